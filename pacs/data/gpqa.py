"""GPQA Diamond (198 questions; the hub's gated ``Idavidrein/gpqa``, config ``gpqa_diamond``) as multiple-choice
rows, asked as GLM-4.5's toolkit asks them (zai-org/glm-simple-evals: evals/gpqa_eval.py, evaluate.py).

The toolkit's protocol, which PACS v2's GPQA figure follows ("the default settings"):
- the rows in file order, repeated ``n_repeats`` times (8: ``examples * n_repeats``), and for each copy in
  that order one draw ``rng.sample(range(4), 4)`` from a single ``random.Random(0)``: the permutation;
- choices ``[Correct Answer, Incorrect Answer 1, 2, 3]``; letter j shows choice ``permutation[j]``; the gold
  is the letter of the first shown choice whose text is the correct answer's;
- one user message, ``QUERY_INSTRUCTION``, the question and the choices "A) ..." to "D) ..." (no system
  message: ``PrepareOptions.system_prompt`` may add one); scoring: ``pacs.verify.choice``.

``shuffles`` is the toolkit's ``n_repeats``: with 8, and ``pacs evaluate`` at n 1, the 1,584 prompts are the
toolkit's; with 1 (the default) the 198 prompts are its first copy's, each sampled n times. A bad row still
draws its permutations, so dropping it leaves every other row's the toolkit's. Texts are kept as written
(no strip; a local CSV's cells are read as text, so a cell "None" stays "None").

GPQA's authors ask that its questions never appear online in plain text: keep prepared files and
responses out of public repositories and logs.
"""

import random
from collections.abc import Iterator, Sequence
from pathlib import Path

import pandas as pd

from pacs.data.prepare import PrepareOptions, prepare_rows
from pacs.data.sources import RawRow, RowError, sha256

DATA_SOURCE = "gpqa"
HUB_ID, HUB_CONFIG, HUB_SPLIT = "Idavidrein/gpqa", "gpqa_diamond", "train"
LOCAL_FILE = "gpqa_diamond.csv"  # the dataset's own file, in --data-dir
LETTERS = "ABCD"
CHOICE_FIELDS = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")
QUESTION_FIELD, ID_FIELD, DOMAIN_FIELD = "Question", "Record ID", "High-level domain"
QUERY_INSTRUCTION = (
    "Answer the following multiple choice question. The last line of your response should be of the following "
    "format: 'ANSWER: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step before answering."
)


class GatedDatasetError(FileNotFoundError):
    """The hub refused the gated dataset (no token, or access not granted)."""


def choice_prompt(question: str, choices: Sequence[str], instruction: str = QUERY_INSTRUCTION) -> str:
    """The toolkit's query: the instruction, a blank line, the question, a blank line, "A) ..." to "D) ..."."""
    options = "\n".join(f"{letter}) {text}" for letter, text in zip(LETTERS, choices, strict=True))
    return f"{instruction}\n\n{question}\n\n{options}"


def draw_permutation(rng: random.Random) -> list[int]:
    """One row's permutation, drawn as the toolkit draws it (the next ``rng.sample(range(4), 4)``)."""
    return rng.sample(range(len(LETTERS)), len(LETTERS))


def shuffled(correct: str, incorrect: Sequence[str], permutation: Sequence[int]) -> tuple[list[str], str]:
    """``(choices shown A to D, gold letter)``: letter j shows choice ``permutation[j]`` of [correct, *incorrect];
    the gold is the first letter showing the correct text (the toolkit's ``choices.index``)."""
    original = [correct, *incorrect]
    choices = [original[i] for i in permutation]
    return choices, LETTERS[choices.index(correct)]


def gated_message(error: BaseException) -> str:
    return (
        f"{HUB_ID} is a gated dataset: log in at https://huggingface.co/datasets/{HUB_ID} and accept its terms, "
        "then give this machine a token of that account (https://huggingface.co/settings/tokens, read access): "
        "`huggingface-cli login` (or `hf auth login`), or the HF_TOKEN environment variable; or prepare from a "
        f"copy of the dataset's {LOCAL_FILE} with --source local --data-dir DIR. The hub said: {error}"
    )


