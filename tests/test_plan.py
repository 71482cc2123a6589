"""`pacs plan`: the memory model against what autograd saves and hand-computed values, the FLOPs and hours of
a tiny experiment, the paper's plan, and configs that cannot fit their GPU."""

import copy
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from pacs import experiment
from pacs.cli import main
from pacs.config import ConfigError
from pacs.models.shapes import model_config, model_shape
from pacs.plan.calibration import Calibration
from pacs.plan.decode import capped_share, decode_seconds, spread
from pacs.plan.markdown import format_plan
from pacs.plan.memory import activation_bytes, dims, layer_activation_bytes

REPO = Path(__file__).resolve().parents[1]
# h 64, q 64 (2 heads of 32), kv 32 (1 KV head), i 128, vocab 100, 2 layers, untied head
SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
         "num_key_value_heads": 1, "vocab_size": 100, "tie_word_embeddings": False}  # fmt: skip
LAYER = 64 * 64 + 2 * 64 * 32 + (64 + 2 * 32) + 64 * 64 + 3 * 64 * 128 + 2 * 64  # 37,120
PARAMS = 2 * 100 * 64 + 64 + 2 * LAYER  # embedding, head, final norm, layers: 87,104


def saved_bytes(model, ids) -> int:
    """Bytes of the tensors autograd saves in a forward of the decoder (parameters excluded)."""
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params:
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model.model(input_ids=ids, attention_mask=torch.ones_like(ids))
    return sum(seen.values())


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("overrides", [{}, {"hidden_size": 128, "num_attention_heads": 4, "intermediate_size": 384}])
@pytest.mark.parametrize("architecture", ["qwen2.5-0.5b", "qwen3-4b"])
def test_activations_per_token_are_what_autograd_saves(dtype, overrides, architecture):
    """One decoder layer's activations are exactly what transformers' Qwen2 and Qwen3 save for backward
    (the difference between a 2- and a 1-layer model); the whole decoder within 2 % (rotary tables aside)."""
    from transformers import AutoModelForCausalLM

    b, tokens = {"float32": 4, "bfloat16": 2}[dtype], 4 * 64
    ids = torch.randint(0, 100, (4, 64), generator=torch.Generator().manual_seed(0))
    measured = {}
    for layers in (1, 2):
        head_dim = {"head_dim": 32} if architecture.startswith("qwen3") else {}  # qwen2: hidden_size / heads
        config = model_config(architecture, **{**SHAPE, **head_dim, **overrides, "num_hidden_layers": layers})
        model = AutoModelForCausalLM.from_config(config).to(getattr(torch, dtype)).train()
        measured[layers] = saved_bytes(model, ids)
    d = dims(config)
    assert measured[2] - measured[1] == tokens * layer_activation_bytes(d, b)
    assert abs(activation_bytes(d, b, tokens, checkpointing=False) / measured[2] - 1) < 0.02


def test_liger_s_kernels_save_what_the_plan_counts_with_them(monkeypatch):
    """With Liger's kernels (the default on CUDA) a decoder layer of Qwen2 and of Qwen3 saves what
    ``layer_activation_bytes(liger=True)`` counts, exactly: each RMSNorm its input and a reciprocal norm, SwiGLU its
    gate and up projections; less than transformers' modules, so that the fit recomputes fewer layers. Counted with
    Liger's autograd functions around torch's computation of their kernels' outputs (``tests/liger_saves.py``)."""
    from liger_saves import liger_on_a_cpu
    from transformers import AutoModelForCausalLM

    from pacs.tensors.kernels import use_liger_kernels

    liger_on_a_cpu(monkeypatch)
    ids = torch.randint(0, 100, (4, 64), generator=torch.Generator().manual_seed(0))
    for architecture in ("qwen2.5-0.5b", "qwen3-4b"):
        saved = {}
        for layers in (1, 2):
            head_dim = {"head_dim": 32} if architecture.startswith("qwen3") else {}
            config = model_config(architecture, **{**SHAPE, **head_dim, "num_hidden_layers": layers})
            model = AutoModelForCausalLM.from_config(config).to(torch.bfloat16).train()
            use_liger_kernels(model)
            saved[layers] = saved_bytes(model, ids)
        d = dims(config)
        assert saved[2] - saved[1] == 4 * 64 * layer_activation_bytes(d, 2, liger=True), architecture
        assert layer_activation_bytes(d, 2, liger=True) < layer_activation_bytes(d, 2)


def tiny_config(**changes) -> dict:
    """A workflow config: the tiny experiment's keys on a model of SHAPE, trained on 2 GPUs with fsdp."""
    config = yaml.safe_load((REPO / "config/tiny.yaml").read_text())
    config["models"] = {"m": {"label": "M", "path": "org/m", "shape": SHAPE}}
    config["methods"] = {k: config["methods"][k] for k in ("ppo", "pacs")}
    config["data"]["benchmarks"] = {"toy_heldout": config["data"]["benchmarks"]["toy_heldout"]}
    config["released"], config["diversity"] = {}, {}
    config["train"]["rollout"] = {"n": 8, "max_response_length": 16, "engine": "vllm"}
    config["train"]["data"] = {"max_prompt_length": 16}
    config["train"]["trainer"] = {
        "total_steps": 10,
        "batch_size": 32,
        "mini_batch_size": 16,
        "micro_batch_size": 2,
        "strategy": "fsdp",
        "compute_dtype": "bfloat16",
        "logprob_chunk_size": 8,
    }
    config["eval"]["checkpoints"] = ["last"]
    config["data"]["benchmarks"]["toy_heldout"]["limit"] = 10
    config["resources"] = {"train": {"gpu": 2}, "evaluate": {"gpu": 1}}
    config["plan"] = {"mean_prompt_length": 12, "mean_response_length": 10}
    for key, value in changes.items():
        config = experiment.merged(config, {key: value})
    return config


