"""Files are written whole or not at all: to a temporary file beside the target, then renamed."""

import json
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pandas is imported where a frame is written, not by every command that writes a file
    import pandas as pd

PARQUET_KEY = b"pacs"


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path`` to write; renamed onto ``path`` if the block succeeds, else deleted."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: Path, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def atomic_write_json(path: Path, obj: object) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False) + "\n")


def atomic_write_csv(path: Path, frame: "pd.DataFrame") -> None:
    atomic_write_text(path, frame.to_csv(index=False))


def atomic_write_parquet(path: Path, frame: "pd.DataFrame", metadata: dict | None = None) -> None:
    """``frame`` as parquet; ``metadata`` (JSON-able) goes into the file's key-value metadata under "pacs"."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    if metadata is not None:
        table = table.replace_schema_metadata({**(table.schema.metadata or {}), PARQUET_KEY: json.dumps(metadata)})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def parquet_metadata(path: Path) -> dict:
    """What ``atomic_write_parquet`` stored with ``metadata`` ({} if nothing)."""
    import pyarrow.parquet as pq

    stored = pq.read_schema(path).metadata or {}
    return json.loads(stored[PARQUET_KEY]) if PARQUET_KEY in stored else {}
