"""`pacs` commands forked from one warm process: a server that has imported torch, transformers, wandb and pacs
once, and a client that stands in for the `pacs` command (``Server.pacs``; first on PATH for the workflow's local
run), for tests that need a `pacs` process but not its start (tests/README.md, "Time"): each would otherwise start
an interpreter that imports them again (about 4 CPU seconds a process here). ``shared()`` is the test process's.

- The server (``python tests/warm_pacs.py SOCKET``) imports what a `pacs` command imports, as ``pacs.cli.main``
  would (scikit-learn and SciPy left out, the collector's start-up schedule), freezes what it holds, and
  serves: for each client it forks a watcher, which forks the job. The server itself never computes, so no
  thread of OpenMP's or anyone's is lost in the fork.
- The job: the client's standard streams (passed over the socket), working directory, environment and argv,
  its signals as a Python process starts with them, ``PATCH`` run (a test's fault), then ``pacs.cli.main`` to its
  end, as the `pacs` command runs it (``pacs.collector.leave``).
- The watcher tells the client the job's pid, then its exit status; it kills the job (SIGKILL) if the client
  goes first (killed, or its process group ended by ``timeout``).
- The client passes SIGTERM, SIGINT, SIGHUP and SIGUSR1 on to the job, and exits as the job did (its code, or
  the same signal). Where the server cannot be reached it runs the real `pacs` instead, and so it does for a
  command whose arguments match the regular expression ``WARM_PACS_COLD`` (a test's jobs that must start as a
  user's do), writing their arguments to the file ``WARM_PACS_COLD_LOG`` first.
"""

import gc
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
PATCH = "WARM_PACS_PATCH"  # code the job runs before `pacs` (a test's fault), taken out of its environment
COLD, COLD_LOG = "WARM_PACS_COLD", "WARM_PACS_COLD_LOG"  # commands run by the real `pacs`, and where they are listed
REAL_PACS = str(Path(sys.executable).parent / "pacs")  # the console script pip installs beside this interpreter
_shared: "Server | None" = None

CLIENT = """#!{python} -S
import sys
sys.path.insert(0, {tests!r})
from warm_pacs import client
client({socket!r}, {pacs!r})
"""


def install(bin_dir: Path, socket_path: Path) -> Path:
    """A `pacs` command in ``bin_dir`` (put it first on PATH) that asks the server at ``socket_path``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    pacs = bin_dir / "pacs"
    pacs.write_text(CLIENT.format(python=sys.executable, tests=str(Path(__file__).parent), socket=str(socket_path),
                                  pacs=REAL_PACS))  # fmt: skip
    pacs.chmod(0o755)
    return pacs


class Server:
    """The server started for ``directory`` (its socket and its `pacs` there): ``environ()`` is ``env`` with that
    `pacs` first on PATH; ``close`` ends the server (jobs still running end with their clients)."""

    def __init__(self, directory: Path, env: dict):
        self.socket, self.env = directory / "pacs.sock", env
        self.pacs = install(directory / "bin", self.socket)
        self.bin = self.pacs.parent
        self.log_path = directory / "server.log"
        self.log = open(self.log_path, "w")  # noqa: SIM115 (the server's output, to its end)
        self.proc = subprocess.Popen([sys.executable, __file__, str(self.socket)], env=env, stdout=self.log,
                                     stderr=subprocess.STDOUT)  # fmt: skip

    def jobs(self) -> int:
        """How many jobs the server has forked so far."""
        return self.log_path.read_text().count("job\n")

    def environ(self) -> dict:
        """``env`` with the server's `pacs` first on PATH, once the server listens."""
        deadline = time.monotonic() + 300
        while not self.socket.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the warm pacs server did not start: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.05)
        return {**self.env, "PATH": f"{self.bin}{os.pathsep}{self.env['PATH']}"}

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def shared() -> Server:
    """This process's server (started at the first call, ended with the process), listening."""
    global _shared
    if _shared is None:
        import atexit
        import tempfile

        _shared = Server(Path(tempfile.mkdtemp(prefix="warm_pacs")), dict(os.environ))
        atexit.register(_shared.close)
    _shared.environ()
    return _shared


