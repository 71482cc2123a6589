"""A run's directory: the one config it belongs to, what a rerun under a changed config keeps of it, and the
metrics it keeps across a resume.

A rerun under a config that differs only in keys of how the run computes (``only_how``; pacs.train.settings.changes
classifies every key) resumes the run from its last checkpoint: ``config.yaml`` takes the new values and
``segments.jsonl`` a ``changed`` record (each key's old and new value, the step it applies from). A finished run
is left as it is. A change of what the run computes is refused, naming the keys; with ``restart_on_change`` (what
the workflow passes) the old run is moved aside whole to ``OUT.superseded/<time>/`` rather than deleted, its steps
and size said and recorded (``superseded`` in the new ``segments.jsonl``), and counted by `pacs plan`'s disk
figure until you delete it: a change by mistake then costs disk, not days of GPUs.
"""

import json
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from pacs.config import dump_yaml, flat_keys, load_yaml, to_dict
from pacs.io import atomic_write_text
from pacs.writer_lock import is_lock_file

SUPERSEDED = ".superseded"
KEPT = ("launches.jsonl", "logs")  # what the launcher of this job wrote; with the lock it holds (pacs.writer_lock)


def superseded_dir(out: Path) -> Path:
    """Where runs of ``out`` under earlier configs are moved: ``OUT.superseded/``."""
    return out.with_name(out.name + SUPERSEDED)


def tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file() and not f.is_symlink())


def append_record(out: Path, event: str, **fields) -> None:
    with open(Path(out) / "segments.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")


def check_run_dir(out: Path, config, restart_on_change: bool = False, only_how: Callable[[str], bool] = lambda k: False,
                  say: Callable[[str], None] = print) -> None:  # fmt: skip
    """Make ``out`` the directory of the run ``config`` (a ``RunConfig``), as the module docstring says."""
    path, new = out / "config.yaml", to_dict(config)
    if not path.exists():
        atomic_write_text(path, dump_yaml(new))
        return
    stored = load_yaml(path.read_text(encoding="utf-8"))
    old, now = flat_keys(stored if isinstance(stored, dict) else {}), flat_keys(new)
    changed = sorted(k for k in old.keys() | now.keys() if old.get(k) != now.get(k))
    if not changed:
        return
    from pacs.runs import checkpoint as ckpt  # torch: not for the workflow's reading of superseded runs

    what = [k for k in changed if not only_how(k)]
    latest = ckpt.latest_checkpoint(out / "checkpoints")
    step = latest[0] if latest else 0
    if what and not restart_on_change:
        raise ValueError(f"{out} holds a run with a different config ({path}); keys that change what it computes: "
                         f"{', '.join(what)}; use a new --out, move the old run away, or pass --restart-on-change")
    if what:
        supersede(out, what, step, say)
        atomic_write_text(path, dump_yaml(new))
        return
    values = {k: [old.get(k), now.get(k)] for k in changed}
    listed = ", ".join(f"{k} {a!r} -> {b!r}" for k, (a, b) in values.items())
    if step >= config.trainer.total_steps:
        say(f"{out}: finished at step {step}; left as it is under the change of how it computes ({listed})")
        return
    say(f"{out}: resumes from step {step} under a change of how it computes: {listed}")
    append_record(out, "changed", step=step, keys=values)
    atomic_write_text(path, dump_yaml(new))


def supersede(out: Path, keys: list[str], step: int, say: Callable[[str], None]) -> Path:
    """Move the run in ``out`` (all but this job's launcher files and lock) to ``OUT.superseded/<time>/``."""
    aside = superseded_dir(out) / time.strftime("%Y%m%dT%H%M%S")
    while aside.exists():
        aside = aside.with_name(aside.name + "_")
    aside.mkdir(parents=True)
    moved = [child for child in out.iterdir() if child.name not in KEPT and not is_lock_file(child.name)]
    for child in moved:
        shutil.move(str(child), str(aside / child.name))
    size = tree_bytes(aside)
    say(f"{out}: its config changes what the run computes ({', '.join(keys)}); the run so far (step {step}, "
        f"{size / 1e9:.2f} GB) is moved to {aside}, and the run starts again from step 0 (delete {aside} once you "
        "no longer need it: pacs plan counts it in the disk figure)")  # fmt: skip
    append_record(out, "superseded", step=step, keys=keys, moved_to=str(aside), bytes=size)
    return aside


def superseded_bytes(runs: Path) -> int:
    """Bytes of the superseded runs under ``runs`` (``runs/<model>/<method>.superseded/``), still on disk."""
    return sum(tree_bytes(p) for p in Path(runs).glob(f"*/*{SUPERSEDED}")) if Path(runs).is_dir() else 0


def mark_trained(out: Path, step: int) -> None:
    """``OUT/trained.json``: the run is done, its last checkpoint at ``step`` (the workflow's training output);
    left untouched where it already says so."""
    text = json.dumps({"step": step, "checkpoint": f"checkpoints/step_{step:06d}"}) + "\n"
    if not (out / "trained.json").exists() or (out / "trained.json").read_text(encoding="utf-8") != text:
        atomic_write_text(out / "trained.json", text)


def truncate_metrics(path: Path, last_step: int) -> None:
    """Forget what a killed run logged after its last checkpoint: those steps are redone."""
    if path.exists():
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        atomic_write_text(path, "".join(ln + "\n" for ln in lines if json.loads(ln)["step"] <= last_step))
