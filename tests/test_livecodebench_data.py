"""`pacs prepare-data --dataset livecodebench`: LiveCodeBench's rows to code rows, releases, dates, safe pickles.

The problems are made up here in code_generation_lite's format (no real LiveCodeBench problem, no network).
"""

import base64
import json
import os
import pickle
import zlib

import pandas as pd
import pytest

from pacs.cli import main
from pacs.data.livecodebench import (
    FORMAT_WITH_STARTER_CODE,
    FORMAT_WITHOUT_STARTER_CODE,
    HUB_ID,
    PlainDataUnpickler,
    private_tests_text,
    release_files,
)
from pacs.data.prepare import prepared_info
from pacs.data.schema import COLUMNS, read_prepared

EXTRA = ["contest_date", "platform", "difficulty"]


def compressed(tests: list[dict]) -> str:
    """LiveCodeBench's private tests: base64(zlib(pickle(JSON string)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()


def problem(qid: str, contest_date: str, public: list[dict], private: str, starter: str = "", fn_name=None) -> dict:
    return {
        "question_title": f"title {qid}",
        "question_content": f"Problem {qid}: do the thing.",
        "platform": "leetcode" if fn_name else "atcoder",
        "question_id": qid,
        "contest_id": f"contest-{qid}",
        "contest_date": contest_date,
        "starter_code": starter,
        "difficulty": "easy",
        "public_test_cases": json.dumps(public),
        "private_test_cases": private,
        "metadata": json.dumps({"func_name": fn_name} if fn_name else {}),
    }


def stdin(i: str, o: str) -> dict:
    return {"input": i, "output": o, "testtype": "stdin"}


def functional(i: str, o: str) -> dict:
    return {"input": i, "output": o, "testtype": "functional"}


STARTER = "class Solution:\n    def addTwo(self, nums: List[int], k: int) -> int:\n        "
# test.jsonl: a stdin problem with plain-JSON private tests, a functional one with compressed private
# tests; test2.jsonl: a stdin problem with compressed tests (and, in some tests, a malicious pickle)
STDIN_PROBLEM = problem("abc001_a", "2024-07-01T00:00:00", [stdin("3\n", "6\n")], json.dumps([stdin("5\n", "10\n")]))
FUNCTIONAL_PROBLEM = problem(
    "3001",
    "2024-12-31T00:00:00",
    [functional("[1, 2]\n3", "6")],
    compressed([functional("[]\n0", "0"), functional("[4]\n1", "5")]),
    STARTER,
    "addTwo",
)
LATER_PROBLEM = problem("abc380_b", "2025-01-01T00:00:00", [stdin("1 2\n", "3\n")], compressed([stdin("2 2\n", "4\n")]))


class Evil:
    """A pickle that would run a shell command when loaded by pickle.loads."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture
def mirror(tmp_path):
    """A local mirror of two increments: release_v1 = test.jsonl, release_v2 adds test2.jsonl."""
    root = tmp_path / "code_generation_lite"
    root.mkdir()
    write_jsonl(root / "test.jsonl", [STDIN_PROBLEM, FUNCTIONAL_PROBLEM])
    write_jsonl(root / "test2.jsonl", [LATER_PROBLEM])
    return root


def prepare(*args) -> int:
    return main(["prepare-data", "--dataset", "livecodebench", *map(str, args)])


