"""One writer per output directory: `pacs train` and `pacs evaluate` hold an advisory lock on ``OUT/.lock`` for as
long as they write into OUT, so that a second command started into a live directory exits at once instead of
writing over the first one's checkpoints or responses.

The lock is POSIX's (``fcntl``), taken without waiting: the kernel releases it when its holder exits or dies, so on
one machine, on NFS v4 (whose leases expire with a dead client) and on Lustre mounted with ``flock`` a crashed or
killed run leaves no stale lock to clear by hand. ``.lock`` itself is never written (a finished run run again
changes nothing in OUT); while it holds the lock the holder names itself (host, pid, command, since when) in
``.lock.holder``, removed when it lets go, which a refused writer's error repeats. The processes a holder starts
(torchrun's ranks) write under its lock: ``PACS_WRITER_LOCK`` names the directory for them. Whatever cleans OUT
under a holder spares the lock's files (``is_lock_file``).

On one machine the lock is exact. On a cluster's shared file system it is what the file system makes of POSIX
locks: NFS v4, NFS v3 and Lustre mounted with ``flock`` give every node the same lock; Lustre's ``localflock`` gives
each node its own (two nodes are then not kept apart), and a file system that refuses locks fails the command,
naming the directory. NFS v3's locks go through its lock manager (NLM), which keeps a crashed node's locks on the
server until that node reboots (``statd`` tells the server) or an admin clears them: a run on a node that died
leaves a stale lock there, whose holder (host, pid) the refusal names; once it is checked gone, the node's return
or the admins clear it, and run directories on NFS v4 or Lustre ``flock`` avoid it (docs/run-config.md, "One writer
per directory").
"""

import fcntl
import json
import os
import socket
import struct
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK, HOLDER = ".lock", ".lock.holder"
HELD = "PACS_WRITER_LOCK"  # the directory whose lock a parent process holds for this one


class DirectoryBusy(ValueError):
    """Another live process writes into the directory."""


def is_lock_file(name: str) -> bool:
    """Whether OUT's file ``name`` is the lock's own (``.lock``, ``.lock.holder``, the holder's temporary
    ``.lock.holder.<pid>``): a cleaning of OUT spares them, since deleting ``.lock`` under a live holder would let
    the next writer lock a fresh file of that name beside it (``pacs.runs.directory.check_run_dir``)."""
    return name in (LOCK, HOLDER) or name.startswith(HOLDER + ".")


def holder_of(out: Path) -> str:
    """The live holder as it named itself, or what can be said without it."""
    try:
        holder = json.loads((Path(out) / HOLDER).read_text())
    except (OSError, ValueError):
        return "a process that has not named itself yet"
    since = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(holder["since"]))
    return f"pid {holder['pid']} on {holder['host']} since {since}: {holder['command']}"


@contextmanager
def sole_writer(out: Path, what: str) -> Iterator[None]:
    """Hold OUT's lock for the block (OUT created if missing); raises ``DirectoryBusy`` at once, naming the holder
    and OUT, when another process holds it. Within a holder's own children (``HELD``), nothing to take."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if os.environ.get(HELD) == str(out.resolve()):
        yield
        return
    fd = os.open(out / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except (BlockingIOError, PermissionError):
            raise DirectoryBusy(f"{out}: {holder_of(out)} writes here; {what} refuses a second writer (wait for "
                                f"it to end, or stop it: its lock goes with it)") from None  # fmt: skip
        except OSError as e:
            raise OSError(f"{out}: the file system refused a lock on {LOCK} ({e}); {what} needs one to keep a "
                          "second writer out (docs/run-config.md, \"One writer per directory\")") from e  # fmt: skip
        holder = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time(),
                  "command": " ".join(sys.argv)}  # fmt: skip
        tmp = out / f"{HOLDER}.{os.getpid()}"
        tmp.write_text(json.dumps(holder))
        tmp.replace(out / HOLDER)
        before = os.environ.get(HELD)
        os.environ[HELD] = str(out.resolve())
        try:
            yield
        finally:
            if before is None:
                os.environ.pop(HELD, None)
            else:
                os.environ[HELD] = before
            (out / HOLDER).unlink(missing_ok=True)
    finally:
        os.close(fd)  # the lock with it


def live_holder(out: Path) -> dict | None:
    """The process that holds OUT's lock now, as it named itself ({} before it has), or None when none does: asked
    of the lock (``F_GETLK``), which takes nothing, so that a reader (`pacs status`) never stands in a writer's
    way."""
    try:
        fd = os.open(Path(out) / LOCK, os.O_RDONLY)
    except OSError:
        return None
    try:
        asked = struct.pack("hhqqi", fcntl.F_WRLCK, os.SEEK_SET, 0, 0, 0)
        kind = struct.unpack("hhqqi", fcntl.fcntl(fd, fcntl.F_GETLK, asked))[0]
    except OSError:
        return None
    finally:
        os.close(fd)
    if kind == fcntl.F_UNLCK:
        return None
    try:
        return json.loads((Path(out) / HOLDER).read_text())
    except (OSError, ValueError):
        return {}

