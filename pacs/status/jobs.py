"""A training (or preflight) run's jobs as its files record them, read and never written: each job's records in
``segments.jsonl`` (pacs.runs.segments) from its ``start`` to its end, what it held (GPUs × its time from its
launcher's start to its ``exit``, or to its last record where it ended without one), its pace, and how the run
stands: its last step (``metrics.jsonl``), its last checkpoint, whether a job holds its directory now
(pacs.writer_lock), how its last job ended."""

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from pacs.runs.segments import Job, read_segments, split_jobs
from pacs.writer_lock import live_holder


def last_metrics(path: Path) -> list[dict]:
    """Every complete record of ``metrics.jsonl`` (a line being written is left out)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return []
    records = []
    for line in text.splitlines():
        if line.endswith("}"):
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    return records


def checkpoint_steps(root: Path) -> list[int]:
    """The steps of the run's checkpoints (``checkpoints/step_N``: each renamed into place whole; the listing of
    pacs.runs.checkpoint, which would import torch)."""
    try:
        return sorted(int(p.name[5:]) for p in (root / "checkpoints").iterdir() if re.fullmatch(r"step_\d{6,}", p.name))
    except OSError:
        return []


def log_tail(path: Path, lines: int = 6) -> list[str]:
    """The last ``lines`` non-empty lines of a log (read from its last 64 KB), wandb's own lines aside (its run's
    summary, printed at every job's end)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - 65536))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    kept = [line.rstrip() for line in text.replace("\r", "\n").splitlines() if line.strip()]
    return [line for line in kept if not line.startswith("wandb:")][-lines:]


@dataclass
class RunFiles:
    """What a run directory holds now."""

    out: Path
    jobs: list[Job] = field(default_factory=list)
    metrics: list[dict] = field(default_factory=list)
    metrics_time: float | None = None  # when metrics.jsonl was last written
    checkpoints: list[int] = field(default_factory=list)
    holder: dict | None = None  # the live process writing in it, as it named itself ({} before it has)
    trained: dict | None = None  # trained.json: the run is done

    @property
    def step(self) -> int:
        return max((m["step"] for m in self.metrics), default=0)

    @property
    def live(self) -> bool:
        return self.holder is not None

    def pace(self, now: float) -> float | None:
        """Seconds a step, wall-clock, in the latest job that trained one: its steps, in-training evaluations and
        checkpoints from its start record to its last step (its stop, or metrics.jsonl's last write)."""
        for i, job in reversed(list(enumerate(self.jobs))):
            ended = job.ended()
            if ended is not None and ended["event"] == "stop":
                steps, end = ended["step"] - job.start["step"], ended["time"]
            elif i == len(self.jobs) - 1 and self.metrics_time is not None:
                steps, end = self.step - job.start["step"], self.metrics_time
            else:
                continue
            if steps > 0:
                return (end - job.start["time"]) / steps
        return None

    def startup_s(self) -> float | None:
        """The mean seconds from a job's launcher start to its first step's start (its start record)."""
        measured = [j.start["time"] - j.start["launched"] for j in self.jobs if j.start.get("launched")]
        return sum(measured) / len(measured) if measured else None

    def hours(self, now: float) -> float:
        """The wall-clock hours of its jobs."""
        last = len(self.jobs) - 1
        return sum(j.seconds(self.live and i == last, now) for i, j in enumerate(self.jobs)) / 3600

    def gpu_hours(self, now: float) -> float:
        last = len(self.jobs) - 1
        return sum(j.gpu_hours(self.live and i == last, now) for i, j in enumerate(self.jobs))


def read_run(out: Path) -> RunFiles:
    out = Path(out)
    files = RunFiles(out)
    if not out.is_dir():
        return files
    files.holder = live_holder(out)  # first: a job that ends while the rest is read has written its records
    files.jobs = split_jobs(read_segments(out))
    metrics = out / "metrics.jsonl"
    files.metrics = last_metrics(metrics)
    files.metrics_time = metrics.stat().st_mtime if files.metrics else None
    files.checkpoints = checkpoint_steps(out)
    try:
        files.trained = json.loads((out / "trained.json").read_text())
    except (OSError, ValueError):
        files.trained = None
    return files


def now() -> float:
    return time.time()