def test_problems_become_code_rows_with_their_tests_and_livecodebench_prompt(mirror, tmp_path):
    out = tmp_path / "lcb.parquet"
    system = "You are a helpful assistant."
    assert prepare("--source", "local", "--data-dir", mirror, "--system-prompt", system, "--out", out) == 0
    frame = read_prepared(out)
    assert list(frame.columns) == [*COLUMNS, *EXTRA]
    assert (frame["task"] == "code").all() and (frame["data_source"] == "livecodebench").all()
    assert frame["id"].tolist() == ["abc001_a", "3001", "abc380_b"] and frame["index"].tolist() == [0, 1, 2]
    assert frame["contest_date"].tolist() == ["2024-07-01T00:00:00", "2024-12-31T00:00:00", "2025-01-01T00:00:00"]
    assert frame["platform"].tolist() == ["atcoder", "leetcode", "atcoder"] and set(frame["difficulty"]) == {"easy"}

    golds = [json.loads(g) for g in frame["ground_truth"]]
    assert golds[0] == {"tests": [stdin("3\n", "6\n"), stdin("5\n", "10\n")], "fn_name": None}
    assert golds[1] == {  # public, then the decompressed private tests
        "tests": [functional("[1, 2]\n3", "6"), functional("[]\n0", "0"), functional("[4]\n1", "5")],
        "fn_name": "addTwo",
    }
    assert golds[2] == {"tests": [stdin("1 2\n", "3\n"), stdin("2 2\n", "4\n")], "fn_name": None}

    stdin_messages, functional_messages = frame["prompt"].iloc[0], frame["prompt"].iloc[1]
    assert [m["role"] for m in stdin_messages] == ["system", "user"] and stdin_messages[0]["content"] == system
    assert stdin_messages[1]["content"] == (
        f"### Question:\nProblem abc001_a: do the thing.\n\n### Format: {FORMAT_WITHOUT_STARTER_CODE}\n"
        "```python\n# YOUR CODE HERE\n```\n\n### Answer: (use the provided format with backticks)"
    )
    assert functional_messages[1]["content"] == (
        f"### Question:\nProblem 3001: do the thing.\n\n### Format: {FORMAT_WITH_STARTER_CODE}\n"
        f"```python\n{STARTER}\n```\n\n### Answer: (use the provided format with backticks)"
    )
    assert "Read the inputs from stdin solve the problem and write the answer to stdout" in FORMAT_WITHOUT_STARTER_CODE
    assert "Please reason step by step" not in stdin_messages[1]["content"]  # no math instruction on code

    info = prepared_info(out)
    assert info["task"] == "code" and info["rows_written"] == 3
    source = info["source"]
    assert source["kind"] == "local" and source["release_version"] is None  # every increment the mirror holds
    assert [f["file"] for f in source["files"]] == [str(mirror / "test.jsonl"), str(mirror / "test2.jsonl")]
    assert all(len(f["sha256"]) == 64 for f in source["files"])
    assert source["rows_in_files"] == 3 and source["outside_window"] == 0


def test_release_versions_are_the_cumulative_files():
    assert release_files("release_v1") == ["test.jsonl"]
    assert release_files("release_v2") == ["test.jsonl", "test2.jsonl"]
    assert release_files("release_v5") == ["test.jsonl", *(f"test{i}.jsonl" for i in range(2, 6))]
    assert release_files("release_latest") == release_files("release_v6")
    assert release_files("v2") == ["test2.jsonl"] and release_files("v4_v5") == ["test4.jsonl", "test5.jsonl"]
    for bad in ("release_v7", "release_v0", "v5_v4", "latest", "v1_"):
        with pytest.raises(ValueError, match="not a LiveCodeBench release"):
            release_files(bad)


def test_a_release_reads_its_files_of_the_mirror(mirror, tmp_path, capsys):
    out = tmp_path / "lcb.parquet"
    assert prepare("--source", "local", "--data-dir", mirror, "--release-version", "release_v1", "--out", out) == 0
    assert read_prepared(out)["id"].tolist() == ["abc001_a", "3001"]
    assert prepared_info(out)["source"]["release_version"] == "release_v1"
    assert prepare("--source", "local", "--data-dir", mirror, "--release-version", "v2", "--out", out) == 0
    assert read_prepared(out)["id"].tolist() == ["abc380_b"]
    assert prepare("--source", "local", "--data-dir", mirror, "--release-version", "release_v3", "--out", out) == 2
    assert f"{mirror / 'test3.jsonl'}: no such file (release release_v3)" in capsys.readouterr().err


def test_the_date_window_keeps_start_and_excludes_end(mirror, tmp_path):
    out = tmp_path / "lcb.parquet"
    window = ["--start-date", "2024-07-01", "--end-date", "2025-01-01"]
    assert prepare("--source", "local", "--data-dir", mirror, *window, "--out", out) == 0
    assert read_prepared(out)["id"].tolist() == ["abc001_a", "3001"]  # 2024-07-01 in, 2025-01-01 out
    source = prepared_info(out)["source"]
    assert source["start_date"] == "2024-07-01" and source["end_date_excluded"] == "2025-01-01"
    assert source["rows_in_files"] == 3 and source["outside_window"] == 1
    assert prepare("--source", "local", "--data-dir", mirror, "--start-date", "2024-07-02", "--out", out) == 0
    assert read_prepared(out)["id"].tolist() == ["3001", "abc380_b"]
    both = ["--release-version", "release_v1", "--end-date", "2024-12-31"]
    assert prepare("--source", "local", "--data-dir", mirror, *both, "--out", out) == 0
    assert read_prepared(out)["id"].tolist() == ["abc001_a"]


