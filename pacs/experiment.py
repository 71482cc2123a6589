"""What a workflow config (config/config.yaml) asks for, as plain data: one training run per (model,
method), each with its run config checked and resolved by pacs itself, and the evaluations of every base
model and selected checkpoint on every benchmark. The workflow (workflow/rules/common.smk) and
``pacs plan`` both read the experiment from here, with the same paths under results/<name>/.

Longer than one reading holds (about 470 lines) and kept whole on purpose: it is one thing, every question the
workflow asks of its config (runs, evaluations, their settings and paths, the plan and the preflights of the
same runs), answered in one place so that the workflow, ``pacs plan`` and the preflights cannot disagree.
"""

import dataclasses
from pathlib import Path

from pacs.config import ConfigError, from_dict, to_dict
from pacs.eval.config import EvalConfig
from pacs.train.settings.config import LoggingConfig, resolve


def merged(base: dict, over: dict) -> dict:
    """``over`` merged into ``base`` key by key, as Snakemake merges config files."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def workflow_config(paths: list[Path]) -> dict:
    """The workflow config of ``paths`` merged in order (as ``snakemake --configfile`` merges them), checked against
    the workflow's schema, its defaults filled."""
    from snakemake.utils import validate

    from pacs.config import read_yaml

    config = {}
    for path in paths:  # later files override earlier ones key by key, as snakemake --configfile does
        config = merged(config, read_yaml(path))
    validate(config, str(Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml"))
    return config


def results_dir(config: dict) -> str:
    return f"results/{config['name']}"


def data_file(config: dict, dataset: str) -> str:
    return f"{results_dir(config)}/data/{dataset}.parquet"


def released(config: dict) -> dict:
    """``config["released"]``: models that are only evaluated (v2's Table 1), as released on the hub, never trained.
    A key may not also be a trained model's."""
    out = config.get("released") or {}
    both = sorted(set(out) & set(config["models"]))
    if both:
        raise ConfigError(f"config: released.{both[0]} is also a key of models: a model is trained or released")
    for key, spec in out.items():
        if not spec.get("path") and spec.get("build") != "tiny":
            raise ConfigError(f"config: released.{key}: give its path (a hub id or directory)")
        unknown = sorted(set(spec.get("benchmarks") or ()) - set(config["data"]["benchmarks"]))
        if unknown:
            raise ConfigError(f"config: released.{key}.benchmarks: {unknown[0]!r} is not a key of data.benchmarks")
    return out


def model_spec(config: dict, model: str) -> dict:
    """A trained model's spec (``models.<model>``) or a released one's (``released.<model>``)."""
    return config["models"][model] if model in config["models"] else released(config)[model]


def model_path(config: dict, model: str) -> str:
    """A hub id or directory; a tiny model is built by the workflow."""
    spec = model_spec(config, model)
    return f"{results_dir(config)}/models/{model}" if spec.get("build") == "tiny" else spec["path"]


def chat_template_source(config: dict, model: str) -> str | None:
    """Whose chat template renders a released model's prompts: None for its own ("own"), the first trained
    model's for "v2" (the template v2's own models use), or the given tokenizer (hub id or directory)."""
    choice = released(config)[model].get("chat_template", "own")
    if choice == "own":
        return None
    return model_path(config, next(iter(config["models"]))) if choice == "v2" else choice


def sweep_value_name(value) -> str:
    """A swept value as it appears in a method's key: 0.1 → "0.1", 2.0 → "2", "none" → "none"."""
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


def methods(config: dict) -> dict:
    """``config["methods"]`` with every sweep expanded, in config order: a method with ``sweep: {key, values,
    label}`` becomes one method per value, ``<method>_<value>``, whose ``key`` (a dotted path in the method:
    ``algorithm.options.beta``, ``train.trainer.reference_reset_every``) is that value and whose label is the
    method's label with ``{value}`` filled in. Each keeps ``swept: {sweep, key, label, value}`` for the report."""
    out = {}
    included = {}  # method → the sweep that also draws it, at its own value of the sweep's key
    for name, spec in config["methods"].items():
        for member in (spec.get("sweep") or {}).get("include", ()):
            if member not in config["methods"] or config["methods"][member].get("sweep") or member in included:
                raise ConfigError(f"config: methods.{name}.sweep.include: {member!r} must be a method of its own, "
                                  "outside every sweep, included once")  # fmt: skip
            included[member] = name
    for name, spec in config["methods"].items():
        sweep = spec.get("sweep")
        if name in included:
            out[name] = {**spec, "swept": _included(config, included[name], name)}
            continue
        if not sweep:
            out[name] = spec
            continue
        where = f"methods.{name}.sweep"
        path = sweep["key"].split(".")
        if path[0] not in ("algorithm", "train") or len(path) < 2 or path[:2] == ["algorithm", "name"]:
            raise ConfigError(f"config: {where}.key {sweep['key']!r} must be a key under algorithm.options or train "
                              "(e.g. algorithm.options.beta)")  # fmt: skip
        if "{value}" not in spec["label"]:
            raise ConfigError(f"config: methods.{name}.label must show the swept value: put {{value}} in it")
        for value in sweep["values"]:
            key = f"{name}_{sweep_value_name(value)}"
            if key in config["methods"] or key in out:
                raise ConfigError(f"config: {where}: the method {key!r} it makes exists already")
            setting = value
            for part in reversed(path):
                setting = {part: setting}
            method = merged({k: v for k, v in spec.items() if k != "sweep"}, setting)  # its models and checkpoints too
            method["label"] = spec["label"].replace("{value}", sweep_value_name(value))
            method["swept"] = {
                "sweep": name,
                "key": sweep["key"],
                "label": sweep.get("label", path[-1]),
                "value": value,
            }
            out[key] = method
    return out


def _included(config: dict, sweep_name: str, name: str) -> dict:
    """The ``swept`` record of ``name``, a method of its own that sweep ``sweep_name`` includes: its value of the
    sweep's key. It must train as the sweep would at that value (same algorithm and train keys) on every model
    the sweep trains, at a value the sweep does not also run."""
    spec, owner = config["methods"][name], config["methods"][sweep_name]
    sweep, where = owner["sweep"], f"config: methods.{sweep_name}.sweep.include: methods.{name}"
    value = spec
    for part in sweep["key"].split("."):
        if not isinstance(value, dict) or part not in value:
            raise ConfigError(f"{where} must set {sweep['key']} itself (its point on the sweep's axis)")
        value = value[part]
    if value in sweep["values"]:
        raise ConfigError(f"{where}: its {sweep['key']} {value!r} is one of the sweep's values (two points at one x)")
    setting = value
    for part in reversed(sweep["key"].split(".")):
        setting = {part: setting}
    member = merged({k: v for k, v in owner.items() if k != "sweep"}, setting)
    for key in ("algorithm", "train"):
        if (member.get(key) or {}) != (spec.get(key) or {}):
            raise ConfigError(f"{where}: its {key} differs from the sweep's at {sweep['key']} {value!r} "
                              f"({spec.get(key)} against {member.get(key)}): it is no point of the sweep")  # fmt: skip
    if spec.get("models") is not None and not set(owner.get("models") or config["models"]) <= set(spec["models"]):
        raise ConfigError(f"{where}: it does not train every model the sweep trains")
    return {"sweep": sweep_name, "key": sweep["key"], "label": sweep.get("label", sweep["key"].split(".")[-1]),
            "value": value}


def run_config(config: dict, model: str, method: str) -> dict:
    """The run's config, checked key by key and resolved (every default filled in): ``train``, then the
    model's ``train``, then the method's."""
    data = config["data"]
    spec = methods(config)[method]
    c = merged(merged(config["train"], config["models"][model].get("train", {})), spec.get("train", {}))
    heldout = [data_file(config, data["heldout"])] if data.get("heldout") else []
    c["algorithm"] = spec["algorithm"]
    c["model"] = {**c.get("model", {}), "path": model_path(config, model)}
    c["data"] = {**c.get("data", {}), "train_files": [data_file(config, data["train"])], "heldout_files": heldout}
    if data.get("chat_template_kwargs"):
        c["data"]["chat_template_kwargs"] = data["chat_template_kwargs"]
    c["logging"] = {**c.get("logging", {}), "run_name": f"{config['name']}-{model}-{method}"}
    try:
        run = to_dict(resolve(c))
    except ConfigError as e:
        raise ConfigError(f"config: train / models.{model}.train / methods.{method} (run {model}/{method}): {e}") from e
    ranks = int((config.get("resources", {}).get("train") or {}).get("gpu") or 1)  # the training job's ranks
    generators = run["rollout"]["generator_ranks"]
    if generators >= ranks:  # the job's GPUs are the trainers' and the generators' together
        raise ConfigError(f"config: run {model}/{method}: rollout.generator_ranks {generators} leaves none of the "
                          f"training job's {ranks} rank(s) (resources.train.gpu) to train")  # fmt: skip
    return run


def trains(config: dict, model: str, method: str, spec: dict | None = None) -> bool:
    """Whether ``method`` trains ``model``: every model, unless the method lists its ``models``."""
    spec = methods(config)[method] if spec is None else spec
    listed = spec.get("models")
    unknown = sorted(set(listed or ()) - set(config["models"]))
    if unknown:
        raise ConfigError(f"config: methods.{method}.models: {unknown[0]!r} is not a key of models")
    return listed is None or model in listed


def run_configs(config: dict) -> dict:
    """``{(model, method): resolved run config}`` for every model and method (sweeps expanded) that trains it
    (``methods.<method>.models``), in config order."""
    expanded = methods(config)
    return {(model, method): run_config(config, model, method) for model in config["models"]
            for method, spec in expanded.items() if trains(config, model, method, spec)}  # fmt: skip


def kept_weights(config: dict, run: dict, method: str | None = None) -> list[int]:
    """The checkpoint steps of ``run`` whose HF weights must outlive retention: those its evaluations read, and
    any its own ``checkpoint.keep_weights`` names."""
    steps = {s for b in config["data"]["benchmarks"] for s in eval_steps(config, run, b, method)}
    return sorted(steps | set(run["checkpoint"]["keep_weights"] or ()))


def evaluates(config: dict, benchmark: str, model: str) -> bool:
    """Whether ``benchmark`` evaluates ``model`` (its base, runs and, for a released model, the model): every
    trained model unless the benchmark lists its ``models``; a released model on every benchmark that is not
    out of domain, unless it lists its ``benchmarks``."""
    spec = config["data"]["benchmarks"][benchmark]
    if model in released(config):
        listed = released(config)[model].get("benchmarks")
        return benchmark in listed if listed is not None else not spec.get("out_of_domain")
    listed = spec.get("models")
    unknown = sorted(set(listed or ()) - set(config["models"]))
    if unknown:
        raise ConfigError(f"config: data.benchmarks.{benchmark}.models: {unknown[0]!r} is not a key of models")
    return listed is None or model in listed


def eval_steps(config: dict, run: dict, benchmark: str | None = None, method: str | None = None) -> list[int]:
    """The checkpoint steps of ``run`` to evaluate on ``benchmark``: the benchmark's own ``checkpoints``, else
    the method's, else ``eval.checkpoints`` ("last": the final step) and every ``eval.every``-th step. Each
    must be a checkpoint the run saves: a multiple of checkpoint.save_every, or the last step."""
    last, ckpt = run["trainer"]["total_steps"], run["checkpoint"]
    own = config["data"]["benchmarks"].get(benchmark, {}).get("checkpoints") if benchmark else None
    where = f"data.benchmarks.{benchmark}.checkpoints" if own else "eval.checkpoints / eval.every"
    if not own and method and methods(config)[method].get("checkpoints"):
        own, where = methods(config)[method]["checkpoints"], f"methods.{method}.checkpoints"
    selected = own or config["eval"]["checkpoints"]
    every = None if own else config["eval"].get("every")
    steps = {last if s == "last" else int(s) for s in selected} | set(range(every, last + 1, every) if every else ())
    for step in sorted(steps):
        if step > last or (step != last and step % ckpt["save_every"]):
            raise ConfigError(f"config: {where}: step {step} is not a checkpoint of run {run['logging']['run_name']} "
                              f"({last} steps, one saved every {ckpt['save_every']})")  # fmt: skip
    return sorted(steps)


def evaluations(config: dict, runs: dict) -> list[dict]:
    """Every evaluation job: ``{model, method, step, benchmark}``; the base model is method "base", step 0, and
    a released model method "released", step 0. A benchmark evaluates the models it lists (``evaluates``)."""
    benchmarks = config["data"]["benchmarks"]
    base = [{"model": m, "method": "base", "step": 0, "benchmark": b} for m in config["models"] for b in benchmarks
            if evaluates(config, b, m)]  # fmt: skip
    trained = [
        {"model": model, "method": method, "step": step, "benchmark": b}
        for (model, method), run in runs.items()
        for b in benchmarks
        if evaluates(config, b, model)
        for step in eval_steps(config, run, b, method)
    ]
    as_released = [{"model": m, "method": "released", "step": 0, "benchmark": b} for m in released(config)
                   for b in benchmarks if evaluates(config, b, m)]  # fmt: skip
    return base + trained + as_released


def eval_config_name(config: dict, evaluation: dict) -> str:
    """The stem of an evaluation's settings file under configs/: ``eval_<benchmark>``, a released model's
    ``eval_<benchmark>_<model>`` (its own tensor-parallel size and chat template)."""
    e = evaluation
    return f"eval_{e['benchmark']}_{e['model']}" if e["model"] in released(config) else f"eval_{e['benchmark']}"


def eval_gpus(config: dict, evaluation: dict) -> int:
    """GPUs of one evaluation job: resources.evaluate.gpu, or more for a released model whose
    ``tensor_parallel_size`` is larger (vLLM splits it over that many)."""
    r = config["resources"]
    gpus = int({**r.get("default", {}), **r.get("evaluate", {})}.get("gpu") or 0)
    spec = released(config).get(evaluation["model"])
    if not spec or not gpus:
        return gpus
    tp = spec.get("tensor_parallel_size") or config["eval"]["settings"].get("vllm", {}).get("tensor_parallel_size")
    return max(gpus, int(tp or 1))


def eval_dtype(config: dict, runs: dict) -> str:
    """The one dtype every evaluation runs in, the base models' included: ``eval.settings.dtype``, or for "auto"
    the dtype the runs compute in (their checkpoints are written in it), which must then be one."""
    dtype = config["eval"]["settings"].get("dtype", "auto")
    computed = sorted({run["trainer"]["compute_dtype"] or run["model"]["dtype"] for run in runs.values()})
    if dtype != "auto" or not computed:
        return dtype
    if len(computed) > 1:
        raise ConfigError(f"config: eval.settings.dtype auto: the runs compute in {' and '.join(computed)}, and base "
                          "and trained models must be evaluated in one dtype: set eval.settings.dtype")  # fmt: skip
    return computed[0]


def eval_settings(config: dict, benchmark: str, runs: dict, model: str | None = None) -> dict:
    """``pacs evaluate``'s config for ``benchmark``: eval.settings updated by the benchmark's own ``settings``,
    with its n and limit and the experiment's one evaluation dtype (``eval_dtype``), resolved; for a released
    ``model``, with its tensor-parallel size and chat template."""
    spec = config["data"]["benchmarks"][benchmark]
    settings = {**merged(config["eval"]["settings"], spec.get("settings") or {}), "n": spec["n"],
                "limit": spec.get("limit"), "dtype": eval_dtype(config, runs)}  # fmt: skip
    where = f"config: eval.settings / data.benchmarks.{benchmark}.settings"
    if config["data"].get("chat_template_kwargs"):
        settings["chat_template_kwargs"] = config["data"]["chat_template_kwargs"]
    if model in released(config):
        own = released(config)[model]
        if own.get("tensor_parallel_size"):
            settings["vllm"] = {**settings.get("vllm", {}), "tensor_parallel_size": own["tensor_parallel_size"]}
        settings["chat_template"] = chat_template_source(config, model)
        where += f" (released.{model})"
    evaluation = from_dict(EvalConfig, settings, where)
    # its grader named, where left null: the benchmark's own (code.grading)
    resolved = to_dict(dataclasses.replace(evaluation, code=evaluation.code.for_source(benchmark)))
    if resolved["chat_template"] is None:  # unset, as settings files written before the key had it
        del resolved["chat_template"]
    return resolved


def wandb_logging(config: dict) -> dict:
    """The experiment's wandb mode and project: ``train.logging``'s (offline and "pacs" by default), for the runs
    that are no training run's: base and released models' evaluations and the report's."""
    where = "config: train.logging"
    logging = to_dict(from_dict(LoggingConfig, (config.get("train") or {}).get("logging") or {}, where))
    return {"mode": logging["wandb"], "project": logging["project"]}


def eval_wandb(config: dict, runs: dict, evaluation: dict) -> dict:
    """How an evaluation is written to wandb (``pacs evaluate --wandb ...``): a trained checkpoint's under its
    run's ``logging`` and in its run's group (the training run's name); a base or released model's under
    ``train.logging``, grouped under the model's name. Its config names the model, method, step and benchmark."""
    e = evaluation
    run = runs.get((e["model"], e["method"]))
    if run is not None:
        mode, project, group = run["logging"]["wandb"], run["logging"]["project"], run["logging"]["run_name"]
    else:
        experiment = wandb_logging(config)
        mode, project, group = experiment["mode"], experiment["project"], f"{config['name']}-{e['model']}"
    return {"mode": mode, "project": project, "group": group,
            "name": f"{config['name']}-{e['model']}-{e['method']}-step{int(e['step'])}-{e['benchmark']}",
            "config": {"experiment": config["name"], "model": e["model"], "method": e["method"],
                       "step": int(e["step"]), "benchmark": e["benchmark"]}}  # fmt: skip


GRADERS = {"judge": "pacs's judge", "livecodebench": "LiveCodeBench's grader", "glm45": "GLM-4.5's grader"}


def benchmark_label(config: dict, benchmark: str, runs: dict) -> str:
    """The benchmark's label in the report, the grader beside it for LiveCodeBench and wherever its settings
    name one (``code.grading``): the same programs pass or fail by grader (docs/verifiers.md, "Code verifier")."""
    spec = config["data"]["benchmarks"][benchmark]
    named = ((spec.get("settings") or {}).get("code") or {}).get("grading") or (
        (config["eval"]["settings"].get("code") or {}).get("grading"))
    if benchmark != "livecodebench" and not named:
        return spec["label"]
    return f"{spec['label']} ({GRADERS[eval_settings(config, benchmark, runs)['code']['grading']]})"


def evaluation_settings(config: dict, runs: dict) -> dict[str, dict]:
    """``{eval_config_name: settings}`` of every evaluation (``eval_config_name``, ``eval_settings``)."""
    out = {}
    for e in evaluations(config, runs):
        name = eval_config_name(config, e)
        if name not in out:
            out[name] = eval_settings(config, e["benchmark"], runs, e["model"] if e["method"] == "released" else None)
    for bench in config["data"]["benchmarks"]:  # a benchmark no model is evaluated on still has its file
        out.setdefault(f"eval_{bench}", eval_settings(config, bench, runs))
    return out


def diversity_jobs(config: dict, runs: dict) -> list[dict]:
    """One diversity measurement (v2's Table 3) per trained model and ``diversity.benchmarks`` benchmark:
    ``{model, benchmark, evaluations: {method: evaluation}}`` over its base model and every run, each at the
    last step evaluated on it."""
    spec = config.get("diversity") or {}
    evaluated = evaluations(config, runs)
    jobs = []
    for bench in spec.get("benchmarks") or ():
        if bench not in config["data"]["benchmarks"]:
            raise ConfigError(f"config: diversity.benchmarks: {bench!r} is not a key of data.benchmarks")
        for model in config["models"]:
            last: dict[str, dict] = {}
            for e in evaluated:
                if (e["model"], e["benchmark"]) == (model, bench) and e["method"] != "released":
                    if e["method"] not in last or e["step"] > last[e["method"]]["step"]:
                        last[e["method"]] = e
            if last:
                jobs.append({"model": model, "benchmark": bench, "evaluations": last})
    return jobs


def check_slurm_extra(config: dict) -> None:
    """Each ``resources.<kind>.slurm_extra``: an option the SLURM executor sets itself (it would refuse the job
    inside its submission thread, where Snakemake then waits forever) or a warning signal other than SIGTERM (SLURM
    sends ``--signal`` to every process of a job's step, the Snakemake there among them, which any other signal
    ends before pacs has saved) is an error naming the key."""
    import re

    try:
        from snakemake_executor_plugin_slurm.validation import get_forbidden_slurm_options
    except ImportError:  # no SLURM executor: nothing submits these options
        forbidden = {}
    else:
        forbidden = get_forbidden_slurm_options()
    for kind, spec in (config.get("resources") or {}).items():
        extra = (spec or {}).get("slurm_extra") or ""
        where = f"config: resources.{kind}.slurm_extra {extra!r}"
        for pattern, name in forbidden.items():
            if re.search(pattern, extra):
                raise ConfigError(f"{where}: the SLURM executor sets the {name} itself; use the resources key for it "
                                  "(runtime, mem_mb, cpus_per_task, constraint, qos, slurm_partition, slurm_account, "
                                  "nodes)")  # fmt: skip
        for signal in re.findall(r"--signal[= ](\S+)", extra):
            if not re.fullmatch(r"(R:)?(TERM|SIGTERM|15)(@\d+)?", signal):
                raise ConfigError(f"{where}: --signal={signal}: SLURM sends it to every process of the job's step, "
                                  "the Snakemake inside it among them, which any signal but TERM ends before pacs has "
                                  "saved; use --signal=TERM@SECONDS, or none "
                                  '(docs/cluster.md, "7. Run everything, and keep it running")')  # fmt: skip


# the caches a job fills, each in a directory of its own under cache_dir (variable -> subdirectory)
CACHES = {"PIP_CACHE_DIR": "pip", "HF_HOME": "huggingface", "TRITON_CACHE_DIR": "triton",
          "TORCHINDUCTOR_CACHE_DIR": "inductor", "VLLM_CACHE_ROOT": "vllm", "XDG_CACHE_HOME": "xdg"}  # fmt: skip


def cache_environment(config: dict, environ) -> dict[str, str]:
    """The cache variables the workflow sets for every job from ``cache_dir`` (those ``environ`` does not set)."""
    root = config.get("cache_dir")
    if not root:
        return {}
    root = Path(root).expanduser().absolute()
    return {var: str(root / sub) for var, sub in CACHES.items() if not environ.get(var)}


def plan(config: dict, runs: dict | None = None):
    """The experiment's ``pacs.plan.Plan`` (memory, tokens, FLOPs and hours of every job), with the
    measurements of every preflight that ran under the current config in place of the default constants."""
    from pacs.plan.whole import plan_experiment

    runs = run_configs(config) if runs is None else runs
    settings = evaluation_settings(config, runs)
    priced = [{**e, "settings": settings[eval_config_name(config, e)], "gpus": eval_gpus(config, e)}
              for e in evaluations(config, runs)]  # fmt: skip
    models = {m: (spec, f"config: models.{m}") for m, spec in config["models"].items()}
    models |= {m: (spec, f"config: released.{m}") for m, spec in released(config).items()}
    from pacs.runs.directory import superseded_bytes

    aside = superseded_bytes(Path(results_dir(config)) / "runs")  # runs moved aside by a change of what they compute
    estimated = plan_experiment(config, runs, priced, models, superseded_bytes=aside)
    specs = preflight_specs(config, runs, estimated)
    measured = measured_preflights(config, specs)
    plan = plan_experiment(config, runs, priced, models, measured, aside) if measured else estimated
    plan.preflights = {shape: spec["name"] for shape, spec in specs.items()}
    return plan


# what a preflight of a run does not depend on: runs differing only in these share one (its spec has the
# objective's needs in place of algorithm.options)
PREFLIGHT_IGNORED = {"trainer": ("seed", "total_steps"), "logging": None, "checkpoint": None, "eval": None,
                     "optim": None}  # fmt: skip


def preflight_dir(config: dict, shape: str) -> str:
    return f"{results_dir(config)}/preflight/{shape}"


def preflight_specs(config: dict, runs: dict, plan) -> dict[str, dict]:
    """``{shape: spec}``: one preflight (``pacs.runs.preflight``) per distinct training job shape, named after
    the first of its runs (``<model>_<method>``); ``spec["runs"]`` names every run it stands for, and
    ``spec["key"]`` (a hash of the run as it trains, seeds, steps and the rest of ``PREFLIGHT_IGNORED`` aside)
    changes exactly when its training measurements may. Its memory limit and evaluation chunk are not in it."""
    import hashlib
    import json

    from pacs.algorithms.options import get_algorithm
    from pacs.plan.memory import PHASES

    cal, steps = plan.calibration, int((config.get("preflight") or {}).get("steps", 2))
    evaluated = evaluations(config, runs)
    settings = {b: eval_settings(config, b, runs) for b in config["data"]["benchmarks"]}
    shapes: dict[str, dict] = {}
    keys: dict[str, str] = {}
    for (model, method), run in runs.items():
        name = f"train/{model}/{method}"
        algorithm = get_algorithm(run["algorithm"]["name"])
        needs = algorithm.needs(from_dict(algorithm.options, run["algorithm"]["options"], "algorithm.options"))
        shape = {}
        for section, value in run.items():
            ignored = PREFLIGHT_IGNORED.get(section, ())
            if ignored is not None:
                shape[section] = {k: v for k, v in value.items() if k not in ignored}
        shape["algorithm"] = {"name": run["algorithm"]["name"], "needs": sorted(needs)}
        benchmarks = sorted({e["benchmark"] for e in evaluated if (e["model"], e["method"]) == (model, method)})
        heaviest = max(benchmarks, key=lambda b: (settings[b]["max_tokens"], settings[b]["n"]), default=None)
        job = plan.job(name)
        spec = {
            "steps": steps,
            # measured against the card (or the run's own limit); the plan fits within job.limit, its headroom less
            "memory": {"limit": int(run["trainer"]["memory_limit_gb"] * 1e9) if run["trainer"].get("memory_limit_gb")
                       else cal.memory_bytes, "usable": job.limit, "device": cal.gpu, "plan": job.peak_bytes,
                       **{phase: job.memory[phase] for phase in PHASES},
                       "sizes": {"max_tokens_per_micro_batch": job.fit.tokens, "checkpoint_layers": job.fit.layers}
                       if job.auto else None},  # fmt: skip
            "eval": heaviest and {"benchmark": heaviest, "data": data_file(config, heaviest),
                                  "settings": settings[heaviest]},  # fmt: skip
        }
        key = json.dumps(shape, sort_keys=True)  # what it trains: a change reruns it
        if key in keys:
            shapes[keys[key]]["runs"].append(name)
            continue
        keys[key] = f"{model}_{method}"
        shapes[keys[key]] = {"name": name, "runs": [name], "run": run, "model": model, "method": method,
                             "keys": f"train (or methods.{method}.train)", **spec,
                             "key": hashlib.sha256(key.encode()).hexdigest()}  # fmt: skip
    return shapes


def preflight_of(specs: dict[str, dict]) -> dict[tuple[str, str], str]:
    """``{(model, method): shape}``: the preflight each run's training needs."""
    return {tuple(name.split("/")[1:]): shape for shape, spec in specs.items() for name in spec["runs"]}


def measured_preflights(config: dict, specs: dict[str, dict]) -> dict[str, dict]:
    """``{training job name: preflight.json}`` of every preflight that passed under a spec of the current key."""
    import json
    out = {}
    for shape, spec in specs.items():
        path = Path(preflight_dir(config, shape)) / "preflight.json"
        if path.is_file():
            found = json.loads(path.read_text())
            if found.get("spec", {}).get("key") == spec["key"]:
                out.update({name: found for name in spec["runs"]})
    return out
