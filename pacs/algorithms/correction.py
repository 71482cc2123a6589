"""Rollout correction: the rollout engine samples from π_s, which differs from the trainer's π_old by its
kernels and precision (bf16 gaps of a few hundredths of a nat per token, docs/rollouts.md), so samples the
objectives treat as drawn from π_old are not. Truncated importance sampling (TIS: Yao et al. 2025, "Your
Efficient RL Framework Secretly Brings You Off-Policy RL Training"; verl, OpenRLHF, slime and TRL ship it)
weights each loss term by its likelihood ratio, truncated. Off unless an objective's ``tis_cap`` is set.
"""

import math

import torch
from torch import Tensor

TIS_LEVELS = ("token", "sequence")


def _masked_sum(x: Tensor, mask: Tensor, dim: int) -> Tensor:
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device)).sum(dim)


def _masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device)).sum() / mask.sum().clamp(min=1)


def truncated_importance_weights(
    old_logprobs: Tensor, sampler_logprobs: Tensor, response_mask: Tensor, cap: float, level: str
) -> tuple[Tensor, dict[str, Tensor]]:
    """Truncated importance weights of the samples: the objectives are expectations under π_old, so each term
    is weighted by the likelihood ratio of what it was computed on, truncated at ``cap`` C:

    - ``token``:    w_t = min(π_old(o_t) / π_s(o_t), C)                        (B, T), per-token losses
    - ``sequence``: w_i = min(Π_t π_old(o_t) / π_s(o_t), C)
                        = min(exp(Σ_t m_t (log π_old − log π_s)), C)           (B,), per-answer losses

    The weights carry no gradient. Metrics: their mean (over response tokens, or answers) and the share of
    them truncated.
    """
    log_ratio = (old_logprobs - sampler_logprobs).detach()
    if level == "sequence":
        log_ratio = _masked_sum(log_ratio, response_mask, -1)
    elif level != "token":
        raise ValueError(f"unknown importance-sampling level {level!r}; choose one of {TIS_LEVELS}")
    log_cap = math.log(cap)
    weights = torch.exp(log_ratio.clamp(max=log_cap))  # min(ratio, C) without overflowing exp
    with torch.no_grad():
        truncated = (log_ratio > log_cap).float()
        if level == "token":
            metrics = {"tis_weight_mean": _masked_mean(weights, response_mask),
                       "tis_truncated_frac": _masked_mean(truncated, response_mask)}  # fmt: skip
        else:
            metrics = {"tis_weight_mean": weights.mean(), "tis_truncated_frac": truncated.mean()}
    return weights, metrics
