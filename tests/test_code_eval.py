"""`pacs evaluate` on a code dataset: programs scored by the code verifier, its statuses, isolation and
timeouts in metrics.json, pass@k from the passed programs."""

import json

import pandas as pd
import pytest

from pacs.cli import main
from pacs.config import ConfigError, from_dict
from pacs.eval.config import EvalConfig
from pacs.eval.metrics import eval_metrics
from pacs.eval.passk import mean_pass_at_k
from pacs.verify import CODE_STATUSES, STATUSES, CodeConfig
from pacs.verify.code import extract_code
from pacs.verify.sandbox import LEVELS


@pytest.fixture(scope="module")
def toy_code_data(tmp_path_factory):
    out = tmp_path_factory.mktemp("toy_code")
    sizes = ["--train-size", "10", "--heldout-size", "12"]
    assert main(["toy-data", "--task", "code", "--out", str(out), *sizes]) == 0
    return out


def evaluate(model, data, out, *flags) -> int:
    return main(["evaluate", "--model", str(model), "--data", str(data), "--out", str(out), *map(str, flags)])


def test_a_code_dataset_is_evaluated_with_the_code_verifier(raw_tiny_model, toy_code_data, tmp_path):
    """The tiny model writes no program: every answer is counted (no_code), none hidden, and pass@k is 0."""
    config = tmp_path / "eval.yaml"
    config.write_text("code:\n  grading: livecodebench\n  timeout_s: 2.0\n")
    out = tmp_path / "eval"
    flags = ["--config", config, "--engine", "hf", "--n", 4, "--max-tokens", 16, "--workers", 1, "--chunk-problems", 6]
    assert evaluate(raw_tiny_model, toy_code_data / "heldout.parquet", out, *flags) == 0
    responses = pd.read_parquet(out / "responses")
    assert len(responses) == 12 * 4
    assert {"tests_passed", "tests_total", "isolation", "verify_s"} <= set(responses.columns)
    assert (responses["tests_total"] == 3).all()  # the toy task's tests per problem
    assert set(responses["status"]) <= set(CODE_STATUSES)
    no_code = responses["status"] == "no_code"
    found = responses["response"].map(lambda r: extract_code(r, "livecodebench"))  # as the profile finds it
    assert no_code.sum() > 0 and found[no_code].isna().all() and found[~no_code].notna().all()
    assert (responses.loc[no_code, "isolation"] == "").all() and (responses.loc[no_code, "tests_passed"] == 0).all()
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["task"] == "code" and metrics["data_source"] == "toy_code"
    assert list(metrics["statuses"]) == list(CODE_STATUSES) and sum(metrics["statuses"].values()) == 48
    assert metrics["statuses"] == {s: int((responses["status"] == s).sum()) for s in CODE_STATUSES}
    counts = pd.DataFrame(metrics["per_problem"])
    assert list(metrics["pass_at_k"]) == ["1", "2", "4"]
    for k, row in metrics["pass_at_k"].items():
        assert row["mean"] == pytest.approx(mean_pass_at_k(counts["n"], counts["correct"], int(k)), abs=1e-12)
    assert int(counts["correct"].sum()) == metrics["statuses"]["passed"]
    code = metrics["code"]
    assert code["grading"] == "livecodebench" and code["test_timeout_s"] == 2.0 and code["budget_s"] is None
    assert set(LEVELS) <= set(code["isolation"]) and sum(code["isolation"].values()) == 48
    assert code["isolation"]["not_run"] >= metrics["statuses"]["no_code"]
    assert metrics["config"]["code"]["timeout_s"] == 2.0 and metrics["config"]["code"]["grading"] == "livecodebench"
    # a code key scores differently: the same directory under another is refused, naming the key
    config.write_text("code:\n  grading: livecodebench\n  timeout_s: 3.0\n")
    assert evaluate(raw_tiny_model, toy_code_data / "heldout.parquet", out, *flags) == 2


def test_real_verdicts_fill_the_code_columns_and_metrics(toy_code_data):
    """The reference program, a wrong one and no program, for 3 problems, through the pool."""
    from pacs.data.schema import read_prepared
    from pacs.data.toy_code import toy_code_solution
    from pacs.eval.greedy import score_completions
    from pacs.eval.run import response_frame
    from pacs.rollout import Completion
    from pacs.verify import VerifierPool

    problems = read_prepared(toy_code_data / "heldout.parquet").head(3)
    completions = []
    for _, row in problems.iterrows():
        right = toy_code_solution(row)
        a, b = map(int, row["id"].split(","))
        wrong = right.replace(f"{a} + {b}", f"{a} + {b + 1}")
        completions.append([Completion((1,), t, "stop") for t in (right, wrong, "I cannot write code.")])
    with VerifierPool(workers=1, code=CodeConfig(timeout_s=2.0)) as pool:
        verdicts = score_completions(list(problems["ground_truth"]), completions, pool.score, "code")
    frame = response_frame(problems, completions, verdicts, "code")
    assert frame["status"].tolist() == ["passed", "failed", "no_code"] * 3
    assert frame["tests_passed"].tolist() == [3, 0, 0] * 3 and (frame["tests_total"] == 3).all()
    assert frame.loc[frame["status"] != "no_code", "isolation"].isin(LEVELS).all()
    assert (frame.loc[frame["status"] != "no_code", "verify_s"] > 0).all()
    metrics = eval_metrics(frame, 0.95, 200, "code", CodeConfig(timeout_s=2.0))
    assert metrics["statuses"]["passed"] == metrics["statuses"]["failed"] == metrics["statuses"]["no_code"] == 3
    assert metrics["pass_at_k"]["1"]["mean"] == pytest.approx(1 / 3)  # each problem 1 of 3
    assert metrics["pass_at_k"]["2"]["mean"] == pytest.approx(2 / 3)  # 1 - C(2, 2) / C(3, 2)
    assert metrics["code"]["isolation"]["not_run"] == 3 and sum(metrics["code"]["isolation"].values()) == 9


