"""pacs's own training step traced at a paper job's full scale on a CPU, without its memory or its compute: what
holds the memory plan (``pacs.plan.memory``) to the tensors a step really allocates.

``trace_job`` runs ``python -m pacs.bench.traced SPEC`` in a fresh process (the process group below is the
process's own), with:

- a process group of ``world`` fake ranks (``torch.testing._internal.distributed.fake_pg``: collectives that move
  no data) and this process as rank 0;
- tensors with shapes, dtypes and a CUDA device but no storage (``FakeTensorMode``), so that the GPU's code paths
  run (FlexAttention over the packed rows, fused AdamW) whatever this machine has;
- torch's ``MemTracker`` (``torch.distributed._tools.mem_tracker``), counting every tensor alive by category:
  parameters, gradients, optimizer state, activations, temporaries, and what the models hold beside them.

The models are built on the meta device, spread as the trainer spreads them (``pacs.train.update.models.spread``:
FSDP2 over each decoder layer and the root, compute in ``trainer.compute_dtype`` over ``model.dtype`` masters, the
resolved recompute of ``trainer.checkpoint_layers``), and made fake on the device. The micro-batch is the largest
the run builds (``pacs.train.update.worst``: packed rows, each group's prompt once, the token budget's positions).
Traced as the step runs them:

- **no_grad**: the policy's forward without autograd (old log-probs, with the entropy for logging), the largest
  of the pass's forwards: the reference's is the same model's without the entropy, the critic's has no LM head;
- **update**: the actor's forward and backward (chunked log-probs) onto the gradients of the micro-batches before it,
  AdamW's state as its first step leaves it, the critic and its state beside it (PPO). The critic's own update comes
  first and allocates less (the same decoder, a value head in place of the LM head, its gradients freed before the
  actor's); clipping and the fused AdamW step allocate little beyond their state, and are left out too.

FlexAttention's compiled kernel cannot run on fake tensors (its eager fallback materialises every score): it is
replaced by ``FlexKernel``, which allocates what the kernel does (its output and log-sum-exp; in backward the
three gradients and the row sums of the output's gradient) and saves for backward what torch's FlexAttention saves
(queries, keys, values, output, log-sum-exp). Not traced: Liger's Triton kernels (off here: the plan counts them
apart, tests/test_plan.py checks that arithmetic against Liger's own saves), the objective's loss (a few
elementwise (B, T) tensors), the allocator's cache and fragmentation, the CUDA context, NCCL, vLLM: the plan's
``overhead`` and the fit's headroom (``pacs.plan.fit``) are for those.
"""

import json
import subprocess
import sys

import torch


class FlexKernel(torch.autograd.Function):
    """FlexAttention's compiled kernel as the memory sees it: query (B, H, L, D), key and value (B, Hkv, L, D) ->
    output (B, H, L, D), with its log-sum-exp (B, H, L) in fp32; both saved for backward with the inputs."""

    @staticmethod
    def forward(ctx, query, key, value):
        out = torch.empty_like(query)
        lse = query.new_empty(query.shape[:-1], dtype=torch.float32)
        ctx.save_for_backward(query, key, value, out, lse)
        return out

    @staticmethod
    def backward(ctx, grad):
        query, key, value, out, lse = ctx.saved_tensors
        delta = torch.empty_like(lse)  # the row sums of out · grad, as the backward kernel keeps them
        del delta
        return torch.empty_like(query), torch.empty_like(key), torch.empty_like(value)


def flex_kernel(query, key, value, block_mask=None, scale=None, enable_gqa=False):
    return FlexKernel.apply(query, key, value)


def head_grad_gpu(grad_weight, dlogits, hidden) -> None:
    """``pacs.tensors.logprobs.accumulate_head_grad`` as a GPU runs it: one GEMM of the bf16 operands into the fp32
    gradient, no fp32 copy of either."""
    torch.addmm(grad_weight, dlogits.T, hidden, out_dtype=torch.float32, out=grad_weight)


def built(config, t, env, kind: str):
    """One of the run's models (``kind``: policy, reference or critic) on the meta device, spread as the trainer
    spreads it (``pacs.train.update.models``)."""
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    from pacs.tensors.varlen import use_varlen_attention
    from pacs.train.update.models import scorer_of, spread

    with torch.device("meta"):
        if kind == "critic":
            critic = config.__class__(**{**config.to_dict(), "num_labels": 1, "classifier_dropout": 0.0})
            model = AutoModelForTokenClassification.from_config(critic, dtype=torch.float32, attn_implementation="sdpa")
        else:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    if kind == "critic":
        if t.pack_sequences:
            use_varlen_attention(model, t.attention_autotune)
        return spread(model, t, env)
    if kind == "reference":
        model.eval().requires_grad_(False)
    return spread(scorer_of(model, t), t, env, trained=kind == "policy")


