# What the config asks for, computed once at parse time: result paths, each run's and each benchmark's
# resolved config (written only when its content changes, so that a change reruns exactly the rules
# that read it), and the manifest the report rules read.
import json
import os
import shlex
import sys
from pathlib import Path

import yaml

from pacs import experiment
from pacs.config import ConfigError
from pacs.eval.diversity import DiversityConfig
from pacs.plan.markdown import format_plan
from pacs.stop import STOP, clear_stop, describe, record_runner
from pacs.train.settings.changes import what_part

RESULTS = experiment.results_dir(config)
# every job's caches (pip, Hugging Face, Triton, Inductor, vLLM) under cache_dir, where the environment does not
# place them already: jobs inherit Snakemake's environment (the SLURM executor submits with --export=ALL)
os.environ.update(experiment.cache_environment(config, os.environ))
CONFIGS = f"{RESULTS}/configs"
LOGS = f"{RESULTS}/logs"
ENV = "../envs/pacs.yaml"  # only with --sdm conda, which is not the supported way (the venv: README)
MODELS, METHODS, DATA = config["models"], experiment.methods(config), config["data"]  # sweeps expanded
RELEASED = experiment.released(config)  # models only evaluated (v2's Table 1)
BENCHMARKS = DATA["benchmarks"]
if DATA["source"] == "local" and not DATA.get("local_dir"):
    raise ConfigError("config: data.source local reads the benchmark files from data.local_dir: set it")
experiment.check_slurm_extra(config)  # before anything is submitted


def start_of_run():
    """A stop asked by `pacs stop` lasts until this run of the workflow (dry runs and the jobs' own Snakemake run
    no onstart); `pacs stop` finds this Snakemake by the file it writes (pacs.stop)."""
    cleared = clear_stop(RESULTS)
    if cleared:
        print(f"pacs: {describe(cleared)} is over: removed {RESULTS}/{STOP}", file=sys.stderr)
    record_runner(RESULTS)


onstart:
    start_of_run()


if not workflow.modifier.is_main_snakefile():
    # used as a module (a snakedeploy deployment): Snakemake runs the main Snakefile's onstart only, so this one
    # becomes the run's (a deployment's own onstart, if it has one, replaces it); tests/test_catalog.py runs it
    workflow._onstart = lambda log: start_of_run()


def write_if_changed(path, text):
    path = Path(path)
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(text)
        tmp.replace(path)


def data_file(dataset):
    return experiment.data_file(config, dataset)


def model_path(model):
    return experiment.model_path(config, model)


def built_model(model):
    return [model_path(model)] if experiment.model_spec(config, model).get("build") == "tiny" else []


def tiny_model_options(model):
    """`pacs tiny-model`'s --seed and --target-accuracy for a built model (a released one may set both)."""
    spec = experiment.model_spec(config, model)
    options = f"--seed {spec.get('seed', 0)}"
    return options + (
        f" --target-accuracy {spec['target_accuracy']}" if spec.get("target_accuracy") is not None else ""
    )


def run_dir(model, method):
    return f"{RESULTS}/runs/{model}/{method}"


RUN_CONFIGS = experiment.run_configs(config)
# A GPU job's shell (the preflight's, the training's, the evaluation's) lives through SLURM's SIGTERM (a preemption,
# a requeue, scancel), which reaches every process of the job, until its pacs command, which takes the signal as
# "save after this step (or chunk)", has saved and exited: `trap : TERM` makes bash run a no-op after its command
# rather than die (a handler, not '', which its children would inherit as ignored), and the tee copying the
# command's output, `(trap '' TERM; exec tee -a FILE)`, ignores it (its death would break the command's output).


def checkpoint(model, method, step):
    return f"{run_dir(model, method)}/checkpoints/step_{int(step):06d}"


def trained(model, method):
    """The output of a run's training (pacs train writes it once the run is done): not the final checkpoint itself,
    which Snakemake would delete before the training rule runs again."""
    return f"{run_dir(model, method)}/trained.json"


def eval_dir(model, method, step, benchmark=None):
    """An evaluation's directory; without ``benchmark``, the evaluation job's (every benchmark of the model or
    checkpoint below it, and its evaluations.json)."""
    step_dir = f"{RESULTS}/eval/{model}/{method}/step_{int(step):06d}"
    return step_dir if benchmark is None else f"{step_dir}/{benchmark}"


