"""The one row schema every prepared dataset has, real benchmark or synthetic task.

- ``prompt``: the chat messages, ``[{"role": "user", "content": ...}]``, after a ``{"role": "system", ...}``
  message when the dataset was prepared with a system prompt (PACS v2's). A math problem's user message is
  ``problem + " " + INSTRUCTION``; a code problem's is its dataset's own, the problem with its format
  instruction (LiveCodeBench's, with the starter code for functional problems); a multiple-choice question's
  is the toolkit's query with the question and its shuffled choices A) ... D) (``pacs.data.gpqa``)
- ``ground_truth``: for ``task`` "math", the normalised gold answer, a string math-verify parses; for
  "code", the tests as one JSON string, ``{"tests": [{"input": str, "output": str, "testtype": "stdin" |
  "functional"}, ...], "fn_name": str | null}`` (``fn_name``: the method a functional problem's tests call;
  a functional test's input is one JSON value per line, one per argument, its output the JSON result); for
  "choice", the letter of the right answer after the shuffle, "A" ... "D"
- ``task``: how ``ground_truth`` is read and a response scored, one of ``TASKS``
- ``data_source``: the dataset's name, e.g. ``math500``, ``livecodebench``, ``gpqa`` or ``toy_addition``
- ``index``: the row's position in the prepared file
- ``id``: the row's id in its source

A dataset may add columns after these (LiveCodeBench: ``contest_date``, ``platform``, ``difficulty``; GPQA:
``permutation``, ``shuffle``, ``domain``).
"""

from pathlib import Path

import pandas as pd

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
COLUMNS = ("prompt", "ground_truth", "task", "data_source", "index", "id")
# math: math-verify against the gold; code: the program run on the tests; choice: the answer line's letter
TASKS = ("math", "code", "choice")


def chat_prompt(problem: str, system_prompt: str | None = None, task: str = "math") -> list[dict[str, str]]:
    """The messages of one problem: a math problem gets the paper's instruction, a code or multiple-choice
    problem is its dataset's whole user message already."""
    system = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
    return [*system, {"role": "user", "content": f"{problem} {INSTRUCTION}" if task == "math" else problem}]


def frame_task(frame: pd.DataFrame, where: str) -> str:
    """The one task of a prepared frame's rows (one verifier scores them all); a frame of several is an error
    naming ``where``."""
    tasks = sorted(set(frame["task"]))
    if len(tasks) != 1:
        raise ValueError(f"{where}: rows of tasks {tasks}; a prepared file holds one task (prepare one per task)")
    return tasks[0]


def read_prepared(path: Path) -> pd.DataFrame:
    """A prepared parquet file, checked for the schema's columns."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prepared dataset {path} does not exist")
    frame = pd.read_parquet(path)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(
            f"{path}: missing column(s) {missing} of the prepared schema {list(COLUMNS)}"
            + ("; a file prepared before the task column: run pacs prepare-data again" if missing == ["task"] else "")
        )
    unknown = sorted(set(frame["task"]) - set(TASKS))
    if unknown:
        raise ValueError(f"{path}: unknown task(s) {unknown}; known: {list(TASKS)}")
    return frame


def prompt_texts(tokenizer, prompts, template_kwargs: dict | None = None) -> list[str]:
    """Chat messages → the model's chat template with the assistant turn opened; ``template_kwargs`` are the
    template's own variables (Qwen3's ``enable_thinking``; a template ignores those it does not use)."""
    kwargs = template_kwargs or {}
    return [tokenizer.apply_chat_template([dict(m) for m in p], tokenize=False, add_generation_prompt=True, **kwargs)
            for p in prompts]  # fmt: skip


def prompt_token_ids(tokenizer, prompts, template_kwargs: dict | None = None) -> list[list[int]]:
    texts = prompt_texts(tokenizer, prompts, template_kwargs)
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
