import math

import pytest
import torch

from pacs.algorithms.advantages import rloo_scores
from pacs.algorithms.options import PacsConfig
from pacs.algorithms.pacs import class_balanced_weights, pacs_loss, pacs_reward_proxy

# two prompts × n = 4 answers, 3 response tokens, the last token padding in rows 1 and 5
N = 4
MASK = torch.tensor([[1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1], [1, 1, 1]])
REWARDS = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0])


def batch(seed=0):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(8, 3, generator=g) * 2
    new = old + 0.3 * torch.randn(8, 3, generator=g)
    return new, old


def test_reward_proxies_by_hand():
    lp = torch.tensor([[-1.0, -2.0, -9.0]])
    old = torch.tensor([[-1.5, -1.0, -3.0]])
    m = torch.tensor([[1, 1, 0]])
    assert pacs_reward_proxy(lp, old, m, 2.0, "log-ratio").item() == pytest.approx(2.0 * (0.5 - 1.0))
    assert pacs_reward_proxy(lp, old, m, 2.0, "reference").item() == pytest.approx(-1.0)
    assert pacs_reward_proxy(lp, None, m, 2.0, "length-normalized").item() == pytest.approx(2.0 * (-3.0) / 2)
    with pytest.raises(ValueError, match="baseline"):
        pacs_reward_proxy(lp, None, m, 1.0, "log-ratio")


def test_class_balanced_weights_by_hand():
    # group 1: c = 1 of 4 → correct 4/(2·1) = 2, wrong 4/(2·3) = 2/3; group 2: c = 3 → correct 2/3, wrong 2
    assert class_balanced_weights(REWARDS, N).tolist() == pytest.approx(
        [2, 2 / 3, 2 / 3, 2 / 3, 2 / 3, 2 / 3, 2, 2 / 3]
    )
    # a group with one class only gets weight 1
    assert class_balanced_weights(torch.tensor([1.0, 1, 1, 1, 0, 0, 0, 0]), N).tolist() == [1.0] * 8


def bce(logit, target):
    return -(target * math.log(1 / (1 + math.exp(-logit))) + (1 - target) * math.log(1 - 1 / (1 + math.exp(-logit))))


@pytest.mark.parametrize("weighting", ["balanced", "positive", "negative", "none"])
def test_loss_by_hand(weighting):
    new, old = batch()
    cfg = PacsConfig(beta=2.0, weighting=weighting)
    loss, metrics = pacs_loss(new, MASK, REWARDS, N, cfg, old_logprobs=old)
    r_hat = [2.0 * sum((new[i, t] - old[i, t]).item() for t in range(3) if MASK[i, t]) for i in range(8)]
    psi = []
    for g in range(2):
        grp = r_hat[g * N : (g + 1) * N]
        psi += [grp[i] - (sum(grp) - grp[i]) / (N - 1) for i in range(N)]
    w = {
        "balanced": class_balanced_weights(REWARDS, N).tolist(),
        "positive": REWARDS.tolist(),
        "negative": (1 - REWARDS).tolist(),
        "none": [1.0] * 8,
    }[weighting]
    expected = sum(w[i] * bce(psi[i], REWARDS[i].item()) for i in range(8)) / 8  # mean over B, not Σw
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    assert {"reward_proxy_mean", "score_std", "classifier_accuracy", "weight_mean"} <= set(metrics)


def official_pacs_loss(new, old, rewards, n, beta, weights):
    """The official computation (ritzz-ai/PACS): unmasked sums, RLOO, torch BCEWithLogitsLoss(weight)."""
    r = beta * (new - old).sum(-1, keepdim=True)
    g = r.reshape(-1, n, 1)
    adv = (g - (g.sum(1, keepdim=True) - g) / (n - 1)).reshape(-1, 1)
    return torch.nn.BCEWithLogitsLoss(weight=weights.reshape(-1, 1))(adv, rewards.reshape(-1, 1))


