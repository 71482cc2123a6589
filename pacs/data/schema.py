"""The one row schema every prepared dataset has, real benchmark or synthetic task.

- ``prompt``: the chat messages, ``[{"role": "user", "content": problem + " " + INSTRUCTION}]``, after a
  ``{"role": "system", ...}`` message when the dataset was prepared with a system prompt (PACS v2's)
- ``ground_truth``: the normalised gold answer, a string math-verify parses
- ``data_source``: the dataset's name, e.g. ``math500`` or ``toy_addition``
- ``index``: the row's position in the prepared file
- ``id``: the row's id in its source
"""

from pathlib import Path

import pandas as pd

INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
COLUMNS = ("prompt", "ground_truth", "data_source", "index", "id")


def chat_prompt(problem: str, system_prompt: str | None = None) -> list[dict[str, str]]:
    system = [{"role": "system", "content": system_prompt}] if system_prompt is not None else []
    return [*system, {"role": "user", "content": f"{problem} {INSTRUCTION}"}]


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


def prompt_texts(tokenizer, prompts, template_kwargs: dict | None = None) -> list[str]:
    """Chat messages → the model's chat template with the assistant turn opened; ``template_kwargs`` are the
    template's own variables (Qwen3's ``enable_thinking``; a template ignores those it does not use)."""
    kwargs = template_kwargs or {}
    return [tokenizer.apply_chat_template([dict(m) for m in p], tokenize=False, add_generation_prompt=True, **kwargs)
            for p in prompts]  # fmt: skip


def prompt_token_ids(tokenizer, prompts, template_kwargs: dict | None = None) -> list[list[int]]:
    texts = prompt_texts(tokenizer, prompts, template_kwargs)
    return [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
