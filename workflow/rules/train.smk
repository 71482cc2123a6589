# One training run per (model, method); its output is the final checkpoint. Earlier checkpoints are
# not declared, so a failed or killed run resumes from them when the rule runs again.


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
    log:
        f"{LOGS}/train_policy/{{model}}/{{method}}/step_{{step}}.log",
    threads: int(resources("train").get("cpus_per_task", 1))
    resources:
        **resources("train"),
    conda:
        ENV
    shell:
        "{params.launcher} --config {input.config} --out {params.out} --restart-on-change > {log} 2>&1"