def _refused(error: BaseException) -> bool:
    """Whether ``error`` (or what caused it) is the hub refusing access: gated, unauthenticated or forbidden."""
    from datasets.exceptions import DatasetNotFoundError
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError

    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, (DatasetNotFoundError, GatedRepoError)):
            return True
        status = getattr(getattr(seen, "response", None), "status_code", None)
        if isinstance(seen, HfHubHTTPError) and status in (401, 403):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def hub_records(revision: str | None = None) -> tuple[list[dict], str, dict]:
    """The hub's rows, in order (``datasets`` finds the token of ``HF_TOKEN`` or ``huggingface-cli login``)."""
    import datasets

    try:
        loaded = datasets.load_dataset(HUB_ID, HUB_CONFIG, split=HUB_SPLIT, revision=revision)
    except Exception as e:
        if _refused(e):
            raise GatedDatasetError(gated_message(e)) from e
        raise
    provenance = {"hub_id": HUB_ID, "config": HUB_CONFIG, "split": HUB_SPLIT, "revision": revision,
                  "fingerprint": loaded._fingerprint}  # fmt: skip
    return list(loaded), f"{HUB_ID} {HUB_CONFIG} [{HUB_SPLIT}]", provenance


def local_records(path: Path) -> tuple[list[dict], str, dict]:
    """The rows of ``path``: a directory holding gpqa_diamond.csv, or a .csv or .parquet file."""
    path = Path(path)
    file = path / LOCAL_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"{file}: no such file (gpqa --source local: a directory with {LOCAL_FILE}, or a "
                                ".csv/.parquet file)")  # fmt: skip
    if file.suffix == ".csv":  # every cell as text: the answers as written, "None" or "NA" no missing value
        records = pd.read_csv(file, dtype=str, keep_default_na=False).to_dict("records")
    elif file.suffix == ".parquet":
        records = pd.read_parquet(file).to_dict("records")
    else:
        raise ValueError(f"{file}: unsupported file type {file.suffix!r} (csv or parquet)")
    return records, str(file), {"file": str(file.resolve()), "sha256": sha256(file)}


def _text(record: dict, field: str, where: str, row: int) -> str:
    if field not in record:
        raise RowError(where, row, f"no field {field!r} (fields: {sorted(record)})")
    value = record[field]
    if not isinstance(value, str) or not value.strip():
        raise RowError(where, row, f"empty or non-text {field!r}: {value!r}"[:200])
    return value


def parse_question(record: dict, where: str, row: int) -> tuple[str, str, list[str], str, str]:
    """``(question, correct, incorrect, id, domain)`` of one row, texts as written; the id is the Record ID
    (the row number without one)."""
    question = _text(record, QUESTION_FIELD, where, row)
    correct, *incorrect = (_text(record, f, where, row) for f in CHOICE_FIELDS)
    record_id, domain = record.get(ID_FIELD), record.get(DOMAIN_FIELD)
    record_id = record_id if isinstance(record_id, str) and record_id.strip() else str(row)
    return question, correct, incorrect, record_id, domain if isinstance(domain, str) else ""


def gpqa_rows(records: list[dict], where: str, seed: int = 0, shuffles: int = 1) -> Iterator[RawRow | RowError]:
    """The rows ``shuffles`` times over, each copy with the next permutation of ``random.Random(seed)``; a bad
    row is yielded once, as its error, and still draws its permutations."""
    parsed: list = []
    for row, record in enumerate(records):
        try:
            parsed.append(parse_question(record, where, row))
        except RowError as e:
            parsed.append(e)
    rng = random.Random(seed)
    for copy in range(shuffles):
        for row, question in enumerate(parsed):
            permutation = draw_permutation(rng)
            if isinstance(question, RowError):
                if copy == 0:
                    yield question
                continue
            text, correct, incorrect, record_id, domain = question
            choices, gold = shuffled(correct, incorrect, permutation)
            extra = {"permutation": permutation, "shuffle": copy, "domain": domain}
            yield RawRow(row, choice_prompt(text, choices), gold, record_id, extra)


def prepare_gpqa(
    kind: str,
    options: PrepareOptions,
    path: Path | None = None,
    tokenizer=None,
    seed: int = 0,
    shuffles: int = 1,
    revision: str | None = None,
) -> tuple[pd.DataFrame, dict]:
    """``(frame, report)``: GPQA Diamond from the hub (``kind`` "hub") or a local copy (``path``), as choice rows;
    the report records the source, the seed and the number of shuffles."""
    if shuffles < 1:
        raise ValueError(f"gpqa: shuffles must be >= 1, got {shuffles}")
    if kind == "hub":
        records, where, provenance = hub_records(revision)
    elif path is None:
        raise ValueError(f"gpqa --source local needs --data-dir: a directory with {LOCAL_FILE}, or a .csv/.parquet")
    else:
        records, where, provenance = local_records(path)
    rows = gpqa_rows(records, where, seed, shuffles)
    frame, report = prepare_rows(DATA_SOURCE, rows, options, tokenizer, "choice")
    source = {"kind": kind, **provenance, "rows_in_source": len(records), "seed": seed, "shuffles": shuffles}
    return frame, {**report, "source": source}
