"""Rollout correction (truncated importance sampling): off changes nothing, the weights are the hand-computed
ones, the cap holds, and each objective applies them where its loss lives (tokens for GRPO and PPO, answers
for PACS)."""

import math

import pytest
import torch
from test_objectives import N, synthetic_batch

from pacs.algorithms.correction import truncated_importance_weights
from pacs.algorithms.objectives import OBJECTIVES, get_objective
from pacs.config import ConfigError
from pacs.train.settings.config import resolve


def with_sampler(batch: dict, seed: int = 1) -> dict:
    """The engine's log-probs: the trainer's old ones off by a few hundredths, a few by a lot."""
    g = torch.Generator().manual_seed(seed)
    sampler = batch["old_logprobs"] + 0.05 * torch.randn(batch["old_logprobs"].shape, generator=g)
    sampler[0, 0] -= 3.0  # π_old / π_s = e^3: truncated
    sampler[2, 1] += 2.0  # e^-2: kept as it is
    return {**batch, "sampler_logprobs": sampler}


def loss_and_grad(name: str, batch: dict, **options) -> tuple:
    objective = get_objective(name)
    config = objective.config(**options)
    batch = {k: v.detach().clone().requires_grad_(v.requires_grad) for k, v in batch.items()}
    batch.update(objective.prepare(batch, N, config))
    loss, metrics = objective.loss(batch, N, config)
    loss.backward()
    return loss.detach(), batch["logprobs"].grad, metrics


def test_the_weights_are_the_truncated_likelihood_ratios():
    old = torch.tensor([[-1.0, -2.0, -0.5], [-0.3, -0.1, 0.0]])
    sampler = torch.tensor([[-1.5, -1.0, -4.0], [-0.3, -0.2, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    weights, metrics = truncated_importance_weights(old, sampler, mask, 2.0, "token")
    expected = torch.tensor([[math.exp(0.5), math.exp(-1.0), 2.0], [1.0, math.exp(0.1), 2.0]])  # e^3.5 capped
    assert torch.allclose(weights[mask.bool()], expected[mask.bool()])
    assert metrics["tis_truncated_frac"] == pytest.approx(1 / 5)
    assert metrics["tis_weight_mean"] == pytest.approx(float(expected[mask.bool()].mean()))
    # an answer's weight is the ratio of its whole sequence: the product over its response tokens
    weights, metrics = truncated_importance_weights(old, sampler, mask, 20.0, "sequence")
    assert weights.tolist() == pytest.approx([min(math.exp(0.5 - 1.0 + 3.5), 20.0), math.exp(0.1)])
    assert metrics["tis_truncated_frac"] == 0.5
    assert not weights.requires_grad


def test_the_cap_holds_however_far_the_sampler_is():
    old = torch.zeros(4, 6)
    sampler = torch.tensor([-1e4, -50.0, 0.0, 1e4]).repeat(6, 1).T  # ratios e^10000 ... e^-10000
    for level in ("token", "sequence"):
        weights, _ = truncated_importance_weights(old, sampler, torch.ones(4, 6), 3.0, level)
        assert torch.isfinite(weights).all() and weights.max() == 3.0 and weights.min() >= 0


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_off_is_bitwise_unchanged(name):
    """tis_cap null: the engine's log-probs in the batch change neither the loss nor the gradient, by a bit."""
    batch = synthetic_batch()
    plain = loss_and_grad(name, batch)
    with_log = loss_and_grad(name, with_sampler(batch))
    assert torch.equal(plain[0], with_log[0]) and torch.equal(plain[1], with_log[1])
    assert "tis_weight_mean" not in with_log[2]


@pytest.mark.parametrize("name", ["grpo", "ppo"])
def test_the_clipped_losses_weight_each_token(name):
    """With every ratio 1 the loss is unchanged; with the sampler's log-probs each token's gradient is scaled
    by its own weight (one token's weight changes only that token's gradient)."""
    batch = synthetic_batch()
    plain = loss_and_grad(name, batch)
    on_policy = loss_and_grad(name, {**batch, "sampler_logprobs": batch["old_logprobs"]}, tis_cap=2.0)
    assert torch.allclose(on_policy[1], plain[1]) and on_policy[2]["tis_weight_mean"] == 1.0
    corrected = with_sampler(batch)
    weighted = loss_and_grad(name, corrected, tis_cap=2.0)
    weights, _ = truncated_importance_weights(batch["old_logprobs"], corrected["sampler_logprobs"],
                                              batch["response_mask"], 2.0, "token")  # fmt: skip
    assert torch.allclose(weighted[1], plain[1] * weights, atol=1e-7)
    assert weighted[2]["tis_truncated_frac"] > 0


def test_pacs_weights_each_answer_by_its_sequence_ratio():
    """PACS's BCE term of answer i is scaled by min(Π_t π_old/π_s, C): with score none (ψ_i depends on answer i
    alone) the gradient of row i is scaled by exactly that weight."""
    batch = synthetic_batch()
    options = {"score": "none", "weighting": "none"}
    plain = loss_and_grad("pacs", batch, **options)
    corrected = with_sampler(batch)
    weighted = loss_and_grad("pacs", corrected, tis_cap=2.0, **options)
    rho, metrics = truncated_importance_weights(batch["old_logprobs"], corrected["sampler_logprobs"],
                                                batch["response_mask"], 2.0, "sequence")  # fmt: skip
    assert torch.allclose(weighted[1], plain[1] * rho[:, None], atol=1e-7)
    assert weighted[2]["tis_weight_mean"] == metrics["tis_weight_mean"] and metrics["tis_truncated_frac"] > 0


def test_correction_needs_an_engine_that_reports_its_log_probs():
    base = {"algorithm": {"name": "grpo", "options": {"tis_cap": 2.0}}, "model": {"path": "m"},
            "data": {"train_files": ["x"]}}  # fmt: skip
    assert "sampler_logprobs" in get_objective("grpo").needs(get_objective("grpo").config(tis_cap=2.0))
    resolve({**base, "rollout": {"engine": "vllm"}})
    with pytest.raises(ConfigError, match="algorithm.options.tis_cap: .* rollout.engine hf"):
        resolve(base)
    with pytest.raises(ValueError, match="tis_cap must be >= 1"):
        get_objective("pacs").config(tis_cap=0.5)
