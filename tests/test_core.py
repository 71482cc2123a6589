import math

import pytest
import torch

from pacs.algorithms.core import (
    aggregate_loss,
    kl_penalty,
    masked_mean,
    masked_whiten,
    policy_loss,
    ppo_clip_loss,
)
from pacs.algorithms.options import PolicyLossConfig

LOSS = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 5.0, -7.0, -7.0]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("token-mean", (1 + 2 + 3 + 4 + 5) / 5),
        ("seq-mean-token-sum", (6 + 9) / 2),
        ("seq-mean-token-mean", (6 / 3 + 9 / 2) / 2),
        ("seq-mean-token-sum-norm", (6 + 9) / 4),
    ],
)
def test_aggregate_loss_modes_by_hand(mode, expected):
    assert aggregate_loss(LOSS, MASK, mode).item() == pytest.approx(expected)


def test_seq_mean_token_sum_norm_uses_the_given_length():
    assert aggregate_loss(LOSS, MASK, "seq-mean-token-sum-norm", max_response_length=10).item() == pytest.approx(1.5)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-sum", "seq-mean-token-mean"])
def test_padding_with_garbage_changes_nothing(mode):
    padded_loss = torch.cat([LOSS, torch.full((2, 3), float("nan"))], dim=1)
    padded_mask = torch.cat([MASK, torch.zeros(2, 3, dtype=MASK.dtype)], dim=1)
    assert aggregate_loss(padded_loss, padded_mask, mode).item() == pytest.approx(
        aggregate_loss(LOSS, MASK, mode).item()
    )


def test_unknown_mode_is_named():
    with pytest.raises(ValueError, match="token-sum-max"):
        aggregate_loss(LOSS, MASK, "token-sum-max")


def test_masked_mean_of_nothing_is_zero():
    assert masked_mean(torch.ones(2, 2), torch.zeros(2, 2)).item() == 0.0


def test_masked_whiten_has_zero_mean_unit_variance_on_the_mask():
    x = torch.tensor([[1.0, 2.0, 3.0, 1e6], [4.0, 5.0, 1e6, 1e6]])
    w = masked_whiten(x, MASK)
    vals = w[MASK.bool()]
    assert vals.mean().item() == pytest.approx(0.0, abs=1e-6)
    assert vals.var(unbiased=True).item() == pytest.approx(1.0, rel=1e-5)


def test_kl_estimators_by_hand():
    lp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    assert kl_penalty(lp, ref, "k1").tolist() == pytest.approx([0.5, -1.0])
    # k3 = exp(ref − lp) − (ref − lp) − 1
    assert kl_penalty(lp, ref, "k3").tolist() == pytest.approx([math.exp(-0.5) + 0.5 - 1, math.exp(1.0) - 1.0 - 1])
    assert (kl_penalty(torch.randn(50), torch.randn(50), "k3") >= 0).all()


def clip_config(**kw):
    return PolicyLossConfig(loss_agg_mode="token-mean", **kw)


def test_ppo_clip_per_token_by_hand():
    # rows: ratio 1.5 A=+1 (clipped at 1.2), ratio 0.5 A=−1 (clipped at 0.8), ratio 5 A=−1 (dual clip at 3),
    # ratio 0.5 A=+1 (not clipped: ratio·A is the smaller gain)
    ratios = torch.tensor([1.5, 0.5, 5.0, 0.5])
    adv = torch.tensor([1.0, -1.0, -1.0, 1.0])
    logprobs = torch.log(ratios).unsqueeze(-1)
    loss, metrics = ppo_clip_loss(logprobs, torch.zeros(4, 1), adv, torch.ones(4, 1), clip_config())
    per_token = [-1.2, 0.8, 3.0, -0.5]
    assert loss.item() == pytest.approx(sum(per_token) / 4)
    # rows 0 and 1 take the ε-clipped term; in row 2 the unclipped term (5) is larger and the dual clip binds
    assert metrics["clip_frac"].item() == pytest.approx(2 / 4)
    assert metrics["clip_frac_lower"].item() == pytest.approx(1 / 4)  # row 2 hits the dual clip


def test_ppo_clip_at_ratio_one_is_the_plain_policy_gradient():
    torch.manual_seed(0)
    old = torch.randn(6, 5)
    logprobs = old.clone().requires_grad_(True)
    adv = torch.randn(6)
    mask = (torch.rand(6, 5) > 0.3).float()
    loss, _ = ppo_clip_loss(logprobs, old, adv, mask, clip_config())
    loss.backward()
    # plain PG: ∇ of −(1/Σm) Σ m A log π
    expected = -adv.unsqueeze(-1) * mask / mask.sum()
    assert torch.allclose(logprobs.grad, expected, atol=1e-6)
    assert loss.item() == pytest.approx(-(adv.unsqueeze(-1) * mask).sum().item() / mask.sum().item(), abs=1e-6)


def test_policy_loss_adds_kl_and_entropy_terms():
    torch.manual_seed(1)
    lp, old, ref, ent = torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3), torch.rand(4, 3)
    adv, mask = torch.randn(4), torch.ones(4, 3)
    base, _ = policy_loss(lp, old, adv, mask, clip_config())
    cfg = clip_config(kl_coef=0.1, kl_estimator="k1", entropy_coef=0.01)
    full, metrics = policy_loss(lp, old, adv, mask, cfg, ref_logprobs=ref, entropy=ent)
    expected = base + 0.1 * (lp - ref).mean() - 0.01 * ent.mean()
    assert full.item() == pytest.approx(expected.item(), abs=1e-6)
    assert set(metrics) >= {"kl_ref", "entropy_bonus", "clip_frac"}
    with pytest.raises(ValueError, match="ref_logprobs"):
        policy_loss(lp, old, adv, mask, cfg)


def test_policy_config_rejects_bad_values():
    with pytest.raises(ValueError, match="clip_ratio_c"):
        PolicyLossConfig(clip_ratio_c=1.0)
    with pytest.raises(ValueError, match="loss_agg_mode"):
        PolicyLossConfig(loss_agg_mode="sum")