def peak_tracker():
    """torch's ``MemTracker`` keeping the process's peak only: its own also keeps each module's peak, updated at every
    operation for every module seen so far, which makes a trace of a 36-layer model minutes instead of seconds; not
    tracking the queries of a tensor's device (half the calls a trace dispatches); and registering no gradient hooks
    on a frozen module's parameters, where torch refuses them."""
    from copy import deepcopy

    from torch.distributed._tools.mem_tracker import _TOTAL_KEY, MemTracker

    class PeakTracker(MemTracker):
        def _track_module_params_and_buffers(self, module, install_grad_hooks: bool = True):
            # a frozen module (the reference) takes no gradient hooks
            frozen = not any(p.requires_grad for p in module.parameters())
            return super()._track_module_params_and_buffers(module, install_grad_hooks and not frozen)

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func is torch.ops.prim.device.default:  # half the calls, allocating nothing: a tensor's device
                return func(*args, **(kwargs or {}))
            return super().__torch_dispatch__(func, types, args, kwargs)

        def _update_peak_stats(self, peak_state) -> None:
            for device, now in self._curr_mem_snap.items():
                if self._peak_mem.get(device, 0) < now[_TOTAL_KEY]:
                    self._peak_mem[device], self._peak_mem_snap[device] = now[_TOTAL_KEY], deepcopy(now)

    return PeakTracker()


def category_bytes(tracker) -> dict[str, int]:
    """The tracker's peak, bytes by category, and ``total``."""
    (peak,) = tracker.get_tracker_snapshot("peak").values()
    return {str(k).removeprefix("_MemRefType."): int(v) for k, v in peak.items()}


def worst_micro_batch(run: dict, t, vocab: int, world: int, critic: bool) -> dict:
    """The largest micro-batch of ``run`` on the host (``pacs.train.update.worst``), as the trainer lays it out:
    rows trimmed, packed (``PackedRows``) where ``trainer.pack_sequences``, the critic's states with a critic."""
    from pacs.plan.memory import update_splits_groups
    from pacs.tensors.batch import add_value_states
    from pacs.train.update.minibatch import micro_batch
    from pacs.train.update.packing import Micro, lengths, micro_cost, pack
    from pacs.train.update.worst import worst_batch, worst_lengths

    n, prompt, response = run["rollout"]["n"], run["data"]["max_prompt_length"], run["rollout"]["max_response_length"]
    layout = (n if t.share_prompt and n > 1 else 1) if t.pack_sequences else None
    groups = t.mini_batch_size // world
    budget = t.max_tokens_per_micro_batch
    split = bool(budget) and update_splits_groups(run)  # a group above the budget in parts, as the update runs it
    response_lengths = (worst_lengths(budget, prompt, response, n, layout, groups, split) if budget
                        else [response] * min(t.micro_batch_size, groups))  # fmt: skip
    batch = worst_batch(response_lengths, prompt, n, vocab, 0)
    if critic:
        add_value_states(batch, response)
    largest = Micro(list(range(len(response_lengths))))
    if budget:
        plan = pack(largest.groups, *lengths(batch), n, budget, layout, split)
        largest = max(plan, key=lambda m: micro_cost(m, *lengths(batch), n, layout))
    return micro_batch(batch, largest, n, "cpu", layout)


