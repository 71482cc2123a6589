"""The training loop end to end on the tiny model: files, metrics, checkpoints, exact resume."""

import json
import os
import subprocess
import sys

import pytest
import torch
from conftest import write_run_config
from helpers import run_until_killed
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from pacs.cli import main
from pacs.train import checkpoint as ckpt
from pacs.train.config import load_run_config
from pacs.train.loop import train

STEP_KEYS = {
    "reward/mean", "accuracy", "groups/all_correct_frac", "groups/all_wrong_frac", "response_length/mean",
    "response_length/max", "response_length/truncated_frac", "verifier/correct", "verifier/timeout",
    "policy/entropy", "actor/loss", "actor/grad_norm", "actor/lr", "time/generate", "time/score",
    "time/old_logprobs", "time/update", "time/step", "throughput/tokens_per_s", "skipped_steps_total",
}  # fmt: skip


def run_cli(config, out, kill_after_step: int | None = None) -> subprocess.CompletedProcess | None:
    """`python -m pacs.train` in a subprocess; optionally SIGKILLed once metrics.jsonl shows ``kill_after_step``."""
    env = {**os.environ, "OMP_NUM_THREADS": "2"}
    cmd = [sys.executable, "-m", "pacs.train", "--config", str(config), "--out", str(out)]
    if kill_after_step is None:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    metrics = out / "metrics.jsonl"
    run_until_killed(
        cmd, env, lambda: metrics.exists() and any(r["step"] >= kill_after_step for r in read_metrics(metrics))
    )
    return None


