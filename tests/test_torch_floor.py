"""The torch floor: pyproject.toml states it, and an older torch fails at start naming both versions."""

import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import pacs

REPO = Path(__file__).resolve().parents[1]


def _torch_reports(monkeypatch, version: str) -> None:
    real = metadata.version
    monkeypatch.setattr(metadata, "version", lambda name: version if name == "torch" else real(name))


def test_pyproject_states_the_floor_pacs_checks():
    requirements = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert [r.split("#")[0].strip() for r in requirements if r.startswith("torch")] == [f"torch>={pacs.TORCH_FLOOR}"]


@pytest.mark.parametrize("version", ["2.9.1", "2.4.0+cu121", "1.13.1"])
def test_an_older_torch_is_refused_naming_both_versions(monkeypatch, version):
    _torch_reports(monkeypatch, version)
    with pytest.raises(ImportError) as error:
        pacs.require_torch()
    assert f"torch >= {pacs.TORCH_FLOOR}" in str(error.value) and f"torch {version} is installed" in str(error.value)


@pytest.mark.parametrize("version", ["2.10.0", "2.10.0a0+git1234abc", "2.13.0+cpu", "2.11.0.dev20260101", "3.0.0"])
def test_the_floor_and_newer_pass(monkeypatch, version):
    _torch_reports(monkeypatch, version)
    pacs.require_torch()


def test_import_fails_at_start_with_an_older_torch():
    """Every entry point (`pacs`, torchrun's ranks, the Snakefile) imports the package first."""
    fake = ("from importlib import metadata; real = metadata.version; "
            "metadata.version = lambda name: '2.9.1' if name == 'torch' else real(name); import pacs.cli")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", fake], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.returncode != 0
    assert f"pacs needs torch >= {pacs.TORCH_FLOOR}, but torch 2.9.1 is installed" in done.stderr, done.stderr