def test_the_plan_of_a_tiny_experiment_equals_hand_computed_values():
    assert dims(model_config("qwen2.5-0.5b", **SHAPE))["params"] == PARAMS  # built models: test_distributed
    plan = experiment.plan(tiny_config())
    assert [j.name for j in plan.jobs] == ["train/m/ppo", "train/m/pacs", "evaluate/m/base/step_000000/toy_heldout",
                                           "evaluate/m/ppo/step_000010/toy_heldout",
                                           "evaluate/m/pacs/step_000010/toy_heldout"]  # fmt: skip
    cal = plan.calibration
    pacs = plan.job("train/m/pacs")
    update = pacs.memory["update"]
    # fp32 masters sharded over 2 GPUs: 4 bytes of parameters, 4 of gradients, 8 of AdamW moments
    assert (update["parameters"], update["gradients"], update["optimizer"]) == (PARAMS * 2, PARAMS * 2, PARAMS * 4)
    assert update["reference"] == 0  # PACS's log-ratio proxy needs the old policy, not a reference
    # root (embedding, head, norm) and two layers gathered in bf16; in backward the root's and a layer's bf16
    # gradients and that layer's fp32 copy for reduce-scatter
    root = 2 * 100 * 64 + 64
    assert update["gathered"] == (root + 2 * LAYER) * 2 + (root + LAYER) * 2 + LAYER * 4
    # micro-batch: 2 groups, packed with each prompt once: 2 × (16 + 8 × 16) = 288 positions, 256 response tokens;
    # on GPUs with Liger's kernels (each norm its input, SwiGLU its gate and up projections)
    per_layer = 2 * (4 * 64 + 2 * 64 + 2 * 32 + 3 * 128) + 4 * (2 + 2)
    assert update["activations"] == 288 * (2 * per_layer + 4 * 64 + 2 * 64 + 12)
    # the larger transient of backward: a layer's (three MLP gradients and two of the residual stream, bf16) over the
    # LM head's (a chunk of 8 positions' logits: bf16 matmul, fp32 copy, fp32 gradient; the head's fp32 gradient;
    # the response positions' hidden states)
    assert update["backward"] == max(288 * 2 * (3 * 128 + 2 * 64), 8 * 100 * (2 + 8) + 100 * 64 * 4 + 256 * 64 * 2)
    assert update["overhead"] == cal.overhead_bytes and "vllm graphs" in update  # vLLM asleep: its CUDA graphs stay
    ppo = plan.job("train/m/ppo").memory["update"]  # and a critic: the decoder, a value head (h + 1)
    critic = PARAMS - 100 * 64 + 64 + 1
    assert ppo["parameters"] == (PARAMS + critic) * 2 and ppo["optimizer"] == (PARAMS + critic) * 4
    generate = pacs.memory["generate"]
    assert generate["vllm"] == int(0.5 * cal.memory_bytes) and "gradients" not in generate
    kv = pacs.memory["kv_cache"]  # K and V, 2 layers × 32, bf16, per token of 16 + 16
    assert kv["per_sequence"] == 2 * 2 * 32 * 2 * 32 and kv["weights"] == PARAMS * 2

    # tokens: 10 steps × 32 prompts × 8 samples × 10 response tokens; trained: × (12 + 10)
    assert pacs.generated_tokens == 10 * 256 * 10 and pacs.trained_tokens == 10 * 256 * 22
    # old log-probs for all but the first mini-batch of 16 prompts (on-policy)
    assert pacs.scored_tokens == 10 * 16 * 8 * 22
    matmul = 2 * LAYER + 100 * 64  # the layers and the LM head; the input embedding is a lookup

    def forward(tokens, context, head=matmul):
        return 2 * head * tokens + 4 * 2 * 64 * context * tokens

    generate_flops = forward(256 * 10 + 32 * 12, 12 + 5)
    # the policy takes each prompt once for its 8 responses (trainer.share_prompt): 12 + 8 × 10 tokens a prompt
    train_flops, score_flops = 3 * forward(32 * 92, 11), forward(16 * 92, 11)
    assert pacs.flops == pytest.approx(10 * (generate_flops + train_flops + score_flops))
    # generation: each GPU decodes its 128 responses (mean 10 tokens, at most 16) in vLLM's KV cache, in bf16
    cache = (int(0.5 * cal.memory_bytes) - PARAMS * 2 - cal.vllm_overhead_bytes) / (2 * 2 * 32 * 2)
    generate = decode_seconds(dims(model_config("qwen2.5-0.5b", **SHAPE)), PARAMS * 2, 2 * 2 * 32 * 2, 12,
                              spread(128, 16, 10), cal, capacity_tokens=cache)  # fmt: skip
    assert 0 < generate < 1
    # forwards alone at score_hfu; forwards and backwards (no layer recomputes) at the narrowest width's HFU, 1536's
    update = (score_flops / cal.score_hfu + train_flops / cal.train_hfu_by_width["1536"]) / (cal.peak_flops * 2)
    step = generate + update + PARAMS * 2 / cal.refit_bytes_per_s  # and the new bf16 weights pushed into vLLM
    assert pacs.seconds == pytest.approx(cal.startup_s + 10 * step)
    assert pacs.gpu_hours == pytest.approx(pacs.seconds * 2 / 3600)
    assert plan.runtime_minutes("train/m/pacs") == 20  # (600 s + a fraction of a second) × 1.5, up to 10 min
    ppo_job = plan.job("train/m/ppo")  # and critic values and a critic update (no LM head)
    assert ppo_job.scored_tokens == 10 * (16 * 8 + 256) * 22

    base = plan.job("evaluate/m/base/step_000000/toy_heldout")  # 10 problems × 8 samples
    assert base.generated_tokens == 10 * 8 * 10
    assert base.flops == pytest.approx(forward(10 * 8 * 10 + 10 * 12, 12 + 5))
    weights = base.memory["generate"]["weights"]  # transformers (tiny.yaml's engine): 64 prompts' samples at once
    per_token = weights // PARAMS * 2 * 32 * 2
    decoded = decode_seconds(dims(model_config("qwen2.5-0.5b", **SHAPE)), weights, per_token, 12,
                             spread(80, 16, 10), cal, wave=64 * 8)  # fmt: skip
    assert base.seconds == pytest.approx(cal.startup_s + decoded)
    assert plan.errors == []


def test_a_transformers_engine_has_no_vllm_share_to_check():
    plan = experiment.plan(tiny_config(train={"rollout": {"engine": "hf"}}, eval={"settings": {"engine": "hf"}}))
    assert plan.errors == [] and all("kv_cache" not in j.memory for j in plan.jobs)
    assert "vllm" not in plan.job("train/m/pacs").memory["generate"]


