"""The GPU path as a whole, on one CUDA device: ``pytest -m gpu`` (tests/README.md: how to run it on a lent
machine that has torch and transformers but no vLLM, hub or network). Where CUDA is absent, as in CI, every
test skips, naming CUDA.

- ``pacs train`` in one process on CUDA (transformers rollouts), killed and resumed: bitwise where an
  uninterrupted run ends (deterministic algorithms and the math attention kernel: tests/train_deterministic.py);
- ``pacs train`` under torchrun with one rank: NCCL, FSDP2, bf16 compute over fp32 masters, activation
  checkpointing, a Qwen2.5-0.5B-shaped model with random weights, transformers rollouts that gather the policy
  once per call; checkpoint, kill, resume, bitwise; its peak GPU
  memory, and its update phase's device use, against ``pacs plan``'s figures for the same run;
- memory per phase (``pacs.ranks.memory``) with the transformers engine: a ``MemPool`` standing in for a
  sleeping vLLM's is left out of each phase's torch peak, and a peak-statistics reset (vLLM's profiling) does
  not erase an earlier phase's peak; where vLLM is installed, a sleeping vLLM engine's pool;
- ``pacs evaluate --engine hf`` on CUDA, in bf16;
- the CUDA RNG kept around the engines (vLLM's ``set_random_seed`` reseeds every CUDA device);
- packed rows on FlexAttention's fused kernel against padded ones (fp32 and bf16), and a mini-batch's passes
  under ``torch.cuda.set_sync_debug_mode("error")`` (no wait for the device between micro-batches);
- the LM head's bf16 GEMM into its fp32 gradient, within a rounding bound derived from the sum;
- the update's fused kernels (``pacs.tensors.kernels``) against the reference path: Liger's RMSNorm, SwiGLU and
  RoPE, the fused AdamW, FlexAttention compiled with autotuning.

``PACS_GPU_SUITE_ON_CPU=1`` runs the same tests on the CPU, gloo for NCCL, with a narrow two-layer model and
short responses in place of the 0.5B shape: a check of the suite's own mechanics on a machine without a GPU,
never a result about GPUs (the memory comparison and the CUDA RNG test skip there).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import write_run_config
from helpers import run_until_killed
from safetensors.torch import load_file

from pacs.rollout.vllm import vllm_available
from pacs.runs import checkpoint as ckpt

CUDA = torch.cuda.is_available()
ON_CPU = not CUDA and os.environ.get("PACS_GPU_SUITE_ON_CPU") == "1"
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not (CUDA or ON_CPU), reason="needs CUDA: torch.cuda.is_available() is False (the GPU "
                                                     "suite, pytest -m gpu, runs on an NVIDIA GPU)"),  # fmt: skip
]
TESTS = Path(__file__).parent
# the Qwen2.5-0.5B shape on a GPU; on the CPU (mechanics only) a narrow two-layer model with its vocabulary
SHAPE_CHANGES = {} if CUDA else {"num_hidden_layers": 2, "hidden_size": 128, "intermediate_size": 256,
                                 "num_attention_heads": 2, "num_key_value_heads": 1}  # fmt: skip
RESPONSE = 128 if CUDA else 32  # tokens: every response reaches it
DETERMINISTIC = [sys.executable, str(TESTS / "train_deterministic.py")]


def torchrun(ranks: int) -> list[str]:
    """``tests/train_deterministic.py`` under torchrun with ``ranks`` processes on this node."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks),
            str(TESTS / "train_deterministic.py")]  # fmt: skip


TORCHRUN = torchrun(1)


def env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "4", "PYTHONPATH": os.pathsep.join([str(TESTS), *sys.path])}


def read_metrics(out: Path) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.endswith("}")]


def train(command: list[str], config: Path, out: Path) -> None:
    done = subprocess.run([*command, "--config", str(config), "--out", str(out)], env=env(), capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]


def killed_and_resumed(command: list[str], config: Path, out: Path, kill_after: int) -> None:
    """Train, SIGKILL the whole process tree once step ``kill_after`` is logged, train again to the end."""
    metrics = out / "metrics.jsonl"
    args = [*command, "--config", str(config), "--out", str(out)]
    run_until_killed(args, env(), lambda: metrics.exists() and any(r["step"] >= kill_after for r in read_metrics(out)))
    train(command, config, out)


def assert_same_run(a: Path, b: Path, step: int) -> None:
    """The same rewards at every step and bitwise the same final weights."""
    assert [r.get("reward/mean") for r in read_metrics(a)] == [r.get("reward/mean") for r in read_metrics(b)]
    final = [load_file(ckpt.checkpoint_dir(out / "checkpoints", step) / "model.safetensors") for out in (a, b)]
    assert final[0].keys() == final[1].keys()
    for name in final[0]:
        assert torch.equal(final[0][name], final[1][name]), name


