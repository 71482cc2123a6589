"""Rollouts k steps off policy on the ranks that train (``rollout.staleness``): the schedule checked exactly,
the behaviour policy's log-probs those of the scheduled weights, and a killed or stopped run resumed bitwise
from the batches saved in flight."""

import dataclasses
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import torch
from conftest import write_run_config
from test_train_loop import assert_bitwise_equal, final_weights, read_metrics, rewards, run_cli
from transformers import AutoConfig, AutoModelForCausalLM

from pacs.config import ConfigError, to_dict
from pacs.plan.disk import checkpoint_bytes
from pacs.ranks.distributed import DistEnv
from pacs.rollout import Completion
from pacs.rollout.base import StaleRolloutError, rollout_seed
from pacs.runs import checkpoint as ckpt
from pacs.runs.segments import EXIT_STOPPED
from pacs.tensors.batch import token_logprobs
from pacs.tensors.logprobs import PolicyScorer
from pacs.train.sampling.staleness import RolloutSchedule, check_sampled
from pacs.train.settings.config import load_run_config, resolve
from pacs.train.settings.prompts import Prompts

STEPS = 6


def test_a_batch_from_other_weights_than_the_schedule_stops_the_run():
    """Step 5 at staleness 2 trains on the weights after update 3 (fingerprint "w3"), whatever happened to the
    pushes: each fault is named with the steps it concerns."""
    expected = {3: "w3", 4: "w4", 5: "w5"}
    assert check_sampled(5, 2, 3, "w3", expected) == {"rollout/staleness": 2, "rollout/weights_step": 3}
    assert check_sampled(1, 2, 0, None, {0: None}) == {"rollout/staleness": 1, "rollout/weights_step": 0}
    with pytest.raises(StaleRolloutError, match=r"step 5: .* after update 2, older than the weights after update 3"):
        check_sampled(5, 2, 2, "w2", {2: "w2", **expected})  # a push skipped: sampled one update too old
    with pytest.raises(StaleRolloutError, match=r"step 5: .* after update 4, newer than the weights after update 3"):
        check_sampled(5, 2, 4, "w4", expected)  # a push early: sampled by weights the schedule has not reached
    with pytest.raises(StaleRolloutError, match=r"step 5: .* fingerprint w2, not the trainer's after update 3 \(w3\)"):
        check_sampled(5, 2, 3, "w2", expected)  # a push doubled (update 2's twice) or lost: labelled 3, holds 2
    with pytest.raises(StaleRolloutError, match=r"fingerprint half, not the trainer's after update 3"):
        check_sampled(5, 2, 3, "half", expected)  # a push partial
    with pytest.raises(StaleRolloutError, match=r"after update 3 \(never recorded\)"):
        check_sampled(5, 2, 3, "w3", {4: "w4"})


def test_staleness_needs_the_truncated_ratio_and_no_gap_guard():
    def config(rollout: dict, options: dict | None = None) -> dict:
        return {"model": {"path": "m"}, "data": {"train_files": ["t.parquet"]}, "rollout": rollout,
                "algorithm": {"name": "grpo", "options": options or {}}}  # fmt: skip

    with pytest.raises(ConfigError, match=r"algorithm.options.tis_cap: rollout.staleness 1 .* required"):
        resolve(config({"staleness": 1, "engine": "vllm"}))
    with pytest.raises(ConfigError, match=r"rollout.max_logprob_gap: with rollout.staleness 2"):
        resolve(config({"staleness": 2, "max_logprob_gap": 0.1}, {"tis_cap": 2.0}))
    with pytest.raises(ConfigError, match=r"rollout.staleness must be an integer >= 0"):
        resolve(config({"staleness": -1}))
    with pytest.raises(ConfigError, match=r"algorithm.options.tis_cap: .* rollout.engine hf does not report"):
        resolve(config({"engine": "hf"}, {"tis_cap": 2.0}))  # on-policy hf: no mismatch to correct
    stale = resolve(config({"staleness": 1, "engine": "hf"}, {"tis_cap": 2.0}))  # hf's behaviour log-probs
    assert stale.rollout.staleness == 1 and stale.rollout.max_logprob_gap is None
    assert resolve(config({})).rollout.staleness == 0


