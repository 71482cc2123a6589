# Every model's base weights, every run's selected checkpoints and every released model, on the benchmarks
# that evaluate each (data.benchmarks.<b>.models; released models on those in domain): one job per model or
# checkpoint, its benchmarks one after the other in one process (pacs evaluate --suite), each in its own directory
# (<benchmark>/: config.yaml, responses/, metrics.json) and a wandb run of its own under wandb/ there
# (pacs.eval.wandb_run), replaced by a rerun. The declared output is evaluations.json, written last: responses/
# survive a failed job, and the rerun resumes them; a benchmark whose settings did not change is not sampled again.
# An evaluation longer than resources.evaluate.max_runtime stops between chunks before its limit and requeues itself
# (pacs evaluate --requeue): the job started again samples only the chunks still missing. Every start's output is
# appended to the job's jobs.log.


rule evaluate_model:
    input:
        unpack(evaluation_suite),
        model=evaluation_inputs,
    output:
        f"{RESULTS}/eval/{{model}}/{{method}}/step_{{step}}/evaluations.json",
    log:
        f"{LOGS}/evaluate_model/{{model}}/{{method}}/step_{{step}}.log",
    conda:
        ENV
    resources:
        **resources("evaluate"),
    params:
        model=evaluated_model,
        out=lambda w: eval_dir(w.model, w.method, w.step),
        wandb=evaluation_wandb,
        stop=f"{RESULTS}/{STOP}",
    shell:
        "trap : TERM; mkdir -p {params.out} && pacs evaluate --model {params.model} --suite {input.suite}"
        " --out {params.out} --restart-on-change --requeue --stop-file {params.stop} {params.wandb} 2>&1"
        " | (trap '' TERM; exec tee -a {params.out}/jobs.log) > {log}"
