"""The real-data tests find ../shared/data through PACS_DATA_DIR: missing data skips with a message
naming it, except in CI, where it fails."""

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_real_data_test(tmp_path, ci: bool) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env["PACS_DATA_DIR"] = str(tmp_path / "nowhere")
    if ci:
        env["CI"] = "true"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-rs",
            "-p",
            "no:cacheprovider",
            "tests/test_real_golds.py::test_row_counts",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_missing_data_skips_outside_ci_and_names_what_is_missing(tmp_path):
    result = run_real_data_test(tmp_path, ci=False)
    assert result.returncode == 0, result.stdout
    assert "1 skipped" in result.stdout
    assert "benchmark data missing" in result.stdout and "math500.jsonl" in result.stdout


def test_missing_data_fails_in_ci(tmp_path):
    result = run_real_data_test(tmp_path, ci=True)
    assert result.returncode == 1
    assert "benchmark data missing" in result.stdout