def evaluated(model, method, step):
    """The output of the evaluation job of a model or checkpoint (pacs evaluate --suite): written once every
    benchmark that evaluates it has its metrics.json."""
    return f"{eval_dir(model, method, step)}/evaluations.json"


RUNS = list(RUN_CONFIGS)
EVALUATIONS = experiment.evaluations(config, RUN_CONFIGS)
for e in EVALUATIONS:
    e["metrics"] = f"{eval_dir(e['model'], e['method'], e['step'], e['benchmark'])}/metrics.json"

for (model, method), run in RUN_CONFIGS.items():
    # the run's training reads only the keys of what the run computes (pacs.train.settings.changes), so that a
    # change of how (a micro-batch, recompute, vLLM's memory) resumes a stopped run under it and leaves a finished
    # run and everything after it as they are; the run's config itself is written once the plan is known (below)
    write_if_changed(f"{CONFIGS}/run_{model}_{method}.what.yaml", yaml.safe_dump(what_part(run), sort_keys=False))
    # the steps whose weights outlive retention, read by the trainer at every save: apart from the run's config,
    # so that evaluating other steps does not restart a run
    kept = experiment.kept_weights(config, run, method)
    write_if_changed(f"{CONFIGS}/keep_weights_{model}_{method}.json", json.dumps(kept))
EVAL_SETTINGS = experiment.evaluation_settings(config, RUN_CONFIGS)
for name, settings in EVAL_SETTINGS.items():  # eval_<benchmark>, and eval_<benchmark>_<released model>
    write_if_changed(f"{CONFIGS}/{name}.yaml", yaml.safe_dump(settings, sort_keys=False))
# One evaluation job per model or checkpoint, every benchmark that evaluates it in one process (pacs evaluate
# --suite: imports, the wandb service and the engine once): its suite file names each benchmark's data, settings
# file and wandb run, written again only when it changes
SUITES = {}
for e in EVALUATIONS:
    SUITES.setdefault((e["model"], e["method"], f"{int(e['step']):06d}"), []).append(e)


def suite_file(model, method, step):
    return f"{CONFIGS}/evaluate/{model}/{method}/step_{int(step):06d}.yaml"


def suite_entry(e):
    spec = experiment.eval_wandb(config, RUN_CONFIGS, e)
    return {
        "data": data_file(e["benchmark"]),
        "config": f"{CONFIGS}/{experiment.eval_config_name(config, e)}.yaml",
        "wandb": {"name": spec["name"], "config": spec["config"]},
    }


for (model, method, step), suite in SUITES.items():
    entries = {e["benchmark"]: suite_entry(e) for e in suite}
    write_if_changed(suite_file(model, method, step), yaml.safe_dump(entries, sort_keys=False))
DIVERSITY = experiment.diversity_jobs(config, RUN_CONFIGS)
for d in DIVERSITY:
    for e in d["evaluations"].values():
        e["metrics"] = f"{eval_dir(e['model'], e['method'], e['step'], e['benchmark'])}/metrics.json"
    d["file"] = f"{RESULTS}/diversity/{d['model']}/{d['benchmark']}.json"
    d["embeddings"] = f"{RESULTS}/diversity/{d['model']}/{d['benchmark']}.npz"
MANIFEST_DATA = {
    "name": config["name"],
    "description": config.get("description", ""),
    "paper": config["paper"],
    "models": {
        **{
            m: {"label": s["label"], "published_as": s.get("published_as"), "released": False}
            for m, s in MODELS.items()
        },
        **{
            m: {"label": s["label"], "published_as": s.get("published_as"), "released": True}
            for m, s in RELEASED.items()
        },
    },
    "methods": {
        "base": {"label": "Base", "published_as": "Base", "algorithm": None, "sweep": None},
        **(
            {"released": {"label": "As released", "published_as": "as-released", "algorithm": None, "sweep": None}}
            if RELEASED
            else {}
        ),
        **{
            m: {
                "label": s["label"],
                "published_as": s.get("published_as"),
                "algorithm": s["algorithm"]["name"],
                "sweep": s.get("swept"),
            }
            for m, s in METHODS.items()
        },
    },
    "benchmarks": {
        b: {
            "label": experiment.benchmark_label(config, b, RUN_CONFIGS),
            "published_as": s.get("published_as"),
            "ks": s["ks"],
            "out_of_domain": bool(s.get("out_of_domain")),
        }
        for b, s in BENCHMARKS.items()
    },
    "evaluations": EVALUATIONS,
    "diversity": [{k: d[k] for k in ("model", "benchmark", "file", "embeddings")} for d in DIVERSITY],
    "runs": [{"model": m, "method": k, "metrics": f"{run_dir(m, k)}/metrics.jsonl"} for m, k in RUNS],
}
write_if_changed(f"{RESULTS}/report/manifest.json", json.dumps(MANIFEST_DATA, indent=1))