def test_matches_the_official_code_on_unpadded_data_and_ignores_padding():
    new, old = batch(3)
    full = torch.ones(8, 3)
    ours, _ = pacs_loss(new, full, REWARDS, N, PacsConfig(), old_logprobs=old)
    official = official_pacs_loss(new, old, REWARDS, N, 1.0, class_balanced_weights(REWARDS, N))
    assert ours.item() == pytest.approx(official.item(), rel=1e-6)
    # pad two columns with garbage (−inf log-probs): the masked loss does not move
    pad = torch.full((8, 2), float("-inf"))
    padded, _ = pacs_loss(
        torch.cat([new, pad], 1),
        torch.cat([full, torch.zeros(8, 2)], 1),
        REWARDS,
        N,
        PacsConfig(),
        old_logprobs=torch.cat([old, torch.zeros(8, 2)], 1),
    )
    assert padded.item() == pytest.approx(ours.item(), rel=1e-6)


def test_gradient_at_old_policy_is_weighted_rloo_reinforce():
    """At π_θ = π_old: ∂L/∂log π_θ(i,t) = (1/B) Σ_j w_j (σ(0) − R_j) ∂ψ_j/∂log π_θ(i,t),
    with ∂ψ_j/∂log π(i,t) = β m_it (1 if i = j, −1/(n−1) if i ≠ j in the same group)."""
    _, old = batch(5)
    beta = 2.0
    lp = old.clone().requires_grad_(True)
    loss, _ = pacs_loss(lp, MASK, REWARDS, N, PacsConfig(beta=beta), old_logprobs=old)
    loss.backward()
    w = class_balanced_weights(REWARDS, N)
    coef = w * (0.5 - REWARDS)  # (B,) w_j (σ(0) − R_j)
    g = coef.view(-1, N)
    per_answer = (g - (g.sum(-1, keepdim=True) - g) / (N - 1)).reshape(-1)  # Σ_j coef_j ∂ψ_j/∂r̂_i
    expected = beta * per_answer.unsqueeze(-1) * MASK / len(REWARDS)
    assert torch.allclose(lp.grad, expected, atol=1e-6)


def test_unweighted_gradient_at_old_policy_is_minus_rloo_advantage_times_score_function():
    _, old = batch(6)
    lp = old.clone().requires_grad_(True)
    loss, _ = pacs_loss(lp, MASK, REWARDS, N, PacsConfig(weighting="none"), old_logprobs=old)
    loss.backward()
    expected = -rloo_scores(REWARDS, N).unsqueeze(-1) * MASK / len(REWARDS)
    assert torch.allclose(lp.grad, expected, atol=1e-6)


def test_group_with_equal_rewards_contributes_no_gradient_at_old_policy():
    _, old = batch(7)
    rewards = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 0.0])  # group 1 all correct
    lp = old.clone().requires_grad_(True)
    loss, _ = pacs_loss(lp, MASK, rewards, N, PacsConfig(), old_logprobs=old)
    loss.backward()
    assert lp.grad[:N].abs().max().item() < 1e-7
    assert lp.grad[N:].abs().max().item() > 1e-3  # the mixed group does get a gradient


def test_grpo_score_and_reference_proxy_by_hand():
    new, old = batch(8)
    ref = old - 0.1
    r_ref = (new - ref).where(MASK.bool(), 0).sum(-1)  # β = 1, reference baseline
    g = r_ref.view(-1, N)
    psi = ((g - g.mean(-1, keepdim=True)) / (g.std(-1, keepdim=True) + 1e-6)).reshape(-1)
    w = class_balanced_weights(REWARDS, N)
    expected = sum(w[i].item() * bce(psi[i].item(), REWARDS[i].item()) for i in range(8)) / 8
    cfg = PacsConfig(reward_proxy="reference", score="grpo")
    loss, _ = pacs_loss(new, MASK, REWARDS, N, cfg, old_logprobs=old, ref_logprobs=ref)
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="pacs.weighting"):
        PacsConfig(weighting="question")
    with pytest.raises(ValueError, match="pacs.score"):
        PacsConfig(score="naive")
