"""A synthetic multiple-choice task for tiny models on CPU: "What is a + b?" with four sums to choose from.

The multiple-choice counterpart of ``pacs.data.toy`` (addition) and ``pacs.data.toy_code``: generated
deterministically from a seed, in the schema of GPQA's prepared rows (task "choice", the gold a letter),
with disjoint train and held-out splits over the (a, b) pairs of two-digit numbers. The wrong choices are
the sum off by 1, 2, 9, 10 or 11 (three of them, drawn from (seed, a, b)), the slips of a model that adds
digit by digit. The choices are shuffled by GPQA's rule (``pacs.data.gpqa``): one ``random.Random(seed)``
drawing ``sample(range(4), 4)`` for each row in order, the train split's rows then the held-out's. The
prompt is GPQA's query with a shorter instruction (``TOY_INSTRUCTION``: the toolkit's answer-line sentence
alone, shortened), the question, "A) ..." to "D) ...": at most ~112 tokens under the tiny chat template with
the tokenizer of the addition model, which never saw its words (the toolkit's whole instruction: ~220), so
that a tiny model's context (512 positions) keeps room for the answer. The reference answer a tiny model is
warm-started on is the answer line alone, "ANSWER: B".
"""

import random
from collections.abc import Mapping

import numpy as np
import pandas as pd

from pacs.data.gpqa import choice_prompt, draw_permutation, shuffled
from pacs.data.prepare import PrepareOptions
from pacs.data.sources import RawRow
from pacs.data.toy import pair_splits, prepared_splits, toy_problem

DATA_SOURCE = "toy_choice"
OFFSETS = (-11, -10, -9, -2, -1, 1, 2, 9, 10, 11)  # a wrong choice: the sum plus one of these
TOY_INSTRUCTION = "Your last line should be 'ANSWER: $LETTER' where LETTER is one of ABCD."


def toy_choice_distractors(a: int, b: int, rng: np.random.Generator) -> list[str]:
    """Three wrong sums, distinct (their offsets are), none the right one."""
    return [str(a + b + int(d)) for d in rng.choice(OFFSETS, size=3, replace=False)]


def toy_choice_solution(row: Mapping) -> str:
    """The reference answer a tiny model is warm-started on: the toolkit's answer line."""
    return f"ANSWER: {row['ground_truth']}"


def toy_choice_rows(
    seed: int, train_size: int, heldout_size: int, low: int = 10, high: int = 99
) -> dict[str, list[RawRow]]:
    """``{"train": rows, "heldout": rows}``; no (a, b) pair is in both splits. The id is "a+b"; a pair's wrong
    sums are drawn from (seed, a, b), its permutation by its place in the splits."""
    shuffle = random.Random(seed)
    out = {}
    for split, pairs in pair_splits(seed, train_size, heldout_size, low, high, "toy choice task").items():
        out[split] = []
        for row, (a, b) in enumerate(pairs):
            wrong = toy_choice_distractors(a, b, np.random.default_rng([seed, a, b]))
            choices, gold = shuffled(str(a + b), wrong, draw_permutation(shuffle))
            out[split].append(RawRow(row, choice_prompt(toy_problem(a, b), choices, TOY_INSTRUCTION), gold, f"{a}+{b}"))
    return out


def toy_choice(
    seed: int, train_size: int, heldout_size: int, options: PrepareOptions = PrepareOptions(), tokenizer=None
) -> dict[str, tuple[pd.DataFrame, dict]]:
    """``{split: (frame, report)}``: both splits prepared, each report recording the generator's settings."""
    rows = toy_choice_rows(seed, train_size, heldout_size)
    return prepared_splits(DATA_SOURCE, "toy_choice", rows, options, tokenizer, "choice", seed, train_size,
                           heldout_size)  # fmt: skip
