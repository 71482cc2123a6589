"""A run as consecutive jobs (segments), each stopping in time for the queue's limit, a preemption or a stop asked.

- **End time.** SLURM sets a job's end time; the trainer reads it (pacs.slurm) when the job starts and again
  every ten minutes (``scontrol update TimeLimit=`` moves it, and so does a preemption's grace time). Outside SLURM
  there is none.
- **Stop.** After every step, every rank agrees (a max over ranks) to stop when ``checkpoint.stop_margin`` ×
  (the longest step + the longest checkpoint write + the longest teardown measured in this run, across its
  segments; a write not yet measured counts as a step, a teardown not yet measured as a write) would pass the end
  time, so that the job also ends in time after its last step; when SIGTERM, SIGINT or SIGUSR1 arrived (a
  preemption, which SLURM announces with SIGTERM; a stop of `pacs train` passed on by pacs.runs.lifetime); or
  when the experiment's stop file exists (`pacs stop`, pacs.stop). The run then saves a checkpoint of that
  step (unless it just did) and exits with ``EXIT_STOPPED``; running the same command again resumes it.
- **Requeue.** With ``pacs train --requeue`` (the workflow's), a job that stopped for its time limit after
  training a step puts itself back in SLURM's queue (pacs.slurm): SLURM starts the same job again and it
  resumes. A stop on a signal or a stop asked does not: SLURM requeues a preempted job itself, and a stop asked
  is meant to last. A job that stopped for its time limit without training a step fails, naming the limit.
- **Record.** Rank 0 appends to ``DIR/segments.jsonl``: a ``start`` (time, step, SLURM job, how many times SLURM
  started that job before (``restart``: a requeue or a preemption), end time, when its launcher started
  (``launched``) and the GPUs it holds (SLURM's allocation, else its CUDA ranks), torch's intra-op threads, the
  step delay where set), a ``signal`` when one arrives, a ``changed`` when the run resumes under a change of how it
  computes (pacs.runs.directory), and a ``stop`` (time, step, reason, the measured seconds and ``need_s``, the
  seconds the last check kept free) or a ``failed``; the launcher, once the job's processes ended, an ``exit``
  after a ``stop``: the teardown's seconds from the stop (the pools, the engine, wandb's finish, the processes'
  exit; up to the signal where the limit's SIGTERM cut it short). (This module imports torch only in a job, to
  record its threads and to stop, so that the workflow's reading of it stays light.)
- **A slow step, by a setting.** ``PACS_STEP_DELAY_S=SECONDS`` in a job's environment makes each of its steps
  that much longer (a sleep after the step, measured with it), so that a stop is decided by time under SLURM's
  shortest limit whatever the machine's speed (tests/test_workflow.py); it changes no result.
"""

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from pacs.slurm import EXIT_STOPPED as EXIT_STOPPED  # where the trainer and its tests read it
from pacs.slurm import REREAD_S, STEP_DELAY, allocated_gpus, slurm_end_time, step_delay
from pacs.stop import stop_requested

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)  # a stop at the next step, saved (exit 75)
LAUNCHED = "PACS_JOB_LAUNCHED"  # when the job's launcher started (seconds since the epoch): its ranks' start record
STOP_ASKED = "stop asked"  # the reason of a stop by the experiment's stop file (pacs stop)


@dataclass(frozen=True)
class JobOptions:
    """How this job of a run was started (``pacs train``'s flags)."""

    restart_on_change: bool = False  # a run directory under another config is moved aside, not refused
    keep_weights: Path | None = None  # a JSON list of steps, read at every save, instead of checkpoint.keep_weights
    calibration: Path | None = None  # pacs bench gpu's file that auto sizes are resolved with (pacs.plan.calibration)
    worst_case: bool = False  # after the last step, the largest micro-batches measured (the preflight's)
    stop_file: Path | None = None  # a stop asked of the experiment (pacs.stop): saved and stopped after a step
    requeue: bool = False  # after a stop for the time limit in SLURM, the job requeues itself (pacs.slurm)


def read_segments(out: Path) -> list[dict]:
    path = Path(out) / "segments.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def how_ended(history: list[dict]) -> dict:
    """The last record of the run's jobs, their launchers' ``exit`` records (and a resume's ``changed``) aside."""
    return next((h for h in reversed(history) if h["event"] not in ("exit", "changed")), {"event": "nothing"})


