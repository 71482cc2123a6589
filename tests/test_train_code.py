"""Training on code: the rewards are the sandboxed verifier's verdicts on the sampled programs, for PACS, GRPO
and PPO alike, from the tiny model warm-started on the toy code task (tests/conftest.py)."""

import json

import pandas as pd
import pytest
import torch
from conftest import write_run_config
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from pacs.runs import checkpoint as ckpt
from pacs.train import loop
from pacs.train.settings.config import load_run_config
from pacs.verify import CODE_STATUSES, VerifierPool, score_code
from pacs.verify.code import extract_code
from pacs.verify.sandbox import LEVELS, resolve_isolation

PROMPTS, N = 16, 8  # a step's prompts and samples per prompt (write_run_config's toy run)
STEPS = 2  # the PACS run's steps: each one verifier call of 128 programs, the second after an update


class RecordingPool(VerifierPool):
    """The trainer's pool, keeping every call's golds, answers, task and verdicts."""

    calls: list = []

    def score(self, golds, answers, task="math"):
        verdicts = super().score(golds, answers, task)
        RecordingPool.calls.append((list(golds), list(answers), task, verdicts))
        return verdicts


def train_on_code(model, data, out, monkeypatch, **sections) -> tuple[list[dict], list]:
    """A run on the toy code task in this process; (its step records, the verifier's calls)."""
    tokens = json.loads((model / "warm_start.json").read_text())["config"]["max_new_tokens"]  # a program and more
    config = write_run_config(out / "run.yaml", model, data, rollout={"max_response_length": tokens},
                              verifier={"workers": 2}, **sections)  # fmt: skip
    monkeypatch.setattr(loop, "VerifierPool", RecordingPool)
    monkeypatch.setattr(RecordingPool, "calls", [])
    loop.train(load_run_config(config), out / "run")
    records = [json.loads(x) for x in (out / "run" / "metrics.jsonl").read_text().splitlines()]
    return [r for r in records if r["step"] > 0], RecordingPool.calls


def assert_counts_are_the_rewards(record: dict, verdicts: list, samples: int) -> None:
    statuses = {s: record[f"verifier/{s}"] for s in CODE_STATUSES}
    assert sum(statuses.values()) == samples == len(verdicts)
    assert statuses == {s: sum(v.status == s for v in verdicts) for s in CODE_STATUSES}
    assert record["verifier/passed"] == sum(v.score for v in verdicts) == round(record["reward/mean"] * samples)
    assert record["accuracy"] == record["reward/mean"]
    assert "verifier/correct" not in record  # math's statuses are not a code run's


# slow: the only training on sandboxed code rewards (and the tiny code model it needs)
@pytest.mark.slow
def test_pacs_trains_on_toy_code_with_sandboxed_rewards(tiny_code_model, toy_code_data, tmp_path, monkeypatch):
    trainer = {"total_steps": STEPS, "batch_size": PROMPTS, "mini_batch_size": PROMPTS, "micro_batch_size": 8}
    records, calls = train_on_code(tiny_code_model, toy_code_data, tmp_path, monkeypatch, trainer=trainer,
                                   checkpoint={"save_every": STEPS})  # fmt: skip
    print("reward/mean by step:", [r["reward/mean"] for r in records])
    print("statuses by step:", [{s: r[f"verifier/{s}"] for s in CODE_STATUSES if r[f"verifier/{s}"]} for r in records])
    assert len(records) == len(calls) == STEPS  # one verifier call a step: no held-out evaluation
    level = resolve_isolation("auto")  # every program ran at the level this machine gives
    for record, (golds, _, task, verdicts) in zip(records, calls, strict=True):
        assert task == "code" and all(json.loads(g)["tests"] for g in golds)
        assert_counts_are_the_rewards(record, verdicts, PROMPTS * N)
        ran = {lv: record[f"verifier/isolation/{lv}"] for lv in LEVELS}
        assert record["verifier/sandbox_error"] == 0
        assert sum(ran.values()) == PROMPTS * N - record["verifier/no_code"]  # every program found was run
        assert [lv for lv, count in ran.items() if count] == [v.isolation for v in verdicts if v.isolation][:1]
        assert all(v.isolation.startswith(level) for v in verdicts if v.isolation)
    assert 0 < records[0]["reward/mean"] < 1  # the warm start left headroom: both kinds of group members
    assert sum(r["verifier/failed"] for r in records) > 0 and sum(r["verifier/runtime_error"] for r in records) > 0

    # a passing sample really passed: its program is the answer's last fence, it passes its tests again, and the
    # same program against a wrong expected output fails (the verdict compared what the program printed)
    golds, answers, _, verdicts = calls[0]
    i = next(i for i, v in enumerate(verdicts) if v.status == "passed")
    assert verdicts[i].score == 1.0 and verdicts[i].passed == verdicts[i].total == 3
    assert verdicts[i].extracted == extract_code(answers[i])
    assert score_code(golds[i], answers[i]).status == "passed"
    wrong = json.loads(golds[i])
    wrong["tests"][0]["output"] = json.dumps(json.loads(wrong["tests"][0]["output"]) + 1)
    assert score_code(json.dumps(wrong), answers[i])[:2] == ("failed", 0.0)
    j = next(j for j, v in enumerate(verdicts) if v.status == "failed")
    assert verdicts[j].score == 0.0 and score_code(golds[j], answers[j]).status == "failed"

    start = AutoModelForCausalLM.from_pretrained(tiny_code_model).state_dict()
    weights = load_file(ckpt.checkpoint_dir(tmp_path / "run" / "checkpoints", STEPS) / "model.safetensors")
    assert any(not torch.equal(p, start[k]) for k, p in weights.items())  # the rewards moved the policy


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_grpo_and_ppo_take_a_step_on_code_rewards(algorithm, tiny_code_model, toy_code_data, tmp_path, monkeypatch):
    trainer = {"total_steps": 1, "batch_size": 8, "mini_batch_size": 8, "micro_batch_size": 8}
    records, calls = train_on_code(tiny_code_model, toy_code_data, tmp_path, monkeypatch, trainer=trainer,
                                   algorithm={"name": algorithm}, checkpoint={"save_every": 1})  # fmt: skip
    (record,), ((_, _, task, verdicts),) = records, calls
    assert task == "code"
    assert_counts_are_the_rewards(record, verdicts, 8 * N)
    assert torch.isfinite(torch.tensor(record["actor/loss"]))
    assert ("critic/loss" in record) == (algorithm == "ppo")


def test_a_run_reads_one_task_from_its_files(toy_code_data, toy_data):
    from pacs.data.schema import read_prepared
    from pacs.train.settings.prompts import files_task

    code, math = read_prepared(toy_code_data / "train.parquet"), read_prepared(toy_data / "train.parquet")
    assert files_task(["code.parquet"], [code]) == "code" and files_task(["math.parquet"], [math]) == "math"
    with pytest.raises(ValueError, match=r"mixed\.parquet: rows of tasks \['code', 'math'\]"):
        files_task(["mixed.parquet"], [pd.concat([code[:3], math[:3]])])
    with pytest.raises(ValueError, match=r"math\.parquet \(math\), code\.parquet \(code\)"):
        files_task(["math.parquet", "code.parquet"], [math, code])
