"""The one row schema every prepared dataset has, real benchmark or synthetic task.

- ``prompt``: the chat messages, ``[{"role": "user", "content": problem + " " + INSTRUCTION}]``
- ``ground_truth``: the normalised gold answer, a string math-verify parses
- ``data_source``: the dataset's name, e.g. ``math500`` or ``toy_addition``
- ``index``: the row's position in the prepared file
- ``id``: the row's id in its source
"""

from pathlib import Path

import pandas as pd

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
COLUMNS = ("prompt", "ground_truth", "data_source", "index", "id")


def chat_prompt(problem: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"{problem} {INSTRUCTION}"}]


def read_prepared(path: Path) -> pd.DataFrame:
    """A prepared parquet file, checked for the schema's columns."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"prepared dataset {path} does not exist")
    frame = pd.read_parquet(path)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"{path}: missing column(s) {missing} of the prepared schema {list(COLUMNS)}")
    return frame


def prompt_texts(tokenizer, prompts) -> list[str]:
    """Chat messages → the model's chat template with the assistant turn opened."""
    return [tokenizer.apply_chat_template(list(p), tokenize=False, add_generation_prompt=True) for p in prompts]


def prompt_token_ids(tokenizer, prompts) -> list[list[int]]:
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in prompt_texts(tokenizer, prompts)]
