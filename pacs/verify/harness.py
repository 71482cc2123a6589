"""The code verifier's harness: what runs inside the sandbox (``python -I harness.py``), its process plumbing; the
policy each child is confined by is ``confinement.py``, loaded from beside this file.

It reads one request as JSON on stdin, ``{"code", "fn_name", "tests": [{"input", "testtype"[, "output"]}],
"timeout_s", "cpu_s", "memory_bytes", "output_bytes", "filters", "grading", "read_dirs", "uid"}``. Under the
``judge`` grading it runs the program once per test, each time in a fresh child forked from here (never
from the trainer); under ``livecodebench`` and ``glm45`` one child runs every test as that grader does
(``graders.py``, loaded from beside this file) and its records are relayed. It writes JSON lines on
stdout: first ``{"ready", "seccomp", "landlock", "uid"}``, then one ``{"test", "status", "seconds",
"bytes"[, "passed"]}`` per test, where status is ``ok``, ``timeout``, ``runtime_error``, ``memory`` or
``output_limit``, followed by ``bytes`` raw bytes of output: the program's stdout (stdin tests) or its
return value as JSON (the judge's functional tests); ``passed`` is a grader profile's verdict on a
functional test, whose ``==`` runs the program's code. Only then is an expected output here; otherwise the
host compares, outside. The host stops reading (and kills this sandbox) at the first test that does not
pass.

In each child, before the program's first line, the confinement (``confinement.py``): a new session, limits,
a seccomp filter and, outside bubblewrap, Landlock. The harness makes itself undumpable (a program cannot open its
memory or its pipe to the host under /proc) and reaps and kills whatever a test left, also when the host, done
reading, asks it to stop (``confinement.STOP_SIGNAL``) before it kills its session. As root, this harness first
drops to ``uid`` (nobody). Standard library only: the file is mounted into the sandbox with ``confinement.py``
and ``graders.py``.
"""

import ctypes
import errno
import importlib.util
import json
import os
import select
import signal
import sys
import tempfile
import time

# LiveCodeBench runs every program after these imports (lcb_runner/evaluation/testing_util.py); imported
# here once, so that each forked child finds them loaded (and, after dropping root, readable)
IMPORTS = (
    "from string import *\nfrom re import *\nfrom datetime import *\nfrom collections import *\n"
    "from heapq import *\nfrom bisect import *\nfrom copy import *\nfrom math import *\nfrom random import *\n"
    "from statistics import *\nfrom itertools import *\nfrom functools import *\nfrom operator import *\n"
    "from io import *\nfrom sys import *\nfrom json import *\nfrom builtins import *\nfrom typing import *\n"
    "import string\nimport re\nimport datetime\nimport collections\nimport heapq\nimport bisect\nimport copy\n"
    "import math\nimport random\nimport statistics\nimport itertools\nimport functools\nimport operator\n"
    "import io\nimport sys\nimport json\nsys.setrecursionlimit(50000)\n"
)
# More modules loaded here for the same reason: started as root with an interpreter under /root (pyenv), the
# limits level's nobody cannot read any module that is not loaded by then (docs/verifiers.md)
PRELOAD = ("array", "cmath", "dataclasses", "decimal", "enum", "fractions", "numbers", "queue", "struct",
           "textwrap", "unicodedata", "time", "threading", "calendar", "pprint", "abc", "contextlib", "fcntl",
           "hashlib", "socket", "select", "ast", "glob", "shutil", "subprocess", "unittest.mock", "types")  # fmt: skip

GRADER_STATUSES = ("ok", "timeout", "runtime_error", "memory")  # what graders.run may say of a test


