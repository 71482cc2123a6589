"""PACS: RLVR as supervised learning of the verifiable reward (Li et al. 2025, arXiv 2509.02522).

The policy's own log-likelihood ratio is a reward proxy r̂_i, its group-relative score ψ_i a logit,
and the loss a (weighted) binary cross-entropy between ψ_i and the 0/1 verifiable reward R_i.
Reference implementation: ritzz-ai/PACS ``src/pacs/pacs_core_algos.py``.
"""

from collections.abc import Mapping

import torch
import torch.nn.functional as F
from torch import Tensor

from pacs.algorithms.advantages import group_scores
from pacs.algorithms.core import masked_mean, masked_sum
from pacs.algorithms.correction import truncated_importance_weights
from pacs.algorithms.options import REWARD_PROXIES, WEIGHTINGS, PacsConfig


def pacs_reward_proxy(
    logprobs: Tensor,
    baseline_logprobs: Tensor | None,
    response_mask: Tensor,
    beta: float,
    kind: str,
) -> Tensor:
    """Per-answer reward proxy r̂_i, shape (B,), with sums over response tokens only:

    - ``log-ratio``:         β Σ_t m_t (log π_θ − log π_old)     (baseline = π_old, the sampler)
    - ``reference``:         β Σ_t m_t (log π_θ − log π_ref)     (baseline = a frozen reference)
    - ``length-normalized``: β Σ_t m_t log π_θ / |o_i|            (no baseline)
    """
    if kind == "length-normalized":
        return beta * masked_sum(logprobs, response_mask, -1) / response_mask.sum(-1).clamp(min=1)
    if kind not in ("log-ratio", "reference"):
        raise ValueError(f"unknown reward proxy {kind!r}; choose one of {REWARD_PROXIES}")
    if baseline_logprobs is None:
        raise ValueError(f"reward proxy {kind!r} needs the baseline log-probs (old or reference)")
    return beta * masked_sum(logprobs - baseline_logprobs, response_mask, -1)


def class_balanced_weights(rewards: Tensor, n: int) -> Tensor:
    """Per-group class balance (sklearn's "balanced"): n/(2c) for the c correct answers of a group,
    n/(2(n−c)) for its wrong ones; a group with only one class gets weight 1.
    """
    groups = rewards.view(-1, n)
    correct = groups.sum(-1, keepdim=True)  # (G, 1) c
    pos = n / (2 * correct.clamp(min=1))
    neg = n / (2 * (n - correct).clamp(min=1))
    weights = torch.where(groups > 0.5, pos, neg)
    mixed = (correct > 0) & (correct < n)
    return torch.where(mixed, weights, torch.ones_like(weights)).reshape(-1)


def pacs_weights(rewards: Tensor, n: int, weighting: str) -> Tensor | None:
    """Per-answer weights of the BCE, shape (B,), or None for unweighted."""
    if weighting == "balanced":
        return class_balanced_weights(rewards, n)
    if weighting == "positive":
        return (rewards > 0.5).to(rewards.dtype)
    if weighting == "negative":
        return (rewards <= 0.5).to(rewards.dtype)
    if weighting == "none":
        return None
    raise ValueError(f"unknown weighting {weighting!r}; choose one of {WEIGHTINGS}")


def pacs_loss(
    logprobs: Tensor,
    response_mask: Tensor,
    rewards: Tensor,
    n: int,
    config: PacsConfig,
    old_logprobs: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    sampler_logprobs: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PACS loss over a batch of whole groups:

        L = (1/B) Σ_i w_i · BCE(σ(ψ_i), R_i),   ψ = score(r̂) within each group of n

    ``logprobs`` (B, T) of π_θ with grad; ``rewards`` (B,) in {0, 1}; the average is over all B
    answers whatever the weights, as torch's BCEWithLogitsLoss(weight=w) in the official code.
    At π_θ = π_old its gradient is (1/B) Σ_i w_i (σ(0) − R_i) ∇ψ_i: RLOO-centred REINFORCE.

    Rollout correction (``tis_cap`` C). L is an expectation over answers o ~ π_old, but the engine drew them
    from π_s. Per answer, E_{o~π_old}[ℓ(o)] = E_{o~π_s}[ρ(o) ℓ(o)] with ρ(o) = π_old(o)/π_s(o)
    = Π_t π_old(o_t)/π_s(o_t), a ratio of whole sequences since ℓ_i is a loss of the whole answer (unlike PPO's
    per-token terms). The
    term w_i · BCE_i is weighted by min(ρ_i, C): unbiased below the cap, bounded variance above it. The
    group's other answers enter ψ_i only through its baseline and are taken as drawn, as GRPO's group
    normalisation is; exact correction would weight by the product over the group. log ρ_i sums the
    per-token gaps, so its spread grows with the length (about σ·√|o| for a per-token spread σ): watch
    ``tis_truncated_frac``.
    """
    baseline = ref_logprobs if config.reward_proxy == "reference" else old_logprobs
    r_hat = pacs_reward_proxy(logprobs, baseline, response_mask, config.beta, config.reward_proxy)  # (B,)
    psi = group_scores(r_hat, n, config.score, config.norm_by_std, config.eps)  # (B,)
    targets = rewards.to(psi.dtype)
    weights = pacs_weights(targets, n, config.weighting)
    tis = {}
    if config.tis_cap is not None:
        if old_logprobs is None or sampler_logprobs is None:
            raise ValueError("tis_cap needs old_logprobs and the rollout engine's log-probs (sampler_logprobs)")
        rho, tis = truncated_importance_weights(old_logprobs, sampler_logprobs, response_mask, config.tis_cap,
                                                "sequence")  # fmt: skip
        weights = rho.to(psi.dtype) if weights is None else weights * rho.to(psi.dtype)
    loss = F.binary_cross_entropy_with_logits(psi, targets, weight=weights)
    with torch.no_grad():
        correct = targets > 0.5
        metrics = {
            "loss": loss.detach(),
            "reward_proxy_mean": r_hat.mean(),
            "reward_proxy_abs_max": r_hat.abs().max(),
            "score_mean": psi.mean(),
            "score_std": psi.std() if psi.numel() > 1 else torch.zeros(()),
            "score_correct_mean": masked_mean(psi, correct),
            "score_wrong_mean": masked_mean(psi, ~correct),
            "classifier_accuracy": ((psi > 0) == correct).float().mean(),
            "weight_mean": weights.mean() if weights is not None else torch.ones(()),
            **tis,
        }
    return loss, metrics


def pacs_prepare(batch: Mapping[str, Tensor], n: int, config: PacsConfig) -> dict[str, Tensor]:
    """PACS needs nothing precomputed per step: its score depends on the current π_θ."""
    return {}


def pacs_batch_loss(batch: Mapping[str, Tensor], n: int, config: PacsConfig) -> tuple[Tensor, dict[str, Tensor]]:
    return pacs_loss(
        batch["logprobs"],
        batch["response_mask"],
        batch["rewards"],
        n,
        config,
        old_logprobs=batch.get("old_logprobs"),
        ref_logprobs=batch.get("ref_logprobs"),
        sampler_logprobs=batch.get("sampler_logprobs"),
    )
