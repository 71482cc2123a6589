"""LiveCodeBench's code-generation problems (the hub's ``livecodebench/code_generation_lite``) as code rows.

The hub repository holds one JSONL file per release increment: ``release_v1`` is test.jsonl,
``release_v2`` adds test2.jsonl, ... ``release_v6`` adds test6.jsonl (``release_latest``: all six); ``vN``
is one increment alone and ``vN_vM`` increments N to M, as the hub's loading script names them. That
script no longer runs under ``datasets`` >= 4, so the files are downloaded one by one with
huggingface_hub, or read from a local mirror: a directory holding them (without a release chosen, every
increment it holds), or one .jsonl or .parquet file of rows.

Two prompts (``PROMPT_STYLES``): LiveCodeBench's own for chat models (the default), or ``glm_cot``, the one
GLM-4.5's toolkit (zai-org/glm-simple-evals, evals/livecodebench_eval.py) always sends: its model name
defaults to "cot", whose prompt has no "### Question:" header and no "### Answer:" line, a shorter stdin
instruction, and no system message.

Problems are chosen by release and, optionally, by contest date: ``start <= date < end``, the end day
excluded (LiveCodeBench's runner keeps ``contest_date <= end`` at midnight, so its window also holds
the problems dated the end day at 00:00). PACS v2: 2024-07-01 to 2025-01-01, the second half of 2024.

A row's private tests are base64(zlib(pickle(JSON string))), or plain JSON in some rows. The pickle is
read by an unpickler that refuses every global, so a file can make it build strings, numbers and
containers only, never call a function (``os.system``) or build an object.
"""

import base64
import io
import json
import pickle
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, datetime
from pathlib import Path

import pandas as pd

from pacs.data.prepare import PrepareOptions, prepare_rows
from pacs.data.sources import RawRow, RowError, sha256

DATA_SOURCE = "livecodebench"
HUB_ID = "livecodebench/code_generation_lite"
INCREMENTS = ("test.jsonl", "test2.jsonl", "test3.jsonl", "test4.jsonl", "test5.jsonl", "test6.jsonl")
DEFAULT_RELEASE = "release_latest"
TEST_TYPES = ("stdin", "functional")
EXTRA_COLUMNS = ("contest_date", "platform", "difficulty")

# lcb_runner/prompts/code_generation.py, PromptConstants and get_generic_question_template_answer: the
# prompt LiveCodeBench gives chat models (with SYSTEM_PROMPT as their system message)
SYSTEM_PROMPT = (
    "You are an expert Python programmer. You will be given a question (problem specification) and will "
    "generate a correct Python program that matches the specification and passes all tests."
)
FORMAT_WITH_STARTER_CODE = (
    "You will use the following starter code to write the solution to the problem and enclose your code "
    "within delimiters."
)
FORMAT_WITHOUT_STARTER_CODE = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the sample inputs). Enclose your code within delimiters as follows. Ensure that when the python program "
    "runs, it reads the inputs, runs the algorithm and writes output to STDOUT."
)


def code_prompt(question: str, starter_code: str) -> str:
    """LiveCodeBench's user message for one problem, without its trailing blank line: the starter code's
    format for functional problems (those with starter code), stdin's otherwise."""
    if starter_code:
        instruction, code = FORMAT_WITH_STARTER_CODE, starter_code
    else:
        instruction, code = FORMAT_WITHOUT_STARTER_CODE, "# YOUR CODE HERE"
    return (
        f"### Question:\n{question}\n\n### Format: {instruction}\n```python\n{code}\n```\n\n"
        "### Answer: (use the provided format with backticks)"
    )


# evals/livecodebench_eval.py of zai-org/glm-simple-evals, get_question_template_answer's "cot" branch (the
# default model name): LiveCodeBench's starter-code instruction, a stdin one without its last sentence
GLM_FORMAT_WITHOUT_STARTER_CODE = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on "
    "the sample inputs). Enclose your code within delimiters as follows."
)


def glm_cot_prompt(question: str, starter_code: str) -> str:
    """The GLM-4.5 toolkit's user message for one problem, whole (its trailing blank line included): the
    problem, then "### Format:" with the starter code, or stdin's instruction, a blank line and the
    placeholder."""
    if starter_code:
        return f"{question}\n\n### Format: {FORMAT_WITH_STARTER_CODE}\n```python\n{starter_code}\n```\n\n"
    return f"{question}\n\n### Format: {GLM_FORMAT_WITHOUT_STARTER_CODE}\n\n```python\n# YOUR CODE HERE\n```\n\n"


PROMPT_STYLES = {"livecodebench": code_prompt, "glm_cot": glm_cot_prompt}


