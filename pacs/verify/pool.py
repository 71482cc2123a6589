"""Batch scoring in worker processes that the caller can kill.

- Processes, never threads: math-verify and our deadline use SIGALRM, which needs a main thread.
- Identical (gold, answer) pairs are scored once (the n answers of a group often repeat).
- Work is handed out as workers free up, so that no item waits in one worker's queue while another
  worker is idle. A program (code) goes to a worker only when it has nothing left: programs take a
  tenth of a second to seconds each, and the n programs of one hard problem arrive together, all slow.
  Math answers take a millisecond or a few tens: a worker holds up to ``chunk_size`` of them (4), the
  next sent while it still scores the last (a thread in the worker takes them off the pipe), so that it
  never waits for the parent, yet too few for a long tail when the work runs out.
- A worker reports each answer as it finishes, with the time, so the parent knows when the current
  answer started (and reads all that has arrived at each wake-up). Past ``timeout_s + grace_s`` the
  worker is killed and replaced, the answer is a ``timeout`` and the rest of what it was sent is queued
  again. A worker that dies on its own gives ``error``. The caller never hangs and never sees an
  exception from a bad answer.
- The workers (and the forkserver they fork from) start at the first call that needs them: a pool that
  scores nothing starts no process (a trainer rank beside generator ranks, which score for it; an
  evaluation of multiple-choice benchmarks only).
"""

import multiprocessing as mp
import os
import queue
import signal
import threading
import time
from collections import Counter, deque
from collections.abc import Iterable, Sequence
from multiprocessing.connection import wait

from pacs.verify.choice import CHOICE_STATUSES, score_choice
from pacs.verify.code import CODE_STATUSES, CodeConfig, CodeVerdict, code_deadline_s, score_code
from pacs.verify.sandbox import reaping, resolve_isolation
from pacs.verify.scoring import STATUSES, DeadlineExceeded, Verdict, VerifyConfig, score_answer

_READY = "ready"
TASKS = ("math", "code", "choice")  # what a dataset's ``task`` column may say
TASK_STATUSES = {"math": STATUSES, "code": CODE_STATUSES, "choice": CHOICE_STATUSES}
PASSING = {"math": "correct", "code": "passed", "choice": "correct"}


def score_item(task: str, gold: str, answer: str, config: VerifyConfig, code: CodeConfig) -> Verdict | CodeVerdict:
    """One answer's verdict: math-verify against a gold, the code verifier against tests, or the letter read
    from a multiple-choice answer against the gold letter."""
    if task == "choice":
        return score_choice(gold, answer)
    if task == "code":
        with reaping():  # anything a program left behind
            return score_code(gold, answer, code)
    try:
        return score_answer(gold, answer, config)
    except DeadlineExceeded:  # the alarm fired just as scoring returned
        return Verdict("timeout", 0.0, "")


def lost_verdict(task: str, status: str, why: str = "") -> Verdict | CodeVerdict:
    """The verdict of an answer whose worker was killed (``timeout``) or died (``error``)."""
    if task == "code":
        return CodeVerdict(status if status == "timeout" else "sandbox_error", 0.0, "", 0, 0, 0.0, "", why)
    return Verdict(status, 0.0, why)


def _worker_main(conn, config: VerifyConfig, code: CodeConfig) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    # and SLURM's SIGTERM (a preemption's warning reaches every process of a job): the step being scored finishes
    # with its verdicts, and the parent ends the workers (SIGKILL) when it closes the pool
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    inbox: queue.SimpleQueue = queue.SimpleQueue()

    def receive() -> None:  # drains the pipe at once, so a parent sending the next chunk never waits on scoring
        while True:
            try:
                chunk = conn.recv()
            except (EOFError, OSError):
                chunk = None
            inbox.put(chunk)
            if chunk is None:
                return

    threading.Thread(target=receive, daemon=True).start()
    conn.send(_READY)
    while (chunk := inbox.get()) is not None:  # scoring stays in the main thread: its deadline is SIGALRM
        for idx, task, gold, answer in chunk:
            verdict = score_item(task, gold, answer, config, code)
            conn.send((idx, verdict, time.monotonic()))  # CLOCK_MONOTONIC: one clock for all processes