def trace_step(shape: str, overrides: dict, run: dict, env, needs_reference: bool, critic: bool,
               entropy: str = "no_grad") -> dict:  # fmt: skip
    """The peaks of a step of ``run`` (a resolved run config: sizes as the plan fits them) for model ``shape``, by
    category: its no_grad pass and its update (module docstring)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from pacs.config import from_dict
    from pacs.models.shapes import model_config
    from pacs.tensors.batch import token_logprobs
    from pacs.tensors.kernels import adamw
    from pacs.train.settings.config import OptimConfig, TrainerConfig

    t = from_dict(TrainerConfig, {**run["trainer"], "liger_kernels": False, "compile": False}, "trainer")
    config = model_config(shape, **overrides)
    host = worst_micro_batch(run, t, config.vocab_size, env.world_size, critic)
    models = {"policy": built(config, t, env, "policy")}
    if needs_reference:
        models["reference"] = built(config, t, env, "reference")
    if critic:
        models["critic"] = built(config, t, env, "critic")
    with FakeTensorMode(allow_non_fake_inputs=True):
        for module in models.values():
            module.to_empty(device=env.device)
        micro = {k: v.to(env.device) if isinstance(v, torch.Tensor) else v for k, v in host.items()}
        if "packed" in micro:
            micro["packed"].kernel = "flex"
        fused = from_dict(OptimConfig, {"fused": True}, "optim")  # as on CUDA (pacs.tensors.kernels.adamw)
        optimizers = {k: adamw(models[k].parameters(), 1e-6, fused, env.device) for k in ("critic", "policy")
                      if k in models}  # fmt: skip
        for name, optimizer in optimizers.items():  # AdamW's state as its first step leaves it: two moments a parameter
            for p in models[name].parameters():
                optimizer.state[p] = {"step": torch.zeros((), dtype=torch.float32, device=p.device),
                                      "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)}  # fmt: skip
        temperature, n = run["rollout"].get("temperature") or 1.0, run["rollout"]["n"]

        def scored() -> None:  # old log-probs, with the entropy for logging: the pass's largest forward
            with torch.no_grad():
                token_logprobs(models["policy"], micro, temperature, "no_grad", n)

        def updated() -> None:  # the actor's forward and backward onto the gradients of the micro-batches before it
            for p in models["policy"].parameters():  # (as from a mini-batch's second one on), then freed
                p.grad = torch.zeros_like(p)
            token_logprobs(models["policy"], micro, temperature, entropy, n)[0].sum().backward()
            optimizers["policy"].zero_grad(set_to_none=True)

        peaks = {}
        for phase, run_phase in (("no_grad", scored), ("update", updated)):
            tracker = peak_tracker()
            tracker.track_external(*models.values(), *optimizers.values())
            with tracker:
                run_phase()
            peaks[phase] = category_bytes(tracker)
    positions = int(host["packed"].source.numel()) if "packed" in host else int(host["input_ids"].numel())
    return {"shape": shape, "overrides": overrides, "world": env.world_size, "micro_batch_positions": positions,
            "micro_batch_response_tokens": int(host["response_mask"].sum()), **peaks}  # fmt: skip


def trace_worker(world: int, jobs: list[dict]) -> list[dict]:
    """Rank 0 of ``world`` fake ranks tracing each job (``trace_step``'s keyword arguments, ``env`` aside)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from pacs.ranks.distributed import DistEnv
    from pacs.tensors import logprobs, varlen

    dist.init_process_group("fake", rank=0, world_size=world, store=FakeStore())
    # FSDP2 on a CUDA mesh needs the CUDA runtime (its streams): the device is the CPU, and the GPU's code paths are
    # taken where they differ: FlexAttention over the packed rows (its kernel as FlexKernel), the LM head's gradient
    # accumulated by one GEMM into fp32 (a CPU upcasts the operands first), fused AdamW
    varlen.flex_attention = flex_kernel
    logprobs.accumulate_head_grad = head_grad_gpu
    env = DistEnv(0, world, "cpu", min(world, 8))
    return [trace_step(**job, env=env) for job in jobs]


def trace_jobs(world: int, jobs: list[dict], processes: int = 1, timeout_s: float = 1800) -> list[dict]:
    """``trace_worker`` in fresh processes (the fake process group is a process's own), ``processes`` at once, the
    jobs dealt among them; their results, in the jobs' order."""
    shares = [list(range(i, len(jobs), processes)) for i in range(min(processes, len(jobs)))]
    specs = [json.dumps({"world": world, "jobs": [jobs[j] for j in share]}) for share in shares]
    started = [subprocess.Popen([sys.executable, "-m", "pacs.bench.traced", spec], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for spec in specs]  # fmt: skip
    results = [None] * len(jobs)
    for share, process in zip(shares, started, strict=True):
        out, err = process.communicate(timeout=timeout_s)
        if process.returncode != 0:
            raise RuntimeError(f"pacs.bench.traced ({len(share)} jobs, {world} ranks) failed: {err[-3000:]}")
        for j, result in zip(share, json.loads(out.strip().splitlines()[-1]), strict=True):
            results[j] = result
    return results


if __name__ == "__main__":
    print(json.dumps(trace_worker(**json.loads(sys.argv[1]))), flush=True)
