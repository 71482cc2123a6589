import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA_FILES = ("math500.jsonl", "aime2024.jsonl", "aime2025.jsonl", "amc23.jsonl", "gsm8k_test.jsonl",
              "beyondaime.jsonl", "deepscaler_subset803.json")  # fmt: skip


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


@pytest.fixture(scope="session")
def vllm_installed() -> None:
    """vLLM must be importable in CI; elsewhere the tests that need it skip, saying so."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        message = "vllm is not importable: pip install -e '.[cpu]' after torch==2.13.0 (README)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="session")
def prepared(shared_data, tmp_path_factory) -> Path:
    """The six real benchmarks as `pacs prepare-data --source local` writes them: NAME.parquet."""
    from pacs.cli import main
    from pacs.data.sources import BENCHMARKS

    out = tmp_path_factory.mktemp("prepared")
    for name in BENCHMARKS:
        args = ["--dataset", name, "--source", "local", "--data-dir", str(shared_data)]
        assert main(["prepare-data", *args, "--out", str(out / f"{name}.parquet")]) == 0
    return out


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory) -> Path:
    """The toy task's train.parquet and heldout.parquet, as `pacs toy-data` writes them."""
    from pacs.cli import main

    out = tmp_path_factory.mktemp("toy")
    assert main(["toy-data", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_model(toy_data, tmp_path_factory) -> Path:
    """A tiny Qwen2 warm-started on the toy task, built by `pacs tiny-model` (about a minute on 2 cores)."""
    from pacs.cli import main

    out = tmp_path_factory.mktemp("tiny") / "model"
    assert main(["tiny-model", "--data", str(toy_data), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def toy_code_data(tmp_path_factory) -> Path:
    """The toy code task's train.parquet and heldout.parquet, as `pacs toy-data --task code` writes them."""
    from pacs.cli import main

    out = tmp_path_factory.mktemp("toy_code")
    assert main(["toy-data", "--task", "code", "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="session")
def tiny_code_model(toy_code_data, tmp_path_factory) -> Path:
    """A tiny Qwen2 warm-started on the toy code task, its held-out programs checked in the sandbox (about 40 s
    on 2 cores)."""
    from pacs.cli import main

    out = tmp_path_factory.mktemp("tiny_code") / "model"
    assert main(["tiny-model", "--data", str(toy_code_data), "--out", str(out)]) == 0
    return out


def write_run_config(path: Path, model: Path, data_dir: Path, **sections) -> Path:
    """The toy-task run of `pacs bench train`, made small (6 steps of 16 prompts, a checkpoint every 2,
    no evaluation); ``sections`` override keys of a section (``algorithm`` as a whole)."""
    import yaml

    from pacs.bench.train import bench_config

    config = bench_config({"name": "pacs"}, model, data_dir, steps=6, seed=0)
    small = {
        "trainer": {"batch_size": 16, "mini_batch_size": 8, "micro_batch_size": 4},
        "checkpoint": {"save_every": 2},
        "eval": {"every": 0},
        "verifier": {"workers": 1},
    }
    for overrides in (small, sections):
        for section, values in overrides.items():
            config[section] = {**config.get(section, {}), **values} if section != "algorithm" else values
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="session")
def raw_tiny_model(toy_data, tmp_path_factory) -> Path:
    """The same tiny Qwen2 and tokenizer with random weights (no warm start): for fast mechanics tests."""
    from pacs.data.schema import read_prepared
    from pacs.data.toy import toy_solution
    from pacs.models.tiny import TinyModelConfig, tiny_qwen2, train_tokenizer

    train = read_prepared(toy_data / "train.parquet")
    corpus = [m[0]["content"] for m in train["prompt"]] + [toy_solution(g) for g in train["ground_truth"]]
    tokenizer = train_tokenizer(corpus + ["user\nassistant\n"], 512)
    model = tiny_qwen2(tokenizer, TinyModelConfig())
    out = tmp_path_factory.mktemp("raw") / "model"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def pytest_runtest_logreport(report) -> None:
    """With ``PACS_TRACEBACKS_AT_ONCE=1`` a failure's traceback is printed as it happens, not in the summary at
    the end: a GPU sitting's time limit may stop the suite before pytest prints one (tests/README.md)."""
    if report.failed and os.environ.get("PACS_TRACEBACKS_AT_ONCE") == "1":
        sys.stderr.write(f"\n{report.nodeid} ({report.when}):\n{report.longreprtext}\n")