class _Worker:
    def __init__(self, ctx, config: VerifyConfig, code: CodeConfig):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, config, code), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.chunk: deque[int] = deque()  # unique-item indices sent and not yet answered
        self.started = 0.0  # when the answer at chunk[0] started

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()
        self.conn.close()


class VerifierPool:
    """``with VerifierPool(config, workers=2) as pool: verdicts = pool.score(golds, answers)``; for code,
    ``pool.score(tests, responses, task="code")`` with each row's tests JSON as its gold; multiple choice
    (``task="choice"``, golds "A" ... "D") is scored in the caller's process."""

    def __init__(
        self,
        config: VerifyConfig = VerifyConfig(),
        workers: int = 2,
        chunk_size: int = 4,
        hard_timeout_s: float | None = None,
        code: CodeConfig = CodeConfig(),
    ):
        """``chunk_size``: math answers a worker holds at most, the one it scores included (programs: one).
        ``hard_timeout_s``: when the parent kills a worker stuck on one math answer; by default one
        second after the worker's own deadline (``config.timeout_s``) should have fired. A program's
        deadline is its sandbox's own, plus that second. ``code.isolation`` is resolved here: a required
        level that this machine lacks fails now, not at the first program."""
        if workers < 1:
            raise ValueError(f"workers must be >= 1, got {workers}")
        self.config = config
        self.code = code
        self.isolation = resolve_isolation(code.isolation)
        self.chunk_size = chunk_size
        self.hard_deadline_s = hard_timeout_s if hard_timeout_s is not None else config.timeout_s + 1.0
        self._ctx = mp.get_context("forkserver")
        # Workers fork from a server that has math-verify imported already: a replacement is cheap.
        self._ctx.set_forkserver_preload(["math_verify", "pacs.verify.scoring"])
        self.workers = workers
        self._workers: list[_Worker] = []  # started by the first call that sends them work
        self.restarts = 0  # workers killed or lost and replaced
        self.unique_scored = 0  # distinct (gold, answer) pairs sent to workers
        self.item_seconds: list[float] = []  # the last call's distinct pairs: each one's seconds in its worker

    def __enter__(self) -> "VerifierPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for w in self._workers:
            try:
                w.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            w.proc.join(timeout=2)
            if w.proc.is_alive():
                w.kill()
        self._workers = []

    def score(self, golds: Sequence[str], answers: Sequence[str], task: str = "math") -> list[Verdict | CodeVerdict]:
        """One verdict per (gold, answer) pair, in order."""
        if len(golds) != len(answers):
            raise ValueError(f"{len(golds)} golds but {len(answers)} answers")
        if task not in TASKS:
            raise ValueError(f"task {task!r}: one of {TASKS}")
        if task == "choice":  # a regex on 1,024 characters: no worker, no deadline; a gold that is no letter raises
            return [score_choice(g, a) for g, a in zip(golds, answers, strict=True)]
        pairs = [(task, g, a) for g, a in zip(golds, answers, strict=True)]
        unique = list(dict.fromkeys(pairs))
        index = {pair: i for i, pair in enumerate(unique)}
        verdicts = self._score_unique(unique)
        self.unique_scored += len(unique)
        return [verdicts[index[pair]] for pair in pairs]

    def _replace(self, w: _Worker) -> None:
        w.kill()
        self.restarts += 1
        self._workers[self._workers.index(w)] = _Worker(self._ctx, self.config, self.code)

    def _deadline_s(self, item: tuple[str, str, str]) -> float:
        task, gold, _ = item
        return code_deadline_s(gold, self.code) + 1.0 if task == "code" else self.hard_deadline_s

    def _score_unique(self, items: list[tuple[str, str, str]]) -> list[Verdict | CodeVerdict]:
        results: list[Verdict | None] = [None] * len(items)
        self.item_seconds = [0.0] * len(items)
        if items and not self._workers:  # the first call with work starts them
            self._workers = [_Worker(self._ctx, self.config, self.code) for _ in range(self.workers)]
        pending = deque(range(len(items)))
        # items one worker may hold: a program only when it holds none (no program queues behind a slow one);
        # math answers a few ahead, so that the worker never waits for the parent
        held = 1 if items and items[0][0] == "code" else self.chunk_size
        while pending or any(w.chunk for w in self._workers):
            now = time.monotonic()
            for w in self._workers:
                # chunks shrink as the work runs out, so that no worker is left with a long tail
                if w.ready and len(w.chunk) < held and pending:
                    size = max(1, min(held - len(w.chunk), len(pending) // (2 * len(self._workers))))
                    ids = [pending.popleft() for _ in range(size)]
                    try:
                        w.conn.send([(i, *items[i]) for i in ids])
                    except OSError:  # it died: give its work to a fresh one
                        pending.extendleft(reversed([*w.chunk, *ids]))
                        w.chunk.clear()
                        self._replace(w)
                        continue
                    if not w.chunk:
                        w.started = now
                    w.chunk.extend(ids)
            busy = [w for w in self._workers if w.chunk]
            next_deadline = min((w.started + self._deadline_s(items[w.chunk[0]]) for w in busy), default=now + 1.0)
            ready = wait([w.conn for w in self._workers], timeout=max(0.0, next_deadline - now))
            for w in list(self._workers):
                if w.conn in ready:
                    while self._receive(w, results, pending, items) and w.conn.poll():
                        pass
            now = time.monotonic()
            for w in list(self._workers):
                if w.chunk and now - w.started > self._deadline_s(items[w.chunk[0]]):
                    results[w.chunk[0]] = lost_verdict(items[w.chunk[0]][0], "timeout")
                    self.item_seconds[w.chunk[0]] = now - w.started
                    w.chunk.popleft()
                    pending.extendleft(reversed(w.chunk))
                    self._replace(w)
        return results  # type: ignore[return-value]

    def _receive(self, w: _Worker, results: list, pending: deque, items: list) -> bool:
        """One message of ``w``; False when ``w`` died (and was replaced)."""
        try:
            msg = w.conn.recv()
        except (EOFError, OSError):  # the worker died by itself (OOM, segfault)
            if not w.ready:
                raise RuntimeError(
                    f"a verifier worker died while starting (exit code {w.proc.exitcode}); its error is above. "
                    "Workers start like multiprocessing's spawn: the main script needs an "
                    "`if __name__ == '__main__':` guard and must be a real file."
                ) from None
            if w.chunk:
                results[w.chunk[0]] = lost_verdict(items[w.chunk[0]][0], "error", "verifier worker died")
                w.chunk.popleft()
                pending.extendleft(reversed(w.chunk))
            self._replace(w)
            return False
        if msg == _READY:
            w.ready = True
            return True
        idx, verdict, finished = msg
        assert w.chunk and w.chunk[0] == idx, "worker answered out of order"
        w.chunk.popleft()
        results[idx] = verdict
        self.item_seconds[idx] = finished - w.started
        w.started = finished  # when the worker began the next answer
        return True


def node_workers(ranks_on_node: int = 1, cores: int | None = None) -> int:
    """Verifier workers for one of ``ranks_on_node`` trainer ranks: its share of the ``cores`` this process may
    run on (``os.sched_getaffinity``: what SLURM or taskset gave it) but one, which the rank's own process
    needs; at least one. One rank on a 16-core GPU node: 15; eight ranks on 64 cores: 7 each."""
    cores = len(os.sched_getaffinity(0)) if cores is None else cores
    return max(1, cores // max(ranks_on_node, 1) - 1)


def status_counts(verdicts: Iterable[Verdict | CodeVerdict], task: str = "math") -> dict[str, int]:
    """Count of each status of ``task``'s verifier, every status present (zeros included), for reports."""
    counts = Counter(v.status for v in verdicts)
    unknown = set(counts) - set(TASK_STATUSES[task])
    if unknown:
        raise ValueError(f"statuses {sorted(unknown)} are not {task} verdicts")
    return {s: counts.get(s, 0) for s in TASK_STATUSES[task]}
