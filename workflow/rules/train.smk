# One training run per (model, method); its output is the final checkpoint. Earlier checkpoints are
# not declared, so a failed or killed run resumes from them when the rule runs again. A run longer than
# resources.train.max_runtime runs as consecutive jobs (retries); Snakemake empties {log} before each, so
# every job's output is also appended to the run's logs/jobs.log.


rule train_policy:
    input:
        config=f"{CONFIGS}/run_{{model}}_{{method}}.yaml",
        data=lambda w: [data_file(DATA["train"])] + ([data_file(DATA["heldout"])] if DATA.get("heldout") else []),
        model=lambda w: built_model(w.model),
    output:
        directory(f"{RESULTS}/runs/{{model}}/{{method}}/checkpoints/step_{{step}}"),
    params:
        out=lambda w: run_dir(w.model, w.method),
        launcher=train_launcher(),
        keep=lambda w: f"{CONFIGS}/keep_weights_{w.model}_{w.method}.json",
    log:
        f"{LOGS}/train_policy/{{model}}/{{method}}/step_{{step}}.log",
    threads: int(resources("train").get("cpus_per_task", 1))
    retries: TRAIN_RETRIES
    resources:
        **resources("train"),
        attempt=continue_run,
    conda:
        ENV
    shell:
        "mkdir -p {params.out}/logs && {params.launcher} --config {input.config} --out {params.out}"
        " --restart-on-change --attempt {resources.attempt} --keep-weights {params.keep} 2>&1"
        " | tee -a {params.out}/logs/jobs.log > {log}"