def test_a_parquet_file_holds_every_release(mirror, tmp_path, capsys):
    """One file mirrors every row (its timestamps typed as such): dates choose, a release cannot."""
    rows = pd.DataFrame([STDIN_PROBLEM, FUNCTIONAL_PROBLEM, LATER_PROBLEM])
    rows["contest_date"] = pd.to_datetime(rows["contest_date"])
    rows.to_parquet(tmp_path / "all.parquet")
    out = tmp_path / "lcb.parquet"
    args = ["--source", "local", "--data-dir", tmp_path / "all.parquet", "--out", out]
    assert prepare(*args, "--end-date", "2025-01-01") == 0
    frame = read_prepared(out)
    assert frame["id"].tolist() == ["abc001_a", "3001"] and frame["contest_date"][1] == "2024-12-31T00:00:00"
    jsonl = tmp_path / "jsonl.parquet"
    assert prepare("--source", "local", "--data-dir", mirror, "--end-date", "2025-01-01", "--out", jsonl) == 0
    pd.testing.assert_frame_equal(frame, read_prepared(jsonl))
    assert prepare(*args, "--release-version", "release_v1") == 2
    assert "is one file, so --release-version cannot choose in it" in capsys.readouterr().err


def test_the_hub_files_are_downloaded_one_by_one(mirror, tmp_path, monkeypatch):
    import huggingface_hub

    asked = []

    def download(repo_id, filename, repo_type=None, revision=None):
        asked.append((repo_id, filename, repo_type, revision))
        return str(mirror / filename)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    out = tmp_path / "lcb.parquet"
    assert prepare("--release-version", "release_v2", "--start-date", "2024-12-01", "--out", out) == 0
    assert asked == [(HUB_ID, "test.jsonl", "dataset", None), (HUB_ID, "test2.jsonl", "dataset", None)]
    assert read_prepared(out)["id"].tolist() == ["3001", "abc380_b"]
    source = prepared_info(out)["source"]
    assert source["kind"] == "hub" and source["hub_id"] == HUB_ID and source["release_version"] == "release_v2"
    assert [f["file"] for f in source["files"]] == [f"{HUB_ID}/test.jsonl", f"{HUB_ID}/test2.jsonl"]


def test_a_malicious_pickle_is_refused_and_runs_nothing(mirror, tmp_path, capsys):
    marker = tmp_path / "pwned"
    evil = base64.b64encode(zlib.compress(pickle.dumps(Evil(marker)))).decode()
    with pytest.raises(pickle.UnpicklingError, match=r"row 7: the pickle names the global (posix|os)\.system"):
        private_tests_text(evil, "row 7")
    with pytest.raises(pickle.UnpicklingError, match="refused"):
        PlainDataUnpickler(pickle.dumps(Evil(marker)), "row 0").load()
    assert private_tests_text(compressed([stdin("1\n", "1\n")]), "row 0") == json.dumps([stdin("1\n", "1\n")])

    write_jsonl(
        mirror / "test2.jsonl", [LATER_PROBLEM, {**LATER_PROBLEM, "question_id": "evil", "private_test_cases": evil}]
    )
    out = tmp_path / "lcb.parquet"
    assert prepare("--source", "local", "--data-dir", mirror, "--out", out) == 2
    err = capsys.readouterr().err
    assert f"{mirror / 'test2.jsonl'}: row 1: private_test_cases:" in err and "refused" in err
    assert not out.exists() and not marker.exists()
    assert prepare("--source", "local", "--data-dir", mirror, "--bad-rows", "drop", "--out", out) == 0
    info = prepared_info(out)
    assert read_prepared(out)["id"].tolist() == ["abc001_a", "3001", "abc380_b"] and info["bad_rows"] == 1
    listed = info["bad_rows_listed"][0]
    assert listed["where"] == str(mirror / "test2.jsonl") and listed["row"] == 1 and "system" in listed["reason"]
    assert not marker.exists()
    pickle.loads(zlib.decompress(base64.b64decode(evil)))  # the payload is real: plain pickle runs it
    assert marker.exists()


