"""What a job asks of SLURM itself: its end time, its own requeue after a planned stop, and (for `pacs stop`) the
jobs a workflow has waiting in the queue.

- **End time.** ``SLURM_JOB_END_TIME`` where SLURM sets it (not 22.05), else ``squeue -h -j $SLURM_JOB_ID -o %e``.
  Outside SLURM, or for a job without a limit, there is none.
- **Requeue.** A job that stopped before its time limit (a training segment, an evaluation's chunks) puts itself
  back in the queue with ``scontrol requeue $SLURM_JOB_ID``: the same job, its id, resources and queue priority
  kept, starts again from the top of its script and resumes from what it saved. Snakemake keeps waiting on the
  one job (a requeued job reads as pending, not failed), so a run needs no resubmission and a failure is never
  submitted again. The job must be requeueable (``sbatch --requeue``: the profile's ``slurm-requeue: true``); SLURM
  holds a requeued job before it may start again (``AuthInfo=cred_expire``, 120 s by default).
- **A slow step or chunk, by a setting** (``STEP_DELAY``, ``CHUNK_DELAY``): for tests and trials of a time limit,
  never needed otherwise.
- **Preemption.** On a ``PreemptMode=REQUEUE`` partition SLURM sends the job SIGTERM, and after KillWait (or the
  partition's GraceTime, the warning) kills it and requeues it. A job that saved and ended within its grace time
  is not requeued but ends as failed (seen on SLURM 22.05), so a job stopped by a signal requeues itself while
  SLURM still lists it as running (a preemption's grace, a ``--signal=TERM@N`` warning); a job being cancelled
  (``scancel``: completing) or past its limit is left to end (``after_stop``).
"""

import os
import subprocess
from datetime import datetime

EXIT_STOPPED = 75  # EX_TEMPFAIL: stopped early with what it saved; the same command continues
# seconds added to every training step, and to every evaluation chunk: a test's slow step or chunk, so that time, not
# the machine's speed, decides a stop under SLURM's shortest limit (pacs.runs.segments, pacs.eval.deadline); neither
# changes a result
STEP_DELAY = "PACS_STEP_DELAY_S"
CHUNK_DELAY = "PACS_CHUNK_DELAY_S"
REREAD_S = 600.0  # a job reads its end time again this often: a grace time or `scontrol update TimeLimit=` moves it


def listed(field: str, environ=os.environ) -> str | None:
    """One field of this SLURM job as squeue lists it (``%e``: its end time; ``%T``: its state), or None outside SLURM
    or without an answer."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return None
    try:
        done = subprocess.run(["squeue", "-h", "-j", job, "-o", field], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def slurm_end_time(environ=os.environ) -> float | None:
    """The SLURM job's end time (seconds since the epoch), or None outside SLURM or without a limit."""
    if environ.get("SLURM_JOB_END_TIME"):
        return float(environ["SLURM_JOB_END_TIME"])
    try:
        return datetime.fromisoformat(listed("%e", environ) or "").timestamp()  # local time, as squeue prints it
    except ValueError:  # "N/A", "Unknown" (no limit), or no answer
        return None


def job_state(environ=os.environ) -> str | None:
    """This SLURM job's state as squeue lists it (RUNNING, COMPLETING, …), or None outside SLURM."""
    return listed("%T", environ)


def after_stop(what: str, reason: str, progressed: bool, requeue_asked: bool, environ=os.environ) -> int:
    """The exit status of a job that stopped, saved, for ``reason`` (its records' word: "time limit", "signal …", a
    stop asked), having ``progressed`` (trained a step, sampled a chunk) since it started. With ``requeue_asked``
    (``--requeue``), in SLURM: after the time limit's stop it requeues itself, or fails (1) when it made no progress
    (its limit leaves no room); after a signal while SLURM still runs it, it requeues itself (module docstring).
    Otherwise 75, EX_TEMPFAIL: the same command continues."""
    if not requeue_asked or not environ.get("SLURM_JOB_ID"):
        return EXIT_STOPPED
    if reason == "time limit":
        if not progressed:
            print(f"{what}: this job stopped for its time limit before it made progress (its start-up and one step or "
                  "chunk do not fit in its time): raise the rule's resources max_runtime (or runtime)", flush=True)
            return 1
        requeue(what, environ)
    elif reason.startswith("signal") and job_state(environ) == "RUNNING":
        requeue(what, environ)
    return EXIT_STOPPED