def test_a_calibration_file_sets_the_constants(tmp_path):
    default = experiment.plan(tiny_config()).job("train/m/pacs")
    path = tmp_path / "gpu.json"
    defaults = Calibration()
    path.write_text(json.dumps({"gpu": "test GPU", "memory_bytes": 10**11, "peak_flops": 1e15,
                                "train_hfu_by_width": {"64": 2 * defaults.hfu_at(64)},
                                "score_hfu": 2 * defaults.score_hfu,
                                "refit_bytes_per_s": 2e15 / 989e12 * defaults.refit_bytes_per_s,
                                "decode_efficiency": 2 * defaults.decode_efficiency,
                                "hbm_bytes_per_s": 1e15 / 989e12 * defaults.hbm_bytes_per_s,
                                "measured": {"anything": 1}}))  # fmt: skip
    plan = experiment.plan(tiny_config(plan={"calibration": str(path)}))
    job = plan.job("train/m/pacs")
    assert plan.calibration.gpu == "test GPU" and job.memory["generate"]["vllm"] == int(0.5 * 10**11)
    # twice the efficiencies on a GPU of 1e15 / 989e12 the peak and the memory bandwidth (the larger KV cache
    # of its 1e11 bytes changes nothing: every response fits in either)
    ratio = (default.seconds - 600) / (job.seconds - 600)
    assert ratio == pytest.approx(2 * 1e15 / 989e12)
    shown = format_plan(plan)  # what the file set is measured; the rest as the defaults say
    assert "train_hfu_by_width measured (calibration file" in shown and "push_bytes_per_s assumed" in shown
    path.write_text(json.dumps({"train_hfu": 0.5, "typo": 1}))
    with pytest.raises(ValueError, match="typo"):
        experiment.plan(tiny_config(plan={"calibration": str(path)}))
    path.write_text(json.dumps({"train_hfu": 0.5, "generate_mfu": 0.2}))  # a file from before the roofline
    with pytest.raises(ValueError, match="generate_mfu: decoding is priced by its roofline"):
        experiment.plan(tiny_config(plan={"calibration": str(path)}))
    path.write_text(json.dumps({"train_mfu": 0.3}))  # a file from before the update's recompute was counted
    with pytest.raises(ValueError, match="train_mfu: the update is priced by hardware FLOPs now"):
        experiment.plan(tiny_config(plan={"calibration": str(path)}))


def test_a_job_too_big_for_its_gpu_is_an_error_naming_the_run_and_keys():
    big = {**SHAPE, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
           "num_attention_heads": 64, "num_key_value_heads": 8}  # fmt: skip
    plan = experiment.plan(tiny_config(models={"m": {"label": "M", "path": "org/m", "shape": big}}))
    update = [e for e in plan.errors if e.startswith("train/m/pacs: the update phase")]
    assert update and "train (or methods.pacs.train).trainer.strategy fsdp or more resources.train.gpu" in update[0]
    # the evaluation engine: 0.05 of an 80 GB card cannot hold a 70B model's weights, so no KV cache at all
    plan = experiment.plan(tiny_config(eval={"settings": {"engine": "vllm", "vllm": {"gpu_memory_utilization": 0.05}}}))
    assert plan.errors == []  # the tiny model still fits
    small = {"settings": {"engine": "vllm", "vllm": {"gpu_memory_utilization": 0.05}}}
    plan = experiment.plan(tiny_config(models={"m": {"label": "M", "path": "org/m", "shape": big}}, eval=small))
    assert any(e.startswith("evaluate/m/base/step_000000/toy_heldout: vLLM's share holds")
               and "eval.settings.vllm.gpu_memory_utilization" in e for e in plan.errors)  # fmt: skip


def test_a_model_of_unknown_architecture_is_an_error_naming_the_key():
    with pytest.raises(ValueError, match=r"models.x.shape"):
        model_shape({"path": "someone/some-model"}, "models.x")
    assert model_shape({"path": "Qwen/Qwen2.5-7B-Instruct"}, "models.x").hidden_size == 3584
    with pytest.raises(ValueError, match=r"models.x.shape: .*missing \['vocab_size'\]"):
        model_shape({"path": "p", "shape": {k: 2 for k in SHAPE if k != "vocab_size"}}, "models.x")


def test_a_local_model_directory_gives_its_own_shape(tiny_model):
    shape = model_shape({"path": str(tiny_model)}, "models.tiny")
    built = json.loads((tiny_model / "config.json").read_text())
    assert (shape.vocab_size, shape.hidden_size, shape.tie_word_embeddings) == (built["vocab_size"], 128, True)
    assert model_shape({"build": "tiny"}, "models.tiny").vocab_size >= built["vocab_size"]


def test_pacs_plan_on_the_paper_config(tmp_path, capsys):
    """The paper's plan names every job the workflow would run, fits its H100s, and gives each a runtime;
    with ddp instead of fsdp the 7B runs cannot fit, and `pacs plan` says which keys to change."""
    assert main(["plan", str(REPO / "config/config.yaml"), "--out", str(tmp_path / "plan.md")]) == 0
    text = capsys.readouterr().out
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    runs = experiment.run_configs(config)
    names = [f"train/{m}/{k}" for m, k in runs] + [
        f"evaluate/{e['model']}/{e['method']}/step_{e['step']:06d}/{e['benchmark']}"
        for e in experiment.evaluations(config, runs)
    ]
    assert len(names) == 58 and all(f"| {n} |" in text for n in names)
    assert (tmp_path / "plan.md").read_text() == text and "GPU-hours" in text and "Does not fit" not in text
    ddp = tmp_path / "ddp.yaml"
    ddp.write_text(yaml.safe_dump({"train": {"trainer": {"strategy": "ddp", "compute_dtype": None}}}))
    assert main(["plan", str(REPO / "config/config.yaml"), str(ddp)]) == 1
    text = capsys.readouterr().out
    assert "- train/qwen2.5-7b/pacs: the update phase needs" in text
    assert "train (or methods.pacs.train).trainer.strategy fsdp" in text


