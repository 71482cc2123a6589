"""The installs: CI's locked environment (tests/requirements-ci.txt) is one pyproject.toml allows, and the
cluster's `pip install -e ".[gpu,slurm]"` resolves (tests/resolve_cluster_install.py)."""

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import resolve_cluster_install
from lock_python import locked_for, refusal
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[1]
LOCK = REPO / "tests" / "requirements-ci.txt"
EXTRAS = ("dev", "cpu", "slurm")  # README's test command installs these from the lock
LEFT_OUT = {"torch", "torchvision", "torchaudio", "torchcodec"}  # torch installed first; the others break it


def pins(lock: Path) -> dict[str, str]:
    lines = [line.split("#")[0].strip() for line in lock.read_text().splitlines()]
    pairs = [line.split("==") for line in lines if line]
    assert all(len(p) == 2 for p in pairs), [p for p in pairs if len(p) != 2]
    return {canonicalize_name(name): version for name, version in pairs}


def test_the_ci_lock_is_an_install_pyproject_allows():
    """Every dependency of the package and of its dev, cpu and slurm extras is pinned in the lock, at a version
    pyproject.toml admits (a bound changed there without `uv pip compile` again, tests/README.md, "The lock", fails
    here), and torch with the builds that break it is left out."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    locked = pins(LOCK)
    assert not LEFT_OUT & set(locked)
    requirements = [Requirement(r) for r in project["dependencies"]]
    requirements += [Requirement(r) for extra in EXTRAS for r in project["optional-dependencies"][extra]]
    for requirement in requirements:
        name = canonicalize_name(requirement.name)
        if name in LEFT_OUT or (requirement.marker and not requirement.marker.evaluate({"extra": ""})):
            continue
        assert name in locked, f"{requirement} is not in {LOCK.name}"
        assert requirement.specifier.contains(locked[name], prereleases=True), (str(requirement), locked[name])


def oldest_python() -> str:
    """An interpreter of the oldest minor version pyproject.toml's requires-python allows: this one's base, or
    pythonX.Y on PATH; in CI its absence fails, elsewhere it skips naming it."""
    allowed = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    match = re.fullmatch(r">=\s*3\.(\d+)(,.*)?", allowed.strip())
    assert match, f"requires-python {allowed!r}: this test reads its lower bound as >=3.N"
    oldest = (3, int(match.group(1)))
    if sys.version_info[:2] == oldest:
        return getattr(sys, "_base_executable", sys.executable)
    found = shutil.which(f"python3.{oldest[1]}")
    if found:
        return found
    missing = f"no python3.{oldest[1]} (the oldest Python pyproject.toml allows) on PATH"
    if os.environ.get("CI"):
        pytest.fail(missing)
    pytest.skip(missing)


# slow: pip 23.2's resolution of the cluster's install, what a user's new venv runs, which no lock test does
@pytest.mark.slow
def test_the_cluster_install_resolves_with_the_pip_a_new_venv_brings(tmp_path, capsys):
    """pip's resolver on the cluster's install, needing PyPI, run by the pip that a new venv of the oldest Python
    pyproject.toml allows brings (ensurepip's: Python 3.11's is pip 23.2, whose backtracking the bounds in
    pyproject.toml exist for; about 80 CPU seconds with an empty cache, pip's own work and the index's answers, so
    it runs beside the other tests rather than before them). Its limit, 15 minutes, is for a resolver lost in
    backtracking, not a measure of speed (it took 212 to 261 s here beside two test sessions)."""
    base = oldest_python()
    subprocess.run([base, "-m", "venv", str(tmp_path / "venv")], check=True, capture_output=True, timeout=300)
    python = str(tmp_path / "venv" / "bin" / "python")
    bundled = subprocess.run([base, "-c", "import ensurepip; print(ensurepip.version())"], capture_output=True,
                             text=True, check=True).stdout.strip()  # fmt: skip
    assert resolve_cluster_install.main(["--python", python, "--timeout-s", "900"]) == 0, capsys.readouterr().err
    said = capsys.readouterr().out
    assert f"(pip {bundled}, CPython 3." in said and "resolves in" in said, said


@pytest.mark.parametrize("python", ["3.12", "3.13"])
def test_the_readme_installs_resolve_for_the_newer_pythons_it_names(python, tmp_path):
    """README's installs for a Python it names beside the lock's 3.11 (Ubuntu 24.04's 3.12, Debian 13's and
    Fedora's 3.13): torch==2.13.0, then the package with the cluster's extras (`.[gpu,slurm]`), resolved by uv for
    that CPython on Linux x86-64, which need not be installed here. The main job's install (`.` after torch) asks
    for a subset of the same requirements, so this resolution is one of its own. Needs PyPI."""
    torch = tmp_path / "torch.txt"
    torch.write_text("torch==2.13.0\n")
    uv = Path(sys.executable).with_name("uv")
    command = [str(uv), "pip", "compile", str(REPO / "pyproject.toml"), str(torch), "--extra", "gpu", "--extra",
               "slurm", "--python-version", python, "--python-platform", "x86_64-manylinux_2_28", "--no-annotate",
               "--no-header", "-q"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    pins = dict(line.split("==", 1) for line in done.stdout.splitlines() if "==" in line and not line.startswith("#"))
    assert (pins["torch"], pins["vllm"]) == ("2.13.0", "0.32.0") and "snakemake" in pins, pins


def test_the_test_command_refuses_a_python_the_lock_is_not_for():
    """README's test command first runs tests/lock_python.py, which passes the Python the lock was compiled for
    (this one: the suite runs in the venv it made) and refuses any other with one line naming the one to use."""
    readme = (REPO / "README.md").read_text()
    command = readme.split("<!-- ci: test command -->", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    assert command.startswith("python3 tests/lock_python.py && ") and command.index("lock_python") < command.index(
        "venv"
    )
    done = subprocess.run([sys.executable, str(REPO / "tests" / "lock_python.py")], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "")
    want, machine = locked_for()
    minor = int(want.split(".")[1])
    others = [("CPython", (3, minor + 1, 1), "Linux", machine), ("CPython", (3, minor, 7), "Linux", "riscv64"),
              ("PyPy", (3, minor, 13), "Linux", machine), ("CPython", (3, minor, 7), "Darwin", machine)]  # fmt: skip
    for implementation, version, system, other_machine in others:
        why = refusal(implementation, version, system, other_machine)
        here = f"{implementation} {'.'.join(map(str, version))} on {system} {other_machine}"
        assert why.startswith(f"requirements-ci.txt is locked for CPython {want} on Linux {machine}, and python3 "
                              f"here is {here}: ") and "\n" not in why, why  # fmt: skip
        if (system, other_machine) == ("Linux", machine):  # another Python: the lock's, installed without root
            assert f"run the test command with python{want} in place of python3" in why, why
            assert f"`uv python install {want}` installs it without root" in why, why
        else:  # another platform, where the lock's wheels cannot help: the plain install, or a Linux machine
            assert "python" + want not in why.split(": ", 1)[1] and "'Try it on a CPU'" in why, why
            assert f"or run the test command on Linux {machine}" in why, why
