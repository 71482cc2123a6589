"""Pieces shared by the objectives: masked reductions, loss aggregation, KL estimators,
and the PPO clipped surrogate that GRPO and PPO both optimise.

Every reduction goes through `torch.where` on the mask, so padded positions may hold
anything (even -inf log-probs) without leaking into a sum.
"""

from collections.abc import Mapping

import torch
from torch import Tensor

from pacs.algorithms.correction import truncated_importance_weights
from pacs.algorithms.options import KL_ESTIMATORS, LOSS_AGG_MODES, PolicyLossConfig


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    x = torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))
    return x.sum() if dim is None else x.sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean over the positions where mask is 1; an empty selection gives 0, not NaN."""
    count = mask.sum() if dim is None else mask.sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1)


def masked_whiten(x: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(x - mean) / sqrt(var + eps) over masked positions, with Bessel's correction as in verl."""
    mean = masked_mean(x, mask)
    count = mask.sum()
    var = masked_sum((x - mean) ** 2, mask) / (count - 1).clamp(min=1)
    return (x - mean) * torch.rsqrt(var + eps)


def aggregate_loss(
    loss_mat: Tensor, response_mask: Tensor, mode: str, max_response_length: int | None = None
) -> Tensor:
    """Reduce a (B, T) per-token loss to a scalar.

    With m the mask, ℓ the loss, B rows and |o_i| = Σ_t m_it:
    - ``token-mean``:               Σ_it m ℓ / Σ_it m              (every token of the batch weighs the same)
    - ``seq-mean-token-sum``:       (1/B) Σ_i Σ_t m ℓ               (long answers weigh more)
    - ``seq-mean-token-mean``:      (1/B) Σ_i (Σ_t m ℓ / |o_i|)     (every answer weighs the same)
    - ``seq-mean-token-sum-norm``:  Σ_it m ℓ / L                    (Dr. GRPO; L = max_response_length, or T
      when not given). As in verl this divides by L only, not by B: the paper's baselines used it.
    """
    if mode == "token-mean":
        return masked_mean(loss_mat, response_mask)
    seq_sums = masked_sum(loss_mat, response_mask, dim=-1)  # (B,)
    if mode == "seq-mean-token-sum":
        return seq_sums.mean()
    if mode == "seq-mean-token-mean":
        return (seq_sums / response_mask.sum(-1).clamp(min=1)).mean()
    if mode == "seq-mean-token-sum-norm":
        return seq_sums.sum() / (max_response_length or response_mask.shape[-1])
    raise ValueError(f"unknown loss aggregation mode {mode!r}; choose one of {LOSS_AGG_MODES}")


def kl_penalty(logprobs: Tensor, ref_logprobs: Tensor, estimator: str) -> Tensor:
    """Per-token estimate of KL(π_θ || π_ref) from samples of π_θ (Schulman, "Approximating KL").

    - ``k1``: log π_θ − log π_ref (unbiased, high variance, can be negative)
    - ``k3``: ρ − log ρ − 1 with ρ = π_ref/π_θ (unbiased, non-negative); clamped to [-10, 10] as verl's low_var_kl
    """
    log_ratio = logprobs - ref_logprobs
    if estimator == "k1":
        return log_ratio
    if estimator == "k3":
        return (torch.exp(-log_ratio) + log_ratio - 1).clamp(-10, 10)
    raise ValueError(f"unknown KL estimator {estimator!r}; choose one of {KL_ESTIMATORS}")


def ppo_clip_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    config: PolicyLossConfig,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Dual-clip PPO surrogate (Schulman et al. 2017; Ye et al. 2020), per token:

        ℓ = max(−A ρ, −A clip(ρ, 1−ε_low, 1+ε_high)),  ρ = exp(log π_θ − log π_old)
        ℓ = min(ℓ, −A c)  where A < 0

    times ``is_weights`` (B, T) where given (rollout correction), aggregated with ``config.loss_agg_mode``.
    ``advantages`` is (B, T) or (B,) for one per answer. At ρ = 1 the gradient is the plain policy gradient
    −A ∇log π_θ.
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)  # (B, 1) broadcasts over tokens
    log_ratio = (logprobs - old_logprobs).clamp(-20.0, 20.0)  # keeps exp finite on wild samples
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1 - config.clip_ratio_low, 1 + config.clip_ratio_high)
    clip_max = torch.maximum(unclipped, clipped)
    dual = torch.minimum(clip_max, -advantages * config.clip_ratio_c)
    loss_mat = torch.where(advantages < 0, dual, clip_max)  # (B, T)
    if is_weights is not None:
        loss_mat = loss_mat * is_weights
    loss = aggregate_loss(loss_mat, response_mask, config.loss_agg_mode, config.max_response_length)
    with torch.no_grad():
        metrics = {
            "pg_loss": loss.detach(),
            "clip_frac": masked_mean((clipped > unclipped).float(), response_mask),
            "clip_frac_lower": masked_mean(((clip_max > dual) & (advantages < 0)).float(), response_mask),
            "approx_kl_old": masked_mean(-log_ratio, response_mask),
        }
    return loss, metrics


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    config: PolicyLossConfig,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
    sampler_logprobs: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO-clip loss (token-level rollout correction with ``tis_cap``) + kl_coef · KL(π_θ‖π_ref) − entropy_coef · H,
    each aggregated the same way."""
    is_weights, tis = None, {}
    if config.tis_cap is not None:
        if sampler_logprobs is None:
            raise ValueError("tis_cap needs the rollout engine's log-probs of its samples (sampler_logprobs)")
        is_weights, tis = truncated_importance_weights(old_logprobs, sampler_logprobs, response_mask,
                                                       config.tis_cap, "token")  # fmt: skip
    loss, metrics = ppo_clip_loss(logprobs, old_logprobs, advantages, response_mask, config, is_weights)
    metrics.update(tis)

    def agg(x: Tensor) -> Tensor:
        return aggregate_loss(x, response_mask, config.loss_agg_mode, config.max_response_length)

    if config.kl_coef:
        if ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs ref_logprobs")
        kl = agg(kl_penalty(logprobs, ref_logprobs, config.kl_estimator))
        loss = loss + config.kl_coef * kl
        metrics["kl_ref"] = kl.detach()
    if config.entropy_coef:
        if entropy is None:
            raise ValueError("entropy_coef > 0 needs the per-token entropy")
        ent = agg(entropy)
        loss = loss - config.entropy_coef * ent
        metrics["entropy_bonus"] = ent.detach()
    metrics["loss"] = loss.detach()
    return loss, metrics


def policy_batch_loss(
    batch: Mapping[str, Tensor], n: int, config: PolicyLossConfig
) -> tuple[Tensor, dict[str, Tensor]]:
    """The actor loss of GRPO and PPO alike; they differ only in how ``prepare`` made the advantages."""
    return policy_loss(
        batch["logprobs"],
        batch["old_logprobs"],
        batch["advantages"],
        batch["response_mask"],
        config,
        ref_logprobs=batch.get("ref_logprobs"),
        entropy=batch.get("entropy"),
        sampler_logprobs=batch.get("sampler_logprobs"),
    )