class SleepyEngine:
    """An engine that, as vLLM in sleep mode on a GPU, holds no weights once it has released its memory:
    it refuses to sample until woken (by the next push)."""

    pushed_dtype = None

    def __init__(self):
        self.asleep, self.calls = False, []

    def generate(self, prompts, params):
        assert not self.asleep, "sampled while asleep"
        self.calls.append(("generate", params.seed))
        return [[Completion((5, 6), "x", "stop", (-0.5, -0.25))] * params.n for _ in prompts]

    def release_memory(self):
        self.asleep = True
        self.calls.append(("release", None))

    def pooled_bytes(self):
        return 0


def test_each_step_samples_what_the_schedule_needs_then_releases_the_engine_once(tmp_path):
    """Staleness 2: step 0 samples steps 0, 1, 2 with the starting weights (each with its own step's seed),
    then lets the engine sleep; every later step samples one step ahead after the push has woken it. What it
    saves resumes only at the same update, staleness and rank count."""
    config = resolve({"model": {"path": "m"}, "data": {"train_files": ["t.parquet"], "shuffle": False},
                      "rollout": {"staleness": 2, "n": 2}, "algorithm": {"name": "grpo", "options": {"tis_cap": 2.0}},
                      "trainer": {"batch_size": 4, "mini_batch_size": 4, "micro_batch_size": 1}})  # fmt: skip
    prompts = Prompts([[1, 2, 3 + i] for i in range(8)], ["1"] * 8, "math", 0)
    pool = SimpleNamespace(score=lambda golds, texts, task: [SimpleNamespace(score=1.0)] * len(texts))
    models = SimpleNamespace(tokenizer=SimpleNamespace(pad_token_id=0), policy=None, policy_module=None)
    engine, env = SleepyEngine(), DistEnv()
    seed = [rollout_seed(config.trainer.seed, s, 0) for s in range(6)]
    with ThreadPoolExecutor(1) as scorer:
        schedule = RolloutSchedule(config, engine, models, prompts, pool, scorer, env, 0, None)
        for step in range(3):
            batch, completions, pending, record = schedule.take(step, {"start": time.perf_counter()})
            assert record == {"rollout/staleness": step, "rollout/weights_step": 0}
            assert batch["sampler_logprobs"].shape == (8, 2) and len(pending.result()) == 8
            engine.asleep = False  # the push after the update wakes it
            schedule.updated(step + 1, {})
        assert engine.calls == [("generate", seed[0]), ("generate", seed[1]), ("generate", seed[2]),
                                ("release", None), ("generate", seed[3]), ("release", None),
                                ("generate", seed[4]), ("release", None)]  # fmt: skip
        assert sorted(schedule.state()["ahead"]) == [3, 4] and schedule.state()["weights_step"] == 3
        torch.save(schedule.state(), tmp_path / "inflight_rank0.pt")  # a checkpoint at step 3

        def resumed(start: int, ranks: int = 1, staleness: int = 2) -> RolloutSchedule:
            run = dataclasses.replace(config, rollout=dataclasses.replace(config.rollout, staleness=staleness))
            env = DistEnv(world_size=ranks)
            return RolloutSchedule(run, SleepyEngine(), models, prompts, pool, scorer, env, start, tmp_path)

        assert sorted(resumed(3).ahead) == [3, 4]
        with pytest.raises(StaleRolloutError, match=r"inflight_rank0.pt: saved by a run of 1 ranks, .* not 2"):
            resumed(3, ranks=2)
        with pytest.raises(StaleRolloutError, match=r"holds steps \[3, 4\] sampled ahead at update 3 with staleness "
                                                    r"2; this run resumes at update 4 with staleness 2 and needs "
                                                    r"steps \[4, 5\]"):  # fmt: skip
            resumed(4)
        with pytest.raises(StaleRolloutError, match=r"with staleness 2; .* with staleness 1 and needs steps \[3\]"):
            resumed(3, staleness=1)


