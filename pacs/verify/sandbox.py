"""Where model-written programs run: the host's side of the sandbox (``harness.py`` is the inside).

Two isolation levels, probed once per process:

- ``bubblewrap``: the harness runs under ``bwrap`` in new user, PID, network, IPC, UTS and mount
  namespaces, as nobody, dying with its parent, with an empty environment. Mounted read-only: /usr (and
  /lib, /lib64, /bin as the host has them), the interpreter's own prefix, the harness and ``graders.py``, the
  packages a grading profile adds (``code.PACKAGES``, from pacs's environment, at their own paths, bound after
  the tmpfs mounts so that an environment under /tmp is not hidden by the sandbox's own); a size-bounded tmpfs
  /tmp is the one writable place. Not mounted: /home, /root, /etc, the project, its results/.
- ``limits``: where bubblewrap cannot run (not installed, or user namespaces switched off), the harness runs
  as a plain process in its own session, with an empty environment, in a fresh private directory, and,
  started as root, drops to nobody.

At both levels each test (under the graders' profiles, each program's tests together: ``graders.py``) runs in
a fresh child of the harness with resource limits and (x86-64) a seccomp filter: no new processes, sockets,
signals to others or tracing; at the limits level also Landlock where the kernel has it (5.13+): reads only
beneath the system's and the interpreter's directories, writes only in the private one.
The isolation in force is reported with every verdict (``LEVELS``; docs/verifiers.md
says what each guards against and what it does not).

The host writes the request on the harness's stdin and reads one JSON line per test; whatever comes back
is untrusted data: parsed with bounds, never executed, compared elsewhere (``code.py``).
"""

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

from pacs.verify.confinement import STOP_SIGNAL, landlock_abi  # standard library only: importable here too

HARNESS = Path(__file__).with_name("harness.py")
GRADERS = HARNESS.with_name("graders.py")  # loaded by the harness from beside itself (graders' profiles)
CONFINEMENT = HARNESS.with_name("confinement.py")  # likewise: the policy of its children
LEVELS = ("bubblewrap+seccomp", "limits+seccomp+landlock", "limits+seccomp", "limits")
NOBODY = 65534
STARTUP_GRACE_S = 10.0  # the sandbox's own start (bwrap, the interpreter, the harness's imports)
STOP_GRACE_S = 2.0  # how long a harness asked to stop has to kill its program's processes before it is killed
INSTALL_HINT = (
    "install Debian/Ubuntu's `bubblewrap` (apt-get install bubblewrap; dnf install bubblewrap on RHEL) and "
    "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04 also "
    "kernel.apparmor_restrict_unprivileged_userns=0), or ask the cluster's admins; `pacs check-code` shows "
    "the level in force"
)


class SandboxUnavailable(RuntimeError):
    """The isolation a config requires cannot be had on this machine."""


def interpreter() -> str:
    """The interpreter that runs the harness: the real file behind this one (a venv's is a link), whose
    standard library is under ``sys.base_prefix``; the venv's packages are not needed inside."""
    return os.path.realpath(sys.executable)


