"""Group-relative scores and GAE.

Rows are ordered in groups of ``n`` answers to the same prompt: row i belongs to group i // n.
"""

import torch
from torch import Tensor

from pacs.algorithms.core import masked_whiten
from pacs.algorithms.options import GROUP_SCORES


def _groups(x: Tensor, n: int) -> Tensor:
    if x.dim() != 1:
        raise ValueError(f"expected one value per answer, shape (B,), got {tuple(x.shape)}")
    if n < 1 or x.shape[0] % n:
        raise ValueError(f"batch of {x.shape[0]} answers is not a whole number of groups of n={n}")
    return x.view(-1, n)  # (B/n, n)


def rloo_scores(x: Tensor, n: int) -> Tensor:
    """Leave-one-out centring (Ahmadian et al. 2024): x_i − mean_{j≠i} x_j within each group.

    The scores of a group sum to zero.
    """
    if n < 2:
        raise ValueError("RLOO needs at least 2 answers per prompt")
    g = _groups(x, n)
    loo_mean = (g.sum(-1, keepdim=True) - g) / (n - 1)
    return (g - loo_mean).reshape(-1)


def grpo_scores(x: Tensor, n: int, norm_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """GRPO group normalisation (Shao et al. 2024): (x_i − mean) / (std + ε), std with Bessel's
    correction as in verl; with ``norm_by_std=False`` only the mean is removed (Dr. GRPO).
    A group of one answer is left as is (mean 0, std 1), as in verl.
    """
    g = _groups(x, n)
    if n == 1:
        return x.clone()
    centred = g - g.mean(-1, keepdim=True)
    if norm_by_std:
        centred = centred / (g.std(-1, keepdim=True) + eps)
    return centred.reshape(-1)


def group_scores(x: Tensor, n: int, method: str, norm_by_std: bool = True, eps: float = 1e-6) -> Tensor:
    """Dispatch on a named group score: ``rloo``, ``grpo`` or ``none`` (x unchanged)."""
    if method == "rloo":
        return rloo_scores(x, n)
    if method == "grpo":
        return grpo_scores(x, n, norm_by_std, eps)
    if method == "none":
        _groups(x, n)
        return x
    raise ValueError(f"unknown group score {method!r}; choose one of {GROUP_SCORES}")


def outcome_token_rewards(rewards: Tensor, response_mask: Tensor) -> Tensor:
    """(B,) outcome rewards placed on the last response token of each row → (B, T)."""
    mask = response_mask.bool()
    T = mask.shape[-1]
    last = T - 1 - mask.flip(-1).int().argmax(-1)  # (B,) index of the last True
    token_rewards = torch.zeros(mask.shape, dtype=rewards.dtype, device=rewards.device)
    has_tokens = mask.any(-1)
    rows = torch.arange(mask.shape[0], device=mask.device)[has_tokens]
    token_rewards[rows, last[has_tokens]] = rewards[has_tokens]
    return token_rewards


@torch.no_grad()
def gae(token_rewards: Tensor, values: Tensor, states: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation (Schulman et al. 2016) over the states of ``states`` (B, T):

        δ_t = r_t + γ V_{t+1} − V_t,   A_t = δ_t + γ λ A_{t+1},   returns_t = A_t + V_t

    V is 0 past the last state. Masked positions are skipped (V and A carry over them). ``states`` is the
    response mask, or PPO's critic states (one more after the last token, as the fork's: its V bootstraps
    the last token, A = −V there and its return 0). With γ = λ = 1 and a single outcome reward R on the last
    token, A_t = R − V_t either way. Returns (advantages, returns), both (B, T), unwhitened, 0 off the states.
    """
    mask = states.bool()
    next_value = torch.zeros_like(values[:, 0])
    next_adv = torch.zeros_like(values[:, 0])
    advantages = torch.zeros_like(values)
    for t in reversed(range(values.shape[-1])):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        adv_t = delta + gamma * lam * next_adv
        next_value = torch.where(mask[:, t], values[:, t], next_value)
        next_adv = torch.where(mask[:, t], adv_t, next_adv)
        advantages[:, t] = next_adv
    advantages = torch.where(mask, advantages, 0.0)
    returns = torch.where(mask, advantages + values, 0.0)
    return advantages, returns


def whiten_advantages(advantages: Tensor, response_mask: Tensor) -> Tensor:
    """Batch whitening of token advantages, zero outside the mask."""
    return torch.where(response_mask.bool(), masked_whiten(advantages, response_mask), 0.0)