def requeue(what: str, environ=os.environ) -> bool:
    """Put this SLURM job back in the queue (``what`` resumes when SLURM starts it again); False, saying why, where
    it cannot (outside SLURM, a job submitted without ``--requeue``, a site that forbids it)."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        print(f"{what}: not in a SLURM job, nothing to requeue; the same command continues it", flush=True)
        return False
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=120)
        error = (done.stderr or done.stdout).strip() if done.returncode else ""
    except (OSError, subprocess.TimeoutExpired) as e:
        error = str(e)
    if error:
        print(f"{what}: SLURM refused to requeue job {job} ({error}); the workflow reports this job as failed: run it "
              "again to continue from what was saved (the profile's slurm-requeue: true makes jobs requeueable)",
              flush=True)  # fmt: skip
        return False
    print(f"{what}: requeued SLURM job {job}; it resumes from what it saved when SLURM starts it again (a requeued "
          "job is held about two minutes, AuthInfo=cred_expire)", flush=True)  # fmt: skip
    return True


def waiting_jobs(workdir: str, user: str | None = None) -> list[str]:
    """The ids of this user's SLURM jobs that have not started and run in ``workdir`` (a workflow's: the SLURM
    executor submits with ``-D`` its working directory); [] where there is no ``squeue``."""
    user = user or os.environ.get("USER") or os.environ.get("LOGNAME") or ""
    try:
        listed = subprocess.run(["squeue", "-h", "-u", user, "-t", "PENDING", "-o", "%i|%Z"], capture_output=True,
                                text=True, timeout=60)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return []
    rows = [line.split("|", 1) for line in listed.stdout.splitlines() if "|" in line]
    return [job for job, where in rows if os.path.realpath(where) == os.path.realpath(workdir)]


def step_delay(environ=os.environ, name: str = STEP_DELAY) -> float:
    """``PACS_STEP_DELAY_S`` (or ``name``): seconds each step (or chunk) is made longer (0 when unset)."""
    text = environ.get(name, "")
    try:
        delay = float(text or 0)
    except ValueError:
        delay = -1.0
    if not 0 <= delay < float("inf"):
        raise ValueError(f"{name}={text!r}: seconds a step or chunk is made longer, a number >= 0")
    return delay


def allocated_gpus(environ=os.environ) -> int | None:
    """The GPUs SLURM allocated this job on all its nodes (0: none asked), or None outside SLURM."""
    if not environ.get("SLURM_JOB_ID"):
        return None
    nodes = int(environ.get("SLURM_JOB_NUM_NODES") or environ.get("SLURM_NNODES") or 1)
    if environ.get("SLURM_GPUS_ON_NODE"):
        return int(environ["SLURM_GPUS_ON_NODE"]) * nodes
    ids = environ.get("SLURM_JOB_GPUS") or environ.get("SLURM_STEP_GPUS") or ""
    return len([i for i in ids.split(",") if i]) * nodes


def job_states(jobs: list[str]) -> dict[str, dict]:
    """``{job id: {"state": ..., "reason": ...}}`` for the SLURM jobs that squeue lists (pending, running,
    completing) or, for the others, that sacct remembers (where the cluster keeps accounting); {} where neither
    answers (no SLURM here). Read only."""
    states: dict[str, dict] = {}
    jobs = sorted(set(jobs), key=lambda j: (len(j), j))
    if not jobs:
        return states
    for command, parse in (
        (["squeue", "-h", "-o", "%i|%T|%r", "-j", ",".join(jobs)], lambda f: {"state": f[1], "reason": f[2]}),
        (["sacct", "-n", "-P", "-X", "-o", "JobID,State,ExitCode", "-j", ",".join(jobs)],
         lambda f: {"state": f[1].split()[0], "reason": f"exit code {f[2]}"}),
    ):  # fmt: skip
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            continue
        for line in done.stdout.splitlines():
            fields = line.strip().split("|")
            if len(fields) == 3 and fields[0] in jobs and fields[0] not in states:
                states[fields[0]] = parse(fields)
        jobs = [j for j in jobs if j not in states]
        if not jobs:
            break
    return states