@pytest.fixture(scope="module")
def qwen_shaped(tiny_model, tmp_path_factory) -> Path:
    """A Qwen2.5-0.5B-shaped model (24 layers, 151,936-token vocabulary) with random weights and the tiny
    model's tokenizer: its samples are long, so every response reaches the maximum length."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    from pacs.models.shapes import model_config

    out = tmp_path_factory.mktemp("qwen") / "model"
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(model_config("qwen2.5-0.5b", **SHAPE_CHANGES), dtype=torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_one_process_on_cuda_killed_and_resumed_ends_where_an_uninterrupted_run_does(tiny_model, toy_data,
                                                                                      tmp_path):  # fmt: skip
    config = write_run_config(tmp_path / "run.yaml", tiny_model, toy_data, trainer={"total_steps": 4})
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    train(DETERMINISTIC, config, whole)
    killed_and_resumed(DETERMINISTIC, config, killed, kill_after=3)
    assert_same_run(whole, killed, 4)
    assert ON_CPU or all(r["memory/peak_gpu_gb"] > 0 for r in read_metrics(whole)[1:])  # it ran on the GPU


@pytest.mark.skipif(not CUDA, reason="needs CUDA: the device's memory")
def test_auto_sizes_resolve_for_the_gpu_s_memory(qwen_shaped, toy_data, tmp_path):
    """``trainer.max_tokens_per_micro_batch`` and ``trainer.checkpoint_layers`` auto on CUDA: resolved for the
    device's total memory (as the plan lists GPUs) less the calibration's headroom, to what ``pacs.plan.fit`` fits
    there for the model's shape."""
    from transformers import AutoConfig

    from pacs.algorithms.objectives import get_objective
    from pacs.config import to_dict
    from pacs.plan.calibration import Calibration
    from pacs.plan.fit import fit_sizes
    from pacs.ranks.distributed import DistEnv
    from pacs.train.settings.config import load_run_config, objective_config
    from pacs.train.update.sizes import resolve_sizes

    trainer = {"strategy": "fsdp", "compute_dtype": "bfloat16", "gradient_checkpointing": True,
               "max_tokens_per_micro_batch": "auto", "checkpoint_layers": "auto"}  # fmt: skip
    config = load_run_config(write_run_config(tmp_path / "run.yaml", qwen_shaped, toy_data, trainer=trainer,
                                              rollout={"n": 8, "max_response_length": 4096}))  # fmt: skip
    needs = get_objective("pacs").needs(objective_config(config))
    resolved, sizes = resolve_sizes(config, DistEnv(0, 1, "cuda:0"), "ref_logprobs" in needs, False)
    memory = torch.cuda.get_device_properties(0).total_memory
    cal = Calibration()
    _, fit = fit_sizes(AutoConfig.from_pretrained(qwen_shaped), to_dict(config), 1, 1, "ref_logprobs" in needs, False,
                       memory, cal)  # fmt: skip
    assert sizes["device_bytes"] == memory and sizes["memory_bytes"] == fit.usable < memory and fit.fits
    assert (resolved.trainer.max_tokens_per_micro_batch, resolved.trainer.checkpoint_layers) == (fit.tokens, fit.layers)


def test_evaluate_with_transformers_on_cuda_in_bf16(tiny_model, toy_data, tmp_path):
    from pacs.cli import main

    out = tmp_path / "eval"
    # wandb disabled: the GPU machine has no wandb
    args = ["evaluate", "--model", str(tiny_model), "--data", str(toy_data / "heldout.parquet"), "--out", str(out),
            "--engine", "hf", "--dtype", "bfloat16", "--n", "4", "--limit", "32", "--max-tokens", "16",
            "--workers", "1", "--wandb", "disabled"]  # fmt: skip
    assert main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["engine"] == "hf" and metrics["dtype"] == "bfloat16" and metrics["problems"] == 32
    assert metrics["pass_at_k"]["1"]["mean"] > 0  # the warm-started model answers some in bf16 too
    assert metrics["throughput"]["samples_per_s"] > 0


