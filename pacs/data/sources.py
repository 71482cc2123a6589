"""Where each dataset's rows come from, and which fields hold its problem, answer and id.

Two kinds of source, one row reader:
- ``hub``: a Hugging Face dataset loaded with ``datasets.load_dataset`` (the ids the paper used);
- ``local``: a .jsonl, .json (a list of objects) or .parquet file, e.g. ../shared/data (its SOURCES.md).
The field names differ between copies of the same benchmark, so each source carries its own mapping.
"""

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pacs.data.golds import GoldError, gsm8k_gold, normalize_gold

GOLD_FORMATS = {"plain": normalize_gold, "gsm8k": gsm8k_gold}


@dataclass(frozen=True)
class DatasetSource:
    """One dataset's rows: where they are and how to read them."""

    kind: Literal["hub", "local"]
    path: str  # hub: dataset id (or a local dataset directory); local: a file, relative to the data directory
    problem_field: str
    answer_field: str
    id_field: str | None = None  # None: the row number is the id
    answer_format: Literal["plain", "gsm8k"] = "plain"  # gsm8k: the number after "####" in a worked solution
    split: str = "test"  # hub only
    name: str | None = None  # hub only: the dataset's config name (GSM8K's "main")
    revision: str | None = None  # hub only: a commit or tag, for a pinned download


HUB_SOURCES: dict[str, DatasetSource] = {
    "deepscaler": DatasetSource("hub", "agentica-org/DeepScaleR-Preview-Dataset", "problem", "answer", split="train"),
    "math500": DatasetSource("hub", "HuggingFaceH4/MATH-500", "problem", "answer", "unique_id"),
    "amc23": DatasetSource("hub", "zwhe99/amc23", "question", "answer"),
    "aime2024": DatasetSource("hub", "Maxwell-Jia/AIME_2024", "Problem", "Answer", "ID", split="train"),
    "aime2025": DatasetSource("hub", "yentinglin/aime_2025", "problem", "answer", split="train"),
    "gsm8k": DatasetSource("hub", "openai/gsm8k", "question", "answer", answer_format="gsm8k", name="main"),
    # PACS v2's fifth benchmark: 100 problems, integer answers up to 33,124,147 (not AIME's 0-999); no id field
    "beyondaime": DatasetSource("hub", "ByteDance-Seed/BeyondAIME", "problem", "answer"),
}

# The files of ../shared/data; the DeepScaleR file there is an 803-row subset, not the training set.
LOCAL_SOURCES: dict[str, DatasetSource] = {
    "deepscaler": DatasetSource("local", "deepscaler_subset803.json", "problem", "answer"),
    "math500": DatasetSource("local", "math500.jsonl", "problem", "answer", "unique_id"),
    "amc23": DatasetSource("local", "amc23.jsonl", "problem", "answer", "id"),
    "aime2024": DatasetSource("local", "aime2024.jsonl", "problem", "answer", "id"),
    "aime2025": DatasetSource("local", "aime2025.jsonl", "problem", "answer", "id"),
    "gsm8k": DatasetSource("local", "gsm8k_test.jsonl", "question", "answer", answer_format="gsm8k"),
    "beyondaime": DatasetSource("local", "beyondaime.jsonl", "problem", "answer", "id"),  # id: the hub's row number
}
BENCHMARKS = ("math500", "amc23", "aime2024", "aime2025", "gsm8k", "beyondaime")  # evaluation sets; deepscaler trains


def default_source(dataset: str, kind: str) -> DatasetSource:
    table = {"hub": HUB_SOURCES, "local": LOCAL_SOURCES}[kind]
    if dataset not in table:
        raise ValueError(f"no {kind} source is known for dataset {dataset!r}; known: {sorted(table)}")
    return table[dataset]


def with_overrides(source: DatasetSource | None, overrides: dict) -> DatasetSource:
    """``source`` with some fields replaced (from a --spec file), or a new source from ``overrides`` alone;
    an unknown key or a missing one is an error naming it."""
    from pacs.config import from_dict, to_dict

    return from_dict(DatasetSource, {**(to_dict(source) if source else {}), **overrides}, "source")


@dataclass(frozen=True)
class RawRow:
    row: int  # 0-based position in the source
    problem: str
    gold: str
    id: str
    extra: dict = field(default_factory=dict)  # the dataset's own columns, written after the schema's


class RowError(ValueError):
    """One source row that cannot be used: no problem, an empty one, or a gold that cannot be normalised."""

    def __init__(self, where: str, row: int, reason: str):
        super().__init__(f"{where}: row {row}: {reason}")
        self.where, self.row, self.reason = where, row, reason


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
        import pandas as pd

        return pd.read_parquet(path).to_dict("records")
    raise ValueError(f"{path}: unsupported file type {path.suffix!r} (jsonl, json or parquet)")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_records(source: DatasetSource, data_dir: Path | None) -> tuple[list[dict], str, dict]:
    """``(records, where, provenance)``: the rows, a name for error messages, and what to record of the source."""
    if source.kind == "local":
        path = Path(source.path) if data_dir is None else Path(data_dir) / source.path
        return read_records(path), str(path), {"file": str(path.resolve()), "sha256": sha256(path)}
    import datasets

    where = f"{source.path} [{source.split}]"
    loaded = datasets.load_dataset(source.path, source.name, split=source.split, revision=source.revision)
    return list(loaded), where, {"hub_id": source.path, "fingerprint": loaded._fingerprint}


def parse_row(record: dict, row: int, source: DatasetSource, where: str) -> RawRow:
    """One record as (problem, normalised gold, id); a ``RowError`` names the file and row."""
    for name in (source.problem_field, source.answer_field, source.id_field):
        if name is not None and name not in record:
            raise RowError(where, row, f"no field {name!r} (fields: {sorted(record)})")
    problem = record[source.problem_field]
    if not isinstance(problem, str) or not problem.strip():
        raise RowError(where, row, f"empty or non-text problem {problem!r}")
    try:
        gold = GOLD_FORMATS[source.answer_format](record[source.answer_field])
    except GoldError as e:
        raise RowError(where, row, str(e)) from e
    return RawRow(row, problem.strip(), gold, str(record[source.id_field]) if source.id_field else str(row))


def iter_rows(records: list[dict], source: DatasetSource, where: str) -> Iterator[RawRow | RowError]:
    """Every record parsed, or the error that makes it unusable, in source order."""
    for i, record in enumerate(records):
        try:
            yield parse_row(record, i, source, where)
        except RowError as e:
            yield e


@dataclass(frozen=True)
class GoldRow:
    benchmark: str
    row: int  # 0-based position in the source file
    problem: str
    gold: str


def load_gold_rows(data_dir: Path, benchmark: str) -> list[GoldRow]:
    """Every row of a local benchmark file with its normalised gold; the first bad row is an error."""
    source = default_source(benchmark, "local")
    records, where, _ = load_records(source, data_dir)
    out = []
    for r in iter_rows(records, source, where):
        if isinstance(r, RowError):
            raise r
        out.append(GoldRow(benchmark, r.row, r.problem, r.gold))
    return out