def release_files(version: str) -> list[str]:
    """The hub files of a release: ``release_vN`` (the first N increments), ``release_latest``, ``vN``, ``vN_vM``."""
    n = len(INCREMENTS)
    if version == "release_latest":
        return list(INCREMENTS)
    if (m := re.fullmatch(r"release_v(\d+)", version)) and 1 <= int(m[1]) <= n:
        return list(INCREMENTS[: int(m[1])])
    if (m := re.fullmatch(r"v(\d+)(?:_v(\d+))?", version)) and 1 <= int(m[1]) <= int(m[2] or m[1]) <= n:
        return list(INCREMENTS[int(m[1]) - 1 : int(m[2] or m[1])])
    raise ValueError(
        f"{version!r} is not a LiveCodeBench release: release_v1 ... release_v{n}, release_latest, "
        f"v1 ... v{n} (one increment) or vN_vM (increments N to M)"
    )


@dataclass(frozen=True)
class DateWindow:
    """Contest dates ``start <= date < end``; either side may be open."""

    start: date | None = None
    end: date | None = None  # excluded

    def __post_init__(self):
        if self.start is not None and self.end is not None and self.start >= self.end:
            raise ValueError(f"empty date window: start {self.start} is not before end {self.end} (excluded)")

    def __contains__(self, day: date) -> bool:
        return (self.start is None or self.start <= day) and (self.end is None or day < self.end)


def source_files(
    kind: str, release: str | None, path: Path | None = None, revision: str | None = None
) -> list[tuple[Path, str]]:
    """``[(file, name for messages)]``: the release's hub files (downloaded, or from the cache); a mirror
    directory's (without a release, every increment it holds); or one local file (all its rows: a release
    cannot be chosen in it)."""
    if kind == "hub":
        from huggingface_hub import hf_hub_download

        names = release_files(release or DEFAULT_RELEASE)
        return [
            (Path(hf_hub_download(HUB_ID, n, repo_type="dataset", revision=revision)), f"{HUB_ID}/{n}") for n in names
        ]
    if path is None:
        raise ValueError("livecodebench --source local needs --data-dir: a mirror directory or a .jsonl/.parquet file")
    path = Path(path)
    if path.is_file():
        if release is not None:
            raise ValueError(f"{path} is one file, so --release-version cannot choose in it; give the directory")
        return [(path, str(path))]
    if not path.is_dir():
        raise FileNotFoundError(f"{path}: no such file or directory")
    files = []
    for name in release_files(release) if release else INCREMENTS:
        file = path / name
        if not file.is_file() and file.with_suffix(".parquet").is_file():
            file = file.with_suffix(".parquet")
        if file.is_file():
            files.append((file, str(file)))
        elif release:
            raise FileNotFoundError(f"{path / name}: no such file (release {release})")
    if not files:
        raise FileNotFoundError(f"{path}: none of LiveCodeBench's files {list(INCREMENTS)} (.jsonl or .parquet)")
    return files


def file_records(path: Path, where: str) -> Iterator[dict | RowError]:
    """A .jsonl (read line by line: the files are large) or .parquet file's rows; a line that is not a
    JSON object is that row's error."""
    if path.suffix == ".parquet":
        yield from pd.read_parquet(path).to_dict("records")
        return
    if path.suffix != ".jsonl":
        raise ValueError(f"{path}: unsupported file type {path.suffix!r} (jsonl or parquet)")
    with path.open(encoding="utf-8") as f:
        for row, line in enumerate(line for line in f if line.strip()):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                yield RowError(where, row, f"invalid JSON: {e}")
                continue
            yield record if isinstance(record, dict) else RowError(where, row, "not a JSON object")


class PlainDataUnpickler(pickle.Unpickler):
    """Builds strings, numbers and containers only: every global a pickle names (a class, or a function
    such as ``os.system`` for its REDUCE to call) is refused, so no code of the file's choosing runs."""

    def __init__(self, data: bytes, row: str):
        super().__init__(io.BytesIO(data))
        self.row = row

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"{self.row}: the pickle names the global {module}.{name}: refused")


def private_tests_text(value: str, row: str) -> str:
    """The private tests' JSON text: the value itself when it is JSON, else base64 → zlib → plain-data pickle."""
    try:
        json.loads(value)
        return value
    except json.JSONDecodeError:
        pass
    try:
        data = zlib.decompress(base64.b64decode(value.encode("utf-8")))
    except (ValueError, zlib.error) as e:
        raise ValueError(f"neither JSON nor base64 zlib: {e}") from e
    try:
        text = PlainDataUnpickler(data, row).load()
    except pickle.UnpicklingError:
        raise
    except Exception as e:  # a malformed pickle fails in many ways (EOFError, KeyError, struct.error, ...)
        raise ValueError(f"not a pickle: {type(e).__name__}: {e}") from e
    if not isinstance(text, str):
        raise ValueError(f"the pickle holds a {type(text).__name__}, not the JSON text of the tests")
    return text


def parse_tests(text: str, field: str) -> list[dict]:
    """``[{"input", "output", "testtype"}]`` from a field's JSON text; anything else is an error naming the field."""
    tests = json.loads(text)
    if not isinstance(tests, list):
        raise ValueError(f"{field}: expected a JSON list of tests, got {type(tests).__name__}")
    for i, t in enumerate(tests):
        ok = isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str)
        if not ok or t.get("testtype") not in TEST_TYPES:
            raise ValueError(f"{field}[{i}]: expected {{input: str, output: str, testtype: stdin|functional}}")
    return [{"input": t["input"], "output": t["output"], "testtype": t["testtype"]} for t in tests]


