import pytest
import torch

from pacs.algorithms.advantages import (
    gae,
    group_scores,
    grpo_scores,
    outcome_token_rewards,
    rloo_scores,
    whiten_advantages,
)


def test_rloo_by_hand():
    x = torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 5.0])  # two groups of 3
    # group 1: 1 − (0+0)/2, 0 − (1+0)/2, 0 − (1+0)/2; group 2: 1 − 4, 3 − 3, 5 − 2
    assert rloo_scores(x, 3).tolist() == pytest.approx([1.0, -0.5, -0.5, -3.0, 0.0, 3.0])


def test_rloo_scores_sum_to_zero_in_each_group():
    x = torch.randn(40)
    assert rloo_scores(x, 8).view(5, 8).sum(-1).abs().max().item() < 1e-5


def test_grpo_by_hand():
    x = torch.tensor([1.0, 0.0, 0.0, 1.0])  # mean 0.5, unbiased std sqrt(1/3)
    std = (1 / 3) ** 0.5
    assert grpo_scores(x, 4, eps=0.0).tolist() == pytest.approx([0.5 / std, -0.5 / std, -0.5 / std, 0.5 / std])
    assert grpo_scores(x, 4, norm_by_std=False).tolist() == pytest.approx([0.5, -0.5, -0.5, 0.5])
    assert grpo_scores(torch.ones(4), 4).tolist() == [0.0] * 4  # equal rewards: zero, not NaN


def test_group_scores_names_and_errors():
    x = torch.arange(6.0)
    assert torch.equal(group_scores(x, 3, "none"), x)
    with pytest.raises(ValueError, match="groups of n=4"):
        group_scores(x, 4, "rloo")
    with pytest.raises(ValueError, match="'loo'"):
        group_scores(x, 3, "loo")


def test_outcome_reward_sits_on_the_last_response_token():
    mask = torch.tensor([[1, 1, 1, 0], [0, 1, 1, 0], [0, 0, 0, 0]])
    r = outcome_token_rewards(torch.tensor([1.0, 2.0, 3.0]), mask)
    assert r.tolist() == [[0, 0, 1, 0], [0, 0, 2, 0], [0, 0, 0, 0]]


def test_gae_with_gamma_lambda_one_is_return_minus_value():
    torch.manual_seed(0)
    mask = torch.tensor([[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0]])
    values = torch.randn(2, 6)
    values[~mask.bool()] = float("nan")  # padding must not leak in
    rewards = torch.tensor([1.0, 0.0])
    adv, ret = gae(outcome_token_rewards(rewards, mask), values, mask, gamma=1.0, lam=1.0)
    expected = rewards.unsqueeze(-1) - values
    assert torch.allclose(adv[mask.bool()], expected[mask.bool()])
    assert torch.allclose(ret[mask.bool()], rewards.unsqueeze(-1).expand(2, 6)[mask.bool()])
    assert not adv.isnan().any()


def test_gae_by_hand_with_discount():
    # one row, 3 tokens, reward 1 at the end, γ = 0.5, λ = 0.5, values 0.2, 0.4, 0.6
    v = torch.tensor([[0.2, 0.4, 0.6]])
    d2 = 1.0 - 0.6
    d1 = 0.0 + 0.5 * 0.6 - 0.4
    d0 = 0.0 + 0.5 * 0.4 - 0.2
    a2 = d2
    a1 = d1 + 0.25 * a2
    a0 = d0 + 0.25 * a1
    adv, ret = gae(torch.tensor([[0.0, 0.0, 1.0]]), v, torch.ones(1, 3), gamma=0.5, lam=0.5)
    assert adv[0].tolist() == pytest.approx([a0, a1, a2])
    assert ret[0].tolist() == pytest.approx([a0 + 0.2, a1 + 0.4, a2 + 0.6])


def test_gae_over_the_critics_states_bootstraps_from_the_state_after_the_last_token():
    """PPO's states as the fork's: one more after the last token (value 0.8 here). Its value enters the last
    token's δ and its advantage is −0.8, so its return is 0; with γλ < 1 the last token's advantage moves by
    γ(1 − λ)·0.8 (with γ = λ = 1 the two terms cancel: A = R − V either way)."""
    v = torch.tensor([[0.2, 0.4, 0.6, 0.8, 7.0]])  # 7.0: padding past the states, never read
    rewards = torch.tensor([[0.0, 0.0, 1.0, 0.0, 0.0]])
    states = torch.tensor([[1, 1, 1, 1, 0]])
    a3 = 0.0 + 0.5 * 0.0 - 0.8
    a2 = (1.0 + 0.5 * 0.8 - 0.6) + 0.25 * a3
    a1 = (0.0 + 0.5 * 0.6 - 0.4) + 0.25 * a2
    a0 = (0.0 + 0.5 * 0.4 - 0.2) + 0.25 * a1
    adv, ret = gae(rewards, v, states, gamma=0.5, lam=0.5)
    assert adv[0].tolist() == pytest.approx([a0, a1, a2, a3, 0.0])
    assert ret[0].tolist() == pytest.approx([a0 + 0.2, a1 + 0.4, a2 + 0.6, 0.0, 0.0], abs=1e-7)
    responses = torch.tensor([[1, 1, 1, 0, 0]])
    without, _ = gae(rewards, v, responses, gamma=0.5, lam=0.5)
    assert adv[0, 2] - without[0, 2] == pytest.approx(0.5 * (1 - 0.5) * 0.8)
    one, _ = gae(rewards, v, states, gamma=1.0, lam=1.0)
    assert one[0, :3].tolist() == pytest.approx([0.8, 0.6, 0.4])  # R − V


def test_whitened_advantages_are_zero_off_the_mask():
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    w = whiten_advantages(torch.tensor([[1.0, 2.0, 50.0], [3.0, 4.0, 5.0]]), mask)
    assert w[0, 2].item() == 0.0
    assert w[mask.bool()].mean().item() == pytest.approx(0.0, abs=1e-6)
