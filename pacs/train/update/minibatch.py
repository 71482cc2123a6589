"""Mini-batches and micro-batches: the passes over a step's rows without gradients (old log-probs, reference
log-probs, values) and the optimizer steps with gradient accumulation, for any objective's loss.

A micro-batch is whole groups, by a fixed number of prompts or by a token budget (``pacs.train.update.packing``);
each goes to the device trimmed of the columns that are padding in all its rows, by queued copies, with its
packed layout built on the host (``pacs.tensors.varlen``). Nothing between two micro-batches waits for the
device: outputs and metrics stay there, and reach the host once per pass or mini-batch.
"""

import math

import numpy as np
import torch

from pacs.plan.memory import splits_groups
from pacs.ranks.distributed import DistEnv, all_reduce, no_sync, total_norm
from pacs.tensors.batch import PACKED, Batch, group_slices, pad_columns, token_logprobs, trimmed
from pacs.tensors.varlen import PackedRows, to_device
from pacs.train.settings.config import RunConfig
from pacs.train.update.packing import Micro, balanced_plan, budget_plan, fixed_plan

FRESH_UNRECORDED = -2  # batch["row"] of a fresh row in a filler pass; -1: a row with old log-probs already
HOST_KEYS = ("row",)  # read by the host inside a micro-batch's loss: kept there


def pack_group(config: RunConfig) -> int | None:
    """The group size of the trainer's packed layout (each prompt once when shared), None when rows are padded."""
    t = config.trainer
    return (config.rollout.n if t.share_prompt else 1) if t.pack_sequences else None


def sum_scale(config: RunConfig) -> float:
    """The factor of a loss summed over responses: the paper's verl fork's micro-batch over the global
    mini-batch's responses (``trainer.verl_micro_batch_size``, docs/trainer.md "The optimizer step"), or 1."""
    t = config.trainer
    return t.verl_micro_batch_size / (t.mini_batch_size * config.rollout.n) if t.verl_micro_batch_size else 1.0


def micro_batch(batch: Batch, micro: Micro, n: int, device: str, pack: int | None = None) -> Batch:
    """The micro-batch's rows of ``batch`` (on the host) trimmed and on ``device``; with ``pack`` (a group
    size) its ``PackedRows`` beside them, built from the host's rows."""
    rows = micro.rows(n)
    host = trimmed({k: v[rows] for k, v in batch.items()})
    out = {k: v if k in HOST_KEYS else to_device(v, device) for k, v in host.items()}
    if pack is not None:
        group = micro.group_size(n) if pack > 1 else pack  # a part of a group shares its prompt over its rows
        out[PACKED] = PackedRows.of(host["input_ids"], host["attention_mask"], host["response_mask"], group,
                                    value_mask=host.get("value_mask"))  # fmt: skip
        out[PACKED].to(device)
    return out