def test_bad_rows_name_file_and_row(mirror, tmp_path, capsys):
    broken = [
        {**STDIN_PROBLEM, "question_id": "no-date", "contest_date": "yesterday"},
        {k: v for k, v in STDIN_PROBLEM.items() if k != "public_test_cases"},
        {**STDIN_PROBLEM, "private_test_cases": "not base64 !!"},
        {**STDIN_PROBLEM, "public_test_cases": json.dumps([{"input": "1", "output": 1, "testtype": "stdin"}])},
        {**FUNCTIONAL_PROBLEM, "metadata": "{}"},  # functional tests, no func_name
        {**STDIN_PROBLEM, "question_content": " "},
    ]
    src = mirror / "test.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in broken) + "{not json\n" + json.dumps(STDIN_PROBLEM) + "\n")
    out = tmp_path / "lcb.parquet"
    assert prepare("--source", "local", "--data-dir", mirror, "--release-version", "v1", "--out", out) == 2
    assert f"{src}: row 0: contest_date 'yesterday' is not an ISO date" in capsys.readouterr().err
    assert prepare("--source", "local", "--data-dir", mirror, "--release-version", "v1", "--bad-rows", "drop",
                   "--out", out) == 0  # fmt: skip
    assert read_prepared(out)["id"].tolist() == ["abc001_a"]
    reasons = {b["row"]: b["reason"] for b in prepared_info(out)["bad_rows_listed"]}
    assert sorted(reasons) == [0, 1, 2, 3, 4, 5, 6]
    assert "no field(s) ['public_test_cases']" in reasons[1]
    assert "neither JSON nor base64 zlib" in reasons[2]
    assert "public_test_cases[0]: expected {input: str, output: str" in reasons[3]
    assert "tests of type(s) ['functional'] with metadata func_name None" in reasons[4]
    assert "empty or non-text question_content" in reasons[5] and "invalid JSON" in reasons[6]


def test_bad_options_are_errors_naming_the_option(mirror, tmp_path, capsys):
    out = tmp_path / "lcb.parquet"
    local = ["--source", "local", "--data-dir", mirror, "--out", out]
    for option, value in (("--release-version", "release_v9"), ("--start-date", "2024-13-01")):
        with pytest.raises(SystemExit):
            prepare(*local, option, value)
        assert f"argument {option}:" in capsys.readouterr().err
    assert prepare(*local, "--start-date", "2025-01-01", "--end-date", "2024-07-01") == 2
    assert "empty date window: start 2025-01-01 is not before end 2024-07-01" in capsys.readouterr().err
    assert main(["prepare-data", "--dataset", "math500", "--start-date", "2024-07-01", "--out", str(out)]) == 2
    assert "--start-date: for --dataset livecodebench only, not 'math500'" in capsys.readouterr().err
    assert prepare("--source", "local", "--out", out) == 2
    assert "livecodebench --source local needs --data-dir" in capsys.readouterr().err
    spec = tmp_path / "spec.yaml"
    spec.write_text("problem_field: question_content\n")
    assert (
        prepare(*local, "--spec", spec) == 2 and "--spec: livecodebench's fields are fixed" in capsys.readouterr().err
    )
    assert not out.exists()


def test_the_glm_cot_prompt_style_is_the_glm_toolkits(mirror, tmp_path, capsys):
    """zai-org/glm-simple-evals' "cot" prompt: the problem, "### Format:", no header, no answer line, no system."""
    out, default = tmp_path / "glm.parquet", tmp_path / "lcb.parquet"
    assert prepare("--source", "local", "--data-dir", mirror, "--prompt-style", "glm_cot", "--out", out) == 0
    assert prepare("--source", "local", "--data-dir", mirror, "--out", default) == 0
    frame = read_prepared(out)
    assert [[m["role"] for m in p] for p in frame["prompt"]] == [["user"]] * 3
    assert frame["prompt"].iloc[0][0]["content"] == (
        "Problem abc001_a: do the thing.\n\n### Format: Read the inputs from stdin solve the problem and write the "
        "answer to stdout (do not directly test on the sample inputs). Enclose your code within delimiters as "
        "follows.\n\n```python\n# YOUR CODE HERE\n```\n\n"
    )
    assert frame["prompt"].iloc[1][0]["content"] == (
        f"Problem 3001: do the thing.\n\n### Format: {FORMAT_WITH_STARTER_CODE}\n```python\n{STARTER}\n```\n\n"
    )
    pd.testing.assert_frame_equal(frame.drop(columns="prompt"), read_prepared(default).drop(columns="prompt"))
    assert prepared_info(out)["source"]["prompt_style"] == "glm_cot"
    assert prepared_info(default)["source"]["prompt_style"] == "livecodebench"
    with pytest.raises(SystemExit):
        prepare("--source", "local", "--data-dir", mirror, "--prompt-style", "cot", "--out", out)
    assert "argument --prompt-style: invalid choice" in capsys.readouterr().err