def code_responses() -> pd.DataFrame:
    """Two problems of two samples: passed and timeout, passed and no code."""
    return pd.DataFrame(
        {
            "problem": [0, 0, 1, 1],
            "id": ["a", "a", "b", "b"],
            "sample": [0, 1, 0, 1],
            "response_tokens": [10, 20, 30, 40],
            "finish_reason": ["stop", "length", "stop", "stop"],
            "status": ["passed", "timeout", "passed", "no_code"],
            "score": [1.0, 0.0, 1.0, 0.0],
            "tests_passed": [3, 1, 2, 0],
            "tests_total": [3, 3, 2, 2],
            "isolation": [LEVELS[0], LEVELS[0], "limits", ""],
            "verify_s": [0.2, 6.5, 0.3, 0.0],
        }
    )


def test_code_metrics_count_statuses_isolation_and_pass_at_k_by_hand():
    metrics = eval_metrics(code_responses(), 0.95, 200, "code", CodeConfig())
    assert metrics["task"] == "code" and metrics["responses"] == 4 and metrics["samples_per_problem"] == 2
    assert metrics["statuses"] == {s: {"passed": 2, "timeout": 1, "no_code": 1}.get(s, 0) for s in CODE_STATUSES}
    assert metrics["verifier_failures"] == 0  # a program's timeout is its own verdict; only sandbox_error is ours
    assert metrics["pass_at_k"]["1"]["mean"] == pytest.approx(0.5)  # each problem 1 of 2
    assert metrics["pass_at_k"]["2"]["mean"] == pytest.approx(1.0)
    assert [p["correct"] for p in metrics["per_problem"]] == [1, 1]
    code = metrics["code"]
    assert code["grading"] == "judge" and code["test_timeout_s"] == 6.0
    assert code["isolation"] == {**{level: 0 for level in LEVELS}, LEVELS[0]: 2, "limits": 1, "not_run": 1}
    assert code["mean_verify_s"] == pytest.approx((0.2 + 6.5 + 0.3) / 3)
    broken = code_responses().assign(status=["passed", "sandbox_error", "passed", "no_code"])
    assert eval_metrics(broken, 0.95, 200, "code")["verifier_failures"] == 1


def test_math_metrics_keep_their_fields_and_refuse_code_statuses():
    math = code_responses().drop(columns=["tests_passed", "tests_total", "isolation", "verify_s"])
    math["status"] = ["correct", "timeout", "wrong", "no_answer"]
    metrics = eval_metrics(math, 0.95, 200)
    assert metrics["task"] == "math" and "code" not in metrics
    assert list(metrics["statuses"]) == list(STATUSES) and metrics["verifier_failures"] == 1
    assert metrics["pass_at_k"]["1"]["mean"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match=r"not math verdicts.*passed"):
        eval_metrics(code_responses(), 0.95, 200)


def test_a_file_of_two_tasks_is_refused_naming_it(toy_code_data, toy_data, tmp_path, capsys):
    from pacs.data.schema import read_prepared

    mixed = pd.concat([read_prepared(toy_code_data / "heldout.parquet").head(2),
                       read_prepared(toy_data / "heldout.parquet").head(2)], ignore_index=True)  # fmt: skip
    mixed.to_parquet(tmp_path / "mixed.parquet")
    assert evaluate("no-model-needed", tmp_path / "mixed.parquet", tmp_path / "out", "--engine", "hf") == 2
    error = capsys.readouterr().err
    assert "mixed.parquet" in error and "['code', 'math']" in error


def test_eval_code_keys_are_checked_by_name():
    config = from_dict(EvalConfig, {"code": {"grading": "glm45", "isolation": "limits"}}, "eval")
    assert config.code.test_timeout_s == 30.0 and config.code.isolation == "limits"
    with pytest.raises(ConfigError, match=r"eval\.code\.gradin: unknown key"):
        from_dict(EvalConfig, {"code": {"gradin": "glm45"}}, "eval")
    with pytest.raises(ConfigError, match=r"eval\.code\.isolation: 'docker' is not one of"):
        from_dict(EvalConfig, {"code": {"isolation": "docker"}}, "eval")