# Memory, tokens, FLOPs and hours of every job (pacs plan): a job that cannot fit its GPU stops the parse
PLAN = experiment.plan(config, RUN_CONFIGS)
if workflow.is_main_process:
    write_if_changed(f"{RESULTS}/plan.md", format_plan(PLAN))
    if any(j.gpus for j in PLAN.jobs):
        print(f"pacs plan ({RESULTS}/plan.md):\n{format_plan(PLAN)}", file=sys.stderr)
if PLAN.errors:
    raise ConfigError("config: jobs that cannot run as configured (pacs plan):\n" + "\n".join(PLAN.errors))
for (model, method), run in RUN_CONFIGS.items():
    # the run's config, read by pacs train, with the plan's figures for it (in its wandb run's config)
    planned = {**run, "logging": {**run["logging"], "plan": PLAN.figures(f"train/{model}/{method}")}}
    write_if_changed(f"{CONFIGS}/run_{model}_{method}.yaml", yaml.safe_dump(planned, sort_keys=False))

# One preflight per distinct training job shape (pacs preflight). Its spec is written again only when its key
# changes (the run as it trains; not a learning rate, a seed, evaluation settings or the memory limit), which
# reruns it. A run's training waits for its preflight; once one passed under the current key, the dependency
# is ancient, so that a preflight run again never makes a trained run train again
PREFLIGHTS = experiment.preflight_specs(config, RUN_CONFIGS, PLAN)
PREFLIGHT_OF = experiment.preflight_of(PREFLIGHTS)
PASSED = experiment.measured_preflights(config, PREFLIGHTS)
for shape, spec in PREFLIGHTS.items():
    written = Path(f"{CONFIGS}/preflight_{shape}.json")
    if not written.exists() or json.loads(written.read_text()).get("key") != spec["key"]:
        write_if_changed(written, json.dumps(spec, indent=1))


def preflight_result(shape):
    return f"{experiment.preflight_dir(config, shape)}/preflight.json"


def finished(name):
    """A training run (``train/<model>/<method>``) done under the keys of what it computes now: its trained.json no
    older than its what-config (written at parse time only when it changes)."""
    model, method = name.split("/")[1:]
    done, what = Path(trained(model, method)), Path(f"{CONFIGS}/run_{model}_{method}.what.yaml")
    return done.exists() and done.stat().st_mtime >= what.stat().st_mtime


def passed(files, shape):
    """``files`` as they are, or ancient once ``shape``'s preflight passed under the current key, or once every run
    it stands for finished (a change of how they compute, which changes what the preflight measures, then runs no
    preflight for runs that will not train again): then neither a new input of the preflight (data prepared again)
    nor its rerun makes anything run again. Always the same files either way: Snakemake reruns a job whose set of
    inputs changed."""
    spec = PREFLIGHTS[shape]
    done = spec["runs"][0] in PASSED or all(finished(name) for name in spec["runs"])
    return [ancient(f) for f in files] if done else files


def preflight_needed(w):
    """The preflight a run's training waits for: ancient, so that a preflight run again (a change of how the run
    computes changes what it measures) never makes a trained run train again."""
    return ancient(preflight_result(PREFLIGHT_OF[(w.model, w.method)]))


def planned_runtime(kind):
    """A GPU rule's runtime in minutes from the plan, for each job (train, or evaluate: its benchmarks together)."""
    if kind == "train":
        return lambda wildcards: PLAN.runtime_minutes(f"train/{wildcards.model}/{wildcards.method}")
    return lambda w: PLAN.runtime_minutes(
        *(f"evaluate/{w.model}/{w.method}/step_{w.step}/{e['benchmark']}" for e in SUITES[(w.model, w.method, w.step)])
    )


