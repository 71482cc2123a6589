"""A run's directory: the one config it belongs to, and the metrics it keeps across a resume."""

import json
import shutil
from pathlib import Path

from pacs.config import config_changes, pin_config, to_dict
from pacs.io import atomic_write_text
from pacs.writer_lock import is_lock_file

# keys that change which files a run keeps or when a job stops, never what it computes
NO_RESULT_KEYS = ("checkpoint.keep_resumable", "checkpoint.keep_weights", "checkpoint.stop_margin")


def check_run_dir(out: Path, config, restart_on_change: bool = False) -> None:
    """A run directory belongs to one config (the run's ``RunConfig``): resuming under a changed one
    (``NO_RESULT_KEYS`` aside) is an error naming the keys, or with ``restart_on_change`` (what a workflow rerun
    wants) the old run is deleted first, but for the launcher's logs and the directory's lock, which it holds."""
    if restart_on_change and config_changes(out / "config.yaml", to_dict(config), NO_RESULT_KEYS):
        for child in out.iterdir():
            # what the launcher of this attempt wrote, and the lock it holds (pacs.writer_lock)
            if child.name not in ("launches.jsonl", "logs") and not is_lock_file(child.name):
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    pin_config(out / "config.yaml", to_dict(config), "a run", NO_RESULT_KEYS)


def truncate_metrics(path: Path, last_step: int) -> None:
    """Forget what a killed run logged after its last checkpoint: those steps are redone."""
    if path.exists():
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        atomic_write_text(path, "".join(ln + "\n" for ln in lines if json.loads(ln)["step"] <= last_step))