def contest_day(value) -> datetime:
    if isinstance(value, datetime):  # a parquet mirror's timestamp column (pd.Timestamp is one)
        return value
    try:
        return datetime.fromisoformat(value)
    except (TypeError, ValueError) as e:
        raise ValueError(f"contest_date {value!r} is not an ISO date") from e


REQUIRED = ("question_content", "question_id", "starter_code", "public_test_cases", "private_test_cases",
            "metadata", "platform", "difficulty")  # fmt: skip


def parse_problem(record: dict, contest: datetime, position: int, where: str, row: int,
                  prompt_style: str = "livecodebench") -> RawRow:  # fmt: skip
    """One in-window problem: its prompt (``PROMPT_STYLES``), its tests as the schema's JSON gold, its id and
    extra columns."""
    missing = [f for f in REQUIRED if f not in record]
    if missing:
        raise RowError(where, row, f"no field(s) {missing} (fields: {sorted(record)})")
    question, starter = record["question_content"], record["starter_code"] or ""
    if not isinstance(question, str) or not question.strip():
        raise RowError(where, row, f"empty or non-text question_content {question!r}")
    try:
        public = parse_tests(record["public_test_cases"], "public_test_cases")
        private = parse_tests(private_tests_text(record["private_test_cases"], f"row {row}"), "private_test_cases")
        metadata = record["metadata"] if isinstance(record["metadata"], dict) else json.loads(record["metadata"])
    except pickle.UnpicklingError as e:
        raise RowError(where, row, f"private_test_cases: {e}") from e
    except (ValueError, TypeError, AttributeError) as e:  # json's errors are ValueErrors; a non-string field
        raise RowError(where, row, str(e)) from e
    tests, fn_name = public + private, metadata.get("func_name")
    if not tests:
        raise RowError(where, row, "no tests")
    kinds = {t["testtype"] for t in tests}
    if kinds != ({"functional"} if fn_name else {"stdin"}):
        raise RowError(where, row, f"tests of type(s) {sorted(kinds)} with metadata func_name {fn_name!r}")
    extra = {"contest_date": contest.isoformat(), "platform": str(record["platform"]),
             "difficulty": str(record["difficulty"])}  # fmt: skip
    gold = json.dumps({"tests": tests, "fn_name": fn_name})
    return RawRow(position, PROMPT_STYLES[prompt_style](question, starter), gold, str(record["question_id"]), extra)


def livecodebench_rows(files: list[tuple[Path, str]], window: DateWindow, counts: dict,
                       prompt_style: str = "livecodebench") -> Iterator[RawRow | RowError]:  # fmt: skip
    """Every problem of the files in the window, or the error that makes it unusable; a row's position is
    its place in the files read one after the other. ``counts`` gets ``rows_in_files`` and ``outside_window``."""
    counts.update(rows_in_files=0, outside_window=0)
    for path, where in files:
        for row, record in enumerate(file_records(path, where)):
            position = counts["rows_in_files"]
            counts["rows_in_files"] += 1
            if isinstance(record, RowError):
                yield record
                continue
            try:
                contest = contest_day(record.get("contest_date"))
            except ValueError as e:
                yield RowError(where, row, str(e))
                continue
            if contest.date() not in window:
                counts["outside_window"] += 1
                continue
            try:
                yield parse_problem(record, contest, position, where, row, prompt_style)
            except RowError as e:
                yield e


def prepare_livecodebench(
    kind: str,
    release: str | None,
    window: DateWindow,
    options: PrepareOptions,
    path: Path | None = None,
    tokenizer=None,
    revision: str | None = None,
    prompt_style: str = "livecodebench",
) -> tuple[pd.DataFrame, dict]:
    """``(frame, report)``: the release's problems in the window as code rows, in ``prompt_style``
    (``PROMPT_STYLES``); the report records the files (and their sha256), the selection, the prompt style
    and how many rows fell outside the window."""
    if prompt_style not in PROMPT_STYLES:
        raise ValueError(f"prompt style {prompt_style!r}: one of {list(PROMPT_STYLES)}")
    files = source_files(kind, release, path, revision)
    counts: dict = {}
    rows = livecodebench_rows(files, window, counts, prompt_style)
    frame, report = prepare_rows(DATA_SOURCE, rows, options, tokenizer, "code")
    source = {
        "kind": kind,
        **({"hub_id": HUB_ID, "revision": revision} if kind == "hub" else {"path": str(Path(path).resolve())}),
        "release_version": release or (DEFAULT_RELEASE if kind == "hub" else None),  # local: the files say
        "start_date": None if window.start is None else window.start.isoformat(),
        "end_date_excluded": None if window.end is None else window.end.isoformat(),
        "files": [{"file": where, "sha256": sha256(file)} for file, where in files],
        "prompt_style": prompt_style,
        **counts,
    }
    return frame, {**report, "source": source}