class Segment:
    """This job's part of the run: when it must stop, and its lines in ``segments.jsonl``. A context manager
    that installs the signal handlers and records how the job ended."""

    def __init__(self, out: Path, env, margin: float, options: JobOptions, environ=os.environ):
        self.out, self.env, self.margin, self.environ = Path(out), env, margin, environ
        self.options, self.signalled = options, ""
        self.history = history = read_segments(out) if env.main else []
        self.delay_s = step_delay(environ)
        # a step measured under another job's PACS_STEP_DELAY_S counts as it would take under this one's
        measured = [(h.get("step_s", 0.0) - h.get("step_delay_s", 0.0) + self.delay_s, h.get("checkpoint_s", 0.0))
                    for h in history if h["event"] == "stop" and h.get("step_s")]  # fmt: skip
        self.step_s = max((m[0] for m in measured), default=0.0)
        self.checkpoint_s = max((m[1] for m in measured), default=0.0)
        self.teardown_s = max((h["teardown_s"] for h in history if h["event"] == "exit"), default=0.0)
        self.read_at, self.end, self.step = -REREAD_S, None, 0
        self.need_s = 0.0  # the seconds the last check kept free before the end time
        self._handlers: dict = {}

    def _record(self, event: str, **fields) -> None:
        if self.env.main:
            self.out.mkdir(parents=True, exist_ok=True)
            with open(self.out / "segments.jsonl", "a", encoding="utf-8") as f:
                f.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")

    def _on_signal(self, signum, frame) -> None:
        if self.signalled:  # the first is the stop (SLURM's warning may be followed by its SIGTERM)
            return
        self.signalled = signal.Signals(signum).name
        self._record("signal", signal=self.signalled, step=self.step)

    def begin(self, step: int, sizes: dict | None = None) -> None:
        """The job's start at ``step``, with the sizes it resolved for its devices (``pacs.train.update.sizes``)."""
        import torch

        self._refresh()
        self.step = step
        job = self.environ.get("SLURM_JOB_ID")
        # SLURM started this job before: requeued after a stop, or preempted (the same job id, started again)
        restart = sum(1 for h in self.history if h["event"] == "start" and job and h.get("slurm_job") == job)
        if self.delay_s:
            print(f"{STEP_DELAY}={self.delay_s:g}: each step of this job is made {self.delay_s:g} s longer", flush=True)
        # the intra-op threads: a sum split over other threads may differ in its last bits
        # what the job holds from its start (its launcher's) and on how many GPUs: `pacs status`'s GPU-hours
        gpus, launched = job_gpus(self.env, self.environ), launched_at(self.environ)
        self._record("start", step=step, slurm_job=job, restart=restart, end_time=self.end, launched=launched,
                     gpus=gpus, cuda_allocator=self.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
                     threads=torch.get_num_threads(),
                     **({"step_delay_s": self.delay_s} if self.delay_s else {}),
                     **({"sizes": sizes} if sizes else {}))  # fmt: skip

    def __enter__(self):
        self._handlers = {s: signal.signal(s, self._on_signal) for s in SIGNALS}
        return self

    def __exit__(self, kind, error, trace):
        for s, handler in self._handlers.items():
            signal.signal(s, handler)
        if error is not None:
            self._record("failed", error=f"{kind.__name__}: {error}")
        return False

    def _refresh(self) -> None:
        if self.env.main and time.monotonic() - self.read_at >= REREAD_S:
            # a read that gets no answer keeps the end time read before
            self.end, self.read_at = slurm_end_time(self.environ) or self.end, time.monotonic()

    def took(self, step: int, step_s: float = 0.0, checkpoint_s: float = 0.0) -> None:
        """Step ``step`` is done (and saved, with ``checkpoint_s``), having taken ``step_s`` seconds (and
        ``PACS_STEP_DELAY_S`` more, slept here)."""
        self.step = step
        if step_s and self.delay_s:
            time.sleep(self.delay_s)
            step_s += self.delay_s
        self.step_s, self.checkpoint_s = max(self.step_s, step_s), max(self.checkpoint_s, checkpoint_s)

    def must_stop(self) -> str:
        """Why this job must stop after the step it just finished ("" to go on): the same answer on every rank."""
        import torch

        from pacs.ranks.distributed import all_reduce

        self._refresh()
        checkpoint = self.checkpoint_s or self.step_s  # not yet measured: as long as a step
        self.need_s = self.margin * (self.step_s + checkpoint + (self.teardown_s or checkpoint))
        short = self.end is not None and time.time() + self.need_s > self.end
        asked = self.env.main and stop_requested(self.options.stop_file) is not None
        votes = torch.tensor([float(bool(self.signalled)), float(asked), float(short)])
        signalled, asked, short = all_reduce(votes, self.env, "max").tolist()
        if signalled:
            return f"signal {self.signalled or 'on another rank'}"
        if asked:
            return STOP_ASKED
        return "time limit" if short else ""

    def stop(self, step: int, reason: str, worst: dict | None = None) -> None:
        """On every rank (it gathers each rank's peak memory): the job ends here, saved at ``step``; ``worst``: the
        largest micro-batches it measured after its last step (``pacs.train.loop.worst_case``)."""
        from pacs.ranks.memory import rank_peaks

        self._record("stop", step=step, reason=reason, step_s=self.step_s, checkpoint_s=self.checkpoint_s,
                     need_s=self.need_s, peak_gb=rank_peaks(self.env),
                     **({"step_delay_s": self.delay_s} if self.delay_s else {}),
                     **({"worst_case": worst} if worst else {}))  # fmt: skip


