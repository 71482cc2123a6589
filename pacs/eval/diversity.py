"""`pacs diversity`: v2's diversity of correct answers (Table 3, Figure 5b), from the responses evaluations stored.

For one method on one benchmark, with e_1 … e_m the embeddings of a problem's m correct answers:

    S_div = mean over problems of  1 − (2 / (m (m − 1))) Σ_{i<j} cos(e_i, e_j)

v2 embeds with Qwen3-Embedding-0.6B (last-token pooling, normalized). It does not say how many answers, what
becomes of a problem with fewer than two correct answers, or whether the thinking is embedded: here every
correct answer (``max_answers``), problems with fewer than two left out of the mean and counted, and the whole
response by default (``embed``); answers are embedded as documents, with no instruction prompt. Nothing is
generated again: the answers are ``pacs evaluate``'s ``responses/part_*.parquet``, the correct ones those its
verifier passed.
"""

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd

from pacs.config import to_dict
from pacs.io import atomic_path
from pacs.verify import PASSING, TASK_STATUSES

RESPONSE_COLUMNS = ("problem", "id", "sample", "response", "status")
THINK_END = "</think>"


@dataclass(frozen=True)
class DiversityConfig:
    model: str = "Qwen/Qwen3-Embedding-0.6B"  # a sentence-transformers model: hub id or directory (v2's)
    # what is embedded: "response", the whole sample, thinking included; "final", the text after the last
    # </think> (the whole sample when it has none). v2 does not say; its "correct answers" are the samples
    embed: Literal["response", "final"] = "response"
    max_answers: int | None = None  # correct answers per problem at most, the first by sample index; null: all
    batch_size: int = 8  # texts per forward pass
    max_length: int | None = None  # tokens per text, longer ones truncated and counted; null: the model's own
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: the checkpoint's own
    device: str = "auto"  # auto: cuda when available, else cpu

    def __post_init__(self):
        for name in ("max_answers", "max_length"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 or null, got {getattr(self, name)}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.embed not in ("response", "final"):
            raise ValueError(f"embed must be 'response' or 'final', got {self.embed!r}")


def s_div(vectors_by_problem: list[np.ndarray]) -> dict:
    """v2's S_div over problems, each given as its answers' embeddings ``(m, d)``: per problem one minus the
    mean cosine over its m (m − 1) / 2 unordered pairs, then the mean over the problems with m ≥ 2.

    Returns ``s_div`` (None when no problem has two answers), ``problems_used``, ``problems_skipped`` (m < 2)
    and ``per_problem`` (one value per input, None where skipped)."""
    per_problem = []
    for vectors in vectors_by_problem:
        x = np.asarray(vectors, dtype=np.float64)
        if len(x) < 2:
            per_problem.append(None)
            continue
        norms = np.linalg.norm(x, axis=1, keepdims=True)
        if not np.all(norms > 0):
            raise ValueError("s_div: a zero vector has no cosine")
        x = x / norms
        gram = x @ x.T  # (m, m) cosines
        pairs = gram[np.triu_indices(len(x), k=1)]
        per_problem.append(max(float(1.0 - pairs.mean()), 0.0))  # ≥ 0 but for rounding (identical answers)
    used = [v for v in per_problem if v is not None]
    return {
        "s_div": float(np.mean(used)) if used else None,
        "problems_used": len(used),
        "problems_skipped": len(per_problem) - len(used),
        "per_problem": per_problem,
    }


def final_answer(response: str) -> str:
    """The text after the last ``</think>``: the answer without its thinking (the whole text if it has none)."""
    return response.rpartition(THINK_END)[2].strip() if THINK_END in response else response


def read_responses(eval_dir: Path) -> tuple[pd.DataFrame, str]:
    """Every stored sample of ``pacs evaluate``'s ``eval_dir`` (the columns S_div needs) and its task."""
    eval_dir = Path(eval_dir)
    if not eval_dir.is_dir():
        raise FileNotFoundError(f"{eval_dir}: evaluation directory missing")
    parts = sorted((eval_dir / "responses").glob("part_*.parquet"))
    if not parts:
        raise FileNotFoundError(f"{eval_dir / 'responses'}: no part_*.parquet (not a `pacs evaluate` output)")
    frames = []
    for part in parts:
        frame = pd.read_parquet(part)
        missing = [c for c in RESPONSE_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"{part}: no column {', '.join(missing)} (has {', '.join(frame.columns)})")
        frames.append(frame[list(RESPONSE_COLUMNS)])
    responses = pd.concat(frames, ignore_index=True)
    return responses, response_task(eval_dir, responses)


def response_task(eval_dir: Path, responses: pd.DataFrame) -> str:
    """The task the samples were scored for: ``metrics.json``'s, else the one whose verdicts they all are."""
    metrics = Path(eval_dir) / "metrics.json"
    if metrics.is_file():
        task = json.loads(metrics.read_text(encoding="utf-8")).get("task")
        if task in PASSING:
            return task
    statuses = set(responses["status"])
    for task, known in TASK_STATUSES.items():
        if statuses <= set(known):
            return task
    raise ValueError(f"{eval_dir}: statuses {sorted(statuses)} are no task's verdicts")


def correct_answers(responses: pd.DataFrame, task: str, config: DiversityConfig) -> pd.DataFrame:
    """The samples the task's verifier passed, by problem then sample, at most ``max_answers`` a problem, with
    the ``text`` to embed."""
    passed = responses[responses["status"] == PASSING[task]].sort_values(["problem", "sample"])
    if config.max_answers is not None:
        passed = passed.groupby("problem", sort=False).head(config.max_answers)
    text = passed["response"].map(final_answer) if config.embed == "final" else passed["response"]
    return passed.assign(text=text.astype(str)).reset_index(drop=True)


def load_embedder(config: DiversityConfig):
    """``config.model`` as a SentenceTransformer on its device, in its dtype, at its length."""
    import torch

    from pacs import imports_left_out

    imports_left_out.take_back()  # sentence-transformers needs scikit-learn and SciPy
    from sentence_transformers import SentenceTransformer

    device = ("cuda" if torch.cuda.is_available() else "cpu") if config.device == "auto" else config.device
    kwargs = {} if config.dtype == "auto" else {"dtype": getattr(torch, config.dtype)}
    model = SentenceTransformer(config.model, device=device, model_kwargs=kwargs)
    if config.max_length is not None:
        model.max_seq_length = config.max_length
    return model


def embed_texts(model, texts: list[str], batch_size: int) -> tuple[np.ndarray, int]:
    """The texts' embeddings ``(N, d)``, float32, and how many were longer than the model's length (truncated)."""
    if not texts:
        return np.zeros((0, model.get_embedding_dimension()), dtype=np.float32), 0
    lengths = [len(ids) for ids in model.tokenizer(texts, add_special_tokens=True)["input_ids"]]
    truncated = sum(n > model.max_seq_length for n in lengths)
    vectors = model.encode(texts, batch_size=batch_size, convert_to_numpy=True, show_progress_bar=False)
    return np.asarray(vectors, dtype=np.float32), int(truncated)


def method_diversity(responses: pd.DataFrame, task: str, model, config: DiversityConfig) -> tuple[dict, pd.DataFrame]:
    """One method's entry of diversity.json, and its correct answers with their ``vector``s."""
    answers = correct_answers(responses, task, config)
    vectors, truncated = embed_texts(model, answers["text"].tolist(), config.batch_size)
    problems = sorted(responses["problem"].unique())
    rows = {p: np.flatnonzero(answers["problem"].to_numpy() == p) for p in problems}
    result = s_div([vectors[rows[p]] for p in problems])
    entry = {
        "task": task,
        "s_div": result["s_div"],
        "problems": len(problems),
        "problems_used": result["problems_used"],
        "problems_skipped": result["problems_skipped"],  # fewer than two correct answers
        "answers": len(answers),
        "truncated": truncated,
        "per_problem": {str(p): v for p, v in zip(problems, result["per_problem"], strict=True)},
    }
    return entry, answers.assign(vector=list(vectors))


def measure_diversity(evals: dict[str, Path], config: DiversityConfig, embeddings: Path | None = None,
                      log: Callable[[str], None] = print) -> dict:  # fmt: skip
    """S_div of each method (label → ``pacs evaluate`` directory); with ``embeddings``, also writes the correct
    answers' embeddings there (``.npz``: float16 ``embeddings`` with their ``method``, ``problem``, ``id`` and
    ``sample``) for Figure 5b. Every directory is read before the model loads: a missing one fails first."""
    read = {method: read_responses(path) for method, path in evals.items()}
    model = load_embedder(config)
    result = {
        "embedder": config.model,
        "embed": config.embed,
        "max_length": int(model.max_seq_length),
        "dimension": int(model.get_embedding_dimension()),
        "config": to_dict(config),
        "methods": {},
    }
    kept = []
    for method, (responses, task) in read.items():
        entry, answers = method_diversity(responses, task, model, config)
        result["methods"][method] = {"eval": str(evals[method]), **entry}
        kept.append(answers.assign(method=method))
        shown = "–" if entry["s_div"] is None else f"{entry['s_div']:.4f}"
        log(f"{method}: S_div {shown} over {entry['problems_used']} problems ({entry['problems_skipped']} with "
            f"fewer than two correct answers), {entry['answers']} answers, {entry['truncated']} truncated")  # fmt: skip
    if embeddings is not None:
        write_embeddings(Path(embeddings), pd.concat(kept, ignore_index=True), result["dimension"])
    return result


def write_embeddings(path: Path, answers: pd.DataFrame, dimension: int) -> None:
    vectors = np.stack(answers["vector"].to_list()) if len(answers) else np.zeros((0, dimension))
    with atomic_path(path) as tmp, open(tmp, "wb") as f:  # a file object: np.savez would append ".npz" to a name
        np.savez_compressed(
            f,
            embeddings=vectors.astype(np.float16),  # (N, d), unit norm up to float16
            method=answers["method"].to_numpy(dtype=str),
            problem=answers["problem"].to_numpy(dtype=np.int64),
            id=answers["id"].astype(str).to_numpy(dtype=str),
            sample=answers["sample"].to_numpy(dtype=np.int64),
        )