def test_the_paper_plan_under_a_time_limit_and_a_disk_quota(tmp_path, capsys):
    """A 48-hour partition: each job's runtime is capped at it and a run needs ceil(hours × margin / what
    one job leaves after startup and a final checkpoint) jobs; retention bounds each run's disk (2 whole
    checkpoints, one being written, the evaluated weights), and a quota below the total is an error naming
    the keys."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    limited = experiment.merged(config, {"resources": {"train": {"max_runtime": 2880}}})
    plan = experiment.plan(limited)
    ppo, grpo = plan.job("train/qwen2.5-7b/ppo"), plan.job("train/qwen2.5-7b/grpo")
    cal = plan.calibration
    checkpoint_s = sum(ppo.checkpoint.values()) / cal.checkpoint_bytes_per_s
    usable = 2880 * 60 - cal.startup_s - 1.5 * checkpoint_s
    assert plan.segments(ppo.name) == -(-((ppo.seconds - cal.startup_s) * 1.5) // usable) == 3  # 92 h, × 1.5
    assert plan.runtime_minutes(ppo.name) == 2880 and plan.runtime_minutes(grpo.name) == 2880
    assert ppo.seconds_longest > 1.9 * ppo.seconds  # every response at 4,096 tokens, not the assumed mean 2,048
    full, policy = sum(grpo.checkpoint.values()), grpo.checkpoint["policy"]
    assert grpo.disk == {"peak": 3 * full, "final": 2 * full, "checkpoints": 15}  # only the last is evaluated
    every = experiment.plan(experiment.merged(config, {"eval": {"every": 100}}))  # steps 100, 200 kept as weights
    assert every.job(grpo.name).disk["peak"] == 3 * full + 2 * policy
    assert plan.errors == []
    quota = experiment.plan(experiment.merged(limited, {"plan": {"disk_quota": 1000}}))
    assert plan.disk_bytes > 1000e9 and len(quota.errors) == 1
    assert "more than plan.disk_quota (1000 GB); change train.checkpoint.save_every" in quota.errors[0]
    assert main(["plan", str(REPO / "config/config.yaml")]) == 0
    assert "| segments | disk peak (GB) |" in capsys.readouterr().out


def test_evaluations_under_a_time_limit_a_preemption_s_cost_and_superseded_runs(tmp_path, monkeypatch):
    """An evaluation job longer than resources.evaluate.max_runtime is started again by SLURM (each start's
    start-up, then chunks) and asks for the limit; one whose single chunk cannot fit after a start-up is an error
    naming chunk_problems. A preemption without warning costs at most checkpoint.save_every mean steps. Runs moved
    aside by a change of what they compute count in the disk figure and its quota until deleted."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    plan = experiment.plan(experiment.merged(config, {"resources": {"evaluate": {"max_runtime": 120}}}))
    cal = plan.calibration
    suite = [j.name for j in plan.jobs if j.name.startswith("evaluate/qwen2.5-7b/pacs/step_000300/")]
    needed = sum(plan.job(n).seconds for n in suite) - (len(suite) - 1) * cal.startup_s
    starts = math.ceil((needed - cal.startup_s) * 1.5 / (7200 - cal.startup_s))
    assert plan.segments(*suite) == starts > 1 and plan.runtime_minutes(*suite) == 120 and plan.errors == []
    assert f"| evaluate_model | qwen2.5-7b/pacs/step_000300 | {needed / 60:.0f} | 120 | 120 | {starts} | - |" in \
        format_plan(plan)  # fmt: skip
    chunk = max(plan.job(n).chunk_s for n in suite)
    tight = experiment.plan(experiment.merged(config, {"resources": {"evaluate": {"max_runtime": math.ceil(
        (cal.startup_s + chunk) / 60)}}}))  # fmt: skip
    assert any("lower chunk_problems (data.benchmarks." in e and "or raise resources.evaluate.max_runtime" in e
               for e in tight.errors), tight.errors  # fmt: skip
    ppo = plan.job("train/qwen2.5-7b/ppo")
    lost = plan.preemption_minutes(ppo.name)
    assert lost == pytest.approx(20 * (ppo.seconds - cal.startup_s) / 300 / 60)
    assert f"| train_policy | qwen2.5-7b/ppo | {ppo.seconds / 60:.0f} |" in format_plan(plan)
    assert f"| {lost:.0f} (20 steps) |" in format_plan(plan)
    monkeypatch.chdir(tmp_path)  # results/paper/ here
    aside = tmp_path / "results/paper/runs/qwen2.5-7b/pacs.superseded/20261201T000000/checkpoints"
    aside.mkdir(parents=True)
    (aside / "model.safetensors").write_bytes(b"0" * 3_000_000)
    moved = experiment.plan(config)
    assert moved.superseded_bytes == 3_000_000 and moved.disk_bytes == experiment.plan(
        yaml.safe_load((REPO / "config/config.yaml").read_text()) | {"name": "elsewhere"}).disk_bytes + 3_000_000
    assert "of them 0.0 GB are runs moved aside by a change of what they compute" in format_plan(moved)


def test_plan_settings_are_checked():
    with pytest.raises(ConfigError, match="plan.runtime_margn"):
        experiment.plan(tiny_config(plan={"runtime_margn": 2}))
    config = copy.deepcopy(tiny_config())
    config["data"]["benchmarks"] = {"mystery": {"label": "?", "n": 4, "ks": [1]}}
    with pytest.raises(ConfigError, match="data.benchmarks.mystery"):
        experiment.plan(config)


