"""A synthetic code task for tiny models on CPU: a program computing ``n * a + b``, a and b two-digit numbers.

The code counterpart of ``pacs.data.toy``: generated deterministically from a seed, in the schema of
LiveCodeBench's prepared rows (task "code", the tests as the schema's JSON gold), with disjoint train
and held-out splits. Two thirds of the problems read n from stdin and print the result; the others,
those with ``(a + b) % 3 == 0``, are functional as LiveCodeBench's LeetCode problems are: a method
``Solution.f`` whose tests give its argument and result as JSON lines. Prompts are short (a tiny
model's context is), not LiveCodeBench's long instruction, and the reference program a tiny model is
warm-started on only copies the two numbers.
"""

import json
from collections.abc import Mapping

import numpy as np
import pandas as pd

from pacs.data.prepare import PrepareOptions
from pacs.data.sources import RawRow
from pacs.data.toy import pair_splits, prepared_splits

DATA_SOURCE = "toy_code"
INSTRUCTION = "Answer with a Python program in ```python``` fences."
FN_NAME = "f"
STARTER_CODE = f"class Solution:\n    def {FN_NAME}(self, n: int) -> int:"
TESTS_PER_PROBLEM = 3
N_RANGE = (0, 1000)  # each test's n, drawn in [low, high)


def is_functional(a: int, b: int) -> bool:
    return (a + b) % 3 == 0


def toy_code_problem(a: int, b: int) -> str:
    """The whole user message (a code row's prompt is its dataset's own)."""
    if is_functional(a, b):
        return f"Complete f so that it returns n * {a} + {b}.\n```python\n{STARTER_CODE}\n```\n{INSTRUCTION}"
    return f"Read an integer n from standard input and print n * {a} + {b}. {INSTRUCTION}"


def toy_code_tests(a: int, b: int, rng: np.random.Generator) -> dict:
    """The schema's code gold: stdin tests feed n and expect the printed line; functional ones give the
    argument and the result as JSON."""
    ns = [int(n) for n in rng.integers(*N_RANGE, size=TESTS_PER_PROBLEM)]
    if is_functional(a, b):
        tests = [{"input": json.dumps(n), "output": json.dumps(n * a + b), "testtype": "functional"} for n in ns]
        return {"tests": tests, "fn_name": FN_NAME}
    return {"tests": [{"input": f"{n}\n", "output": f"{n * a + b}\n", "testtype": "stdin"} for n in ns],
            "fn_name": None}  # fmt: skip


def toy_code_solution(row: Mapping) -> str:
    """The reference answer a tiny model is warm-started on, from a prepared row's id ("a,b") and gold."""
    a, b = map(int, row["id"].split(","))
    if json.loads(row["ground_truth"])["fn_name"] is not None:
        return f"```python\nclass Solution:\n    def {FN_NAME}(self, n):\n        return n * {a} + {b}\n```"
    return f"```python\nn = int(input())\nprint(n * {a} + {b})\n```"


def toy_code_rows(
    seed: int, train_size: int, heldout_size: int, low: int = 10, high: int = 99
) -> dict[str, list[RawRow]]:
    """``{"train": rows, "heldout": rows}``; no (a, b) pair is in both splits. The id is "a,b"; the tests
    of a pair are drawn from (seed, a, b), whatever split it falls in."""
    out = {}
    for split, pairs in pair_splits(seed, train_size, heldout_size, low, high, "toy code task").items():
        out[split] = []
        for row, (a, b) in enumerate(pairs):
            gold = json.dumps(toy_code_tests(a, b, np.random.default_rng([seed, a, b])))
            out[split].append(RawRow(row, toy_code_problem(a, b), gold, f"{a},{b}"))
    return out


def toy_code(
    seed: int, train_size: int, heldout_size: int, options: PrepareOptions = PrepareOptions(), tokenizer=None
) -> dict[str, tuple[pd.DataFrame, dict]]:
    """``{split: (frame, report)}``: both splits prepared, each report recording the generator's settings."""
    rows = toy_code_rows(seed, train_size, heldout_size)
    return prepared_splits(DATA_SOURCE, "toy_code", rows, options, tokenizer, "code", seed, train_size, heldout_size)