def resources(kind):
    """A rule's resources from the config: resources.default, updated by resources.<kind>.

    A job runs at most max_runtime minutes (the partition's limit): a longer training or evaluation stops in time and
    requeues itself, started again by SLURM as the same job (pacs.slurm), whose log then appends
    (--open-mode=append).
    A GPU job runs its command once: the SLURM plugin would turn `tasks` into --ntasks-per-gpu and run
    it once per GPU (its issue 459), so tasks_per_gpu is 0. A training job on several nodes asks for
    `gpu / nodes` GPUs on each node (gres) and one task per node (mpi: the rule's own srun starts them).
    A GPU job whose kind sets no runtime takes its runtime from the plan.
    """
    own = config["resources"].get(kind, {})
    spec = {**config["resources"].get("default", {}), **own}
    spec = {k: v for k, v in spec.items() if v is not None}
    max_runtime = spec.pop("max_runtime", None)
    if spec.get("gpu"):
        spec["tasks_per_gpu"] = 0
        if kind in ("train", "evaluate") and own.get("runtime") is None:
            spec["runtime"] = planned_runtime(kind)
        if kind == "evaluate" and any(r.get("tensor_parallel_size", 1) > 1 for r in RELEASED.values()):
            spec["gpu"] = lambda w: experiment.eval_gpus(config, {"model": w.model})  # a released model's TP
    if max_runtime is not None:
        runtime = spec.get("runtime")
        spec["runtime"] = (
            (lambda w, r=runtime: min(r(w), max_runtime))
            if callable(runtime)
            else min(runtime or max_runtime, max_runtime)
        )
    if kind in ("train", "evaluate"):
        spec["slurm_extra"] = " ".join(filter(None, [spec.get("slurm_extra"), "--open-mode=append"]))
    nodes = int(spec.get("nodes", 1))
    if kind == "train" and nodes > 1:
        gpus = int(spec.pop("gpu", 0))
        if gpus % nodes:
            raise ConfigError(f"config: resources.train.gpu {gpus} must split evenly over its {nodes} nodes")
        model = spec.pop("gpu_model", None)
        spec.update(gres=f"gpu:{model + ':' if model else ''}{gpus // nodes}", mpi="srun", tasks=nodes)
    return spec


def prepare_args(dataset):
    if dataset.startswith("toy_"):
        return ""
    args = [f"--source {DATA['source']}"]
    if DATA["source"] == "local":
        args.append(f"--data-dir {DATA['local_dir']}")
    options = DATA.get("prepare", {}).get(dataset, {})
    if DATA.get("system_prompt") is not None:
        args.append(f"--system-prompt {shlex.quote(DATA['system_prompt'])}")
    if "max_prompt_length" in options:
        args.append(f"--tokenizer {model_path(DATA['tokenizer'])} --max-prompt-length {options['max_prompt_length']}")
        if DATA.get("chat_template_kwargs"):
            args.append(f"--chat-template-kwargs {shlex.quote(json.dumps(DATA['chat_template_kwargs']))}")
    for key in ("repeat", "bad_rows", "duplicates", "release_version", "start_date", "end_date", "prompt_style"):
        if key in options:
            args.append(f"--{key.replace('_', '-')} {shlex.quote(str(options[key]))}")
    return " ".join(args)


def prepare_inputs(dataset):
    """The tokenizer's model, when prompts are filtered by length and that model is built here."""
    options = DATA.get("prepare", {}).get(dataset, {})
    return built_model(DATA["tokenizer"]) if "max_prompt_length" in options else []


def train_launcher(verb="train"):
    """`pacs train` (and `pacs preflight`) starts torchrun itself: one per node, each over that node's GPUs
    (pacs.train.launch)."""
    spec = config["resources"].get("train", {})
    nodes = int(spec.get("nodes") or 1)
    per_node = int(spec.get("gpu") or 0) // nodes
    # auto sizes resolved with the calibration the plan prices the run with (pacs.train.update.sizes)
    calibration = (config.get("plan") or {}).get("calibration")
    calibration = f" --calibration {shlex.quote(calibration)}" if calibration else ""
    return f"pacs {verb} --nproc-per-node {max(per_node, 1)} --nnodes {nodes}{calibration}"


