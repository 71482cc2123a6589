"""A run's prompts: the prepared files read, their chat prompts as tokens, the overlong ones dropped, and the
task that scores every answer (``pacs.data.schema``: one task per file, and per run's list of files)."""

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pacs.data.schema import frame_task, prompt_token_ids, read_prepared


@dataclass
class Prompts:
    token_ids: list[list[int]]
    golds: list[str]
    task: str  # how every answer is scored: "math" (math-verify) or "code" (run on its tests)
    dropped: int  # longer than data.max_prompt_length


def load_prompts(files: list[str], tokenizer, max_prompt_length: int, template_kwargs: dict | None = None) -> Prompts:
    frames = [read_prepared(Path(f)) for f in files]
    frame = pd.concat(frames, ignore_index=True)
    ids = prompt_token_ids(tokenizer, frame["prompt"], template_kwargs)
    keep = [i for i, p in enumerate(ids) if len(p) <= max_prompt_length]
    golds = [str(frame["ground_truth"][i]) for i in keep]
    return Prompts([ids[i] for i in keep], golds, files_task(files, frames), len(ids) - len(keep))


def files_task(files: list[str], frames: list[pd.DataFrame]) -> str:
    """The one task of a run's training (or held-out) files: every answer goes to one verifier."""
    tasks = {f: frame_task(frame, f) for f, frame in zip(files, frames, strict=True) if len(frame)}
    if len(set(tasks.values())) > 1:  # one verifier call scores a whole step
        raise ValueError(f"files of different tasks: {', '.join(f'{f} ({t})' for f, t in tasks.items())}; "
                         "a run's training files, and its held-out files, are of one task")  # fmt: skip
    return next(iter(tasks.values()), "math")
