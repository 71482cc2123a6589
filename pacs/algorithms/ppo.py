"""PPO with a learned critic (Schulman et al. 2017) for outcome rewards, as the paper's verl fork runs it
(ritzz-ai/PACS ``src/verl``): the reward sits on the last response token, GAE(γ, λ) gives token advantages
from the critic's values, advantages are whitened over the batch, and the critic regresses the returns.

The critic's states (``value_mask``) are the fork's: the state before each response token and, for a
response that stopped before the maximum length, the state after its last token (its value bootstraps the
last token's GAE term and is trained toward a return of 0). Without a ``value_mask``, the response's.
"""

from collections.abc import Mapping

import torch
from torch import Tensor

from pacs.algorithms.advantages import gae, outcome_token_rewards, whiten_advantages
from pacs.algorithms.core import aggregate_loss, masked_mean
from pacs.algorithms.options import PpoConfig


def ppo_advantages(rewards: Tensor, values: Tensor, response_mask: Tensor, config: PpoConfig,
                   value_mask: Tensor | None = None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """(B, T) advantages (whitened if configured; 0 off the response) and (B, T) returns (over the critic's
    states, ``value_mask``, or the response's) from (B,) outcome rewards."""
    token_rewards = outcome_token_rewards(rewards, response_mask)
    states = response_mask if value_mask is None else value_mask
    advantages, returns = gae(token_rewards, values, states, config.gamma, config.lam)
    advantages = torch.where(response_mask.bool(), advantages, 0.0)
    if config.whiten_advantages:
        advantages = whiten_advantages(advantages, response_mask)
    return advantages, returns


def clipped_value_loss(
    values: Tensor,
    old_values: Tensor,
    returns: Tensor,
    response_mask: Tensor,
    value_clip: float,
    loss_agg_mode: str = "token-mean",
    max_response_length: int | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Critic loss agg(max((V − G)², (clip(V, V_old ± c) − G)²)), G the GAE returns, over the mask's states:
    the fork's ``compute_value_loss`` (``core_algos.py``), with no ½ (TRL's and later verl's have one)."""
    clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
    unclipped_err = (values - returns) ** 2
    clipped_err = (clipped - returns) ** 2
    loss = aggregate_loss(torch.maximum(unclipped_err, clipped_err), response_mask, loss_agg_mode, max_response_length)
    with torch.no_grad():
        metrics = {
            "value_loss": loss.detach(),
            "value_clip_frac": masked_mean((clipped_err > unclipped_err).float(), response_mask),
            "value_mean": masked_mean(values, response_mask),
        }
    return loss, metrics


def ppo_prepare(batch: Mapping[str, Tensor], n: int, config: PpoConfig) -> dict[str, Tensor]:
    advantages, returns = ppo_advantages(batch["rewards"], batch["values"], batch["response_mask"], config,
                                         batch.get("value_mask"))  # fmt: skip
    return {"advantages": advantages, "returns": returns}


def ppo_value_loss(batch: Mapping[str, Tensor], config: PpoConfig) -> tuple[Tensor, dict[str, Tensor]]:
    """The critic's loss over its states (``value_mask``, or the response's); ``batch["new_values"]`` are the
    critic's predictions with grad."""
    return clipped_value_loss(
        batch["new_values"],
        batch["values"],
        batch["returns"],
        batch.get("value_mask", batch["response_mask"]),
        config.value_clip,
        config.value_agg,
        config.max_response_length,
    )
