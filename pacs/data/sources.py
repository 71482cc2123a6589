"""Where each benchmark's rows live in local files, and how to read its problem and gold.

The file names are those of ../shared/data (see its SOURCES.md); the Hugging Face hub sources
come with `pacs prepare-data`.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pacs.data.golds import GoldError, gsm8k_gold, normalize_gold


@dataclass(frozen=True)
class LocalSource:
    file: str
    problem_field: str
    answer_field: str
    gold: Callable[[object], str] = normalize_gold


LOCAL_BENCHMARKS: dict[str, LocalSource] = {
    "math500": LocalSource("math500.jsonl", "problem", "answer"),
    "aime2024": LocalSource("aime2024.jsonl", "problem", "answer"),
    "aime2025": LocalSource("aime2025.jsonl", "problem", "answer"),
    "amc23": LocalSource("amc23.jsonl", "problem", "answer"),
    "gsm8k": LocalSource("gsm8k_test.jsonl", "question", "answer", gsm8k_gold),
}


@dataclass(frozen=True)
class GoldRow:
    benchmark: str
    row: int  # 0-based position in the source file
    problem: str
    gold: str


def read_records(path: Path) -> list[dict]:
    """Rows of a .jsonl, .json (a list of objects) or .parquet file."""
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    if path.suffix == ".jsonl":
        rows = []
        with path.open(encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{lineno}: invalid JSON: {e}") from e
        return rows
    if path.suffix == ".json":
        rows = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of objects")
        return rows
    if path.suffix == ".parquet":
        return pd.read_parquet(path).to_dict("records")
    raise ValueError(f"{path}: unsupported file type {path.suffix!r} (jsonl, json or parquet)")


def load_gold_rows(data_dir: Path, benchmark: str) -> list[GoldRow]:
    """Every row of a local benchmark file with its normalised gold; errors name file, row and field."""
    if benchmark not in LOCAL_BENCHMARKS:
        raise ValueError(f"unknown benchmark {benchmark!r}; choose one of {sorted(LOCAL_BENCHMARKS)}")
    source = LOCAL_BENCHMARKS[benchmark]
    path = Path(data_dir) / source.file
    out = []
    for i, record in enumerate(read_records(path)):
        for field in (source.problem_field, source.answer_field):
            if field not in record:
                raise ValueError(f"{path}: row {i} has no field {field!r}")
        try:
            gold = source.gold(record[source.answer_field])
        except GoldError as e:
            raise ValueError(f"{path}: row {i}: {e}") from e
        out.append(GoldRow(benchmark, i, str(record[source.problem_field]), gold))
    return out
