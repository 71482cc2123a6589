# Every model's base weights, every run's selected checkpoints and every released model, on the benchmarks
# that evaluate each (data.benchmarks.<b>.models; released models on those in domain). The declared
# output is metrics.json only: responses/ survives a failed job, and the rerun resumes it. Each job also writes
# its evaluation as a wandb run of its own under wandb/ beside it (pacs.eval.wandb_run), replaced by a rerun.


rule evaluate_model:
    input:
        config=evaluation_config,
        data=lambda w: data_file(w.benchmark),
        model=evaluation_inputs,
    output:
        f"{RESULTS}/eval/{{model}}/{{method}}/step_{{step}}/{{benchmark}}/metrics.json",
    params:
        model=evaluated_model,
        out=lambda w: eval_dir(w.model, w.method, w.step, w.benchmark),
        wandb=evaluation_wandb,
    log:
        f"{LOGS}/evaluate_model/{{model}}/{{method}}/step_{{step}}/{{benchmark}}.log",
    resources:
        **resources("evaluate"),
    conda:
        ENV
    shell:
        "pacs evaluate --config {input.config} --model {params.model} --data {input.data} --out {params.out}"
        " --restart-on-change {params.wandb} > {log} 2>&1"