def test_the_cuda_rng_is_kept_around_the_engines(tiny_model):
    """vLLM's engine reseeds every CUDA device when it starts (LLM(seed=...)), and a seeded generate call seeds
    the device it samples on: neither may change the trainer's CUDA RNG, which a resumed run has restored."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pacs.rollout import SamplingParams
    from pacs.rollout.hf import HFEngine
    from pacs.rollout.vllm import torch_rng_kept

    if ON_CPU:
        pytest.skip("the CUDA RNG needs CUDA")
    torch.cuda.manual_seed_all(123)
    before = torch.cuda.get_rng_state_all()
    with torch_rng_kept():
        torch.cuda.manual_seed_all(0)  # what vLLM's set_random_seed does
        torch.randn(10, device="cuda")
    assert all(torch.equal(a, b) for a, b in zip(before, torch.cuda.get_rng_state_all(), strict=True))
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model).to("cuda")
    engine = HFEngine(model, tokenizer, [tokenizer.eos_token_id])
    first = engine.generate([[1, 2, 3]], SamplingParams(n=2, max_tokens=8, seed=7))
    assert all(torch.equal(a, b) for a, b in zip(before, torch.cuda.get_rng_state_all(), strict=True))
    assert engine.generate([[1, 2, 3]], SamplingParams(n=2, max_tokens=8, seed=7)) == first


@pytest.mark.skipif(not CUDA, reason="needs CUDA: the bf16 GEMM into an fp32 gradient is the CUDA path")
def test_the_lm_head_gradient_from_bf16_operands_is_the_fp32_products_sum():
    """``accumulate_head_grad`` on CUDA: bf16 operands accumulated into the fp32 gradient by one GEMM. Each
    element is an fp32 sum of 2,049 exact products (the gradient's own value and 2,048 products of bf16 numbers):
    within ``fp32_sum_bound`` of the exact sum (fp64), whatever order cuBLAS adds them in; a result rounded
    through bf16 on its way, the bug this guards against, is not."""
    from helpers import fp32_sum_bound

    from pacs.tensors.logprobs import accumulate_head_grad

    g = torch.Generator(device="cuda").manual_seed(0)
    rows = 2048
    hidden = torch.randn(rows, 256, device="cuda", generator=g).bfloat16()
    dlogits = torch.randn(rows, 4096, device="cuda", generator=g).bfloat16()
    grad = torch.randn(4096, 256, device="cuda", generator=g)
    exact = grad.double() + dlogits.T.double() @ hidden.double()
    bound = fp32_sum_bound(grad.double().abs() + dlogits.T.double().abs() @ hidden.double().abs(), rows + 1)
    accumulate_head_grad(grad, dlogits, hidden)
    assert grad.dtype == torch.float32
    error = (grad.double() - exact).abs()
    print(f"\nlargest error {error.max():.2e}, {(error / bound).max():.3f} of its bound")
    assert (error <= bound).all(), f"{int((error > bound).sum())} elements beyond the bound"
    assert ((exact.bfloat16().double() - exact).abs() > bound).any()  # the bound is tight enough to see bf16


def _cuda_batch(n: int, share: bool, pack: bool) -> dict:
    """Groups of n (test_logprobs' rows) on CUDA, as the trainer hands them over: packed rows with their
    layout built on the host."""
    from test_logprobs import _grouped_batch

    from pacs.tensors.batch import PACKED
    from pacs.tensors.varlen import PackedRows

    host = _grouped_batch(n)
    batch = {k: v.cuda() for k, v in host.items()}
    if pack:
        layout = PackedRows.of(host["input_ids"], host["attention_mask"], host["response_mask"], n if share else 1)
        batch[PACKED] = layout.to("cuda")
    return batch


def _scored_pass(model, share: bool = True, pack: bool = True, autotune: bool = False, n: int = 4) -> tuple:
    """Groups of ``n`` on CUDA through ``PolicyScorer`` (prompts shared and rows packed, or each row whole and
    padded): the log-probs and every parameter's gradient."""
    from pacs.tensors.batch import token_logprobs
    from pacs.tensors.logprobs import PolicyScorer

    model.zero_grad()
    scorer = PolicyScorer(model, 4, share_prompt=share, pack=pack, autotune=autotune)
    logprobs, _ = token_logprobs(scorer, _cuda_batch(n, share, pack), 1.0, None, n)
    logprobs.sum().backward()
    return logprobs.detach(), {k: p.grad.float().clone() for k, p in model.named_parameters()}


# packed against padded rows: within fp32 rounding, or within bf16's (the kernels differ)
TOLERANCE = {"float32": dict(atol=1e-4, rtol=1e-4), "bfloat16": dict(atol=5e-2, rtol=5e-2)}


def _assert_same_pass(got: tuple, want: tuple, dtype: str) -> None:
    torch.testing.assert_close(got[0], want[0], **TOLERANCE[dtype])
    for name, grad in want[1].items():
        torch.testing.assert_close(got[1][name], grad, **TOLERANCE[dtype], msg=name)


@pytest.mark.skipif(not CUDA, reason="needs CUDA: packed rows on the GPU attention kernels")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_packed_rows_give_what_padded_rows_give_on_cuda(dtype):
    """The packed layout (each group's prompt once) against padded whole rows on CUDA: log-probs and gradients
    within fp32 rounding, or within bf16's (the kernels differ). The packed attention is FlexAttention's fused
    kernel, in fp32 too (no SDPA kernel runs, so no (L, L) mask is built), one call per layer; the kernels it runs
    (its forward and backward templates and Inductor's kernels beside them) printed."""
    from test_logprobs import _small_qwen2

    from pacs.bench.profile import attention_calls, device_activities, family_of

    model = _small_qwen2(hidden_size=128).to("cuda", getattr(torch, dtype))  # head_dim 32, GQA (4 over 2)
    whole = _scored_pass(model, share=False, pack=False)
    _scored_pass(model)  # compiles FlexAttention
    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        packed = _scored_pass(model)
        torch.cuda.synchronize()
    _assert_same_pass(packed, whole, dtype)
    kernels = {}
    for name, _ in device_activities(prof):
        kernels[name] = kernels.get(name, 0) + 1
    attention = {k: c for k, c in kernels.items() if family_of(k) == "attention"}
    print(f"\n{dtype}: attention kernels beside the calls {attention}")
    assert any("flex" in k or "triton_tem" in k for k in attention), kernels
    assert not any(x in k.lower() for k in kernels for x in ("flash", "fmha", "efficient")), attention
    assert attention_calls(prof) == len(model.model.layers)  # one call a layer (its backward is not a call)


@pytest.mark.skipif(not CUDA, reason="needs CUDA: Liger's kernels are Triton's")
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_liger_kernels_give_the_reference_log_probs_and_gradients(dtype, monkeypatch):
    """``trainer.liger_kernels``: Liger's RMSNorm, SwiGLU and RoPE in the decoder layers, against transformers'
    own, on packed rows: the same log-probs and gradients, within the tolerances of the packed path itself."""
    pytest.importorskip("liger_kernel", reason="needs liger-kernel: tests/README.md carries its wheel")
    from helpers import transformers_modules_kept
    from test_logprobs import _small_qwen2
    from transformers.models.qwen2 import modeling_qwen2

    from pacs.tensors.kernels import use_liger_kernels

    transformers_modules_kept(monkeypatch)  # Liger replaces them in the module
    model = _small_qwen2(hidden_size=128).to("cuda", getattr(torch, dtype))
    reference = _scored_pass(model)
    use_liger_kernels(model)
    assert model.model.layers[0].input_layernorm._get_name() == "LigerRMSNorm"
    assert modeling_qwen2.apply_rotary_pos_emb.__module__.startswith("liger_kernel")
    _assert_same_pass(_scored_pass(model), reference, dtype)


@pytest.mark.skipif(not CUDA, reason="needs CUDA: AdamW's fused kernel is the CUDA default")
def test_the_fused_adamw_steps_as_the_default_one():
    """``optim.fused`` null on CUDA: AdamW's fused kernel; three steps from the same gradients as torch's default
    (multi-tensor) AdamW, to fp32 rounding."""
    from test_logprobs import _small_qwen2

    from pacs.tensors.kernels import adamw
    from pacs.train.settings.config import OptimConfig

    models = [_small_qwen2(hidden_size=128).to("cuda") for _ in range(2)]
    fused, default = (adamw(m.parameters(), 1e-3, OptimConfig(fused=f), "cuda")
                      for m, f in zip(models, (None, False), strict=True))  # fmt: skip
    assert fused.defaults["fused"] and not default.defaults["fused"]
    g = torch.Generator(device="cuda").manual_seed(0)
    for _ in range(3):
        for a, b in zip(*(m.parameters() for m in models), strict=True):
            a.grad = torch.randn(a.shape, device="cuda", generator=g)
            b.grad = a.grad.clone()
        fused.step()
        default.step()
    for (name, a), b in zip(models[0].named_parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, msg=name)


@pytest.mark.skipif(not CUDA, reason="needs CUDA: FlexAttention's compiled kernels")
def test_autotuned_flex_attention_gives_the_untuned_kernels_log_probs_and_gradients():
    """``trainer.attention_autotune``: the packed rows' FlexAttention compiled with autotuning (its backward too),
    against the untuned compile, in bf16: the same log-probs and gradients within bf16's tolerance; inductor
    counts an autotuning (candidate kernels timed on this GPU) for the forward's template and the backward's."""
    from test_logprobs import _small_qwen2
    from torch._dynamo.utils import counters

    from pacs.tensors import varlen

    model = _small_qwen2(hidden_size=128).to("cuda", torch.bfloat16)
    untuned = _scored_pass(model)
    counters.clear()
    tuned = _scored_pass(model, autotune=True)
    assert model.config._attn_implementation == varlen.AUTOTUNED and True in varlen._compiled_flex
    tuning = {k: v for k, v in counters["inductor"].items() if k.startswith("select_algorithm")}
    print(f"\ninductor's autotuning: {tuning}")
    assert tuning.get("select_algorithm_autotune", 0) >= 2  # the forward's kernel and the backward's, timed
    _assert_same_pass(tuned, untuned, "bfloat16")


FAMILIES = {"qwen2", "qwen3"}
# each variant's trainer keys over bf16 compute on FSDP2 with activation checkpointing; "fp32" the same run in
# float32, the exact reference bf16's rounding is measured against. Liger is named off where it is not the variant
# (its default on CUDA is on for these families); compile leaves it off itself
VARIANTS = {"fp32": {"compute_dtype": "float32", "liger_kernels": False}, "bf16": {"liger_kernels": False},
            "liger": {"liger_kernels": True}, "compile": {"compile": True}}  # fmt: skip


def trained_variant(model_path, data_dir, trainer: dict, steps: int = 2) -> dict:
    """``steps`` updates of PACS (its reward proxy against the reference, PACS v2's) through the trainer's own
    functions (``load_models``, ``score_batch``, ``prepare_whole_batch``, ``update_models``) on FSDP2 in a one-rank
    group (NCCL on a GPU), bf16 compute over fp32 masters with activation checkpointing unless ``trainer`` says
    otherwise, on fixed rollouts (toy prompts, made-up responses of four lengths: every variant sees the same
    tokens). Per step: the rows' log-probs from the update's own forward (their old log-probs), the reference's,
    the actor's loss; the weights after the last step."""
    import torch.distributed as dist
    from helpers import N, ragged_batch

    from pacs.algorithms.objectives import get_objective
    from pacs.ranks.distributed import full_tensors, init_distributed
    from pacs.train.loop import prepare_whole_batch, score_batch, update_models
    from pacs.train.settings.config import objective_config, resolve
    from pacs.train.update.models import load_models

    prompts = 4
    config = resolve({"algorithm": {"name": "pacs", "options": {"reward_proxy": "reference"}},
                      "model": {"path": str(model_path)}, "data": {"train_files": ["unused.parquet"]},
                      "rollout": {"n": N, "max_response_length": 64}, "optim": {"lr": 1e-5},
                      "trainer": {"strategy": "fsdp", "compute_dtype": "bfloat16", "gradient_checkpointing": True,
                                  "batch_size": prompts, "mini_batch_size": prompts, "micro_batch_size": 2,
                                  **trainer}})  # fmt: skip
    objective, options = get_objective("pacs"), objective_config(config)
    env = init_distributed(0, 1, fsdp=True)
    try:
        models = load_models(config, objective, objective.needs(options), None, env)
        out = {"steps": []}
        for step in range(steps):
            batch = ragged_batch(model_path, data_dir, [5, 17, 40, 64], prompts, seed=step)
            entropy = score_batch(batch, config, models, env)
            batch.update(prepare_whole_batch(objective, batch, N, options, env))
            record = update_models(batch, config, models, env, entropy)
            mask = batch["response_mask"]
            out["steps"].append({"logprobs": batch["old_logprobs"][mask], "ref_logprobs": batch["ref_logprobs"][mask],
                                 "loss": record["actor/loss"]})  # fmt: skip
        out["weights"] = {k: v.detach().float().cpu().clone() for k, v in full_tensors(models.policy)}
    finally:
        dist.destroy_process_group()
    return out


@pytest.fixture(scope="module")
def variants(tiny_model, toy_data, tmp_path_factory):
    """``variants(family, variant)``: ``trained_variant`` of a tiny Qwen2 (the warm-started one) or a tiny Qwen3
    (random weights), run once each (its error too), each from transformers' own modules (Liger's process-wide
    patches undone after its run) and compiled code dropped after it."""
    from helpers import qwen3_like, transformers_modules_kept

    paths = {"qwen2": tiny_model, "qwen3": lambda: qwen3_like(tiny_model, tmp_path_factory.mktemp("qwen3") / "m")}
    runs = {}

    def run(family: str, variant: str) -> dict:
        if variant == "liger":
            pytest.importorskip("liger_kernel", reason="needs liger-kernel: tests/README.md carries its wheel")
        if callable(paths[family]):
            paths[family] = paths[family]()
        if (family, variant) not in runs:
            try:
                with pytest.MonkeyPatch.context() as patch:
                    transformers_modules_kept(patch)
                    runs[family, variant] = trained_variant(paths[family], toy_data, VARIANTS[variant])
            except Exception as e:  # noqa: BLE001  (kept, raised again for every test that needs this run)
                runs[family, variant] = e
            finally:
                torch._dynamo.reset()
        if isinstance(runs[family, variant], Exception):
            raise runs[family, variant]
        return runs[family, variant]

    return run


def _loss_bound(got: dict, base: dict, rows: int = 16, n: int = 4, beta: float = 1.0) -> float:
    """How far PACS's loss may move when its log-probs move from ``base``'s to ``got``'s (one step of
    ``trained_variant``: ``rows`` answers in groups of ``n``, β = ``beta``): L = (1/B) Σ_i w_i BCE(ψ_i, R_i) is
    1-Lipschitz in each ψ_i times w_i ≤ n/2 (class balance), RLOO's ψ moves by at most 2 Σ_i |Δr̂_i| over the
    batch, and r̂_i = β Σ_t (log π − log π_ref): |ΔL| ≤ (n/2)(2β/B) Σ_i,t |Δ(log π − log π_ref)|, plus fp32's
    rounding of L."""
    delta = (got["logprobs"] - got["ref_logprobs"]) - (base["logprobs"] - base["ref_logprobs"])
    return n / 2 * 2 * beta / rows * float(delta.abs().sum()) + 2**-20 * abs(base["loss"])


def _bf16_bound(base, exact) -> float:
    """How far a bf16 variant may lie from the bf16 run ``base``: 3 times base's own distance from the fp32 run
    ``exact`` (two bf16 computations whose roundings are independent and of base's size lie √2 times that size
    apart; 3 allows a fused kernel's rounding twice transformers'), and never under one bf16 rounding of
    ``exact`` (2⁻⁸ relative)."""
    if isinstance(base, float):
        return 3 * max(abs(base - exact), 2**-8 * abs(exact))
    return 3 * max(float((base - exact).norm()), 2**-8 * float(exact.norm()))


@pytest.mark.skipif(not CUDA, reason="needs CUDA: Liger's kernels are Triton's, the trainer's path on the GPU")
@pytest.mark.parametrize("family", sorted(FAMILIES))
@pytest.mark.parametrize("variant", ["liger", "compile"])
def test_the_trainers_path_with_liger_or_compile_keeps_log_probs_loss_and_weights(variants, family, variant):
    """``trainer.liger_kernels`` and ``trainer.compile`` through the trainer's own path (FSDP2, bf16 compute over
    fp32 masters, activation checkpointing) on a tiny Qwen2 and a tiny Qwen3, two PACS steps: the policy's and the
    reference's log-probs at each step and the weights after both lie within bf16's rounding (``_bf16_bound``) of
    the same run without them; each step's loss differs from that run's by no more than its log-probs explain
    (``_loss_bound``)."""
    base, exact, got = (variants(family, v) for v in ("bf16", "fp32", variant))
    for step, (b, e, g) in enumerate(zip(base["steps"], exact["steps"], got["steps"], strict=True)):
        for key in ("logprobs", "ref_logprobs"):
            distance, bound = float((g[key] - b[key]).norm()), _bf16_bound(b[key], e[key])
            print(f"\n{family} {variant} step {step + 1} {key}: {distance:.3e} from bf16, bound {bound:.3e}")
            assert distance <= bound, (family, variant, step, key)
        distance, bound = abs(g["loss"] - b["loss"]), _loss_bound(g, b)
        print(f"{family} {variant} step {step + 1} loss: {distance:.3e} from bf16, bound {bound:.3e}")
        assert distance <= bound, (family, variant, step)
    flat = {k: torch.cat([w.flatten() for w in run["weights"].values()]) for k, run in (("b", base), ("e", exact),
                                                                                           ("g", got))}  # fmt: skip
    distance, bound = float((flat["g"] - flat["b"]).norm()), _bf16_bound(flat["b"], flat["e"])
    print(f"{family} {variant} weights: {distance:.3e} from bf16, bound {bound:.3e}")
    assert distance <= bound


@pytest.mark.skipif(not CUDA, reason="needs CUDA: Liger's kernels are Triton's")
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_with_liger_the_policy_and_reference_agree_exactly_at_step_0(variants, family):
    """At the first step the policy is the reference: with Liger's kernels in both (the reference built after
    Liger patched the family's classes, the policy patched after it was built), log π − log π_ref is exactly 0,
    as it is without them."""
    for variant in ("bf16", "liger"):
        first = variants(family, variant)["steps"][0]
        assert torch.equal(first["logprobs"], first["ref_logprobs"]), (family, variant)


def _greedy(model_path, data_dir, dtype: torch.dtype, liger: bool) -> list:
    """Greedy samples of eight toy held-out prompts through the transformers engine on CUDA."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pacs.data.schema import prompt_token_ids, read_prepared
    from pacs.rollout import SamplingParams
    from pacs.rollout.hf import HFEngine
    from pacs.tensors.kernels import use_liger_kernels

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype).to("cuda")
    if liger:
        use_liger_kernels(model)
    prompts = prompt_token_ids(tokenizer, read_prepared(data_dir / "heldout.parquet")["prompt"][:8])
    engine = HFEngine(model, tokenizer, [tokenizer.eos_token_id])
    return engine.generate(prompts, SamplingParams(n=1, max_tokens=24, temperature=0.0, seed=0))


@pytest.mark.skipif(not CUDA, reason="needs CUDA: Liger's kernels are Triton's")
@pytest.mark.parametrize("family, dtype", [("qwen2", "bfloat16"), ("qwen2", "float32"), ("qwen3", "float32")])
def test_greedy_generation_is_the_same_with_liger_on_and_off(tiny_model, toy_data, tmp_path, monkeypatch, family,
                                                              dtype):  # fmt: skip
    """Liger's kernels on the decoding path (its rotary embedding at each new position, a KV cache) in the
    transformers engine: the same greedy tokens as transformers' own, for the warm-started tiny Qwen2 in bf16
    and fp32 and a random tiny Qwen3 in fp32 (its logits nearly flat: bf16's rounding may pick another token)."""
    pytest.importorskip("liger_kernel", reason="needs liger-kernel: tests/README.md carries its wheel")
    from helpers import qwen3_like, transformers_modules_kept

    transformers_modules_kept(monkeypatch)
    path = qwen3_like(tiny_model, tmp_path / "qwen3") if family == "qwen3" else tiny_model
    own = _greedy(path, toy_data, getattr(torch, dtype), liger=False)
    fused = _greedy(path, toy_data, getattr(torch, dtype), liger=True)
    assert [c.token_ids for g in fused for c in g] == [c.token_ids for g in own for c in g]
    assert sum(len(c.token_ids) for g in own for c in g) >= 8 * 4  # it decoded past the prompts


def mini_batch_passes(device: str, check=lambda fn: fn()) -> dict:
    """A no-grad pass and an update's micro-batches (packed rows, shared prompts, GRPO's loss) over groups of
    4 on ``device``, each pass run through ``check``; the update's metric sums."""
    from test_logprobs import _grouped_batch, _small_qwen2

    from pacs.algorithms.objectives import get_objective
    from pacs.ranks.distributed import DistEnv
    from pacs.tensors.batch import token_logprobs
    from pacs.tensors.logprobs import PolicyScorer
    from pacs.train.update.minibatch import accumulate, device_pass
    from pacs.train.update.packing import fixed_plan

    n, batch = 4, _grouped_batch(4)  # on the host, as the trainer keeps a step's rows
    rows = batch["response_mask"].shape[0]
    scorer = PolicyScorer(_small_qwen2(hidden_size=128).to(device), 4, share_prompt=True, pack=True)
    plan, objective = fixed_plan(rows // n, 1), get_objective("grpo")  # one group per micro-batch
    options = objective.config()
    (old,) = check(lambda: device_pass(batch, plan, n, lambda m: token_logprobs(scorer, m, 1.0)[:1], device, n))
    batch = {**batch, "old_logprobs": old.cpu(), "rewards": (torch.arange(rows) % 3 == 0).float()}
    batch.update(objective.prepare(batch, n, options))

    def loss(micro):
        logprobs, _ = token_logprobs(scorer, micro, 1.0, None, n)
        return objective.loss({**micro, "logprobs": logprobs}, n, options)

    units = [float(n)] * len(plan)
    env = DistEnv(device=device)
    return check(lambda: accumulate(scorer, loss, batch, plan, units, sum(units), "sequences", n, env, pack=n))


@pytest.mark.skipif(not CUDA, reason="needs CUDA: host syncs are a GPU's")
def test_a_mini_batch_never_waits_for_the_gpu_between_micro_batches():
    """The no-grad pass and the update's micro-batches under torch.cuda.set_sync_debug_mode("error"): any wait
    for the device inside them is an error. The host waits only after them, for the gradient norm and the
    metrics (pacs.train.update.minibatch.update)."""

    def warm_then_strict(fn):
        fn()  # compiles FlexAttention, warms the allocators
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return fn()
        finally:
            torch.cuda.set_sync_debug_mode(0)

    totals = mini_batch_passes("cuda", warm_then_strict)
    assert totals["loss"].device.type == "cuda"


def _sampling_engine(tiny_model):
    """The transformers engine on CUDA, sampling from the tiny model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pacs.rollout.hf import HFEngine

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model).to("cuda")
    return HFEngine(model, tokenizer, [tokenizer.eos_token_id])


@pytest.mark.skipif(not CUDA, reason="needs CUDA: torch's caching allocator and a MemPool")
def test_a_phase_s_torch_peak_leaves_out_a_sleeping_engine_s_pool(tiny_model):
    """vLLM's sleep mode as torch sees it: a MemPool of its own, which torch counts as reserved even while vLLM
    has unmapped it. Sampling with the transformers engine and a 256 MiB buffer in the update: each phase's
    torch peak is the trainer's alone, the pool left out; the device's use counts what torch's does not."""
    from pacs.ranks.memory import PhaseMemory
    from pacs.rollout import SamplingParams

    mib = 2**20
    engine = _sampling_engine(tiny_model)
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        held = torch.ones(512 * mib, dtype=torch.uint8, device="cuda")  # the engine's weights and KV cache
    pooled = sum(segment["total_size"] for segment in pool.snapshot())
    assert pooled >= 512 * mib and torch.cuda.memory_reserved() >= pooled  # torch counts the pool
    engine.pooled_bytes = lambda: pooled  # what VLLMEngine.pooled_bytes reports of vLLM's pool
    tracker = PhaseMemory()
    tracker.pooled = engine.pooled_bytes
    with tracker.phase("generate"):
        engine.generate([[1, 2, 3]] * 4, SamplingParams(n=2, max_tokens=8, seed=0))
    torch.cuda.empty_cache()
    trainer = torch.cuda.memory_reserved() - pooled
    with tracker.phase("update"):
        scratch = torch.ones(256 * mib, dtype=torch.uint8, device="cuda")
        del scratch
    update = tracker.phases["update"]
    assert abs(update["torch"] - (trainer + 256 * mib)) <= 2 * mib, (update, trainer)
    assert 0 < tracker.phases["generate"]["torch"] < pooled  # the tiny model's, not the pool's
    # the device's use: the CUDA context, and here the pool, which is really mapped (vLLM's sleeping one is not)
    assert update["device"] > update["torch"] + pooled
    del held


@pytest.mark.skipif(not CUDA, reason="needs CUDA: torch's peak statistics")
def test_a_peak_statistics_reset_does_not_erase_the_trainer_s_earlier_peak(tiny_model):
    """vLLM resets torch's peak statistics while it profiles (vllm/utils/mem_utils.py): the update's peak,
    folded at its end, outlives a reset in the next phase, and so does the run's."""
    from pacs.ranks.memory import PhaseMemory
    from pacs.rollout import SamplingParams

    mib = 2**20
    engine = _sampling_engine(tiny_model)
    tracker = PhaseMemory()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_reserved()
    with tracker.phase("update"):
        scratch = torch.ones(256 * mib, dtype=torch.uint8, device="cuda")
        del scratch
        torch.cuda.empty_cache()  # given back: later phases hold less
    with tracker.phase("generate"):
        engine.generate([[1, 2, 3]] * 4, SamplingParams(n=2, max_tokens=8, seed=0))
        torch.cuda.reset_peak_memory_stats()  # what vLLM's memory profiling does
        forgotten = torch.cuda.max_memory_reserved()
    assert forgotten < before + 256 * mib  # torch itself no longer knows the update's peak
    assert tracker.phases["update"]["torch"] >= before + 256 * mib
    assert tracker.peaks()["gpu"] * 1e9 >= before + 256 * mib
    assert tracker.phases["generate"]["torch"] < before + 256 * mib


@pytest.mark.skipif(not (CUDA and vllm_available()), reason="needs CUDA and vLLM: a sleeping vLLM engine")
def test_a_sleeping_vllm_engine_is_in_no_phase_s_torch_peak_and_leaves_the_device(tiny_model):
    """vLLM in-process with sleep mode (level 1), sampling inside a phase, then asleep for an update: torch still
    counts vLLM's pool as reserved, the tracker leaves it out, and the device's use falls by about the pool."""
    from pacs.ranks.memory import PhaseMemory
    from pacs.rollout import SamplingParams
    from pacs.rollout.vllm import VLLMEngine, VLLMRolloutOptions

    options = VLLMRolloutOptions(max_model_len=64, gpu_memory_utilization=0.2, sleep_level=1, enforce_eager=True)
    engine = VLLMEngine(str(tiny_model), [0], 0, "float32", 8, options, in_process=True)
    tracker = PhaseMemory()
    tracker.pooled = engine.pooled_bytes
    with tracker.phase("generate"):
        engine.generate([[1, 2, 3]] * 4, SamplingParams(n=2, max_tokens=8, seed=0))
    engine.release_memory()
    pooled = engine.pooled_bytes()
    total = torch.cuda.get_device_properties(0).total_memory
    assert pooled > 0.1 * total and torch.cuda.memory_reserved() >= pooled  # asleep, and still counted by torch
    with tracker.phase("update"):
        scratch = torch.ones(2**28, dtype=torch.uint8, device="cuda")
        del scratch
    generate, update = tracker.phases["generate"], tracker.phases["update"]
    assert update["torch"] < 0.5 * pooled  # the trainer's scratch and vLLM's buffers outside its pool
    assert update["device"] < generate["device"] - 0.8 * pooled
    engine.close()


TWO_GPUS = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs (NCCL between two ranks, each "
                               "on its own GPU): this machine has fewer")  # fmt: skip


@TWO_GPUS
def test_two_ranks_on_two_gpus_gather_a_sharded_policy_once_per_generate_call(raw_tiny_model, tmp_path):
    """The trainer's transformers engine on an FSDP2 policy sharded over two GPUs (NCCL): one all-gather per
    FSDP unit and call whatever the lengths, the unsharded model's samples (``check_gathered_generation``)."""
    from helpers import check_gathered_generation

    check_gathered_generation(raw_tiny_model, tmp_path / "generated.pt")


@TWO_GPUS
def test_two_ranks_on_two_gpus_train_killed_and_resumed_end_where_an_uninterrupted_run_does(tiny_model, toy_data,
                                                                                           tmp_path):  # fmt: skip
    """``pacs train`` under torchrun on two GPUs (NCCL, FSDP2, bf16 compute over fp32 masters, activation
    checkpointing), SIGKILLed after step 2 and resumed: bitwise the uninterrupted run's weights and rewards."""
    trainer = {"total_steps": 3, "strategy": "fsdp", "compute_dtype": "bfloat16", "gradient_checkpointing": True}
    config = write_run_config(tmp_path / "run.yaml", tiny_model, toy_data, trainer=trainer)
    two = torchrun(2)
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    train(two, config, whole)
    killed_and_resumed(two, config, killed, kill_after=2)
    assert_same_run(whole, killed, 3)


def test_torchrun_fsdp_bf16_checkpoints_resumes_and_fits_the_plan(qwen_shaped, toy_data, tmp_path):
    """One rank under torchrun (NCCL and gloo), FSDP2 computing in bf16 over fp32 masters with activation
    checkpointing and chunked log-probs, every response at the maximum length: checkpoints in bf16 with the
    masters beside them, a killed run resumed to the same bits, and a peak within pacs plan's figure."""
    from pacs.config import to_dict
    from pacs.models.shapes import model_config
    from pacs.plan.calibration import Calibration
    from pacs.plan.jobs import PlanSettings, plan_training
    from pacs.train.settings.config import load_run_config

    trainer = {"total_steps": 3, "batch_size": 8, "mini_batch_size": 4, "micro_batch_size": 2, "strategy": "fsdp",
               "compute_dtype": "bfloat16", "gradient_checkpointing": True, "logprob_chunk_size": 256}  # fmt: skip
    config = write_run_config(tmp_path / "run.yaml", qwen_shaped, toy_data, trainer=trainer,
                              rollout={"n": 4, "max_response_length": RESPONSE}, data={"max_prompt_length": 64},
                              optim={"lr": 1e-5})  # fmt: skip
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    train(TORCHRUN, config, whole)
    killed_and_resumed(TORCHRUN, config, killed, kill_after=2)
    assert_same_run(whole, killed, 3)
    last = ckpt.checkpoint_dir(whole / "checkpoints", 3)
    assert {t.dtype for t in load_file(last / "model.safetensors").values()} == {torch.bfloat16}
    assert (last / "resume" / ".metadata").is_file()  # the optimizer and the fp32 masters
    records = read_metrics(whole)[1:]
    # random weights over 151,936 tokens rarely stop (about 1 in 150,000 tokens): the longest responses
    assert all(r["response_length/max"] == RESPONSE and r["response_length/mean"] > 0.9 * RESPONSE for r in records)
    if ON_CPU:
        pytest.skip("the peak GPU memory against the plan needs CUDA")
    run = to_dict(load_run_config(config))
    job = plan_training("train", model_config("qwen2.5-0.5b", **SHAPE_CHANGES), run, 1, PlanSettings(), Calibration())
    measured = max(r["memory/peak_gpu_gb"] for r in records) * 1e9
    state = sum(job.memory["update"][k] for k in ("parameters", "gradients", "optimizer"))
    print(f"peak GPU memory: measured {measured / 1e9:.2f} GB, planned {job.peak_bytes / 1e9:.2f} GB "
          f"({', '.join(f'{k} {v / 1e9:.2f}' for k, v in job.memory['update'].items())})")  # fmt: skip
    phases = {p: max(r[f"memory/{p}/device_gb"] for r in records) * 1e9 for p in ("generate", "no_grad", "update")}
    for phase, used in phases.items():  # the device's use holds blocks torch keeps cached from earlier phases
        print(f"{phase}: device {used / 1e9:.2f} GB, torch {records[-1][f'memory/{phase}/torch_gb']:.2f} GB, "
              f"planned {sum(job.memory[phase].values()) / 1e9:.2f} GB")  # fmt: skip
    assert state < measured <= job.peak_bytes
    assert phases["update"] <= sum(job.memory["update"].values())  # the CUDA context is in the plan's overhead
    # what torch reserves in the update (Liger's kernels on, expandable segments): the plan's tensors, and no more
    # beyond them than the headroom the fit leaves free
    reserved = max(r["memory/update/torch_gb"] for r in records) * 1e9
    tensors = sum(v for k, v in job.memory["update"].items() if k != "overhead")
    assert reserved <= tensors + Calibration().memory_headroom * torch.cuda.get_device_properties(0).total_memory
