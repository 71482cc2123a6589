import pytest
import torch

from pacs.algorithms.objectives import OBJECTIVES, get_objective
from pacs.algorithms.options import GrpoConfig, PacsConfig, PpoConfig
from pacs.algorithms.ppo import clipped_value_loss

N, B, T = 4, 8, 5


def synthetic_batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 2
    mask = torch.ones(B, T)
    mask[1, 3:] = 0
    mask[6, 2:] = 0
    return {
        "logprobs": (old + 0.05 * torch.randn(B, T, generator=g)).requires_grad_(True),
        "old_logprobs": old,
        "ref_logprobs": old - 0.1,
        "entropy": torch.rand(B, T, generator=g),
        "values": torch.rand(B, T, generator=g),
        "new_values": torch.rand(B, T, generator=g).requires_grad_(True),
        "response_mask": mask,
        "rewards": torch.tensor([1.0, 0, 0, 1, 0, 1, 1, 1]),
    }


@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_every_objective_runs_through_one_generic_driver(name):
    """What the trainer does, objective-agnostic: needs → prepare once → loss per micro-batch."""
    objective = get_objective(name)
    config = objective.config()
    full = synthetic_batch()
    batch = {k: full[k] for k in {"logprobs", "response_mask", "rewards"} | objective.needs(config)}
    batch.update(objective.prepare(batch, N, config))
    loss, metrics = objective.loss(batch, N, config)
    loss.backward()
    grad = batch["logprobs"].grad
    assert torch.isfinite(loss) and grad.abs().sum() > 0
    assert grad[full["response_mask"] == 0].abs().max() == 0  # no gradient through padding
    assert all(not v.requires_grad for v in metrics.values())
    if objective.value_loss is not None:
        batch["new_values"] = full["new_values"]
        vloss, _ = objective.value_loss(batch, config)
        vloss.backward()
        assert full["new_values"].grad.abs().sum() > 0


def test_needs_follow_the_config():
    assert get_objective("pacs").needs(PacsConfig()) == {"old_logprobs"}
    assert get_objective("pacs").needs(PacsConfig(reward_proxy="reference")) == {"ref_logprobs"}
    assert get_objective("pacs").needs(PacsConfig(reward_proxy="length-normalized")) == set()
    assert get_objective("grpo").needs(GrpoConfig()) == {"old_logprobs"}
    assert get_objective("grpo").needs(GrpoConfig(kl_coef=0.001, entropy_coef=0.01)) == {
        "old_logprobs",
        "ref_logprobs",
        "entropy",
    }
    assert get_objective("ppo").needs(PpoConfig()) == {"old_logprobs", "values"}
    with pytest.raises(ValueError, match="'dpo'"):
        get_objective("dpo")


def test_grpo_at_ratio_one_is_policy_gradient_with_group_advantages():
    objective = get_objective("grpo")
    config = GrpoConfig()  # seq-mean-token-sum-norm: Σ m ℓ / T
    b = synthetic_batch(1)
    b["logprobs"] = b["old_logprobs"].clone().requires_grad_(True)
    b.update(objective.prepare(b, N, config))
    loss, _ = objective.loss(b, N, config)
    loss.backward()
    r = b["rewards"].view(-1, N)
    adv = ((r - r.mean(-1, keepdim=True)) / (r.std(-1, keepdim=True) + 1e-6)).reshape(-1)
    assert torch.allclose(b["advantages"], adv)
    assert torch.allclose(b["logprobs"].grad, -adv.unsqueeze(-1) * b["response_mask"] / T, atol=1e-6)


def test_ppo_prepare_whitens_gae_advantages_of_return_minus_value():
    objective = get_objective("ppo")
    b = synthetic_batch(2)
    raw = objective.prepare(b, N, PpoConfig(whiten_advantages=False))
    mask = b["response_mask"].bool()
    expected = (b["rewards"].unsqueeze(-1) - b["values"])[mask]
    assert torch.allclose(raw["advantages"][mask], expected, atol=1e-6)
    assert torch.allclose(raw["returns"][mask], b["rewards"].unsqueeze(-1).expand(B, T)[mask])
    white = objective.prepare(b, N, PpoConfig())["advantages"][mask]
    assert white.mean().item() == pytest.approx(0.0, abs=1e-5)
    assert white.std().item() == pytest.approx(1.0, rel=1e-4)


def test_clipped_value_loss_by_hand():
    old = torch.tensor([[0.0, 0.0]])
    new = torch.tensor([[1.0, 0.2]])
    returns = torch.tensor([[0.0, 1.0]])
    # token 0: unclipped (1−0)² = 1, clipped (0.5−0)² = 0.25 → max 1
    # token 1: unclipped (0.2−1)² = 0.64, clipped (0.2−1)² = 0.64 → 0.64
    loss, m = clipped_value_loss(new, old, returns, torch.ones(1, 2), value_clip=0.5)
    assert loss.item() == pytest.approx((1 + 0.64) / 2)  # no ½, as the paper's verl fork
    assert m["value_clip_frac"].item() == 0.0
    # when the clipped error is the larger one, it is the one used and counted
    loss, m = clipped_value_loss(torch.tensor([[1.0]]), old[:, :1], torch.tensor([[2.0]]), torch.ones(1, 1), 0.5)
    assert loss.item() == pytest.approx(1.5**2)
    # the fork's aggregation, the actor's seq-mean-token-sum-norm: Σ over the states / max_response_length
    loss, _ = clipped_value_loss(new, old, returns, torch.tensor([[1, 0]]), 0.5, "seq-mean-token-sum-norm", 4)
    assert loss.item() == pytest.approx(1 / 4)
    assert m["value_clip_frac"].item() == 1.0
