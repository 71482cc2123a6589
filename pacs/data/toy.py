"""A synthetic arithmetic task for tiny models on CPU: "What is a + b?" with a, b two-digit numbers.

Generated deterministically from a seed, in the schema of the real benchmarks, with disjoint
train and held-out splits. The reference answer a tiny model is warm-started on is just the boxed
sum: a 0.5 M-parameter model cannot reason step by step, but the prompt carries the paper's
instruction all the same, so that the pipeline is the paper's.
"""

import numpy as np
import pandas as pd

from pacs.data.prepare import PrepareOptions, prepare_rows
from pacs.data.sources import RawRow

DATA_SOURCE = "toy_addition"




def toy_problem(a: int, b: int) -> str:
    return f"What is {a} + {b}?"


def toy_solution(ground_truth: str) -> str:
    """The reference answer a tiny model is warm-started on."""
    return f"\\boxed{{{ground_truth}}}"


def pair_splits(seed: int, train_size: int, heldout_size: int, low: int = 10, high: int = 99,
                what: str = "toy task") -> dict[str, list[tuple[int, int]]]:  # fmt: skip
    """``{"train": pairs, "heldout": pairs}`` of the (a, b) pairs with low ≤ a, b ≤ high, drawn from ``seed``;
    no pair is in both splits. Every toy task (addition, code, multiple choice) splits its problems so."""
    pairs = [(a, b) for a in range(low, high + 1) for b in range(low, high + 1)]
    if train_size + heldout_size > len(pairs):
        raise ValueError(f"{what}: {train_size} + {heldout_size} rows asked, only {len(pairs)} distinct problems")
    order = np.random.default_rng(seed).permutation(len(pairs))
    splits = {"train": order[:train_size], "heldout": order[train_size : train_size + heldout_size]}
    return {split: [pairs[i] for i in indices] for split, indices in splits.items()}


def prepared_splits(data_source: str, kind: str, rows: dict[str, list[RawRow]], options: PrepareOptions, tokenizer,
                    task: str, seed: int, train_size: int, heldout_size: int) -> dict:  # fmt: skip
    """``{split: (frame, report)}``: a toy task's splits prepared, each report recording its generator
    (``kind``) and settings."""
    generator = {"kind": kind, "seed": seed, "train_size": train_size, "heldout_size": heldout_size}
    out = {}
    for split, split_rows in rows.items():
        frame, report = prepare_rows(data_source, split_rows, options, tokenizer, task)
        out[split] = frame, {**report, "source": {**generator, "split": split}}
    return out


def toy_rows(seed: int, train_size: int, heldout_size: int, low: int = 10, high: int = 99) -> dict[str, list[RawRow]]:
    """``{"train": rows, "heldout": rows}``; no (a, b) pair is in both splits. The id is "a+b"."""
    return {
        split: [RawRow(row, toy_problem(a, b), str(a + b), f"{a}+{b}") for row, (a, b) in enumerate(pairs)]
        for split, pairs in pair_splits(seed, train_size, heldout_size, low, high).items()
    }


def toy_addition(
    seed: int, train_size: int, heldout_size: int, options: PrepareOptions = PrepareOptions(), tokenizer=None
) -> dict[str, tuple[pd.DataFrame, dict]]:
    """``{split: (frame, report)}``: both splits prepared, each report recording the generator's settings."""
    rows = toy_rows(seed, train_size, heldout_size)
    return prepared_splits(DATA_SOURCE, "toy", rows, options, tokenizer, "math", seed, train_size, heldout_size)