def load_beside(name: str):
    """The module ``name``.py beside this file (``-I`` puts no directory of ours on the path)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(os.path.dirname(__file__), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


running: int | None = None  # the pid (and session) of the child running a program now, if any
confinement = load_beside("confinement")  # the policy: limits, seccomp, Landlock, the drop to nobody
EXIT_RUNTIME, EXIT_MEMORY, EXIT_OUTPUT = confinement.EXIT_RUNTIME, confinement.EXIT_MEMORY, confinement.EXIT_OUTPUT


def run_child(request: dict, test: dict, stdin_fd: int, out_fd: int, filters: dict, harness: int) -> None:
    """In the forked child: confine, then run the program once on one test (the judge). Never returns."""
    signal.signal(confinement.STOP_SIGNAL, signal.SIG_DFL)  # the harness's ``stop`` is not the program's
    confinement.confine(request, stdin_fd, out_fd, filters, harness, request["cpu_s"])
    sys.stdin = open(0, encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
    sys.stdout = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
    code, value = EXIT_RUNTIME, None
    try:
        value = run_program(request, test)
        code = 0
    except SystemExit:
        code = 0 if test["testtype"] == "stdin" else EXIT_RUNTIME  # a functional test needs its value
    except MemoryError:
        code = EXIT_MEMORY
    except BaseException:  # noqa: BLE001
        code = EXIT_RUNTIME
    try:
        sys.stdout.flush()
    except OSError as e:
        code = EXIT_OUTPUT if e.errno == errno.EFBIG else EXIT_RUNTIME
    except BaseException:  # noqa: BLE001
        code = EXIT_RUNTIME
    if code == 0 and value is not None:  # the functional test's answer replaces whatever was printed
        try:
            os.ftruncate(1, 0)
            os.lseek(1, 0, os.SEEK_SET)
            data = value.encode("utf-8", "surrogateescape")
            while data:
                data = data[os.write(1, data) :]
        except OSError as e:
            code = EXIT_OUTPUT if e.errno == errno.EFBIG else EXIT_RUNTIME
    os._exit(code)  # no atexit handlers or finalizers of the program's run after its answer


def run_program(request: dict, test: dict) -> str | None:
    """Run the program on one test: for a functional test, return its value as JSON."""
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    if test["testtype"] == "stdin":
        exec(compile(IMPORTS, "<imports>", "exec"), namespace)
        exec(compile(request["code"], "<program>", "exec"), namespace)
        return None
    namespace["__name__"] = "solution"
    exec(compile(IMPORTS + "\n" + request["code"], "<program>", "exec"), namespace)
    target = namespace["Solution"]() if "class Solution" in request["code"] else None
    method = getattr(target, request["fn_name"]) if target is not None else namespace[request["fn_name"]]
    args = [json.loads(line) for line in test["input"].split("\n")]
    result = method(*args)
    if isinstance(result, tuple):  # LiveCodeBench: a tuple counts as the list it holds
        result = list(result)
    return json.dumps(result)  # a value that is not plain JSON data (an object equal to everything) fails here


def one_test(request: dict, test: dict, workdir: str, filters: dict) -> tuple[dict, bytes]:
    global running
    stdin = tempfile.TemporaryFile(dir=workdir)  # noqa: SIM115
    stdin.write((test["input"] if test["testtype"] == "stdin" else "").encode("utf-8", "surrogateescape"))
    stdin.seek(0)
    out = tempfile.TemporaryFile(dir=workdir)  # noqa: SIM115
    start = time.monotonic()
    harness = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.chdir(workdir)
        run_child(request, test, stdin.fileno(), out.fileno(), filters, harness)
    running = pid
    stdin.close()
    pidfd = os.pidfd_open(pid)
    ready, _, _ = select.select([pidfd], [], [], request["timeout_s"])
    timed_out = not ready
    if timed_out:
        os.kill(pid, signal.SIGKILL)  # still ours to reap, so the pid cannot be another's
    _, status = os.waitpid(pid, 0)
    os.close(pidfd)
    end_session(pid)
    seconds = time.monotonic() - start
    size = os.fstat(out.fileno()).st_size
    out.seek(0)
    output = out.read(request["output_bytes"])
    out.close()
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
    if timed_out or sig == signal.SIGXCPU:
        verdict = "timeout"
    elif code == EXIT_OUTPUT or sig == signal.SIGXFSZ or size >= request["output_bytes"]:
        verdict = "output_limit"
    elif code == EXIT_MEMORY:
        verdict = "memory"
    elif code != 0:
        verdict = "runtime_error"
    else:
        verdict = "ok"
    return {"status": verdict, "seconds": seconds}, output if verdict == "ok" else b""


def graded_tests(request: dict, workdir: str, filters: dict, graders) -> None:
    """The ``livecodebench`` and ``glm45`` profiles: one confined child runs every test (``graders.run``), as
    both graders run a program in one process, and its records (fd 3) are relayed here with bounds: each
    must come within the test's limit and a second (the graders' own alarm fires at the limit), name its
    test and hold at most ``output_bytes``. The child's stdin and stdout are /dev/null, as in the graders'
    ``multiprocessing`` child: the stdin the graders' patches land on, the stdout a program reaches past
    the capture (``os.write(1, ...)``)."""
    global running
    read_fd, write_fd = os.pipe()
    devnull = os.open(os.devnull, os.O_RDWR)
    harness, tests = os.getpid(), len(request["tests"])
    pid = os.fork()
    if pid == 0:
        signal.signal(confinement.STOP_SIGNAL, signal.SIG_DFL)  # the harness's ``stop`` is not the program's
        os.close(read_fd)
        os.chdir(workdir)
        confinement.confine(request, devnull, devnull, filters, harness, request["cpu_s"] * tests, channel=write_fd)
        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)  # noqa: SIM115
        code = 0
        try:
            graders.run(request, IMPORTS)
        except MemoryError:
            code = EXIT_MEMORY
        except BaseException:  # noqa: BLE001
            code = EXIT_RUNTIME
        os._exit(code)
    running = pid
    os.close(write_fd)
    os.close(devnull)
    reaped = False
    try:
        reaped = relay(read_fd, request, tests, pid)
    finally:
        if not reaped:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        end_session(pid)
        os.close(read_fd)


def relay(read_fd: int, request: dict, tests: int, pid: int) -> bool:
    """Each test's record from the graders' child to the host, until one does not pass or none comes;
    whether the child was reaped here."""
    buffer, limit_bytes = bytearray(), request["output_bytes"]

    def fill(size: int | None, deadline: float) -> str | None:
        """Read until ``buffer`` holds ``size`` bytes (a line, size None); why not, else None."""
        nonlocal buffer
        while (b"\n" not in buffer[:4096]) if size is None else len(buffer) < size:
            if size is None and len(buffer) > 4096:
                return "garbled"
            ready, _, _ = select.select([read_fd], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                return "timeout"
            chunk = os.read(read_fd, 1 << 16)
            if not chunk:
                return "ended"
            buffer.extend(chunk)
        return None

    for i in range(tests):
        start = time.monotonic()
        # the graders time the program's top level (its compile) and each test apart: the first record may
        # come after two limits
        deadline = start + (2 if i == 0 else 1) * request["timeout_s"] + 1.0
        why = fill(None, deadline)
        if why is None:
            end = buffer.index(b"\n")
            record, size = None, -1
            try:
                record = json.loads(bytes(buffer[:end]))
                size = record["bytes"]
            except (ValueError, TypeError, KeyError, RecursionError):
                pass
            del buffer[: end + 1]
            valid = isinstance(record, dict) and record.get("test") == i and type(size) is int and size >= 0
            if not (valid and record.get("status") in GRADER_STATUSES and record.get("passed", False) in (True, False)):
                why = "garbled"
            else:
                why = "output_limit" if size >= limit_bytes else fill(size, deadline)
        if why is None:
            payload = bytes(buffer[:size])
            del buffer[:size]
            emit({**{k: record[k] for k in ("test", "status", "passed") if k in record},
                  "seconds": time.monotonic() - start}, payload)  # fmt: skip
            if record["status"] != "ok" or record.get("passed") is False:
                return False
            continue
        if why != "ended":
            os.kill(pid, signal.SIGKILL)  # still unreaped, so the pid is its own
        status = os.waitpid(pid, 0)[1]
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
        code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else -1
        if why == "timeout" or sig == signal.SIGXCPU:
            verdict = "timeout"
        elif why == "output_limit":
            verdict = "output_limit"
        elif code == EXIT_MEMORY:
            verdict = "memory"
        else:
            verdict = "runtime_error"
        emit({"test": i, "status": verdict, "seconds": time.monotonic() - start})
        return True
    return False


def kill_leftovers() -> None:
    """Kill and reap every process a test left (where no filter stopped it from starting one): as the
    subreaper, this harness inherits them all, daemons included."""
    me = str(os.getpid())
    for _ in range(100):
        left = []
        for entry in os.listdir("/proc"):
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if entry.isdigit() and f.read().rsplit(")", 1)[1].split()[1] == me:
                        left.append(int(entry))
            except (OSError, IndexError):
                continue
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        if not left:
            return
        time.sleep(0.005)  # their own children are handed to us as they die


def end_session(pid: int | None) -> None:
    """A test's end: its child's session (group ``pid``) killed, then (as their subreaper) whatever left it."""
    global running
    if pid is not None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    running = None
    kill_leftovers()


def stop(signum: int, frame) -> None:
    """The host's ``STOP_SIGNAL``, done reading (a test that did not pass, its deadline, too much output):
    the program's processes are in a session of their own, out of reach of the host's kill of this
    harness's, so they die here first, as at the end of a test; then this harness ends."""
    end_session(running)
    os._exit(0)


