import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA_FILES = ("math500.jsonl", "aime2024.jsonl", "aime2025.jsonl", "amc23.jsonl", "gsm8k_test.jsonl")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real benchmark files: PACS_DATA_DIR, default ../shared/data beside the repo.
    Missing data fails in CI (CI set) and skips elsewhere, naming what is missing."""
    path = Path(os.environ.get("PACS_DATA_DIR", REPO.parent / "shared" / "data")).resolve()
    missing = [f for f in DATA_FILES if not (path / f).is_file()]
    if missing:
        message = f"benchmark data missing in {path} (set PACS_DATA_DIR): {', '.join(missing)}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return path
