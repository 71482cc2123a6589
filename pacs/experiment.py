"""What a workflow config (config/config.yaml) asks for, as plain data: one training run per (model,
method), each with its run config checked and resolved by pacs itself, and the evaluations of every base
model and selected checkpoint on every benchmark. The workflow (workflow/rules/common.smk) and
``pacs plan`` both read the experiment from here, with the same paths under results/<name>/.
"""

from pacs.config import ConfigError, from_dict, to_dict
from pacs.eval.config import EvalConfig
from pacs.train.config import resolve


def merged(base: dict, over: dict) -> dict:
    """``over`` merged into ``base`` key by key, as Snakemake merges config files."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def results_dir(config: dict) -> str:
    return f"results/{config['name']}"


def data_file(config: dict, dataset: str) -> str:
    return f"{results_dir(config)}/data/{dataset}.parquet"


def model_path(config: dict, model: str) -> str:
    """A hub id or directory; a tiny model is built by the workflow."""
    spec = config["models"][model]
    return f"{results_dir(config)}/models/{model}" if spec.get("build") == "tiny" else spec["path"]


def run_config(config: dict, model: str, method: str) -> dict:
    """The run's config, checked key by key and resolved (every default filled in)."""
    data = config["data"]
    c = merged(config["train"], config["methods"][method].get("train", {}))
    heldout = [data_file(config, data["heldout"])] if data.get("heldout") else []
    c["algorithm"] = config["methods"][method]["algorithm"]
    c["model"] = {**c.get("model", {}), "path": model_path(config, model)}
    c["data"] = {**c.get("data", {}), "train_files": [data_file(config, data["train"])], "heldout_files": heldout}
    c["logging"] = {**c.get("logging", {}), "run_name": f"{config['name']}-{model}-{method}"}
    try:
        return to_dict(resolve(c))
    except ConfigError as e:
        raise ConfigError(f"config: train / methods.{method} (run {model}/{method}): {e}") from e


def run_configs(config: dict) -> dict:
    """``{(model, method): resolved run config}`` for every model and method, in config order."""
    return {(model, method): run_config(config, model, method) for model in config["models"]
            for method in config["methods"]}  # fmt: skip


def eval_steps(config: dict, run: dict) -> list[int]:
    """The checkpoint steps of ``run`` that ``eval.checkpoints`` selects ("last": its final step)."""
    last = run["trainer"]["total_steps"]
    return sorted({last if s == "last" else int(s) for s in config["eval"]["checkpoints"]})


def evaluations(config: dict, runs: dict) -> list[dict]:
    """Every evaluation job: ``{model, method, step, benchmark}``; the base model is method "base", step 0."""
    benchmarks = config["data"]["benchmarks"]
    base = [{"model": m, "method": "base", "step": 0, "benchmark": b} for m in config["models"] for b in benchmarks]
    return base + [
        {"model": model, "method": method, "step": step, "benchmark": b}
        for (model, method), run in runs.items()
        for step in eval_steps(config, run)
        for b in benchmarks
    ]


def eval_settings(config: dict, benchmark: str) -> dict:
    """``pacs evaluate``'s config for ``benchmark``: eval.settings with the benchmark's n and limit, resolved."""
    spec = config["data"]["benchmarks"][benchmark]
    settings = {**config["eval"]["settings"], "n": spec["n"], "limit": spec.get("limit")}
    return to_dict(from_dict(EvalConfig, settings, f"config: eval.settings (benchmark {benchmark})"))


def plan(config: dict, runs: dict | None = None):
    """The experiment's ``pacs.plan.Plan`` (memory, tokens, FLOPs and hours of every job)."""
    from pacs.plan.jobs import plan_experiment

    runs = run_configs(config) if runs is None else runs
    settings = {b: eval_settings(config, b) for b in config["data"]["benchmarks"]}
    return plan_experiment(config, runs, evaluations(config, runs), settings)