def emit(record: dict, payload: bytes = b"") -> None:
    sys.stdout.buffer.write(json.dumps({**record, "bytes": len(payload)}).encode() + b"\n" + payload)
    sys.stdout.buffer.flush()


def only_standard_library(packages: list[str]) -> None:
    """The interpreter's site-packages taken off the path, so that a program imports the standard library
    whatever the machine has installed, and the request's ``packages`` (directories, the graders' profiles'
    numpy) imported now, each from its own directory for that import only, while still readable; their BLAS
    on one thread (a test's process may start none)."""
    import site

    installed = {os.path.realpath(p) for p in [*site.getsitepackages(), site.getusersitepackages()]}
    sys.path[:] = [p for p in sys.path if os.path.realpath(p) not in installed]
    if packages:
        os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
    for package in packages:
        if not package.endswith(".libs"):  # a wheel's shared libraries, which the package loads itself
            parent, name = os.path.split(package)
            sys.path.insert(0, parent)
            try:
                importlib.import_module(name)
            finally:
                sys.path.remove(parent)


def main() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(confinement.PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # die with the verifier
    libc.prctl(confinement.PR_SET_DUMPABLE, 0, 0, 0, 0)  # /proc/<this>/mem and fd/ closed to the programs (same uid)
    libc.prctl(confinement.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # a test's escaped daemons come back here, to be killed
    signal.signal(confinement.STOP_SIGNAL, stop)
    request = json.loads(sys.stdin.read())
    only_standard_library(request["packages"])
    for name in PRELOAD:
        __import__(name)
    exec(compile(IMPORTS, "<imports>", "exec"), {})  # the children's imports, loaded while still readable
    graders = None if request["grading"] == "judge" else load_beside("graders")
    landlock = confinement.landlock_abi() if request["filters"] and request["read_dirs"] is not None else 0
    read_fds = [os.open(d, os.O_PATH) for d in request["read_dirs"]] if landlock else []
    confinement.drop_root(request["uid"])
    workdir = os.getcwd()
    seccomp = request["filters"] and confinement.seccomp_works()
    filters = {"seccomp": seccomp, "landlock": landlock, "read_fds": read_fds}
    emit({"ready": True, "seccomp": filters["seccomp"], "landlock": landlock, "uid": os.getuid()})
    if graders is not None:
        return graded_tests(request, workdir, filters, graders)
    for i, test in enumerate(request["tests"]):
        record, output = one_test(request, test, workdir, filters)
        emit({"test": i, **record}, output)
    return None


if __name__ == "__main__":
    main()
