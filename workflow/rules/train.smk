# A preflight per distinct training job shape (pacs preflight: a few steps at the maximum lengths, on the
# job's own resources); `snakemake preflight` runs them all. One training run per (model, method), after its
# shape's preflight passed; its output is the final checkpoint. Earlier checkpoints are
# not declared, so a failed or killed run resumes from them when the rule runs again. A run longer than
# resources.train.max_runtime runs as consecutive jobs (retries); Snakemake empties {log} before each, so
# every job's output is also appended to the run's logs/jobs.log.


rule preflight_job:
    input:
        preflight_inputs,
    output:
        f"{RESULTS}/preflight/{{shape}}/preflight.json",
    params:
        spec=lambda w: f"{CONFIGS}/preflight_{w.shape}.json",
        out=lambda w: experiment.preflight_dir(config, w.shape),
        launcher=train_launcher("preflight"),
    log:
        f"{LOGS}/preflight/{{shape}}.log",
    threads: int(resources("train").get("cpus_per_task", 1))
    resources:
        **preflight_resources(),
    conda:
        ENV
    shell:
        "{params.launcher} --spec {params.spec} --out {params.out} > {log} 2>&1"


rule train_policy:
    input:
        config=f"{CONFIGS}/run_{{model}}_{{method}}.yaml",
        preflight=preflight_needed,
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