def client(socket_path: str, real_pacs: str) -> None:
    import re

    if os.environ.get(COLD) and re.search(os.environ[COLD], " ".join(sys.argv[1:])):
        with open(os.environ[COLD_LOG], "a") as log:
            log.write(" ".join(sys.argv[1:]) + "\n")
        os.execv(real_pacs, [real_pacs, *sys.argv[1:]])
    connection = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        connection.connect(socket_path)
    except OSError:
        os.execv(real_pacs, [real_pacs, *sys.argv[1:]])
    request = json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(connection, [b"%16d" % len(request)], [0, 1, 2])
    connection.sendall(request)
    replies = connection.makefile("r")
    pid = int(replies.readline())
    for s in SIGNALS:
        signal.signal(s, lambda signum, frame: os.kill(pid, signum))
    status = int(replies.readline())
    if status < 0:  # ended by a signal: end by the same one
        for s in SIGNALS:
            signal.signal(s, signal.SIG_DFL)
        os.kill(os.getpid(), -status)
    sys.exit(status)


def serve(socket_path: str) -> None:
    from pacs import collector, imports_left_out
    from pacs.runs.lifetime import die_with_parent

    die_with_parent()  # the test process that started it

    collector.starting()
    imports_left_out.leave_out()
    import pandas  # noqa: F401
    import transformers.models.qwen2.modeling_qwen2  # noqa: F401
    import wandb  # noqa: F401

    import pacs.cli.main  # noqa: F401
    import pacs.eval.run  # noqa: F401
    import pacs.eval.suite  # noqa: F401
    import pacs.train.launch  # noqa: F401
    import pacs.train.loop  # noqa: F401

    gc.collect()
    gc.freeze()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(socket_path)
    listener.listen(64)
    listener.settimeout(0.5)
    sys.stdout.flush()
    sys.stderr.flush()
    while True:
        try:
            connection, _ = listener.accept()
        except TimeoutError:
            connection = None
        if connection is not None:
            print("job", flush=True)
            if os.fork() == 0:
                listener.close()
                watch(connection)
            connection.close()
        # watchers reaped here, so that their CPU (their jobs' with it) counts as this process's children's
        while True:
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break


def watch(connection: socket.socket) -> None:
    """The watcher: forks the job, reports its pid and exit status, and kills it if the client goes first."""
    import select

    header, fds, _, _ = socket.recv_fds(connection, 16, 3)  # the request's length, with the client's streams
    message = b""
    while len(message) < int(header):
        message += connection.recv(int(header) - len(message))
    request = json.loads(message)
    pid = os.fork()
    if pid == 0:
        connection.close()
        job(request, fds)
    for fd in fds:
        os.close(fd)
    connection.sendall(f"{pid}\n".encode())
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            connection.sendall(f"{code}\n".encode())
            os._exit(0)
        readable, _, _ = select.select([connection], [], [], 0.2)
        if readable and not connection.recv(1):  # the client is gone
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            os._exit(0)


def job(request: dict, fds: list[int]) -> None:
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    for s in SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as a Python process starts
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = ["pacs", *request["argv"]]
    own_temporaries()
    exec(os.environ.pop(PATCH, ""), {})
    from pacs.cli.main import run

    run()


def own_temporaries() -> None:
    """What the server's imports made for the process and remove at its exit, made again for the job: wandb's media
    directory (a TemporaryDirectory made at import; the first job to end would remove it for every other)."""
    import tempfile

    private = sys.modules.get("wandb.sdk.data_types._private")
    if private is not None:
        private.MEDIA_TMP.name = tempfile.mkdtemp("wandb-media")


if __name__ == "__main__":
    serve(sys.argv[1])
