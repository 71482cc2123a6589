"""Source rows → one prepared parquet in the schema of ``pacs.data.schema``, with what was done recorded.

Bad rows (no problem, an empty one, a gold that cannot be normalised) are an error naming the file and
row, or, with ``bad_rows="drop"``, dropped and counted. Every math prompt is the problem and the instruction,
a code prompt its dataset's own message, after an optional system message (``system_prompt``); the rows'
golds are written as the source parsed them (a code row's tests JSON untouched). Duplicate problems (equal
up to whitespace) are always reported, and
dropped with ``duplicates="drop"``. Then the paper's options: prompts longer than
``max_prompt_length`` tokens (with the model's tokenizer and chat template) are dropped, and the rows
are repeated ``repeat`` times. The report travels inside the parquet file (``prepared_info``).
"""

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import pandas as pd

from pacs.data.schema import COLUMNS, TASKS, chat_prompt, prompt_token_ids
from pacs.data.sources import DatasetSource, RawRow, RowError, iter_rows, load_records
from pacs.io import parquet_metadata

MAX_LISTED = 20  # bad rows and duplicates listed in the report; all are counted


@dataclass(frozen=True)
class PrepareOptions:
    bad_rows: Literal["error", "drop"] = "error"
    duplicates: Literal["keep", "drop"] = "keep"  # reported either way; "drop" keeps the first
    max_prompt_length: int | None = None  # in tokens of the chat-templated prompt; needs a tokenizer
    repeat: int = 1  # every row this many times (the paper's option for small sets)
    system_prompt: str | None = None  # a system message before each problem (PACS v2: "You are a helpful assistant.")
    chat_template_kwargs: dict | None = None  # the template's variables when measuring max_prompt_length

    def __post_init__(self):
        if self.repeat < 1:
            raise ValueError(f"repeat must be >= 1, got {self.repeat}")
        if self.max_prompt_length is not None and self.max_prompt_length < 1:
            raise ValueError(f"max_prompt_length must be >= 1, got {self.max_prompt_length}")


def problem_key(problem: str) -> str:
    return " ".join(problem.split())


def prepare_rows(
    dataset: str, rows: Iterable[RawRow | RowError], options: PrepareOptions, tokenizer=None, task: str = "math"
) -> tuple[pd.DataFrame, dict]:
    """``(frame, report)``: the prepared rows and the counts of everything dropped or found. ``task`` says
    what the golds are (``pacs.data.schema``): the rows' golds and problems are written as the source
    parsed them, the paper's instruction added to math problems only."""
    if task not in TASKS:
        raise ValueError(f"{dataset}: unknown task {task!r}; known: {list(TASKS)}")
    if options.max_prompt_length is not None and tokenizer is None:
        raise ValueError("max_prompt_length needs the model's tokenizer")
    kept: list[RawRow] = []
    bad: list[dict] = []
    first_seen: dict[str, RawRow] = {}
    duplicates: list[dict] = []
    read = 0
    for r in rows:
        read += 1
        if isinstance(r, RowError):
            if options.bad_rows == "error":
                raise r
            bad.append({"where": r.where, "row": r.row, "reason": r.reason})
            continue
        first = first_seen.setdefault(problem_key(r.problem), r)
        if first is not r:
            duplicates.append({"row": r.row, "first_row": first.row, "same_gold": first.gold == r.gold})
            if options.duplicates == "drop":
                continue
        kept.append(r)
    frame = pd.DataFrame(
        {
            "prompt": [chat_prompt(r.problem, options.system_prompt, task) for r in kept],
            "ground_truth": [r.gold for r in kept],
            "task": task,
            "data_source": dataset,
            "id": [r.id for r in kept],
        }
    )
    extra = pd.DataFrame([r.extra for r in kept], index=frame.index)
    frame = pd.concat([frame, extra], axis=1)
    too_long = 0
    if options.max_prompt_length is not None and len(frame):
        lengths = pd.Series(
            [len(p) for p in prompt_token_ids(tokenizer, frame["prompt"], options.chat_template_kwargs)]
        )
        too_long = int((lengths > options.max_prompt_length).sum())
        frame = frame[lengths <= options.max_prompt_length]
    if frame.empty:
        raise ValueError(f"{dataset}: no rows left of {read} ({len(bad)} bad, {too_long} too long)")
    frame = pd.concat([frame] * options.repeat, ignore_index=True)
    frame.insert(COLUMNS.index("index"), "index", range(len(frame)))
    report = {
        "dataset": dataset,
        "task": task,
        "rows_read": read,
        "rows_written": len(frame),
        "bad_rows": len(bad),
        "bad_rows_listed": bad[:MAX_LISTED],
        "duplicates": len(duplicates),
        "duplicates_dropped": len(duplicates) if options.duplicates == "drop" else 0,
        "duplicates_listed": duplicates[:MAX_LISTED],
        "too_long_dropped": too_long,
        "options": {k: getattr(options, k) for k in PrepareOptions.__dataclass_fields__},
    }
    return frame, report


def prepare_source(
    dataset: str, source: DatasetSource, data_dir: Path | None, options: PrepareOptions, tokenizer=None
) -> tuple[pd.DataFrame, dict]:
    """A hub or local dataset prepared; the report records the source (file and sha256, or hub id)."""
    from pacs.config import to_dict

    records, where, provenance = load_records(source, data_dir)
    frame, report = prepare_rows(dataset, iter_rows(records, source, where), options, tokenizer)
    return frame, {**report, "source": {**to_dict(source), **provenance}}


def prepared_info(path: Path) -> dict:
    """The report `pacs prepare-data` stored in a prepared file ({} for files written otherwise)."""
    return parquet_metadata(path)


def summary(report: dict) -> str:
    parts = [f"{report['rows_written']} rows written of {report['rows_read']} read"]
    if report["bad_rows"]:
        parts.append(f"{report['bad_rows']} bad rows dropped")
    if report["duplicates"]:
        listed = ", ".join(f"row {d['row']} = row {d['first_row']}" for d in report["duplicates_listed"][:5])
        action = "dropped" if report["duplicates_dropped"] else "kept"
        more = ", ..." if report["duplicates"] > 5 else ""
        parts.append(f"{report['duplicates']} duplicate problems {action} ({listed}{more})")
    if report["too_long_dropped"]:
        parts.append(
            f"{report['too_long_dropped']} prompts over {report['options']['max_prompt_length']} tokens dropped"
        )
    if report["options"]["repeat"] > 1:
        parts.append(f"repeated {report['options']['repeat']}x")
    return "; ".join(parts)
