"""The toy code task: deterministic, disjoint splits, a third functional, reference programs that pass their tests."""

import json
import subprocess
import sys

import pandas as pd

from pacs.cli import main
from pacs.data.prepare import prepared_info
from pacs.data.schema import COLUMNS, read_prepared
from pacs.data.toy_code import DATA_SOURCE, INSTRUCTION, STARTER_CODE, toy_code, toy_code_solution


def program(solution: str) -> str:
    assert solution.startswith("```python\n") and solution.endswith("\n```")
    return solution.removeprefix("```python\n").removesuffix("```")


def passes(row) -> bool:
    """The row's reference program on each of its tests: stdin ones in a fresh interpreter, functional
    ones by calling Solution().f on the JSON arguments (one per input line)."""
    gold, code = json.loads(row["ground_truth"]), program(toy_code_solution(row))
    for test in gold["tests"]:
        if gold["fn_name"] is None:
            run = subprocess.run([sys.executable, "-I", "-c", code], input=test["input"], capture_output=True,
                                 text=True, timeout=30, check=True)  # fmt: skip
            if run.stdout != test["output"]:
                return False
        else:
            namespace: dict = {}
            exec(code, namespace)
            arguments = [json.loads(line) for line in test["input"].split("\n")]
            if getattr(namespace["Solution"](), gold["fn_name"])(*arguments) != json.loads(test["output"]):
                return False
    return True


def test_splits_are_deterministic_disjoint_and_a_third_functional():
    a, b = ({s: f for s, (f, _) in toy_code(7, 300, 50).items()} for _ in range(2))
    pd.testing.assert_frame_equal(a["train"], b["train"])
    pd.testing.assert_frame_equal(a["heldout"], b["heldout"])
    assert not toy_code(8, 300, 50)["train"][0]["id"].equals(a["train"]["id"])
    assert not set(a["train"]["id"]) & set(a["heldout"]["id"])
    frame = a["train"]
    assert tuple(frame.columns) == COLUMNS and (frame["task"] == "code").all()
    assert (frame["data_source"] == DATA_SOURCE).all() and frame["id"].is_unique
    golds = [json.loads(g) for g in frame["ground_truth"]]
    assert all(set(g) == {"tests", "fn_name"} and len(g["tests"]) == 3 for g in golds)
    functional = [g["fn_name"] == "f" for g in golds]
    assert 0.25 < sum(functional) / len(golds) < 0.42
    for g, f in zip(golds, functional, strict=True):
        assert {t["testtype"] for t in g["tests"]} == ({"functional"} if f else {"stdin"})
    # a pair's tests come from (seed, a, b): the same in another split size
    again = toy_code(7, 100, 10)["train"][0].set_index("id")["ground_truth"]
    assert (frame.set_index("id")["ground_truth"][again.index] == again).all()


def test_prompts_are_short_and_name_the_program_to_write():
    frame = toy_code(0, 60, 1)["train"][0]
    for _, row in frame.iterrows():
        (message,) = row["prompt"]
        a, b = row["id"].split(",")
        assert message["role"] == "user" and message["content"].endswith(INSTRUCTION)
        assert f"n * {a} + {b}" in message["content"] and len(message["content"]) < 160
        functional = json.loads(row["ground_truth"])["fn_name"] is not None
        assert (f"```python\n{STARTER_CODE}\n```" in message["content"]) == functional
        assert message["content"].startswith("Read an integer n from standard input") != functional


def test_reference_programs_produce_the_tests_outputs():
    frame = toy_code(3, 40, 1)["train"][0]
    kinds = frame["ground_truth"].map(lambda g: json.loads(g)["fn_name"])
    rows = pd.concat([frame[kinds.isna()].head(6), frame[kinds.notna()].head(6)])
    assert len(rows) == 12 and all(passes(row) for _, row in rows.iterrows())
    row = rows.iloc[0]
    wrong = {**row, "id": "10,10"}  # another problem's program fails these tests
    assert not passes(wrong)
    a, b = row["id"].split(",")
    assert toy_code_solution(row) == f"```python\nn = int(input())\nprint(n * {a} + {b})\n```"
    a, b = rows.iloc[-1]["id"].split(",")
    assert toy_code_solution(rows.iloc[-1]) == (
        f"```python\nclass Solution:\n    def f(self, n):\n        return n * {a} + {b}\n```"
    )


def test_toy_data_and_prepare_data_write_the_code_task(tmp_path):
    assert (
        main(["toy-data", "--task", "code", "--train-size", "300", "--heldout-size", "40", "--out", str(tmp_path)]) == 0
    )
    for split, rows in (("train", 300), ("heldout", 40)):
        frame = read_prepared(tmp_path / f"{split}.parquet")
        assert len(frame) == rows and (frame["task"] == "code").all()
        assert prepared_info(tmp_path / f"{split}.parquet")["source"]["kind"] == "toy_code"
        out = tmp_path / f"prepared_{split}.parquet"
        args = ["--dataset", f"toy_code_{split}", "--train-size", "300", "--heldout-size", "40", "--out", str(out)]
        assert main(["prepare-data", *args]) == 0
        pd.testing.assert_frame_equal(read_prepared(out), frame)