def stale_config(path, tiny_model, toy_data, staleness: int, rollout: dict | None = None, **sections):
    return write_run_config(path, tiny_model, toy_data, rollout={"staleness": staleness, **(rollout or {})},
                            algorithm={"name": "pacs", "options": {"tis_cap": 2.0}}, **sections)  # fmt: skip


@pytest.fixture(scope="module")
def one_off(tiny_model, toy_data, tmp_path_factory):
    """Staleness 1, every step saved and kept resumable: (config, run dir)."""
    directory = tmp_path_factory.mktemp("one_off")
    config = stale_config(directory / "run.yaml", tiny_model, toy_data, 1,
                          checkpoint={"save_every": 1, "keep_resumable": STEPS})  # fmt: skip
    result = run_cli(config, directory / "whole")
    assert result.returncode == 0, result.stderr
    return config, directory / "whole"


def test_step_t_trains_on_rollouts_sampled_by_the_weights_after_update_t_minus_1(one_off, tiny_model):
    """The batch each checkpoint holds in flight is the next step's: its behaviour log-probs are the policy's
    after the update before (recomputed from that checkpoint's weights), not after the latest."""
    config, out = one_off
    records = read_metrics(out / "metrics.jsonl")[1:]
    assert [(r["rollout/staleness"], r["rollout/weights_step"]) for r in records] == [(0, 0)] + [
        (1, t - 1) for t in range(1, STEPS)
    ]
    assert all(0 <= r["actor/tis_truncated_frac"] < 1 for r in records)
    assert records[0]["rollout/logprob_gap_max"] == 0.0 and records[1]["rollout/logprob_gap_mean"] > 1e-3

    assert_sampled_by_the_update_before(out / "checkpoints", tiny_model, STEPS, 1e-4)
    # pacs plan's disk counts the batch in flight, at most: every row padded to the longest prompt and response
    run = to_dict(load_run_config(config))
    bound = checkpoint_bytes(AutoConfig.from_pretrained(tiny_model), run, False)["inflight"]
    saved = max((out / "checkpoints").glob("step_*/inflight_rank0.pt"), key=lambda f: f.stat().st_size)
    assert saved.stat().st_size <= bound  # the tiny prompts are far below data.max_prompt_length (512)


def assert_sampled_by_the_update_before(root, start, steps: int, tolerance: float) -> None:
    """Checkpoint c holds step c's batch in flight, sampled by the weights after update c − 1 (``start``'s
    for c = 1): its behaviour log-probs are those weights' within ``tolerance``, and not the weights after c's."""

    def logprobs(weights, batch):
        policy = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32)
        with torch.no_grad():
            return token_logprobs(PolicyScorer(policy, 1024), batch, 1.0)[0]

    for c in range(1, steps + 1):  # the last checkpoint's too: step `steps` is sampled as any other
        state = torch.load(ckpt.checkpoint_dir(root, c) / "inflight_rank0.pt", weights_only=False)
        assert state["weights_step"] == c and list(state["ahead"]) == [c]
        sampled = state["ahead"][c]
        assert sampled["weights_step"] == c - 1 and len(sampled["verdicts"]) == 16 * 8
        batch, mask = sampled["batch"], sampled["batch"]["response_mask"]
        before = ckpt.checkpoint_dir(root, c - 1) if c > 1 else start
        gap = (logprobs(before, batch) - batch["sampler_logprobs"]).abs()[mask]
        assert gap.max() < tolerance, (c, gap.max())
        moved = (logprobs(ckpt.checkpoint_dir(root, c), batch) - batch["sampler_logprobs"]).abs()[mask]
        assert moved.mean() > 1e-3, (c, moved.mean())


