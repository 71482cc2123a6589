"""A job lives and dies whole: the processes of a `pacs train` job on one node end with the one that started
them, and a stop asked of `pacs train` reaches every rank.

- ``die_with_parent``: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``, so that the kernel kills this process when its parent
  ends, however it ends (SIGKILL, the OOM killer, a closed terminal); the parent is checked again afterwards,
  since it may have gone before the signal was armed. torchrun, started by `pacs train` (``torchrun_main``), dies
  with it, and each rank with torchrun.
- ``wait_forwarding_stops``: `pacs train` waits for torchrun (or srun) and passes a SIGTERM or SIGINT it
  receives on as SIGTERM; torchrun (``torchrun_main``) passes it to each rank, in a session of its own (a
  terminal's Ctrl-C reaches only `pacs train` and torchrun). The ranks stop after their step, saved
  (pacs.runs.segments), and the job exits 75 as at SLURM's warning signal: the same command continues the run,
  however long the step and its checkpoint take. torchrun itself never ends the ranks for these two: it is
  started with ``--signals-to-handle SIGHUP,SIGQUIT`` (``SIGNALS_TORCHRUN_HANDLES``; its default, SIGTERM and
  SIGINT included, would replace our handler with its own, which sends the ranks SIGTERM and SIGKILLs them
  ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT`` seconds later, 30 by default: a 7B step and its checkpoint do not fit). It
  ignores SIGUSR1, SLURM's warning, which the ranks hear themselves. SIGHUP and SIGQUIT sent to torchrun itself
  still end the job its way (the signal to the ranks, SIGKILL 30 s later; the step in flight is lost, the last
  checkpoint stands); sent to `pacs train` they end it, and torchrun and the ranks die with it.

Several nodes (one srun step, a torchrun per node): srun passes the SIGTERM to each node's torchrun, which passes
it to its ranks; each torchrun and its ranks die with the process srun started there, and SLURM ends the step's
tasks on every node when one of them fails (``--kill-on-bad-exit``) or the job ends. What SLURM does not cover is
a task that hangs without exiting: the job's time limit ends it.
"""

import contextlib
import ctypes
import os
import runpy
import signal
import subprocess
import sys
from pathlib import Path

PR_SET_PDEATHSIG = 1
PARENT = "PACS_PARENT_PID"  # set by `pacs train` for the torchrun it starts: torchrun's expected parent
TORCHRUN = "PACS_TORCHRUN_PID"  # set by torchrun_main for its ranks: their expected parent
STOPS = (signal.SIGTERM, signal.SIGINT)
# torchrun's --signals-to-handle: not STOPS, whose handler here passes them to the ranks (module docstring)
SIGNALS_TORCHRUN_HANDLES = "SIGHUP,SIGQUIT"


def die_with_parent(expected: int | None = None) -> None:
    """Be killed (SIGKILL) when the parent process ends; if ``expected`` is not the parent now, it has ended
    already: die at once."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if expected is not None and os.getppid() != expected:
        os.kill(os.getpid(), signal.SIGKILL)


def torchrun_main(module: str = "torch.distributed.run") -> None:
    """torchrun (``module``), as `pacs train` starts it (with ``--signals-to-handle SIGNALS_TORCHRUN_HANDLES`` among
    its arguments, ``pacs.train.launch.torchrun_command``): a SIGTERM or SIGINT passed to its ranks as SIGTERM (they
    save, then end), SIGUSR1 ignored; dying with `pacs train` and naming itself to its ranks, which die with it."""

    def pass_on(signum, frame) -> None:
        for rank in children(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.kill(rank, signal.SIGTERM)

    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    for s in STOPS:
        signal.signal(s, pass_on)
    parent = os.environ.pop(PARENT, None)
    die_with_parent(int(parent) if parent else None)
    os.environ[TORCHRUN] = str(os.getpid())
    sys.argv[0] = "torchrun"
    runpy.run_module(module, run_name="__main__")


def rank_dies_with_torchrun() -> None:
    """At a rank's start: die with the torchrun that started it (checked where torchrun_main named itself)."""
    expected = os.environ.get(TORCHRUN)
    die_with_parent(int(expected) if expected else None)


def children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (Linux /proc)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):  # ended meanwhile
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
    return found


def wait_forwarding_stops(command: list[str], env: dict) -> int:
    """Run ``command`` (torchrun, or srun of one torchrun per node) to its end, passing it each SIGTERM or SIGINT
    this process receives as SIGTERM (torchrun passes it to its ranks)."""
    with subprocess.Popen(command, env=env) as child:

        def pass_on(signum, frame) -> None:
            with contextlib.suppress(ProcessLookupError):
                child.send_signal(signal.SIGTERM)

        handlers = {s: signal.signal(s, pass_on) for s in STOPS}
        try:
            return child.wait()
        finally:
            for s, handler in handlers.items():
                signal.signal(s, handler)