def test_pacs_bench_gpu_calibrates_the_plan_per_width_each_part_under_its_time_limit(tmp_path, capsys):
    """The calibration command's mechanics on the CPU: updates as the paper configs train (FSDP2 over a group of
    one, bf16 compute, checkpointing, micro-batches sized by memory: ``auto``) of a tiny shape and a slice of a
    wider one (at most the layers the memory plan fits), then the memory bandwidth and transformers' generation.
    It says each part as it goes, writes the file after each and a table beside it; the plan prices each model at
    the nearest measured width. Each model is built on the meta device and materialised (its build's seconds in
    its row, and the loss it trains on finite); the peak memory the allocator reserved is a GPU's figure ('-' on
    CPU); every MFU is said to be one rank's, without collectives. A part past its time limit, counted from its
    model's build, or past the build's own limit is recorded as such; an unknown shape fails before any part runs;
    without CUDA and without --allow-cpu it refuses. A bench stopped in a part (killed, its sitting's limit) leaves
    the file as written after the part before: read here as the second part begins, it holds the first part's
    MFU and is a calibration the plan reads."""
    import pacs.bench.gpu
    from pacs.bench.gpu import ONE_RANK, reserved_over_allocated, update_part, update_run

    out, stopped = tmp_path / "gpu.json", tmp_path / "stopped.json"

    def reading_the_file_first(*args, **kwargs):  # the file a bench stopped in this part would leave
        if out.exists() and not stopped.exists():
            stopped.write_text(out.read_text())
        return update_part(*args, **kwargs)

    args = ["bench", "gpu", "--shapes", "tiny", "--slice", "qwen2.5-0.5b", "--set", "num_hidden_layers=2",
            "vocab_size=512", "intermediate_size=256", "num_attention_heads=2", "num_key_value_heads=1", "--rows",
            "4", "--group-size", "2", "--prompt-length", "16", "--response-length", "48", "--steps", "2",
            "--generate-batch", "4", "--new-tokens", "8", "--peak-flops", "1e12", "--out", str(out)]  # fmt: skip
    if not torch.cuda.is_available():
        assert main(args) == 2 and "CUDA" in capsys.readouterr().err and not out.exists()
    assert main([*args[:2], "--shapes", "qwen9-nope", *args[3:], "--allow-cpu"]) == 2
    assert "qwen9-nope" in capsys.readouterr().err and not out.exists()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pacs.bench.gpu, "update_part", reading_the_file_first)
        assert main([*args, "--allow-cpu"]) == 0
    said = capsys.readouterr().out
    assert re.search(r"3 parts, each under 70 s once its model is built \(under 300 s\): updates of tiny, "
                     r"qwen2.5-0.5b \(2 layers\), no liger", said), said  # fmt: skip
    assert re.search(r"tiny no liger: 2 updates of 4 rows.*\ntiny no liger: \d+ tokens/s, MFU [\d.]+, HFU [\d.]+, "
                     r"1 micro-batch"
                     r".*\(reserved - GB, planned [\d.]+ GB\), built in [\d.]+ s"
                     r".*\nqwen2.5-0.5b \(2 layers\) no liger: 2 updates", said), said  # fmt: skip
    assert re.search(r"memory bandwidth: \d+ GB/s\ntiny: transformers generate, 4 sequences", said), said
    data = json.loads(out.read_text())
    updates = data["measured"]["updates"]
    assert [(u["shape"], u["slice"], u["hidden_size"]) for u in updates] == [("tiny", None, 128),
                                                                              ("qwen2.5-0.5b", 2, 896)]  # fmt: skip
    for u in updates:
        assert u["strategy"] == "fsdp" and u["trainer"]["compute_dtype"] == "bfloat16" and u["planned"]["gathered"] > 0
        assert u["trainer"]["max_tokens_per_micro_batch"] == "auto" and u["sizes"]["max_tokens_per_micro_batch"] > 0
        assert u["build_s"] > 0 and len(u["losses"]) == len(u["grad_norms"]) == 2
        assert all(math.isfinite(x) and x > 0 for x in [*u["losses"], *u["grad_norms"]])
        assert u["ranks"][0]["peak_reserved_bytes"] is None and u["ranks"][0]["peak_bytes"] > 0
    assert data["train_hfu_by_width"] == {"128": updates[0]["hfu"], "896": updates[1]["hfu"]}
    assert 0 < data["train_hfu"] == updates[0]["hfu"] and data["hbm_bytes_per_s"] > 0
    for u in updates:  # auto recomputes no layer here: the GPU's work is the model's (tests/test_cli.py: with some)
        assert u["sizes"]["checkpoint_layers"] == 0 and u["hfu"] == u["mfu"]
    partial = json.loads(stopped.read_text())
    assert [u["shape"] for u in partial["measured"]["updates"]] == ["tiny"]
    assert 0 < partial["train_hfu"] == partial["train_hfu_by_width"]["128"] == updates[0]["hfu"]
    assert experiment.plan(tiny_config(plan={"calibration": str(stopped)})).calibration.hfu_at(64) == updates[0]["hfu"]
    assert data["measured"]["generations_transformers"][0]["tokens_per_s"] > 0
    # on a CPU no allocator's ratio nor CUDA context: the defaults stay, and the file says what it did not measure
    measured = data["measured"]
    assert measured["context_bytes"] is None and measured["reserved_over_allocated"] is None
    assert "memory_headroom" not in data and "overhead_bytes" not in data and "vLLM" in measured["not_measured"]
    assert reserved_over_allocated([{"ranks": [{"peak_reserved_bytes": 12, "peak_bytes": 10}]},
                                    {"ranks": [{"peak_reserved_bytes": None, "peak_bytes": 10}]}]) == 1.2
    table = out.with_suffix(".md").read_text()
    assert "| qwen2.5-0.5b | 2 | no liger |" in table and ONE_RANK in data["source"] and f"MFU of {ONE_RANK}." in table
    assert "| peak GB | reserved GB | planned GB | build s |" in table
    assert re.search(r"\| qwen2.5-0.5b \| 2 \| no liger \|.* \| [\d.]+ \| - \| [\d.]+ \| [\d.]+ \|\n", table), table
    plan = experiment.plan(tiny_config(plan={"calibration": str(out)}))
    cal = plan.calibration
    assert cal.train_hfu_by_width == data["train_hfu_by_width"] and cal.peak_flops == 1e12
    low, high = updates[0]["hfu"], updates[1]["hfu"]  # interpolated in width between 128 and 896, flat beyond
    assert cal.hfu_at(64) == cal.hfu_at(128) == low and cal.hfu_at(2000) == high
    assert cal.hfu_at(512) == pytest.approx(low + (high - low) * (512 - 128) / (896 - 128))
    assert cal.hbm_bytes_per_s == data["hbm_bytes_per_s"] and cal.max_num_seqs == 256
    assert f"update HFU {low:.3f} at width 128, {high:.3f} at width 896" in format_plan(plan)
    run = update_run(4, 2, 16, 48, {"strategy": "fsdp", "compute_dtype": "bfloat16"})
    late = update_part("tiny", {}, run["trainer"], run, 2, 1e12, 0.01, False)
    assert late.pop("build_s") > 0 and late == {"shape": "tiny", "hidden_size": 128,
                                                "error": "timed out 0 s after its model was built"}  # fmt: skip
    unbuilt = update_part("tiny", {}, run["trainer"], run, 2, 1e12, 60, False, build_s=0.01)
    assert unbuilt == {"shape": "tiny", "hidden_size": 128, "error": "timed out after 0 s before its model was built"}


def test_the_peak_flops_are_the_exact_card_s():
    """The dense bf16 peak by the name torch gives the card, case and spacing aside: an H100 PCIe or NVL is not
    priced as an SXM H100, and a card not in the table is an error asking for --peak-flops."""
    from pacs.bench.gpu import peak_flops_of

    assert peak_flops_of("NVIDIA H100 80GB HBM3") == peak_flops_of("NVIDIA H200") == 989e12
    assert peak_flops_of("NVIDIA H100 PCIe") == 756e12 and peak_flops_of(" nvidia  h100 nvl ") == 835e12
    assert peak_flops_of("NVIDIA H200 NVL") == 835e12 and peak_flops_of("NVIDIA B200") == 2250e12
    for a100 in ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-40GB", "NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-40GB"):
        assert peak_flops_of(a100) == 312e12
    for unknown in ("NVIDIA H100", "NVIDIA H100 SXM5 94GB", "NVIDIA GeForce RTX 4090", "cpu"):
        with pytest.raises(ValueError, match=rf"{re.escape(repr(unknown))} is not in .*give --peak-flops"):
            peak_flops_of(unknown)