def preflight_resources():
    """A training job's resources, for as long as the plan says its preflight needs (or preflight.runtime), within
    max_runtime (pacs.plan.whole.preflight_seconds)."""
    spec = resources("train")
    fallback = None if callable(spec.get("runtime")) else spec.get("runtime")  # a CPU job: no plan of its time
    return {**spec, "runtime": lambda w: PLAN.preflight_minutes(PREFLIGHTS[w.shape]["name"]) or fallback}


def preflight_inputs(w):
    """Its spec, the data its run trains on, every benchmark (it evaluates one chunk of the heaviest, which a
    change of n may make another one), and a built model."""
    spec = PREFLIGHTS[w.shape]
    files = [*spec["run"]["data"]["train_files"], *map(data_file, BENCHMARKS), *built_model(spec["model"])]
    return passed([f"{CONFIGS}/preflight_{w.shape}.json", *files], w.shape)


def evaluated_model(w):
    return model_path(w.model) if w.method in ("base", "released") else checkpoint(w.model, w.method, w.step)


def evaluation_suite(w):
    """An evaluation job's suite file, and each of its benchmarks' data and settings file (eval_<benchmark>.yaml,
    or a released model's own: experiment.eval_config_name)."""
    entries = [suite_entry(e) for e in SUITES[(w.model, w.method, w.step)]]
    return {
        "suite": suite_file(w.model, w.method, w.step),
        "configs": [e["config"] for e in entries],
        "data": [e["data"] for e in entries],
    }


# wandb: every training run, every evaluation and the report a run of its own, offline unless train.logging.wandb
# says otherwise (pacs.wandb_runs); the report's run only where wandb is not disabled
WANDB = experiment.wandb_logging(config)


def evaluation_wandb(w):
    """`pacs evaluate`'s wandb options for an evaluation job: mode, project and group (its training run's;
    experiment.eval_wandb); each benchmark's run name and config entries are in its suite file."""
    spec = experiment.eval_wandb(config, RUN_CONFIGS, SUITES[(w.model, w.method, w.step)][0])
    return shlex.join(["--wandb", spec["mode"], "--wandb-project", spec["project"], "--wandb-group", spec["group"]])


def evaluation_inputs(w):
    """What must exist first: a built base or released model (and the built model whose chat template a released
    one borrows), or the run's final checkpoint (training done)."""
    if w.method == "released":
        source = experiment.chat_template_source(config, w.model)
        borrowed = [m for m in MODELS if source == model_path(m)]
        return built_model(w.model) + [p for m in borrowed for p in built_model(m)]
    if w.method == "base":
        return built_model(w.model)
    return [trained(w.model, w.method)]


def diversity_inputs(w):
    """The metrics.json of every evaluation a diversity measurement reads (its responses/ beside it), and a
    built embedding model."""
    job = next(d for d in DIVERSITY if (d["model"], d["benchmark"]) == (w.model, w.benchmark))
    built = [f"{RESULTS}/embedder/tiny"] if (config.get("diversity") or {}).get("embedder", {}).get("build") else []
    return sorted({evaluated(e["model"], e["method"], e["step"]) for e in job["evaluations"].values()}) + built


def diversity_args(w):
    """`pacs diversity`'s options: --eval method=dir for each evaluation, the embedder and the config's keys."""
    job = next(d for d in DIVERSITY if (d["model"], d["benchmark"]) == (w.model, w.benchmark))
    spec = config.get("diversity") or {}
    embedder = spec.get("embedder") or {}
    args = [f"--eval {m}={shlex.quote(str(Path(e['metrics']).parent))}" for m, e in job["evaluations"].items()]
    path = f"{RESULTS}/embedder/tiny" if embedder.get("build") else embedder.get("path", DiversityConfig().model)
    args.append(f"--model {shlex.quote(path)}")
    for key in ("embed", "max_answers", "batch_size", "max_length", "device"):
        if spec.get(key) is not None:
            args.append(f"--{key.replace('_', '-')} {shlex.quote(str(spec[key]))}")
    return " ".join(args)
