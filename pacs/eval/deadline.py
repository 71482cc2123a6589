"""When an evaluation job stops, between two chunks: before a chunk that would not end before the job's time limit,
after a stop was asked of the experiment (`pacs stop`, pacs.stop), or after SIGTERM, SIGINT or SIGUSR1 (a
preemption, a stop of the command). Every chunk is written whole as it is scored (pacs.eval.run), so a stopped
evaluation keeps what it sampled, and the same command (or the job requeued, `pacs evaluate --requeue`) samples
only the chunks still missing: no response is sampled twice.

The time check: ``STOP_MARGIN`` × the longest chunk measured (in this job, or recorded in the chunks already
written: generation, scoring and write) must fit before the end time SLURM gives the job (pacs.slurm); the
first chunk of an evaluation with none measured always starts. ``PACS_CHUNK_DELAY_S`` makes each chunk that much
longer (a sleep after it, measured with it), as ``PACS_STEP_DELAY_S`` does a training step: a test's slow chunk.
"""

import os
import signal
import time
from pathlib import Path

from pacs.slurm import CHUNK_DELAY, REREAD_S, slurm_end_time, step_delay
from pacs.stop import describe, stop_requested

STOP_MARGIN = 1.5
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class Stopped(Exception):
    """The evaluation stopped before a chunk, its chunks so far kept; ``reason``: why."""

    def __init__(self, reason: str, chunks: int):
        super().__init__(f"stopped before its next chunk ({reason}) after {chunks} chunk(s) in this job")
        self.reason, self.chunks = reason, chunks


class Deadline:
    """This job's time, stop file and signals. A context manager that installs the signal handlers."""

    def __init__(self, stop_file: Path | None = None, environ=os.environ):
        self.stop_file, self.environ = stop_file, environ
        self.end, self.read_at = slurm_end_time(environ), time.monotonic()
        self.delay_s = step_delay(environ, CHUNK_DELAY)
        self.chunk_s, self.chunks, self.signalled = 0.0, 0, ""
        self._handlers: dict = {}

    def __enter__(self):
        self._handlers = {s: signal.signal(s, self._on_signal) for s in SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, handler in self._handlers.items():
            signal.signal(s, handler)
        return False

    def _on_signal(self, signum, frame) -> None:
        if self.signalled and signum == signal.SIGINT:  # a second Ctrl-C: at once, the chunk in flight lost
            raise KeyboardInterrupt
        self.signalled = self.signalled or signal.Signals(signum).name
        print(f"{self.signalled}: the evaluation stops after its chunk in flight (a second Ctrl-C: at once)",
              flush=True)

    def measured(self, seconds: float) -> None:
        """A chunk (written now or before) took ``seconds``."""
        self.chunk_s = max(self.chunk_s, seconds)

    def chunk_done(self, seconds: float) -> None:
        """A chunk of this job was written after ``seconds`` (and ``PACS_CHUNK_DELAY_S`` more, slept here)."""
        if self.delay_s:
            time.sleep(self.delay_s)
        self.chunks += 1
        self.measured(seconds + self.delay_s)

    def interrupted(self) -> None:
        """Raise ``Stopped`` after a signal or a stop asked: before a finished benchmark's wandb run, whose service a
        signal may have ended (the next start, finding the benchmark done, writes it)."""
        asked = stop_requested(self.stop_file)
        if self.signalled:
            raise Stopped(f"signal {self.signalled}", self.chunks)
        if asked is not None:
            raise Stopped(describe(asked), self.chunks)

    def check(self) -> None:
        """Raise ``Stopped`` when the next chunk must not start."""
        self.interrupted()
        if time.monotonic() - self.read_at >= REREAD_S:  # a grace time or `scontrol update TimeLimit=` moves it
            # a read that gets no answer keeps the end time read before
            self.end, self.read_at = slurm_end_time(self.environ) or self.end, time.monotonic()
        if self.end is not None and self.chunk_s and time.time() + STOP_MARGIN * self.chunk_s > self.end:
            raise Stopped("time limit", self.chunks)