def test_a_model_built_on_the_meta_device_is_the_model_from_config():
    """``pacs.bench.update.built_model`` (meta device, then materialised) gives what ``from_config`` gives: the
    same parameters by name and shape, the LM head tied to the embeddings, transformers' initialisation (unit
    norms, weights at ``initializer_range``, the rotary frequencies computed again) and a finite forward."""
    from transformers import AutoModelForCausalLM

    from pacs.bench.update import built_model, update_batch
    from pacs.config import from_dict
    from pacs.ranks.distributed import DistEnv
    from pacs.tensors.batch import token_logprobs
    from pacs.train.settings.config import TrainerConfig
    from pacs.train.update.minibatch import micro_batch
    from pacs.train.update.packing import Micro

    config = model_config("qwen2.5-0.5b", num_hidden_layers=2, vocab_size=512, intermediate_size=256)
    reference = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    t = from_dict(TrainerConfig, {"strategy": "ddp", "logprob_chunk_size": 64})
    torch.manual_seed(0)
    model, module = built_model(config, t, DistEnv())
    assert config.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight
    shapes = {n: p.shape for n, p in model.named_parameters()}
    assert shapes == {n: p.shape for n, p in reference.named_parameters()} and not any(
        p.is_meta for p in model.parameters())  # fmt: skip
    assert sum(p.numel() for p in module.parameters()) == sum(p.numel() for p in reference.parameters())
    assert torch.equal(model.model.rotary_emb.inv_freq, reference.model.rotary_emb.inv_freq)
    assert torch.equal(model.model.norm.weight, torch.ones(config.hidden_size))
    assert abs(model.model.layers[0].mlp.up_proj.weight.std().item() - config.initializer_range) < 2e-3
    batch = update_batch(config.vocab_size, 4, 2, 8, 16, "fixed", 0)
    logprobs, _ = token_logprobs(module, micro_batch(batch, Micro([0, 1]), 2, "cpu", None), 1.0, None, 2)
    assert logprobs.isfinite().all() and (logprobs < 0).any()


