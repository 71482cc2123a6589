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
