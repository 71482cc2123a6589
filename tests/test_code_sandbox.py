"""Hostile programs cannot fool or escape the code verifier, at each isolation level.

Each level's programs run in tests/hostile_programs.py inside a PID namespace of its own (``unshare``, as
root; CI runs as root), so a fork bomb or a ``kill(-1)`` that got out reaches only that namespace. This
test holds what a program must not reach: a TCP listener, a secret in the verifier's environment and in
a world-readable file, an expected output planted on disk, a world-writable directory. The plain
``limits`` level (no seccomp, no Landlock: machines without them) guards less, as docs/verifiers.md says:
the programs it does not guard against are listed, and only what it guards is asserted.
"""

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from pacs.verify.code import CodeConfig, CodeTest, CodeTests, run_program
from pacs.verify.sandbox import probe_bubblewrap

REPO = Path(__file__).resolve().parents[1]
NETWORK_AND_FILES = {"connect to the host", "write outside its directory", "secret from a home file",
                     "search the disk for expected outputs", "fill memory or disk through files"}  # fmt: skip
SIGNALS = {"signal another process through F_SETOWN"}  # seccomp's and Landlock's


def need_bubblewrap() -> None:
    why = probe_bubblewrap()
    if why is not None:
        message = f"bubblewrap cannot run here ({why}): apt-get install bubblewrap"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def host():
    """What a program must not reach, fresh for each level; removed after."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    dirs = {k: tempfile.mkdtemp(prefix=f"pacs-hostile-{k}-") for k in ("secret", "plant", "escape")}
    os.chmod(dirs["secret"], 0o755)
    os.chmod(dirs["plant"], 0o755)
    os.chmod(dirs["escape"], 0o777)
    secret, planted = secrets.token_hex(8), f"PACS-EXPECTED-{secrets.token_hex(8)}"
    Path(dirs["secret"], ".netrc").write_text(secret)
    Path(dirs["plant"], "expected.txt").write_text(planted)
    for d in ("secret", "plant"):
        os.chmod(Path(dirs[d], ".netrc" if d == "secret" else "expected.txt"), 0o644)
    escapes = [Path(d, "pacs-escaped") for d in (dirs["escape"], "/tmp", "/root", "/home")]
    for p in escapes:
        p.unlink(missing_ok=True)
    yield {"listener": listener, "dirs": dirs, "secret": secret, "planted": planted, "escapes": escapes}
    listener.close()
    for d in dirs.values():
        shutil.rmtree(d, ignore_errors=True)
    for p in escapes:
        p.unlink(missing_ok=True)


def run_level(level: str, host: dict) -> list[dict]:
    command = [sys.executable, str(REPO / "tests" / "hostile_programs.py"), "--level", level,
               "--port", str(host["listener"].getsockname()[1]), "--secret", host["secret"],
               "--planted", host["planted"], "--secret-file", str(Path(host["dirs"]["secret"], ".netrc")),
               "--plant-dir", host["dirs"]["plant"], "--escape-dir", host["dirs"]["escape"]]  # fmt: skip
    if os.getuid() == 0 and shutil.which("unshare"):
        command = ["unshare", "--pid", "--fork", "--mount-proc", *command]
    elif level != "bubblewrap":  # bubblewrap brings its own PID namespace; the limits levels need ours
        message = "the limits levels' hostile programs run only in a PID namespace: as root, with unshare"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines()]


def connections(listener: socket.socket) -> int:
    count = 0
    while True:
        try:
            conn, _ = listener.accept()
        except BlockingIOError:
            return count
        conn.close()
        count += 1


@pytest.mark.parametrize("level", ["bubblewrap", "limits+filters", "limits"])
def test_hostile_programs(level, host):
    if level == "bubblewrap":
        need_bubblewrap()
    records = run_level(level, host)
    assert len(records) == 21, records
    isolation = {r["isolation"] for r in records}
    assert len(isolation) == 1, isolation
    (isolation,) = isolation
    assert isolation.startswith("bubblewrap" if level == "bubblewrap" else "limits")
    assert ("seccomp" in isolation) == (level != "limits")
    guarded = {r["program"] for r in records}
    if "landlock" not in isolation and level != "bubblewrap":
        guarded -= NETWORK_AND_FILES if "seccomp" not in isolation else NETWORK_AND_FILES - {"connect to the host"}
    if "seccomp" not in isolation:
        guarded -= SIGNALS
    for r in records:
        assert r["verifier_goes_on"], r  # a correct program still passes after each hostile one
        assert r["left_behind"] == 0, r  # no process of it outlives its verdict
        if r["program"] in guarded:
            assert r["status"] != "passed", r
    by_name = {r["program"]: r["status"] for r in records}
    assert by_name["infinite loop"] == "timeout"
    assert by_name["memory hog"] == "memory"
    assert by_name["endless output"] == "output_limit"
    assert by_name["processes past the verifier's deadline"] == "timeout"
    if "connect to the host" in guarded:
        assert connections(host["listener"]) == 0
    if "write outside its directory" in guarded:
        assert not [p for p in host["escapes"] if p.exists()]


def test_check_code_prints_a_verdict_and_names_bad_input(tmp_path, capsys):
    from pacs.cli import main

    bystander = subprocess.Popen(["sleep", "60"])  # a child of the caller's: the verifier's cleanup spares it
    tests = tmp_path / "tests.json"
    tests.write_text(json.dumps({"tests": [{"input": "1 2", "output": "3", "testtype": "stdin"},
                                           {"input": "[2]\n5", "output": "7", "testtype": "functional"}],
                                 "fn_name": "add"}))  # fmt: skip
    program = "\n".join(["class Solution:", "    def add(self, a, b):", "        return a[0] + b", "import sys",
                         "data = sys.stdin.read().split()", "if data:", "    print(sum(map(int, data)))"])  # fmt: skip
    (tmp_path / "answer.md").write_text(f"<think>```python\nprint(0)\n```</think>\nHere:\n```python\n{program}\n```\n")
    (tmp_path / "wrong.py").write_text("print(4)")
    assert main(["check-code", "--response", str(tmp_path / "answer.md"), "--tests", str(tests)]) == 0
    verdict = json.loads(capsys.readouterr().out)
    assert (verdict["status"], verdict["passed"], verdict["total"]) == ("passed", 2, 2)
    assert verdict["isolation"] and (verdict["grading"], verdict["timeout_s"]) == ("judge", 6.0)  # by default
    assert main(["check-code", "--program", str(tmp_path / "wrong.py"), "--tests", str(tests), "--timeout", "2"]) == 1
    verdict = json.loads(capsys.readouterr().out)
    assert (verdict["status"], verdict["passed"], verdict["timeout_s"]) == ("failed", 0, 2.0)
    (tmp_path / "no_code.md").write_text("I cannot write this.")
    assert main(["check-code", "--response", str(tmp_path / "no_code.md"), "--tests", str(tests)]) == 1
    assert json.loads(capsys.readouterr().out)["status"] == "no_code"

    bad = {"missing.json": None, "malformed.json": "{not json",
           "no_fn.json": json.dumps({"tests": [{"input": "1", "output": "1", "testtype": "functional"}]})}  # fmt: skip
    for name, text in bad.items():
        if text is not None:
            (tmp_path / name).write_text(text)
        assert main(["check-code", "--program", str(tmp_path / "wrong.py"), "--tests", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err
        assert name in err, err
    assert "fn_name" in err
    assert bystander.poll() is None
    bystander.kill()
    bystander.wait()


@pytest.mark.parametrize("level", ["bubblewrap", "limits"])
def test_the_graders_profiles_offer_numpy_read_only_and_nothing_else_installed(level):
    """Under ``livecodebench`` and ``glm45`` a program imports numpy (its submodules too) from pacs's
    environment, and can write nothing there; no other installed package is importable (code.PACKAGES)."""
    import numpy as np

    if level == "bubblewrap":
        need_bubblewrap()
    program = "\n".join([
        "import os, numpy as np", "class Solution:", "    def f(self, a):", "        import numpy.linalg",
        "        try:", "            open(os.path.join(os.path.dirname(np.__file__), 'planted.py'), 'w')",
        "            return 'written'", "        except OSError:", "            pass",
        "        try:", "            import torch", "            return 'torch'", "        except ImportError:",
        "            pass", "        return int(np.linalg.det(np.eye(2)) * a)"])  # fmt: skip
    tests = CodeTests((CodeTest("3", "3", "functional"),), "f")
    for grading in ("livecodebench", "glm45"):
        verdict = run_program(program, tests, CodeConfig(grading=grading, isolation=level))
        assert (verdict.status, verdict.isolation.split("+")[0]) == ("passed", level), (grading, verdict)
    assert not (Path(np.__file__).parent / "planted.py").exists()


def test_the_graders_profiles_offer_numpy_from_an_environment_under_tmp():
    """An environment under /tmp (a node-local scratch copy, a container, a clone CI made there) still offers
    its numpy to a program: the sandbox's own /tmp is mounted before the packages are bound, not over them."""
    import numpy as np

    need_bubblewrap()
    env_dir = Path(tempfile.mkdtemp(prefix="pacs-env-", dir="/tmp"))
    try:
        top = Path(np.__file__).parent
        for source in (top, top.with_name("numpy.libs")):
            if source.is_dir():
                shutil.copytree(source, env_dir / "site" / source.name, symlinks=True)
        program = "import numpy as np\nclass Solution:\n    def f(self, a):\n        return int(np.sum(np.ones(a)))"
        script = "\n".join([
            "import importlib.util, json, sys",
            "from pacs.verify.code import CodeConfig, CodeTest, CodeTests, run_program",
            "assert importlib.util.find_spec('numpy').origin.startswith('/tmp/'), importlib.util.find_spec('numpy')",
            "tests = CodeTests((CodeTest('3', '3', 'functional'),), 'f')",
            "verdict = run_program(sys.argv[1], tests, CodeConfig(grading='livecodebench', isolation='bubblewrap'))",
            "print(json.dumps(verdict._asdict()))"])  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(env_dir / "site")}
        done = subprocess.run([sys.executable, "-c", script, program], capture_output=True, text=True, cwd=REPO,
                              env=env, timeout=120)  # fmt: skip
        assert done.returncode == 0, done.stderr
        verdict = json.loads(done.stdout)
        assert (verdict["status"], verdict["isolation"].split("+")[0]) == ("passed", "bubblewrap"), verdict["detail"]
    finally:
        shutil.rmtree(env_dir, ignore_errors=True)