def test_preflight_measurements_replace_the_plans_constants(tmp_path, monkeypatch):
    """One preflight per distinct training job shape (the paper's β sweep shares PACS's); a preflight.json
    taken under the current spec gives its runs' start-up, step (at the maximum length) and checkpoint
    seconds, hence hours and segments; one taken under another spec is ignored."""
    monkeypatch.chdir(tmp_path)
    config = experiment.merged(yaml.safe_load((REPO / "config/config.yaml").read_text()),
                               {"resources": {"train": {"max_runtime": 2880}}})  # fmt: skip
    runs = experiment.run_configs(config)
    estimated = experiment.plan(config, runs)
    specs = experiment.preflight_specs(config, runs, estimated)
    assert len(runs) == 10 and len(specs) == 6
    pacs = next(s for s in specs.values() if s["name"] == "train/qwen2.5-7b/pacs")
    assert len(pacs["runs"]) > 1 and all(r.startswith("train/qwen2.5-7b/pacs") for r in pacs["runs"])
    assert pacs["eval"]["settings"]["max_tokens"] == max(s["max_tokens"] for s in (
        experiment.eval_settings(config, b, runs) for b in config["data"]["benchmarks"]))  # fmt: skip
    shape = next(k for k, s in specs.items() if s is pacs)
    measured = {"startup_s": 300.0, "step_s": 1200.0, "checkpoint_s": 900.0, "spec": pacs}
    path = Path(experiment.preflight_dir(config, shape)) / "preflight.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(measured))
    plan = experiment.plan(config, runs)
    for name in pacs["runs"]:
        job, before = plan.job(name), estimated.job(name)
        assert job.seconds_longest == 300.0 + 300 * 1200.0
        assert job.seconds / job.seconds_longest == pytest.approx(
            (before.seconds - 600.0) / (before.seconds_longest - 600.0), rel=1e-3
        )  # scaled to the mean length as the FLOPs model scales it
        usable = 2880 * 60 - 300.0 - 1.5 * 900.0
        assert plan.segments(name) == -(-((job.seconds - 300.0) * 1.5) // usable)
    ppo = "train/qwen2.5-7b/ppo"
    assert plan.job(ppo).seconds == estimated.job(ppo).seconds  # no preflight of its own yet
    assert "Measured by pacs preflight (hours, runtime, segments): train/qwen2.5-7b/pacs" in format_plan(plan)
    longer = experiment.merged(config, {"train": {"rollout": {"max_response_length": 8192}}})
    other = experiment.preflight_specs(longer, experiment.run_configs(longer), experiment.plan(longer))[shape]
    assert other["key"] != pacs["key"]  # what the preflight measures changed: its measurements no longer count
    path.write_text(json.dumps({**measured, "spec": other}))
    assert experiment.plan(config, runs).job(pacs["name"]).seconds == estimated.job(pacs["name"]).seconds
    lr = experiment.merged(config, {"train": {"optim": {"lr": 1e-5}}})  # a learning rate does not change them
    assert experiment.preflight_specs(lr, experiment.run_configs(lr), estimated)[shape]["key"] == pacs["key"]


def test_auto_sizes_are_the_fewest_recomputing_layers_then_the_largest_budget_the_memory_plan_fits():
    """The paper config's 7B runs (both keys auto) on made-up devices: the layers are the fewest with which one
    longest group fits (PACS, whose update holds whole groups; one longest row for PPO, whose groups split) (one
    fewer does not), the budget the largest from that floor in steps of ``STEP`` that
    fits with them (a step more does not), or the mini-batch's share; each key alone, the other fixed; a device
    too small for one group is said not to fit, and the plan errs for it. Fitting is within the device's memory less
    the calibration's headroom, or within a run's own trainer.memory_limit_gb as it is. The plan's job is the
    resolution on the plan's GPU and its memory the resolved run's. A model spread with trainer.checkpoint_layers
    recomputes only its first K layers, and its gradients are those of recomputing every layer."""
    from transformers import AutoModelForCausalLM

    from pacs.plan.fit import STEP, fit_sizes
    from pacs.plan.memory import training_memory
    from pacs.ranks.distributed import DistEnv
    from pacs.train.settings.config import TrainerConfig
    from pacs.train.update.models import spread

    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    runs = experiment.run_configs(config)
    plan = experiment.plan(config, runs)
    shape = model_shape(config["models"]["qwen2.5-7b"], "models.qwen2.5-7b")
    cal, layers = plan.calibration, shape.num_hidden_layers
    device = 75_000_000_000  # a made-up device: some layers recompute, but not all
    for method, critic in (("pacs", False), ("ppo", True)):  # neither has a reference model
        run, job = runs[("qwen2.5-7b", method)], plan.job(f"train/qwen2.5-7b/{method}")
        assert run["trainer"]["max_tokens_per_micro_batch"] == run["trainer"]["checkpoint_layers"] == "auto"

        def peak(tokens, k, memory, run=run, gpus=job.gpus, critic=critic) -> int:
            r = {**run, "trainer": {**run["trainer"], "max_tokens_per_micro_batch": tokens, "checkpoint_layers": k}}
            planned = training_memory(shape, r, gpus, False, critic, memory, cal)
            return max(sum(planned[p].values()) for p in ("no_grad", "update"))

        def fit(memory, run=run, gpus=job.gpus, critic=critic, **trainer):
            r = {**run, "trainer": {**run["trainer"], **trainer}}
            return fit_sizes(shape, r, gpus, gpus, False, critic, memory, cal)

        group = 512 + 8 * 4096  # one group packed, its prompt once
        floor = group if method == "pacs" else 512 + 4096  # PPO's update splits a group above the budget
        for memory in (device, cal.memory_bytes, 141e9):
            trainer, got = fit(int(memory))
            usable = int(int(memory) * (1 - cal.memory_headroom))
            assert got.fits and got.floor == floor and got.cap == 256 // job.gpus * group, (method, memory, got)
            assert got.usable == usable and usable < memory
            assert trainer["max_tokens_per_micro_batch"] == got.tokens and trainer["checkpoint_layers"] == got.layers
            assert peak(floor, got.layers, memory) <= usable
            assert got.layers == 0 or peak(floor, got.layers - 1, memory) > usable
            assert floor <= got.tokens and peak(got.tokens, got.layers, memory) <= usable
            assert got.tokens == got.cap or peak(got.tokens + STEP, got.layers, memory) > usable
            assert (got.tokens - floor) % STEP == 0 or got.tokens == got.cap
        usable = int(device * (1 - cal.memory_headroom))
        _, small = fit(device)
        assert small.tokens < small.cap  # memory, not the mini-batch, decides
        assert 0 < small.layers < layers if method == "pacs" else small.layers == 0  # a row needs no recompute
        _, budget = fit(device, checkpoint_layers=None)  # every layer recomputes: a larger budget fits
        assert budget.tokens > small.tokens and peak(budget.tokens + STEP, None, device) > usable
        larger = small.tokens + 2 * STEP
        _, fixed = fit(device, max_tokens_per_micro_batch=larger)  # a larger fixed budget takes more recompute
        assert fixed.fits and fixed.tokens == larger and fixed.layers > small.layers
        assert peak(larger, fixed.layers, device) <= usable < peak(larger, fixed.layers - 1, device)
        _, limited = fit(device, memory_limit_gb=60)  # a limit of the run's own: as it is, no headroom
        assert limited.usable == 60e9 and limited.peak <= 60e9 < small.peak  # more recompute, or a smaller budget
        assert (limited.layers, -limited.tokens) > (small.layers, -small.tokens)
        _, tiny = fit(int(30e9))
        assert not tiny.fits and tiny.tokens == floor and tiny.layers == layers
        trainer, expected = fit(cal.memory_bytes)
        assert job.auto and job.fit == expected and job.limit == expected.usable
        assert job.memory["update"]["activations"] == training_memory(
            shape, {**run, "trainer": trainer}, job.gpus, False, critic, cal.memory_bytes, cal)["update"]["activations"]
    assert "Micro-batches sized by memory" in format_plan(plan) and not plan.errors
    longer = experiment.merged(config, {"train": {"rollout": {"max_response_length": 65536}}})
    errors = experiment.plan(longer).errors
    assert any("train/qwen2.5-7b/pacs: the update phase needs" in e for e in errors), errors

    ids = torch.randint(0, 100, (2, 16), generator=torch.Generator().manual_seed(0))
    grads = {}
    for k in (None, 1):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(model_config("qwen2.5-0.5b", **SHAPE))
        model = spread(model, TrainerConfig(gradient_checkpointing=True, checkpoint_layers=k), DistEnv())
        assert [layer.gradient_checkpointing for layer in model.model.layers] == ([True, True] if k is None
                                                                                  else [True, False])  # fmt: skip
        model(input_ids=ids).logits.float().square().mean().backward()
        grads[k] = {name: p.grad for name, p in model.named_parameters()}
    for name, grad in grads[None].items():
        torch.testing.assert_close(grads[1][name], grad, msg=name)


def test_released_models_are_planned_on_their_own_gpus_and_limo_needs_two_h100s_or_one_h200():
    """v2's Table 1 models are evaluation jobs of the plan, each on its architecture; LIMO (Qwen2.5-32B) on one
    H100 leaves vLLM too little KV cache to run at speed (an error naming its tensor_parallel_size), on two
    H100s or one H200 it fits."""
    config = yaml.safe_load((REPO / "config/paper_v2.yaml").read_text())
    plan = experiment.plan(config)
    released = [j for j in plan.jobs if "/released/" in j.name]
    assert len(released) == 35 and not [e for e in plan.errors if "/released/" in e]
    limo = plan.job("evaluate/limo/released/step_000000/aime2024")
    assert limo.memory["kv_cache"]["weights"] > 60e9 and limo.gpus == 1  # 32.8 B parameters in bf16, one H200
    on_h100 = experiment.merged(config, {"plan": {"gpu": "h100"}})
    errors = [e for e in experiment.plan(on_h100).errors if "/released/" in e]
    assert len(errors) == 5 and all(e.startswith("evaluate/limo/") for e in errors)
    assert "change released.limo.tensor_parallel_size" in errors[0] and "the 8 sequences at once" in errors[0]
    two = experiment.plan(experiment.merged(on_h100, {"released": {"limo": {"tensor_parallel_size": 2}}}))
    job = two.job("evaluate/limo/released/step_000000/aime2024")
    assert not [e for e in two.errors if "/released/" in e] and job.gpus == 2
    assert job.memory["kv_cache"]["weights"] == pytest.approx(limo.memory["kv_cache"]["weights"] / 2, rel=1e-6)
    assert job.seconds < limo.seconds < job.gpu_hours * 3600  # two GPUs: sooner, and more GPU-hours (two start-ups)


def test_decoding_is_priced_by_its_roofline():
    """pacs.plan.decode by hand: memory-bound iterations read the weights and every running sequence's KV
    cache; compute-bound ones cost their FLOPs; vLLM's cache and max_num_seqs bound the sequences at once, and
    transformers' calls wait for their longest response."""
    d = {"layers": 2, "layer_params": 1000, "vocab": 10, "h": 100, "q": 8}  # 2·N = 2 · 3000 FLOPs a token
    cal = Calibration(hbm_bytes_per_s=1e6, peak_flops=1e9, decode_efficiency=0.5, max_num_seqs=1024, score_hfu=0.25)
    bandwidth, flops = 0.5e6, 0.5e9
    attention = 4 * 2 * 8  # FLOPs per token of context
    prefill = (2 * 3000 * 4 + attention * 4 * 4 / 2) / 0.25e9  # one 4-token prompt: a forward, at score_hfu
    # one sequence of 6 tokens after a 4-token prompt: iteration i reads the weights and 4 + i + 1/2 tokens of KV
    one = decode_seconds(d, 1000, 10, 4, np.array([6]), cal, capacity_tokens=1e9)
    assert one == pytest.approx(prefill + sum((1000 + 10 * (4 + i + 0.5)) / bandwidth for i in range(6)))
    # a cache of room for two sequences' prompts and a token: four sequences run two at a time
    two = decode_seconds(d, 1000, 10, 4, np.array([6, 6]), cal, capacity_tokens=1e9)
    waves = decode_seconds(d, 1000, 10, 4, np.array([6] * 4), cal, capacity_tokens=2 * 5 + 4)
    assert waves == pytest.approx(2 * two)
    capped = decode_seconds(d, 1000, 10, 4, np.array([6] * 4), Calibration(**{**vars(cal), "max_num_seqs": 2}),
                            capacity_tokens=1e9)  # fmt: skip
    assert capped == pytest.approx(2 * two)
    assert decode_seconds(d, 1000, 10, 4, np.array([6]), cal, capacity_tokens=4) == math.inf  # not one fits
    # transformers: a call of a 1- and a 6-token response decodes both for 6 iterations; vLLM frees the first
    hf = decode_seconds(d, 1000, 10, 4, np.array([1, 6]), cal, wave=2)
    assert hf == pytest.approx(2 * prefill + sum((1000 + 10 * 2 * (4 + i + 0.5)) / bandwidth for i in range(6)))
    vllm = decode_seconds(d, 1000, 10, 4, np.array([1, 6]), cal, capacity_tokens=1e9)
    assert vllm == pytest.approx(hf - 10 * sum(4 + i + 0.5 for i in range(1, 6)) / bandwidth)
    # many sequences on free weights: compute-bound, each iteration 2·N per sequence and its attention
    many = decode_seconds(d, 0, 0, 4, np.array([1] * 1000), cal, capacity_tokens=1e9)
    assert many == pytest.approx(1000 * prefill + (1000 * 2 * 3000 + attention * 1000 * 4.5) / flops)
    # the spread: exponential of the mean, cut at the maximum, in an order unrelated to length; the share at the cap
    # e^(-cap/θ): 0.15 % at verl's GSM8K log's mean (158 of 1,024; it logged 0.000-0.001), one in 160 at NeMo-RL's
    for count, cap, mean in ((1000, 4096, 1024), (2000, 1024, 158), (4000, 3968, 777), (1000, 4096, 2048)):
        lengths = spread(count, cap, mean)
        assert lengths.max() <= cap and abs(lengths.mean() / mean - 1) < 0.01 and lengths[0] != lengths.min()
        assert abs(np.mean(lengths == cap) - capped_share(mean, cap)) <= 1 / count
    assert 0.001 < capped_share(158, 1024) < 0.002 and 0.005 < capped_share(777, 3968) < 0.007
    assert spread(256, 3968, 777).max() == 3968  # a GPU's 256 responses of NeMo-RL's step: one at the cap
    assert np.all(spread(8, 16, 16) == 16) and capped_share(16, 16) == 1


def test_one_step_off_is_priced_for_each_split_of_a_runs_gpus():
    """pacs.plan.overlap on the tiny plan's 2-GPU runs: the colocated step, then one generator GPU (vLLM at 0.9
    of the card) beside one trainer, a step the longer of the two plus the push; the table and its flags."""
    from pacs.plan.decode import GENERATOR_MEMORY_UTILIZATION
    from pacs.plan.jobs import Job
    from pacs.plan.overlap import Split, format_overlap

    plan = experiment.plan(tiny_config())
    cal, job = plan.calibration, plan.job("train/m/pacs")
    colocated, split = job.splits
    assert colocated.generators == 0 and colocated.push_s == pytest.approx(PARAMS * 2 / cal.refit_bytes_per_s)
    assert colocated.step_s == pytest.approx(colocated.generate_s + colocated.update_s + colocated.push_s)
    assert 10 * colocated.step_s == pytest.approx(job.seconds - cal.startup_s)  # the plan's own step
    assert split.generators == 1 and split.update_s == pytest.approx(2 * colocated.update_s)  # on one GPU of two
    d = dims(model_config("qwen2.5-0.5b", **SHAPE))
    cache = (GENERATOR_MEMORY_UTILIZATION * cal.memory_bytes - PARAMS * 2 - cal.vllm_overhead_bytes) / 256
    generate = decode_seconds(d, PARAMS * 2, 256, 12, spread(256, 16, 10), cal, capacity_tokens=cache)
    assert split.generate_s == pytest.approx(generate) and split.push_s == pytest.approx(PARAMS * 2 / 4e10)
    assert split.step_s == pytest.approx(max(split.generate_s, split.update_s) + split.push_s)
    assert split.gpu_hours == pytest.approx(2 * (cal.startup_s + 10 * split.step_s) / 3600)
    shown = format_plan(plan)
    assert "One step off (rollout.staleness 1)" in shown and "| train/m/pacs | 2 | " in shown
    # a run whose best split leaves its generators waiting most of the step is flagged; a colocated best is not
    waits = Job("train", "train/m/x", 4, {}, 0, 0, 0, 0.0)
    waits.splits = [Split(0, 30, 30, 0, 60, 10), Split(1, 10, 40, 1, 41, 8), Split(2, 5, 60, 1, 61, 12)]
    lines = format_overlap([waits])
    assert "| train/m/x | 4 | 60.0 (30.0 + 30.0) | 10 | 1 | 10.0 | 40.0 | 1.00 | 41.0 | 8 | 76%, 2% |" in lines
    assert lines[-1] == "- train/m/x at g = 1: its generators idle more than half the step (76%, 2%)"
    waits.splits = waits.splits[:1] + [Split(1, 10, 40, 1, 41, 11)]
    assert not any(line.startswith("- ") for line in format_overlap([waits]))


def test_the_plan_holds_to_published_rl_steps():
    """pacs plan of each published step's config (config/published/) at its reported mean response length: every
    phase a source reports (generation, scoring and update, the step) within 25 % of it; docs/plan-vs-published.md
    holds the table the code writes."""
    from pacs.bench.published import STEPS, priced, table

    assert len(STEPS) >= 3 and sum(1 for row in STEPS if row.one_step_off) >= 1
    for row in STEPS:
        plan = priced(row)
        for phase, measured in row.measured().items():
            assert abs(plan[phase] / measured - 1) <= 0.25, (row.name, phase, plan[phase], measured)
    assert table() in (REPO / "docs/plan-vs-published.md").read_text()