def micro_plan(batch: Batch, n: int, config: RunConfig, env: DistEnv) -> list[Micro]:
    """This rank's micro-batches of its rows for a no-grad pass: by token budget, or micro_batch_size prompts."""
    t = config.trainer
    if t.max_tokens_per_micro_batch:
        return budget_plan(batch, n, t.max_tokens_per_micro_batch, env, pack_group(config), splits_groups(t))
    return fixed_plan(batch["response_mask"].shape[0] // n, t.micro_batch_size)


@torch.no_grad()
def device_pass(batch: Batch, plan: list[Micro], n: int, fn, device: str = "cpu",
                pack: int | None = None) -> list[torch.Tensor]:  # fmt: skip
    """``fn(micro) -> tensors (rows, T')`` over the plan's micro-batches, put back in row order (B, T) on the
    device: nothing in it waits for the device."""
    shape = batch["response_mask"].shape
    out: list[torch.Tensor] = []
    for micro in plan:
        parts = fn(micro_batch(batch, micro, n, device, pack))
        if not micro.scale:  # a filler pass, there only to keep the ranks' collectives in step
            continue
        out = out or [torch.zeros(shape, dtype=torch.float32, device=device) for _ in parts]
        rows = to_device(micro.rows(n), device)
        for o, p in zip(out, parts, strict=True):
            o[rows] = pad_columns(p.float(), shape[1])
    return out


def forward_pass(batch: Batch, plan: list[Micro], n: int, fn, device: str = "cpu",
                 pack: int | None = None) -> list[torch.Tensor]:  # fmt: skip
    """``device_pass``, copied to the host once."""
    return [o.cpu() for o in device_pass(batch, plan, n, fn, device, pack)]


def policy_logprobs(batch: Batch, config: RunConfig, policy, env: DistEnv) -> list[torch.Tensor]:
    """The policy's log-probs of the batch's response tokens and its entropy, (B, T) each, without gradients
    over this rank's no-grad micro-batches: old log-probs, or the behaviour policy's right after sampling."""
    n, temperature = config.rollout.n, config.rollout.temperature or 1.0
    return forward_pass(batch, micro_plan(batch, n, config, env), n,
                        lambda m: token_logprobs(policy, m, temperature, "no_grad", n), env.device,
                        pack_group(config))  # fmt: skip


def accumulate(module, loss_fn, mini: Batch, plan: list[Micro], units, global_units: float, reduction: str, n: int,
               env: DistEnv, pack: int | None = None, sum_scale: float = 1.0) -> dict:  # fmt: skip
    """The gradients of one mini-batch's micro-batches, accumulated (``update``); the metrics' weighted sums, on
    the device: nothing in it waits for the device."""
    totals: dict[str, torch.Tensor | float] = {}
    for i, m in enumerate(plan):
        micro = micro_batch(mini, m, n, env.device, pack)
        if not m.scale and "row" in micro:  # a filler pass records nothing (update_models)
            micro["row"] = torch.where(micro["row"] >= 0, FRESH_UNRECORDED, micro["row"])
        share = units[i] / global_units * m.scale
        weight = m.scale * sum_scale if reduction == "sum" else share
        with no_sync(module, sync=i == len(plan) - 1):
            loss, metrics = loss_fn(micro)
            (loss * weight * env.world_size).backward()
        for k, v in {**metrics, "loss": loss}.items():
            v = v.detach().float() if isinstance(v, torch.Tensor) else float(v)
            totals[k] = totals.get(k, 0.0) + v * (weight if k == "loss" else share)
    return totals


def update(
    module,
    optimizer,
    loss_fn,
    batch: Batch,
    reduction: str,
    n: int,
    mini_rows: int,
    micro_rows: int,
    epochs: int,
    grad_clip: float | None,
    env: DistEnv,
    max_tokens: int | None = None,
    pack: int | None = None,
    sum_scale: float = 1.0,
    mask: str = "response_mask",
    split: bool = False,
) -> dict:
    """Optimizer steps over mini-batches of whole groups.

    Each micro-batch's loss is weighted by its share of the global mini-batch (its sequences or tokens;
    ``sum_scale`` for a "sum" reduction: 1, or verl's scale, ``trainer.verl_micro_batch_size``), times world_size
    since DDP and FSDP average gradients over ranks: the accumulated gradient is then the gradient of the
    objective on the whole global mini-batch (a sum's times ``sum_scale``), for any micro-batches and any number
    of ranks. It is clipped to ``grad_clip`` in global norm (torch's ``clip_grad_norm_``, as verl's).
    Micro-batches are ``micro_rows`` rows of this rank's share, or, with ``max_tokens``, the global mini-batch's
    groups dealt to ranks by tokens and packed up to the budget (``pacs.train.update.packing``). ``pack``: the rows go
    through the model packed in groups of that size (``pack_group``), and budgets count their own tokens, no
    padding; with ``split``, a group above the budget runs in parts. ``mask``: the positions a "tokens" reduction
    averages over (the critic's: its states,
    ``value_mask``). Metrics are averaged the same way (by rows for "sum"); ``loss`` is the mini-batch loss as
    optimized. They add up on the device: the host waits for it once per mini-batch (the gradient norm), and for
    the metrics once at the end. ``grad_norm`` (mean) and ``grad_norm_max`` are the norms before clipping;
    ``grad_clipped`` counts the optimizer steps whose gradient the clip scaled down.
    """
    units = {
        "sequences": lambda b: float(b["response_mask"].shape[0]),
        "tokens": lambda b: float(b["response_mask"].sum()),
        "sum": lambda b: float(b["response_mask"].shape[0]),
    }[reduction]
    totals: dict[str, torch.Tensor | float] = {}
    grad_norms, skipped, clipped = [], 0, 0
    params = [p for group in optimizer.param_groups for p in group["params"]]  # under fsdp: the shards
    for _ in range(epochs):
        for mini in group_slices(batch, mini_rows, n):
            if max_tokens:
                mini, plan = balanced_plan(mini, n, max_tokens, env, pack, split)
            else:
                plan = fixed_plan(mini_rows // n, micro_rows // n)
            local = [units({"response_mask": mini[mask][m.rows(n)]}) for m in plan]  # on the host
            counted = sum(u for u, m in zip(local, plan, strict=True) if m.scale)
            global_units = float(all_reduce(torch.tensor(counted), env))
            sums = accumulate(module, loss_fn, mini, plan, local, global_units, reduction, n, env, pack, sum_scale)
            totals = {k: totals.get(k, 0.0) + v for k, v in sums.items()}
            norm = total_norm(torch.nn.utils.clip_grad_norm_(params, grad_clip if grad_clip is not None else math.inf))
            grad_norms.append(float(norm))  # the host's one wait per mini-batch
            clipped += grad_clip is not None and grad_clip / (grad_norms[-1] + 1e-6) < 1  # clip_grad_norm_'s test
            if math.isfinite(grad_norms[-1]):
                optimizer.step()
            else:  # every rank holds the same all-reduced gradient, so every rank skips
                skipped += 1
            optimizer.zero_grad(set_to_none=True)
    summed = torch.stack([torch.as_tensor(v, dtype=torch.float32, device=env.device) for v in totals.values()])
    out = dict(zip(totals, (all_reduce(summed, env) / len(grad_norms)).tolist(), strict=True)) if totals else {}
    out.update(
        grad_norm=float(np.mean(grad_norms)),
        grad_norm_max=float(np.max(grad_norms)),
        grad_clipped=clipped,
        skipped_steps=skipped,
        optimizer_steps=len(grad_norms),
    )
    return out
