"""A stop asked of a whole experiment (`pacs stop`): a file, not a signal, so that it reaches every job however
SLURM, Snakemake and a shell stand between them, and a step of any length is saved.

``RESULTS/STOP`` (JSON: when, by whom) is read by every training job after each step (`pacs train --stop-file`,
pacs.runs.segments) and by every evaluation before each chunk (pacs.eval.deadline): the job saves, exits as
stopped (status 75) and does not requeue itself; a job that starts while it is there exits at once. The
workflow's next run (`snakemake ... all`, its ``onstart``) removes the file and says so. ``RESULTS/snakemake.json``
names the Snakemake that runs the workflow (host, pid), which `pacs stop` asks to submit nothing more (SIGTERM,
which Snakemake takes as "finish the running jobs, then exit").
"""

import getpass
import json
import os
import signal
import socket
import time
from pathlib import Path

from pacs.io import atomic_write_json

STOP = "STOP"
RUNNER = "snakemake.json"


def stop_requested(path: Path | None) -> dict | None:
    """The stop request at ``path`` (None: no file given, or none there)."""
    if path is None:
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8") or "{}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"time": None}  # being written, or unreadable: a stop all the same


def describe(request: dict) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(request["time"])) if request.get("time") else "?"
    return f"a stop asked by {request.get('by', '?')} at {when} (pacs stop)"


def request_stop(results: Path) -> dict:
    """Write ``results/STOP``; returns the request."""
    request = {"time": time.time(), "by": f"{getpass.getuser()}@{socket.gethostname()}"}
    atomic_write_json(Path(results) / STOP, request)
    return request


def clear_stop(results: Path) -> dict | None:
    """Remove ``results/STOP`` (the workflow's next run); returns the request it held, if any."""
    request = stop_requested(Path(results) / STOP)
    (Path(results) / STOP).unlink(missing_ok=True)
    return request


def record_runner(results: Path) -> None:
    """``results/snakemake.json``: this process (the workflow's Snakemake) and its host."""
    atomic_write_json(Path(results) / RUNNER, {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(),
                                               "workdir": os.getcwd()})  # fmt: skip


def signal_runner(results: Path) -> str:
    """Ask the workflow's Snakemake (``results/snakemake.json``) to submit nothing more: SIGTERM where it runs on
    this host and still lives; otherwise what to do instead. Returns what happened, in a sentence."""
    path = Path(results) / RUNNER
    if not path.exists():
        return "no Snakemake has run this workflow (no snakemake.json): nothing to tell"
    runner = json.loads(path.read_text(encoding="utf-8"))
    pid, host = int(runner["pid"]), runner["host"]
    if host != socket.gethostname():
        return (f"its Snakemake runs on {host} (pid {pid}): there, `kill -TERM {pid}` makes it submit nothing more; "
                "without it, each job it still submits exits at once")  # fmt: skip
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return f"its Snakemake (pid {pid}) has ended"
    if "snakemake" not in command:
        return f"its Snakemake (pid {pid}) has ended"
    os.kill(pid, signal.SIGTERM)
    return f"its Snakemake (pid {pid}) submits nothing more and exits once the running jobs have ended"
