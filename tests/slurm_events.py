"""What happens to a workflow's jobs on a shared cluster, made to happen on the local SLURM (tests/test_workflow.py):
a training job requeued mid-step by `scontrol requeue`, one preempted by a job of the higher-priority partition
`high`, each at a random moment of a step, and the two-minute hold SLURM puts on every requeued job released
(it tests nothing and would cost CI minutes; on a real cluster it stands)."""

import json
import random
import subprocess
import threading
import time
from pathlib import Path

from pacs.runs.segments import read_segments

# A requeued job released this long after it was first seen held, not at once: SLURM revokes the credential of the
# run it ended as of the requeue's second, and a start launched within that second is refused ("Killing
# non-startable batch JobId=…: Job credential revoked" in slurmctld's log) and ends the job, failed (seen in CI)
RELEASE_AFTER_S = 5.0


def release_held(done: threading.Event) -> threading.Thread:
    """Until ``done``: every pending job that waits for its begin time (a requeued job's hold) may start
    RELEASE_AFTER_S after it was first seen waiting for that begin time."""

    def loop() -> None:
        seen: dict[tuple[str, str], float] = {}
        while not done.wait(1):
            listed = subprocess.run(["squeue", "-h", "-t", "PENDING", "-o", "%i %S %r"], capture_output=True,
                                    text=True)  # fmt: skip
            for line in listed.stdout.splitlines():
                job, begin, reason = line.split(maxsplit=2)
                if reason.strip() != "BeginTime":
                    continue
                first = seen.setdefault((job, begin), time.monotonic())
                if time.monotonic() - first >= RELEASE_AFTER_S:
                    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], capture_output=True)

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def steps_done(run: Path) -> int:
    metrics = run / "metrics.jsonl"
    if not metrics.exists():
        return 0
    return max((json.loads(x)["step"] for x in metrics.read_text().splitlines() if x.endswith("}")), default=0)


def wait_for(condition, deadline: float, what: str) -> None:
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.5)


def mid_step(run: Path, starts: int, deadline: float, rng: random.Random, latest: float) -> tuple[str, int]:
    """Once the run's ``starts``-th start has trained a step: a random moment of the step after it, within
    ``latest`` seconds of its beginning. Returns the SLURM job and the step in flight."""
    started = lambda: [r for r in read_segments(run) if r["event"] == "start"]  # noqa: E731
    wait_for(lambda: len(started()) >= starts, deadline, f"start {starts} of {run}")
    first = started()[starts - 1]["step"]
    wait_for(lambda: steps_done(run) > first, deadline, f"a step of start {starts}")
    done = steps_done(run)
    time.sleep(rng.uniform(1.0, latest))
    return started()[starts - 1]["slurm_job"], done + 1


def files_now(run: Path) -> tuple:
    """What a status of ``run`` reads, as it is now: its records, its last step, its checkpoints, trained.json."""
    checkpoints = sorted(p.name for p in (run / "checkpoints").glob("step_*")) if (run / "checkpoints").is_dir() else []
    return len(read_segments(run)), steps_done(run), checkpoints, (run / "trained.json").exists()


def while_running(run: Path, take, deadline: float) -> dict:
    """``take()`` (a status) while the job that started last trains ``run``, once it has trained a step, at a
    moment when none of ``run``'s files changed while it was taken (tried again otherwise): ``{"taken": its
    result, "records": the records then, "step": the last step then, "checkpoints": the checkpoints then}``."""
    started = lambda: [r for r in read_segments(run) if r["event"] == "start"]  # noqa: E731
    first = started()[-1]["step"]
    wait_for(lambda: steps_done(run) > first, deadline, f"a step of start {len(started())}")
    while True:
        before = files_now(run)
        taken = take()
        if files_now(run) == before:
            return {"taken": taken, "records": read_segments(run), "step": before[1], "checkpoints": before[2]}
        assert time.monotonic() < deadline, "no moment without a change"
        time.sleep(1)


def interrupt_training(run: Path, log: list[dict], timeout_s: float, seed: int = 0, during=None) -> None:
    """The workflow's SLURM training of ``run``: in its first start, ``scontrol requeue`` at a random moment of a
    step, early enough that KillWait ends the step unsaved; then, in the start after its first stop for the time
    limit, a job of partition `high` asking for both GPUs, which preempts it with the partition's GraceTime as
    warning. ``log`` gets what was done, when, and the step in flight; in between, in the second start, ``during``
    (a status) taken while it trains (``while_running``), logged as "during"."""
    rng, deadline = random.Random(seed), time.monotonic() + timeout_s
    job, step = mid_step(run, 1, deadline, rng, 6.0)
    log.append({"what": "requeue", "time": time.time(), "job": job, "in_flight": step})  # its SIGTERM follows
    subprocess.run(["scontrol", "requeue", job], check=True, capture_output=True)
    if during is not None:
        wait_for(lambda: sum(1 for r in read_segments(run) if r["event"] == "start") >= 2, deadline, "start 2")
        log.append({"what": "during", "time": time.time(), **while_running(run, during, deadline)})
    wait_for(lambda: any(r["event"] == "stop" and r["reason"] == "time limit" for r in read_segments(run)),
             deadline, "a stop for the time limit")  # fmt: skip
    starts = sum(1 for r in read_segments(run) if r["event"] == "start")
    job, step = mid_step(run, starts + 1, deadline, rng, 15.0)
    high = ["sbatch", "--parsable", "-p", "high", "--gpus=2", "--cpus-per-task=1", "--mem=100", "--time=1",
            "--output=/dev/null", "--wrap", "sleep 5"]  # fmt: skip
    log.append({"what": "preempt", "time": time.time(), "job": job, "in_flight": step})
    subprocess.run(high, check=True, capture_output=True)