def system_dirs() -> list[str]:
    """What the interpreter needs to run: /usr, the host's /lib and /bin (links into /usr or not), and the
    interpreter's own prefix and directory where they lie elsewhere (pyenv, conda)."""
    python = interpreter()
    prefix = os.path.realpath(sys.base_prefix)
    tops = [t for t in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32") if os.path.isdir(t)]
    dirs = ["/usr", *(os.path.realpath(t) for t in tops), prefix, os.path.dirname(python)]
    return [d for i, d in enumerate(dirs) if not any(d == e or d.startswith(e + "/") for e in dirs[:i])]


@lru_cache(maxsize=8)
def package_dirs(names: tuple[str, ...]) -> list[str]:
    """The directories of the packages ``names`` in the environment pacs runs in, each with the shared libraries
    its wheel keeps beside it (``numpy.libs``): what the harness imports for a program, read-only."""
    import importlib.util

    dirs = []
    for name in names:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.submodule_search_locations:
            raise SandboxUnavailable(f"code verifier: the package {name!r} that the grading profile offers its "
                                     "programs is not installed where pacs runs")  # fmt: skip
        top = os.path.realpath(spec.submodule_search_locations[0])
        dirs += [top, *([top + ".libs"] if os.path.isdir(top + ".libs") else [])]
    return dirs


def bubblewrap_command(tmpfs_bytes: int, packages: list[str]) -> list[str]:
    python = interpreter()
    mounts = ["--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            mounts += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            mounts += ["--ro-bind", top, top]
    prefix = os.path.realpath(sys.base_prefix)
    if not prefix.startswith("/usr/"):
        mounts += ["--ro-bind", prefix, prefix]
    if not python.startswith(("/usr/", prefix + "/")):
        mounts += ["--ro-bind", python, python]
    for package in packages:
        mounts += ["--ro-bind", package, package]
    # bwrap applies its options in order: the tmpfs mounts come before the binds, which would be hidden under
    # them where pacs's environment or interpreter lies under /tmp (a node-local copy, a container, CI's clone)
    return [
        shutil.which("bwrap") or "bwrap", "--unshare-all", "--unshare-user", "--die-with-parent",
        "--new-session", "--clearenv", "--cap-drop", "ALL",
        "--uid", str(NOBODY), "--gid", str(NOBODY),
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(tmpfs_bytes), "--tmpfs", "/tmp", "--size", str(1 << 20), "--tmpfs", "/dev/shm", *mounts,
        "--ro-bind", str(HARNESS), "/sandbox/harness.py",
        "--ro-bind", str(GRADERS), "/sandbox/graders.py", "--ro-bind", str(CONFINEMENT), "/sandbox/confinement.py",
        "--remount-ro", "/dev", "--remount-ro", "/", "--disable-userns", "--as-pid-1", "--chdir", "/tmp",
        python, "-I", "/sandbox/harness.py",
    ]  # fmt: skip


@lru_cache(maxsize=1)
def probe_bubblewrap() -> str | None:
    """None when a program can run under bubblewrap here; else why not."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    command = bubblewrap_command(1 << 20, [])[:-2] + ["-I", "-c", "import os; print(os.getuid())"]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30, env={})
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap failed to start: {e}"
    if done.returncode != 0 or done.stdout.strip() != str(NOBODY):
        return f"bwrap failed (exit {done.returncode}): {done.stderr.strip()[:300]}"
    return None


def resolve_isolation(wanted: str) -> str:
    """``auto`` → bubblewrap where it works, else limits where they hold (as root, which drops to nobody,
    or with Landlock); ``bubblewrap`` → an error where it does not work; ``limits`` → limits, however weak."""
    if wanted == "limits":
        return "limits"
    why = probe_bubblewrap()
    if why is None:
        return "bubblewrap"
    if wanted == "bubblewrap":
        raise SandboxUnavailable(f"code verifier: isolation 'bubblewrap' is required, but {why}. To get it, "
                                 f"{INSTALL_HINT}")  # fmt: skip
    if os.getuid() != 0 and landlock_abi() == 0:
        raise SandboxUnavailable(
            f"code verifier: {why}, and without Landlock a program run as this user could read and write this "
            f"user's files and the verifier's memory (/proc). {INSTALL_HINT}; or set code.isolation: limits to "
            "accept that level (docs/verifiers.md, 'Code verifier')"
        )
    return "limits"


class Sandbox:
    """One program's run: ``with Sandbox(request, level) as box: for record in box.records(deadline): ...``.
    Leaving the block kills the sandbox whole and removes its directory."""

    def __init__(self, request: dict, level: str, tmpfs_bytes: int):
        self.level = level
        self.workdir = None
        packages = request.get("packages", [])
        if level == "bubblewrap":
            command, cwd = bubblewrap_command(tmpfs_bytes, packages), None
        else:
            self.workdir = tempfile.mkdtemp(prefix="pacs-code-")
            if os.getuid() == 0:  # the harness drops to nobody, who must own its only writable place
                os.chown(self.workdir, NOBODY, NOBODY)
            command, cwd = [interpreter(), "-I", str(HARNESS)], self.workdir
        read_dirs = None if level == "bubblewrap" else system_dirs() + packages  # Landlock's, outside bubblewrap
        payload = json.dumps({**request, "uid": NOBODY, "read_dirs": read_dirs}).encode()
        self.errors = b""
        self.deadline = time.monotonic() + STARTUP_GRACE_S  # until the harness says it is ready
        try:
            self.proc = subprocess.Popen(
                command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=cwd, env={},
                start_new_session=True, close_fds=True,
            )  # fmt: skip
        except BaseException:
            self._remove_workdir()
            raise
        try:
            self.proc.stdin.write(payload)  # the harness reads it whole before anything else
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def records(self, max_output_bytes: int) -> Iterator[dict | str]:
        """The harness's records as dicts, each with its ``output`` (str) read from the bytes after its JSON
        line, until the harness ends or ``self.deadline`` (monotonic; the reader may move it between
        records) passes; then ``"deadline"``; more than ``max_output_bytes`` (or an endless line) gives
        ``"too_long"``, a record that does not parse ``"unreadable"``; the stream stops after any of those."""
        selector = selectors.DefaultSelector()
        out, err = self.proc.stdout, self.proc.stderr
        os.set_blocking(out.fileno(), False)
        os.set_blocking(err.fileno(), False)
        selector.register(out, selectors.EVENT_READ)
        selector.register(err, selectors.EVENT_READ)
        buffer, start, header = bytearray(), 0, None  # start: where the next unread byte is
        open_streams = 2
        try:
            while True:
                while True:  # every complete record in the buffer
                    if header is None:
                        end = buffer.find(b"\n", start)
                        if end < 0:
                            if len(buffer) - start > 4096:
                                yield "too_long"
                                return
                            break
                        try:
                            header = json.loads(bytes(buffer[start:end]))
                            size = int(header.get("bytes", 0))
                        except (ValueError, TypeError, AttributeError, RecursionError):
                            yield "unreadable"
                            return
                        if size > max_output_bytes or size < 0:
                            yield "too_long"
                            return
                        start = end + 1
                    if len(buffer) - start < size:
                        break
                    output = bytes(buffer[start : start + size]).decode("utf-8", "surrogateescape")
                    start += size
                    yield {**header, "output": output}
                    header = None
                del buffer[:start]
                start = 0
                if not open_streams:
                    if buffer or header is not None:
                        yield "unreadable"
                    return
                left = self.deadline - time.monotonic()
                if left <= 0:
                    yield "deadline"
                    return
                for key, _ in selector.select(timeout=left):
                    chunk = os.read(key.fd, 1 << 20)
                    if not chunk:
                        selector.unregister(key.fileobj)
                        open_streams -= 1
                    elif key.fileobj is err:
                        self.errors = (self.errors + chunk)[:4096]
                    else:
                        buffer += chunk
        finally:
            selector.close()

    def close(self) -> None:
        """Kill the sandbox's session (under bubblewrap the PID namespace dies with it) and reap it. At the
        limits level a harness still running is first asked to stop (``STOP_SIGNAL``) and given
        ``STOP_GRACE_S``: its program's processes are in a session of their own, which only the harness
        knows, and would outlive a harness killed at once."""
        if self.level != "bubblewrap" and self.proc.poll() is None:
            self.proc.send_signal(STOP_SIGNAL)
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.kill()
        self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            stream.close()
        self._remove_workdir()

    def _remove_workdir(self) -> None:
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)


def become_subreaper() -> None:
    """Make this process the reaper of its orphaned descendants (Linux), so that a program's escaped
    processes stay findable by ``kill_descendants``; for the verifier's own worker processes."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


def descendants(pid: int | None = None) -> list[int]:
    """Every live process below ``pid`` (this one by default), from /proc."""
    root = os.getpid() if pid is None else pid
    parents: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(entry.path, "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if fields[0] != "Z":
                parents[int(entry.name)] = int(fields[1])
    found, frontier = [], [root]
    while frontier:
        parent = frontier.pop()
        children = [p for p, pp in parents.items() if pp == parent]
        found += children
        frontier += children
    return found


def kill_descendants(spare: set[int] = frozenset()) -> int:
    """SIGKILL every descendant of this process not in ``spare`` until none is left, reaping only those
    (never another child's exit status: a forkserver or a Popen of the caller's stays its own); the number
    killed."""
    killed = set()
    for _ in range(100):
        left = [p for p in descendants() if p not in spare]
        if not left:
            break
        for p in left:
            try:
                os.kill(p, signal.SIGKILL)
                killed.add(p)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
        for p in list(killed):
            try:
                os.waitpid(p, os.WNOHANG)  # ours when it was a child, or an orphan handed to us as reaper
            except ChildProcessError:
                pass
    return len(killed)


@contextmanager
def reaping() -> Iterator[None]:
    """Around a sandbox's run: this process becomes the reaper of what the run orphans, and afterwards
    kills whatever below it was not there before."""
    become_subreaper()
    before = set(descendants())
    try:
        yield
    finally:
        kill_descendants(before)
