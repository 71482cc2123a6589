"""`pacs evaluate --suite`: one model on several prepared benchmarks in one process.

The suite file (YAML) maps each benchmark's name to its prepared data, its settings file (``pacs evaluate
--config``) and, optionally, its wandb run's name and config entries::

    toy_heldout:
      data: results/tiny/data/toy_heldout.parquet
      config: results/tiny/configs/eval_toy_heldout.yaml
      wandb: {name: tiny-tiny-pacs-step10-toy_heldout, config: {method: pacs, step: 10}}

Each benchmark is evaluated into ``OUT/<name>`` exactly as `pacs evaluate` evaluates one (pacs.eval.run: resumed
chunk by chunk, metrics recomputed) and written as a wandb run of its own (pacs.eval.wandb_run); then
``OUT/evaluations.json`` lists them, written last: the workflow's output of an evaluation job, one per model or
checkpoint. The process starts once (torch, transformers, the wandb service) and the engine and the verifier pools
are kept from one benchmark to the next where their settings allow (pacs.eval.run.Kept). Every settings file is
read before the first sample: a bad one fails the job at once, naming its file. A job stopped between chunks
(pacs.eval.deadline) keeps every benchmark it finished and the chunks of the one it was in.
"""

from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from pacs.config import read_yaml
from pacs.eval.config import EvalConfig
from pacs.eval.deadline import Deadline
from pacs.eval.run import Kept, evaluate
from pacs.eval.wandb_run import log_evaluation
from pacs.io import atomic_write_json
from pacs.writer_lock import sole_writer

SUMMARY = "evaluations.json"


@dataclass(frozen=True)
class Entry:
    """One benchmark of a suite."""

    data: Path
    config: Path | None = None  # its evaluation settings (YAML); None: the defaults and the command's flags
    wandb_name: str | None = None  # default: GROUP-stepSTEP-BENCHMARK (pacs.eval.wandb_run)
    wandb_config: dict = field(default_factory=dict)


def read_suite(path: Path) -> dict[str, Entry]:
    """The suite file's benchmarks, in its order; an error names the file and the key."""
    spec = read_yaml(path)
    if not isinstance(spec, dict) or not spec:
        raise ValueError(f"{path}: expected a mapping of benchmark names to {{data, config, wandb}}")
    suite = {}
    for name, entry in spec.items():
        where = f"{path}: {name}"
        if not isinstance(entry, dict) or "data" not in entry:
            raise ValueError(f"{where}: expected a mapping with data (and config, wandb)")
        unknown = set(entry) - {"data", "config", "wandb"}
        if unknown:
            raise ValueError(f"{where}: unknown key {sorted(unknown)[0]!r} (data, config, wandb)")
        wandb = entry.get("wandb") or {}
        if not isinstance(wandb, dict) or set(wandb) - {"name", "config"}:
            raise ValueError(f"{where}.wandb: expected a mapping of name and config")
        suite[str(name)] = Entry(Path(entry["data"]), Path(entry["config"]) if entry.get("config") else None,
                                 wandb.get("name"), dict(wandb.get("config") or {}))  # fmt: skip
    return suite


def evaluate_suite(model: str, suite: dict[str, Entry], configs: dict[str, EvalConfig], out: Path, wandb: dict,
                   restart: bool = False, log: Callable[[str], None] = print,
                   deadline: Deadline | None = None) -> dict:  # fmt: skip
    """Evaluate ``model`` on every benchmark of ``suite`` (``configs``: each one's resolved settings) into
    ``out/<name>``, each a wandb run (``wandb``: mode, project, group); then write and return ``out/evaluations.json``:
    ``{"model", "benchmarks": {name: {"metrics", "pass_at_k": {k: mean}, "wandb"}}}``."""
    done = {}
    with sole_writer(out, "pacs evaluate --suite"), closing(Kept()) as kept:
        for name, entry in suite.items():
            log(f"{name}: {entry.data}")
            with sole_writer(out / name, "pacs evaluate"):  # the evaluation and its wandb run
                metrics = evaluate(model, entry.data, out / name, configs[name], log, restart, kept, deadline)
                if deadline is not None:
                    deadline.interrupted()
                logged = log_evaluation(metrics, out / name, wandb["mode"], wandb.get("project", "pacs"),
                                        wandb.get("group"), entry.wandb_name, entry.wandb_config)  # fmt: skip
            passk = {k: v["mean"] for k, v in metrics["pass_at_k"].items()}
            done[name] = {"metrics": str(out / name / "metrics.json"), "pass_at_k": passk, "wandb": logged}
            log(f"{name}: " + ", ".join(f"pass@{k} {v:.3f}" for k, v in done[name]["pass_at_k"].items()))
        summary = {"model": model, "benchmarks": done}
        atomic_write_json(out / SUMMARY, summary)
    return summary