@dataclass
class Job:
    """One job of the run: its records from its ``start`` on."""

    records: list[dict]

    @property
    def start(self) -> dict:
        return self.records[0]

    @property
    def began(self) -> float:
        """When it started: its launcher's start, else its start record's."""
        return self.start.get("launched") or self.start["time"]

    @property
    def gpus(self) -> int:
        return int(self.start.get("gpus") or 0)

    @property
    def slurm_job(self) -> str | None:
        return self.start.get("slurm_job")

    def ended(self) -> dict | None:
        """Its ``stop`` or ``failed`` record (None: neither, yet or ever)."""
        return next((r for r in self.records if r["event"] in ("stop", "failed")), None)

    def exit(self) -> dict | None:
        return next((r for r in self.records if r["event"] == "exit"), None)

    def end(self, live: bool, now: float) -> float:
        """When it ended: its launcher's ``exit``, else its last record; ``now`` while it runs."""
        if live:
            return now
        exit_ = self.exit()
        return exit_["time"] if exit_ else self.records[-1]["time"]

    def seconds(self, live: bool, now: float) -> float:
        return max(0.0, self.end(live, now) - self.began)

    def gpu_hours(self, live: bool, now: float) -> float:
        return self.gpus * self.seconds(live, now) / 3600


def split_jobs(records: list[dict]) -> list[Job]:
    """The records of each job, from each ``start`` (records before the first, a resume's ``changed``, aside)."""
    jobs: list[Job] = []
    for record in records:
        if record["event"] == "start":
            jobs.append(Job([record]))
        elif jobs:
            jobs[-1].records.append(record)
    return jobs


def job_gpus(env, environ=os.environ) -> int:
    """The GPUs this job holds: SLURM's allocation, else its ranks where they run on CUDA, else none."""
    gpus = allocated_gpus(environ)
    return (env.world_size if str(env.device).startswith("cuda") else 0) if gpus is None else gpus


def launched_at(environ=os.environ) -> float | None:
    """When this job's launcher started (``LAUNCHED``, which it sets for its ranks)."""
    return float(environ.get(LAUNCHED) or 0.0) or None


def process_started() -> float:
    """When this process started, in seconds since the epoch (Linux's /proc; elsewhere: now)."""
    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime "))  # fmt: skip
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return time.time()


def job_ended(out: Path, began: int, code: int | None, signalled: str = "") -> None:
    """The launcher's ``exit`` record, once a job whose records begin at index ``began`` of ``segments.jsonl``
    stopped (``code``, its exit status; or ``signalled``, the signal that is ending it): the seconds from its
    ``stop`` to now. Nothing when the job did not stop (a run found finished writes nothing)."""
    stops = [h for h in read_segments(out)[began:] if h["event"] == "stop"]
    if not stops:
        return
    record = {"event": "exit", "time": time.time(), "step": stops[-1]["step"], "code": code}
    record["teardown_s"] = record["time"] - stops[-1]["time"]
    with open(Path(out) / "segments.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({**record, **({"signal": signalled} if signalled else {})}) + "\n")


def teardown_recorded(out: Path, job) -> int:
    """``job()`` (the launcher's whole job: its ranks in this process or under torchrun), then ``job_ended``.
    A SIGTERM or SIGINT that reaches this process while no one else handles it (in the teardown after the
    ranks' stop: the limit's SIGTERM) records the teardown so far, then takes its usual course."""
    began = len(read_segments(out))

    def cut_short(signum, frame) -> None:
        job_ended(out, began, None, signal.Signals(signum).name)
        signal.signal(signum, handlers[signum] or signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    handlers = {s: signal.signal(s, cut_short) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        code = job()
    finally:
        for s, handler in handlers.items():
            signal.signal(s, handler)
    job_ended(out, began, code)
    return code