def read_metrics(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


def final_weights(out, step=6) -> dict:
    return load_file(ckpt.checkpoint_dir(out / "checkpoints", step) / "model.safetensors")


def assert_bitwise_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs"


def rewards(out) -> list:
    return [r.get("reward/mean") for r in read_metrics(out / "metrics.jsonl")]


@pytest.fixture(scope="module")
def config(tiny_model, toy_data, tmp_path_factory):
    return write_run_config(tmp_path_factory.mktemp("cfg") / "run.yaml", tiny_model, toy_data)


@pytest.fixture(scope="module")
def uninterrupted(config, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "whole"
    result = run_cli(config, out)
    assert result.returncode == 0, result.stderr
    return out


def test_a_run_writes_metrics_config_and_loadable_checkpoints(uninterrupted, config):
    records = read_metrics(uninterrupted / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4, 5, 6]
    assert records.pop(0) == {"step": 0, "data/prompts": 4000, "data/prompts_dropped": 0}
    for r in records:
        assert STEP_KEYS <= r.keys(), STEP_KEYS - r.keys()
        assert 0.0 <= r["reward/mean"] <= 1.0 and r["time/step"] > 0
        assert r["verifier/correct"] == round(r["reward/mean"] * 16 * 8)
    assert "actor/classifier_accuracy" in records[0] and "actor/score_std" in records[0]  # PACS statistics
    assert load_run_config(uninterrupted / "config.yaml") == load_run_config(config)
    assert [s for s, _ in ckpt.complete_checkpoints(uninterrupted / "checkpoints")] == [2, 4, 6]
    last = ckpt.checkpoint_dir(uninterrupted / "checkpoints", 6)
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "trainer_state.pt",
                 "optimizer/.metadata"):  # fmt: skip
        assert (last / name).is_file(), name
    model = AutoModelForCausalLM.from_pretrained(last)
    assert AutoTokenizer.from_pretrained(last).chat_template
    start = AutoModelForCausalLM.from_pretrained(load_run_config(config).model.path)
    assert any(not torch.equal(p, start.state_dict()[k]) for k, p in model.state_dict().items())


def test_killed_run_resumes_bitwise(uninterrupted, config, tmp_path):
    out = tmp_path / "killed"
    run_cli(config, out, kill_after_step=3)
    assert ckpt.latest_checkpoint(out / "checkpoints")[0] in (2, 4)
    result = run_cli(config, out)
    assert result.returncode == 0, result.stderr
    assert_bitwise_equal(final_weights(out), final_weights(uninterrupted))
    assert rewards(out) == rewards(uninterrupted)  # steps redone after the kill are logged once, identically


def test_crash_while_writing_a_checkpoint_resumes_bitwise(uninterrupted, config, tmp_path, monkeypatch):
    out = tmp_path / "crashed"
    write = ckpt.save_optimizers

    def crash_at_step_4(staging, pairs):
        write(staging, pairs)
        if staging.name == ".step_000004.tmp":
            raise KeyboardInterrupt("killed while writing the checkpoint")

    monkeypatch.setattr(ckpt, "save_optimizers", crash_at_step_4)
    with pytest.raises(KeyboardInterrupt):
        train(load_run_config(config), out)
    assert (out / "checkpoints" / ".step_000004.tmp" / "optimizer").is_dir()  # written, never published
    assert ckpt.latest_checkpoint(out / "checkpoints")[0] == 2
    monkeypatch.setattr(ckpt, "save_optimizers", write)
    assert train(load_run_config(config), out)["start_step"] == 2
    assert not (out / "checkpoints" / ".step_000004.tmp").exists()
    assert_bitwise_equal(final_weights(out), final_weights(uninterrupted))


def test_a_finished_run_does_nothing(uninterrupted, config, capsys):
    before = {p: p.stat().st_mtime_ns for p in uninterrupted.rglob("*") if p.is_file()}
    assert main(["train", "--config", str(config), "--out", str(uninterrupted)]) == 0
    assert "already complete" in capsys.readouterr().out
    assert before == {p: p.stat().st_mtime_ns for p in uninterrupted.rglob("*") if p.is_file()}


def test_a_run_dir_refuses_a_changed_config(uninterrupted, tiny_model, toy_data, tmp_path, capsys):
    changed = write_run_config(tmp_path / "changed.yaml", tiny_model, toy_data, optim={"lr": 2e-4})
    assert main(["train", "--config", str(changed), "--out", str(uninterrupted)]) == 2
    assert "optim.lr" in capsys.readouterr().err


def test_wandb_offline_and_keep_last(tiny_model, toy_data, tmp_path):
    config = write_run_config(
        tmp_path / "run.yaml", tiny_model, toy_data,
        trainer={"total_steps": 2, "batch_size": 8, "mini_batch_size": 8, "micro_batch_size": 8},
        checkpoint={"save_every": 1, "keep_last": 1}, logging={"wandb": "offline", "progress_bar": False},
    )  # fmt: skip
    out = tmp_path / "run"
    result = run_cli(config, out)
    assert result.returncode == 0, result.stderr
    assert [s for s, _ in ckpt.complete_checkpoints(out / "checkpoints")] == [2]
    runs = list((out / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))


def test_bench_train_reports_each_variant_and_engine(vllm_installed, tiny_model, toy_data, tmp_path):
    out = tmp_path / "train.json"
    args = ["bench", "train", "--model", str(tiny_model), "--data", str(toy_data), "--steps", "2"]
    assert main([*args, "--variants", "pacs", "--engines", "hf", "vllm", "--out", str(out)]) == 0
    report = json.loads(out.read_text())["results"]
    assert list(report) == ["pacs/hf/seed0", "pacs/vllm/seed0"]
    for row in report.values():
        assert row["steps"] == 2 and row["seconds_step"] > 0 and row["rollout_tokens_per_s"] > 0
        assert row["peak_rss_gb"] > 0.1  # the largest rank's resident memory, logged every step
        assert row["seconds_generate"] + row["seconds_update"] <= row["seconds_step"]
        assert 0 <= row["heldout_accuracy_before"] <= 1 and 0 <= row["heldout_accuracy_after"] <= 1
    assert report["pacs/vllm/seed0"]["logprob_gap_max"] < 1e-4 and "logprob_gap_max" not in report["pacs/hf/seed0"]
    assert main([*args, "--variants", "dpo", "--out", str(out)]) == 2


def test_a_reference_reset_zeroes_the_proxy_restarts_adamw_and_resumes_bitwise(tiny_model, toy_data, tmp_path,
                                                                                 monkeypatch):  # fmt: skip
    """PACS v2's reward proxy against a reference reset every 2 steps (one optimizer step per step): the
    proxy is 0 on the steps that start at the reference (1, 3, 5) and not between; the reset step's update
    is AdamW's first (every weight moves by lr); a run crashed after the reset resumes bitwise."""
    config = write_run_config(tmp_path / "run.yaml", tiny_model, toy_data,
                              algorithm={"name": "pacs", "options": {"reward_proxy": "reference"}},
                              trainer={"mini_batch_size": 16, "reference_reset_every": 2},
                              checkpoint={"save_every": 1}, optim={"lr": 1e-3})  # fmt: skip
    whole = tmp_path / "whole"
    train(load_run_config(config), whole)
    records = read_metrics(whole / "metrics.jsonl")[1:]
    assert [r["reference/reset"] for r in records] == [0, 0, 1, 0, 1, 0]
    assert [r["reference/step"] for r in records] == [0, 0, 2, 2, 4, 4]
    assert [r["actor/reward_proxy_abs_max"] == 0 for r in records] == [True, False] * 3
    assert (whole / "checkpoints/step_000003/reference/model.safetensors").is_file()
    assert not (whole / "checkpoints/step_000002/reference").exists()  # the starting model: nothing to save
    reference = load_file(whole / "checkpoints/step_000004/reference/model.safetensors")
    assert_bitwise_equal(reference, final_weights(whole, 2))  # the policy as the reset at step 3 found it

    def moved_by_lr(step):  # of the weights the gradient moved (not weight decay alone), the share moved by lr (1 %)
        before, after = final_weights(whole, step - 1), final_weights(whole, step)
        delta = torch.cat([(after[k] - before[k]).abs().flatten() for k in after])
        delta = delta[delta > 1e-4]
        return float(((delta - 1e-3).abs() < 1e-5).float().mean())

    moved = {step: moved_by_lr(step) for step in (3, 4, 5)}  # AdamW's first step is lr·g/|g|: lr for every weight
    assert moved[3] > 0.9 and moved[5] > 0.9 and moved[4] < 0.2, moved  # measured 0.93, 0.98 and 0.06

    crashed, write = tmp_path / "crashed", ckpt.save_optimizers

    def crash_at_step_6(staging, pairs):
        if staging.name == ".step_000006.tmp":
            raise KeyboardInterrupt("killed while writing the checkpoint")
        write(staging, pairs)

    monkeypatch.setattr(ckpt, "save_optimizers", crash_at_step_6)
    with pytest.raises(KeyboardInterrupt):
        train(load_run_config(config), crashed)
    monkeypatch.setattr(ckpt, "save_optimizers", write)
    assert train(load_run_config(config), crashed)["start_step"] == 5  # the reference of step 5's reset, saved
    assert_bitwise_equal(final_weights(crashed), final_weights(whole))
