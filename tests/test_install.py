"""The installs: CI's locked environment (tests/requirements-ci.txt) is one pyproject.toml allows, and the
cluster's `pip install -e ".[gpu,slurm]"` resolves (tests/resolve_cluster_install.py)."""

import tomllib
from pathlib import Path

import resolve_cluster_install
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
    pyproject.toml admits (a bound changed there without `uv pip compile` again, README "Installing", fails
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


def test_the_cluster_install_resolves(capsys):
    """pip's resolver on the cluster's install, needing PyPI (the dev extra's pip: about 15 s with an empty cache,
    pip's own work and the index's answers, so it runs beside the other tests rather than before them)."""
    assert resolve_cluster_install.main([]) == 0, capsys.readouterr().err
    assert "resolves in" in capsys.readouterr().out
