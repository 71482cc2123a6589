"""An evaluation as a wandb run of its own (job type ``eval``), from its ``metrics.json`` content.

Evaluation jobs run side by side and a wandb run has one writer, so each evaluation writes its own run, grouped
with the training run whose checkpoint it evaluates (``pacs.wandb_runs.group_of_checkpoint``) or under the
model's name. Its id comes from the evaluation's directory: a rerun (after a config change) replaces it.
Config: the model, its checkpoint step, the benchmark and every evaluation setting (n, temperature, top_p,
max_tokens, seed, dtype, ...). Summary (``summary``): pass@k for every k with its interval, the mean response
length, the share cut at the token limit, the verifier's status counts and failures, for code the isolation
levels; and the table of pass@k against k.
"""

from pathlib import Path

from pacs.wandb_runs import Mode, checkpoint_step, group_of_checkpoint, start_run


def summary(metrics: dict) -> dict:
    """The run's summary: flat keys, one number each."""
    out = {"problems": metrics["problems"], "samples_per_problem": metrics["samples_per_problem"],
           "responses": metrics["responses"]}  # fmt: skip
    for k, v in metrics["pass_at_k"].items():
        out[f"pass@{k}"] = v["mean"]
        out[f"pass@{k}/ci_low"], out[f"pass@{k}/ci_high"] = v["ci_low"], v["ci_high"]
    out["confidence"] = metrics["confidence"]
    out["mean_response_tokens"] = metrics["mean_response_tokens"]
    out["truncation_rate"] = metrics["truncation_rate"]  # the share of samples cut at max_tokens
    out.update({f"statuses/{s}": n for s, n in metrics["statuses"].items()})
    out["verifier_failures"] = metrics["verifier_failures"]
    if "code" in metrics:
        out.update({f"code/isolation/{level}": n for level, n in metrics["code"]["isolation"].items()})
    speed = metrics["throughput"]
    out.update({f"throughput/{key}": speed[key] for key in ("samples_per_s", "tokens_per_s") if speed[key] is not None})
    return out


def log_evaluation(metrics: dict, out: Path, mode: Mode, project: str = "pacs", group: str | None = None,
                   name: str | None = None, config: dict | None = None) -> str | None:  # fmt: skip
    """Write the evaluation in ``out`` (``metrics``: its metrics.json) as a wandb run; returns the run's local
    directory, or None when ``mode`` is disabled. ``config`` adds to or overrides the derived config keys
    (model, step, benchmark): the workflow names its model, method, step and benchmark this way."""
    if mode == "disabled":
        return None
    import wandb

    described = {"model": metrics["model"], "step": checkpoint_step(metrics["model"]),
                 "benchmark": metrics["data_source"], **(config or {})}  # fmt: skip
    group = group or group_of_checkpoint(metrics["model"])
    name = name or f"{group}-step{described['step']}-{described['benchmark']}"
    settings = {"model_path": metrics["model"], "data": metrics["data"], "engine": metrics["engine"],
                "dtype": metrics["dtype"], "eval": metrics["config"]}  # fmt: skip
    run = start_run(out, mode, project, name, group, "eval", {**described, **settings}, replace=True)
    try:
        rows = [[int(k), v["mean"], v["ci_low"], v["ci_high"]] for k, v in metrics["pass_at_k"].items()]
        run.log({"pass_at_k": wandb.Table(columns=["k", "pass@k", "ci_low", "ci_high"], data=rows)})
        run.summary.update(summary(metrics))
        return str(Path(run.dir).parent)
    finally:
        run.finish()
