# A preflight per distinct training job shape (pacs preflight: a few steps at the maximum lengths, on the
# job's own resources); `snakemake preflight` runs them all. One training run per (model, method), after its
# shape's preflight passed; its output is trained.json, written when the run is done. A run longer than
# resources.train.max_runtime trains as one SLURM job started several times: each time it stops before its limit,
# saved, and requeues itself (pacs train --requeue); a preemption requeues it too. Its shell survives SLURM's
# SIGTERM until pacs train has saved (`trap : TERM`, and a tee that ignores it: common.smk says why), and every
# start's output is appended to the run's logs/jobs.log (Snakemake empties {log} at each).


rule preflight_job:
    input:
        preflight_inputs,
    output:
        f"{RESULTS}/preflight/{{shape}}/preflight.json",
    log:
        f"{LOGS}/preflight/{{shape}}.log",
    conda:
        ENV
    threads: int(resources("train").get("cpus_per_task", 1))
    resources:
        **preflight_resources(),
    params:
        spec=lambda w: f"{CONFIGS}/preflight_{w.shape}.json",
        out=lambda w: experiment.preflight_dir(config, w.shape),
        launcher=train_launcher("preflight"),
    shell:
        "trap : TERM; {params.launcher} --spec {params.spec} --out {params.out} > {log} 2>&1"


rule train_policy:
    input:
        config=f"{CONFIGS}/run_{{model}}_{{method}}.what.yaml",
        preflight=preflight_needed,
        data=lambda w: [data_file(DATA["train"])] + ([data_file(DATA["heldout"])] if DATA.get("heldout") else []),
        model=lambda w: built_model(w.model),
    output:
        f"{RESULTS}/runs/{{model}}/{{method}}/trained.json",
    log:
        f"{LOGS}/train_policy/{{model}}/{{method}}.log",
    conda:
        ENV
    threads: int(resources("train").get("cpus_per_task", 1))
    resources:
        **resources("train"),
    params:
        config=lambda w: f"{CONFIGS}/run_{w.model}_{w.method}.yaml",
        out=lambda w: run_dir(w.model, w.method),
        stop=f"{RESULTS}/{STOP}",
        launcher=train_launcher(),
        keep=lambda w: f"{CONFIGS}/keep_weights_{w.model}_{w.method}.json",
    shell:
        "trap : TERM; mkdir -p {params.out}/logs && {params.launcher} --config {params.config} --out {params.out}"
        " --restart-on-change --requeue --stop-file {params.stop} --keep-weights {params.keep} 2>&1"
        " | (trap '' TERM; exec tee -a {params.out}/logs/jobs.log) > {log}"
