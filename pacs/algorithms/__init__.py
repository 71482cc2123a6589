"""The RL objectives as pure tensor functions, and one registry naming them.

A trainer looks an objective up by name, builds its config from the run's options, computes the
batch tensors ``needs(config)`` lists once per step, calls ``prepare`` once per step and ``loss``
per micro-batch. Adding an objective means adding an entry here; no training code changes.

Batch tensors: ``logprobs``, ``old_logprobs``, ``ref_logprobs``, ``entropy``, ``values``,
``new_values``, ``sampler_logprobs`` (the rollout engine's, for rollout correction) (B, T); ``response_mask``
(B, T); ``value_mask`` (B, T), the critic's states where they are not the response's (PPO); ``rewards`` (B,)
in {0, 1}; rows in groups of n.
"""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from pacs.algorithms.core import PolicyLossConfig, policy_batch_loss
from pacs.algorithms.grpo import GrpoConfig, grpo_prepare
from pacs.algorithms.pacs import PacsConfig, pacs_batch_loss, pacs_prepare
from pacs.algorithms.ppo import PpoConfig, ppo_prepare, ppo_value_loss

Batch = Mapping[str, Tensor]
LossFn = Callable[[Batch, int, Any], tuple[Tensor, dict[str, Tensor]]]


@dataclass(frozen=True)
class Objective:
    config: type  # frozen dataclass of the objective's options; defaults are the paper's
    needs: Callable[[Any], frozenset[str]]  # batch tensors beyond logprobs, response_mask, rewards
    prepare: Callable[[Batch, int, Any], dict[str, Tensor]]  # once per step, on the whole batch
    loss: LossFn  # per micro-batch of whole groups, with grad
    # what ``loss`` averages over, so that a trainer can weight micro-batches to get the loss of the whole
    # mini-batch: "sequences", "tokens", or "sum" (a sum with a constant divisor: micro-batch losses add up)
    reduction: Callable[[Any], str]
    value_loss: Callable[[Batch, Any], tuple[Tensor, dict[str, Tensor]]] | None = None  # critic, if any
    value_reduction: Callable[[Any], str] | None = None


def _correction_needs(config) -> set[str]:
    return {"old_logprobs", "sampler_logprobs"} if config.tis_cap is not None else set()


def _pacs_needs(config: PacsConfig) -> frozenset[str]:
    needs = {"log-ratio": {"old_logprobs"}, "reference": {"ref_logprobs"}}.get(config.reward_proxy, set())
    return frozenset(needs | _correction_needs(config))


def _policy_needs(config: PolicyLossConfig) -> frozenset[str]:
    needs = {"old_logprobs"} | _correction_needs(config)
    if config.kl_coef:
        needs.add("ref_logprobs")
    if config.entropy_coef:
        needs.add("entropy")
    return frozenset(needs)


AGG_REDUCTION = {
    "token-mean": "tokens",
    "seq-mean-token-sum": "sequences",
    "seq-mean-token-mean": "sequences",
    "seq-mean-token-sum-norm": "sum",
}

OBJECTIVES: dict[str, Objective] = {
    "pacs": Objective(PacsConfig, _pacs_needs, pacs_prepare, pacs_batch_loss, lambda c: "sequences"),
    "grpo": Objective(
        GrpoConfig, _policy_needs, grpo_prepare, policy_batch_loss, lambda c: AGG_REDUCTION[c.loss_agg_mode]
    ),
    "ppo": Objective(
        PpoConfig,
        lambda c: _policy_needs(c) | {"values"},
        ppo_prepare,
        policy_batch_loss,
        lambda c: AGG_REDUCTION[c.loss_agg_mode],
        value_loss=ppo_value_loss,
        value_reduction=lambda c: AGG_REDUCTION[c.value_agg],
    ),
}


def get_objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {sorted(OBJECTIVES)}")
    return OBJECTIVES[name]