def test_killed_one_step_off_run_resumes_bitwise_from_the_batch_in_flight(one_off, tmp_path):
    config, whole = one_off
    out = tmp_path / "killed"
    run_cli(config, out, kill_after_step=3)
    assert ckpt.latest_checkpoint(out / "checkpoints")[0] >= 3
    result = run_cli(config, out)
    assert result.returncode == 0, result.stderr
    assert_bitwise_equal(final_weights(out), final_weights(whole))
    assert rewards(out) == rewards(whole)


def test_two_steps_off_stopped_by_sigterm_resumes_bitwise(tiny_model, toy_data, tmp_path):
    """Staleness 2: a SIGTERM (a segment's end) saves the step it stops after with its two batches in flight;
    the next attempt ends bitwise where a run never stopped does."""
    config = stale_config(tmp_path / "run.yaml", tiny_model, toy_data, 2)
    whole, out = tmp_path / "whole", tmp_path / "stopped"
    assert run_cli(config, whole).returncode == 0
    records = read_metrics(whole / "metrics.jsonl")[1:]
    assert [r["rollout/weights_step"] for r in records] == [0, 0, 0, 1, 2, 3]
    cmd = [sys.executable, "-m", "pacs.cli", "train", "--config", str(config), "--out", str(out)]
    process = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    while not (metrics.exists() and any(r["step"] >= 1 for r in read_metrics(metrics))):
        assert process.poll() is None, "the run ended before its first step was logged"
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    process.communicate(timeout=600)
    assert process.returncode == EXIT_STOPPED
    step = ckpt.latest_checkpoint(out / "checkpoints")[0]
    state = torch.load(ckpt.checkpoint_dir(out / "checkpoints", step) / "inflight_rank0.pt", weights_only=False)
    assert sorted(state["ahead"]) == [step, step + 1]
    assert run_cli(config, out).returncode == 0
    assert_bitwise_equal(final_weights(out), final_weights(whole))
    assert rewards(out) == rewards(whole)


def test_vllm_one_step_off_samples_with_the_scheduled_weights_and_resumes_from_its_batch_in_flight(
    vllm_installed, tiny_model, toy_data, tmp_path
):  # fmt: skip
    """The engine's own log-probs of step c's samples are the policy's after update c − 1, within the engine's
    tolerance (fp32: max gaps of at most 1.5e-5, test_train_vllm); a run resumed from step 2's checkpoint
    checks the restarted engine's weights before its first sample, trains on the batch saved in flight and
    ends bitwise where the whole run does."""
    config = stale_config(tmp_path / "run.yaml", tiny_model, toy_data, 1, trainer={"total_steps": 3},
                          rollout={"engine": "vllm", "vllm": {"enforce_eager": True}},
                          checkpoint={"save_every": 1, "keep_resumable": 3})  # fmt: skip
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    result = run_cli(config, whole)
    assert result.returncode == 0, result.stderr
    assert [r["rollout/push_checked_tensors"] for r in read_metrics(whole / "metrics.jsonl")[1:]] == [12] * 3
    assert_sampled_by_the_update_before(whole / "checkpoints", tiny_model, 3, 1.5e-5)
    shutil.copytree(whole, resumed)
    shutil.rmtree(ckpt.checkpoint_dir(resumed / "checkpoints", 3))
    result = run_cli(config, resumed)
    assert result.returncode == 0, result.stderr
    assert_bitwise_equal(final_weights(resumed, 3), final_weights(whole, 3))
    assert rewards(resumed) == rewards(whole)


def test_a_resumed_engine_holding_other_weights_is_named_as_started_from_the_checkpoint():
    from pacs.train.sampling.rollouts import check_push

    with pytest.raises(StaleRolloutError, match=r"step 3: started from the checkpoint the rollout engine holds other "
                                                r"weights than the trainer's: 1 of 2 tensors differ: b$"):  # fmt: skip
        check_push(3, {"a": ((2,), 7), "b": ((2,), 8)}, {"a": 7, "b": 9}, "started from the checkpoint")
    assert check_push(3, {"a": ((2,), 7)}, {"a": 7, "c": None}) == {"rollout/push_checked_tensors": 1}
