"""One optimizer step of the trainer against the paper's verl fork (ritzz-ai/PACS, ``src/verl``): the gradient
before and after clipping and the AdamW update, for PACS, GRPO and PPO's actor and critic, at two micro-batch
sizes, with token budgets and on two ranks, with the clip binding and not.

The fork's step is written out below from its source, on the tiny model's own forward (one row at a time, no
packing, no prompt sharing): each of its ranks splits its share of the mini-batch into micro-batches of
``ppo_micro_batch_size_per_gpu`` responses and backpropagates each micro-batch's loss divided by its
gradient-accumulation count (``dp_actor.py`` 337-414, ``dp_critic.py`` 207-245, ``pacs_actor.py`` 78-134);
FSDP averages the ranks' gradients; ``_optimizer_step`` clips the global norm (``dp_actor.py`` 224-240,
``dp_critic.py`` 119-135; PACS's own, ``pacs_actor.py`` 29-44, never clips) and AdamW steps
(``fsdp_workers.py`` 327-332, 919-924). The trainer, with ``trainer.verl_micro_batch_size`` the fork's
micro-batch, must give every step that gradient, whatever its own micro-batches, token budget or ranks.
"""

import pytest
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from helpers import N, ragged_batch, trainer_update, trainer_update_worker
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification

from pacs.ranks.distributed import DistEnv
from pacs.train.launch import free_port

FORK_RANKS, FORK_MICRO = 2, 8  # the fork's ranks and ppo_micro_batch_size_per_gpu (the paper's: 64 and 8)
PROMPTS = 8  # one step, one mini-batch: 32 responses, 16 per fork rank, 2 fork micro-batches each
MAX_LEN = 12  # rollout.max_response_length: the fork pads every response to it
LENGTHS = [12, 5, 9, 12, 3, 7, 12, 10, 1, 11]  # cycled over the responses; 12 stops at the limit (no state after)
LR, BETAS, EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.999), 1e-8, 0.01  # AdamW: the fork's defaults (ppo_trainer.yaml)
OBJECTIVES = ("pacs", "grpo", "ppo")  # each with the paper scripts' options, pacs's defaults
SPLIT = 60  # tokens: under any group of the toy prompts (over 30 tokens each) and 4 responses
LAYOUTS = {  # this run's micro-batches on one rank
    "micro 1": {"micro_batch_size": 1},
    "micro 2": {"micro_batch_size": 2},
    "tokens": {"micro_batch_size": 1, "max_tokens_per_micro_batch": 300},
    # the budget the memory plan fits in a made-up 0.15 GB (pacs.train.update.sizes): more than one group at the maximum
    # lengths (4 × (512 + 12) tokens), less than the mini-batch
    "tokens auto": {"micro_batch_size": 1, "max_tokens_per_micro_batch": "auto", "memory_limit_gb": 0.15},
    "micro 2 padded": {"micro_batch_size": 2, "pack_sequences": False, "share_prompt": False},
    # a budget below one group: every pass but PACS's update (whose scores are relative within a group) runs each
    # group in parts of consecutive rows, packed with the part's prompt shared, or padded, each row its own prompt
    "split": {"micro_batch_size": 1, "max_tokens_per_micro_batch": SPLIT},
    "split padded": {"micro_batch_size": 1, "max_tokens_per_micro_batch": SPLIT, "pack_sequences": False,
                     "share_prompt": False},
}


def run_config(algorithm: str, clip: float | None, critic_clip: float | None, **trainer) -> dict:
    return {
        "algorithm": {"name": algorithm},
        "rollout": {"n": N, "max_response_length": MAX_LEN},
        "optim": {"lr": LR, "critic_lr": LR, "grad_clip": clip, "critic_grad_clip": critic_clip},
        "trainer": {"batch_size": PROMPTS, "mini_batch_size": PROMPTS, "verl_micro_batch_size": FORK_MICRO,
                    "logprob_chunk_size": 5, **trainer},
    }  # fmt: skip


def rows(batch) -> list[tuple[list[int], list[int]]]:
    """(prompt, response) token ids of each row of a padded batch."""
    width = batch["response_mask"].shape[1]
    out = []
    for ids, attention, response in zip(batch["input_ids"], batch["attention_mask"], batch["response_mask"],
                                        strict=True):  # fmt: skip
        real = ids[attention.bool()].tolist()
        length = int(response[:width].sum())
        out.append((real[: len(real) - length], real[len(real) - length :]))
    return out


# The fork's functions, written out from its source (core_algos.py, dp_actor.py, dp_critic.py, pacs_core_algos.py)


def fork_logprobs(model, batch_rows) -> torch.Tensor:
    """log π of each response token (B, MAX_LEN), 0 in the padding the fork's rollout adds up to MAX_LEN."""
    out = []
    for prompt, response in batch_rows:
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1 : -1].float()
        taken = torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None])[:, 0]
        out.append(F.pad(taken, (0, MAX_LEN - len(response))))
    return torch.stack(out)


def fork_value_mask(batch_rows) -> torch.Tensor:
    """``attention_mask[:, -T-1:-1]`` (dp_critic.py 175, 225): the prompt's last token and every response token
    but the last padded column: the state before each token, and after the last one when the response stopped
    before MAX_LEN."""
    return torch.stack([torch.arange(MAX_LEN) < min(len(r) + 1, MAX_LEN) for _, r in batch_rows]).float()


def fork_values(critic, batch_rows) -> torch.Tensor:
    """The critic's outputs at ``[-T-1:-1]`` (dp_critic.py 106), times the state mask (175)."""
    out = []
    for prompt, response in batch_rows:
        values = critic(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1 :, 0].float()
        out.append(F.pad(values, (0, MAX_LEN + 1 - values.shape[0]))[:MAX_LEN])
    return torch.stack(out) * fork_value_mask(batch_rows)


def agg_sum_norm(loss_mat, mask) -> torch.Tensor:
    """agg_loss, seq-mean-token-sum-norm (core_algos.py 392-394): Σ m ℓ over the mask's width, T = MAX_LEN."""
    return torch.sum(torch.sum(loss_mat * mask, dim=-1)) / mask.shape[-1]


def fork_policy_loss(logp, old, advantages, mask) -> torch.Tensor:
    """compute_policy_loss (core_algos.py 405-468): dual-clip PPO, clip_ratio 0.2, clip_ratio_c 3."""
    ratio = torch.exp(logp - old)
    losses1, losses2 = -advantages * ratio, -advantages * torch.clamp(ratio, 0.8, 1.2)
    clip1 = torch.maximum(losses1, losses2)
    clip2 = torch.min(-advantages * 3.0, clip1)
    return agg_sum_norm(torch.where(advantages < 0, clip2, clip1), mask)


def fork_value_loss(vpreds, values, returns, mask) -> torch.Tensor:
    """compute_value_loss (core_algos.py 490-517): cliprange_value 0.5, no ½."""
    clipped = torch.clamp(vpreds, values - 0.5, values + 0.5)
    return agg_sum_norm(torch.max((vpreds - returns) ** 2, (clipped - returns) ** 2), mask)


def fork_whiten(values, mask) -> torch.Tensor:
    """verl_F.masked_whiten (torch_functional.py 136-187)."""
    mean = (values * mask).sum() / (mask.sum() + 1e-8)
    var = ((values - mean) ** 2 * mask).sum() / (mask.sum() + 1e-8) * mask.sum() / (mask.sum() - 1)
    return (values - mean) * torch.rsqrt(var + 1e-8)


def fork_gae(token_rewards, values, response_mask, gamma=1.0, lam=1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """compute_gae_advantage_return (core_algos.py 67-109): over every column, values 0 past the states."""
    last, reversed_advantages = 0, []
    for t in reversed(range(MAX_LEN)):
        next_values = values[:, t + 1] if t < MAX_LEN - 1 else 0.0
        last = token_rewards[:, t] + gamma * next_values - values[:, t] + gamma * lam * last
        reversed_advantages.append(last)
    advantages = torch.stack(reversed_advantages[::-1], dim=1)
    return fork_whiten(advantages, response_mask), advantages + values


def fork_grpo_advantages(scores, response_mask) -> torch.Tensor:
    """compute_grpo_outcome_advantage (core_algos.py 113): (R − mean) / (std + 1e-6) in each group, on every token."""
    groups = scores.view(-1, N)
    normed = (groups - groups.mean(-1, keepdim=True)) / (groups.std(-1, keepdim=True) + 1e-6)
    return normed.reshape(-1, 1) * response_mask


def fork_pacs_loss(logp, old, scores) -> torch.Tensor:
    """compute_pacs_loss (pacs_core_algos.py 89-138), reward_method 1, β 1, rloo, use_weight with weight_mode
    question: sklearn's "balanced" class weights per group, BCEWithLogitsLoss's mean over the micro-batch."""
    reward = (logp - old).sum(-1).view(-1, N)
    advantage = (reward - (reward.sum(-1, keepdim=True) - reward) / (N - 1)).reshape(-1)
    labels = scores.view(-1, N)
    correct = labels.sum(-1, keepdim=True)
    balanced = torch.where(labels > 0.5, N / (2 * correct), N / (2 * (N - correct)))
    weight = torch.where((correct > 0) & (correct < N), balanced, torch.ones_like(labels)).reshape(-1)
    return F.binary_cross_entropy_with_logits(advantage, scores, weight=weight)


def fork_gradient(model, loss_of) -> dict[str, torch.Tensor]:
    """The step's gradient: each fork rank's rows (in order) in micro-batches of FORK_MICRO, each micro-batch's
    loss over its gradient-accumulation count, summed; then FSDP's mean over the ranks."""
    per_rank = PROMPTS * N // FORK_RANKS
    accumulation = per_rank // FORK_MICRO
    model.zero_grad()
    for rank in range(FORK_RANKS):
        for start in range(rank * per_rank, (rank + 1) * per_rank, FORK_MICRO):
            (loss_of(list(range(start, start + FORK_MICRO))) / accumulation).backward()
    return {k: p.grad / FORK_RANKS for k, p in model.named_parameters()}


def fork_models(model_path, initial: dict) -> dict:
    policy = AutoModelForCausalLM.from_pretrained(model_path)
    policy.load_state_dict(initial["policy"])
    models = {"policy": policy}
    if "critic" in initial:
        config = AutoConfig.from_pretrained(model_path, num_labels=1, classifier_dropout=0.0)
        models["critic"] = AutoModelForTokenClassification.from_pretrained(model_path, config=config)
        models["critic"].load_state_dict(initial["critic"])
    return models


def fork_gradients(model_path, batch, algorithm: str, initial: dict) -> dict[str, dict[str, torch.Tensor]]:
    """The unclipped step gradient of each trained model, by name (policy, critic)."""
    models, batch_rows = fork_models(model_path, initial), rows(batch)
    response_mask = torch.stack([torch.arange(MAX_LEN) < len(r) for _, r in batch_rows]).float()
    scores = batch["rewards"]
    with torch.no_grad():
        old = fork_logprobs(models["policy"], batch_rows)
    grads = {}
    if algorithm == "pacs":
        grads["policy"] = fork_gradient(models["policy"], lambda i: fork_pacs_loss(
            fork_logprobs(models["policy"], [batch_rows[j] for j in i]), old[i], scores[i]))  # fmt: skip
        return grads
    if algorithm == "grpo":
        advantages = fork_grpo_advantages(scores, response_mask)
    else:
        value_mask = fork_value_mask(batch_rows)
        with torch.no_grad():
            values = fork_values(models["critic"], batch_rows)
        token_rewards = torch.zeros(len(batch_rows), MAX_LEN)
        token_rewards[torch.arange(len(batch_rows)), response_mask.sum(-1).long() - 1] = scores
        advantages, returns = fork_gae(token_rewards, values, response_mask)
        grads["critic"] = fork_gradient(models["critic"], lambda i: fork_value_loss(
            fork_values(models["critic"], [batch_rows[j] for j in i]), values[i], returns[i], value_mask[i]))
    grads["policy"] = fork_gradient(models["policy"], lambda i: fork_policy_loss(
        fork_logprobs(models["policy"], [batch_rows[j] for j in i]), old[i], advantages[i], response_mask[i]))
    return grads


def global_norm(grads: dict) -> float:
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads.values()])))


def fork_step(weights: dict, grads: dict, clip: float | None) -> tuple[float, dict, dict]:
    """_optimizer_step: the global norm before clipping, torch's clip_grad_norm_ (max_norm / (norm + 1e-6) when
    below 1), then AdamW's first step, written out: p (1 − lr λ) − lr m̂ / (√v̂ + ε) with m̂ = g, √v̂ = |g|."""
    norm = global_norm(grads)
    coefficient = min(1.0, clip / (norm + 1e-6)) if clip is not None else 1.0
    clipped = {k: g * coefficient for k, g in grads.items()}
    stepped = {k: weights[k] * (1 - LR * WEIGHT_DECAY) - LR * g / (g.abs() + EPS) for k, g in clipped.items()}
    return norm, clipped, stepped


@pytest.fixture(scope="module")
def fork(raw_tiny_model, toy_data):
    """The rollouts, and for each objective the models' starting weights (as the trainer loads them: the critic's
    value head from the run's seed) and the fork's unclipped gradients."""
    batch = ragged_batch(raw_tiny_model, toy_data, LENGTHS, PROMPTS)
    out = {}
    for algorithm in OBJECTIVES:
        initial = trainer_update(raw_tiny_model, batch, run_config(algorithm, None, None), DistEnv())["initial"]
        out[algorithm] = initial, fork_gradients(raw_tiny_model, batch, algorithm, initial)
    return batch, out


def caps(grads: dict, algorithm: str, binding: bool) -> tuple[float | None, float | None]:
    """optim.grad_clip and critic_grad_clip: below each gradient's norm (the clip binds) or above it. The fork
    never clips PACS."""
    norms = {k: global_norm(g) for k, g in grads.items()}
    factor = 0.5 if binding else 2.0
    return (None if algorithm == "pacs" else norms["policy"] * factor,
            norms["critic"] * factor if "critic" in norms else None)  # fmt: skip


def check_step(result: dict, initial: dict, grads: dict, clip: float | None, critic_clip: float | None, label: str):
    """The trainer's step against the fork's: the norm before clipping and whether the clip bit (logged), the
    gradient the optimizer took, the weights after AdamW."""
    for name, cap in (("policy", clip), ("critic", critic_clip)):
        if name not in grads:
            continue
        prefix = {"policy": "actor", "critic": "critic"}[name]
        norm, clipped, _ = fork_step(initial[name], grads[name], cap)
        for k in clipped:
            torch.testing.assert_close(result["initial"][name][k], initial[name][k], rtol=0, atol=0)
        assert result["metrics"][f"{prefix}/grad_norm"] == pytest.approx(norm, rel=1e-4), (label, name)
        assert result["metrics"][f"{prefix}/grad_clipped"] == int(cap is not None and cap < norm), (label, name)
        [took] = result["grads"][name]  # one optimizer step
        scale = max(float(g.abs().max()) for g in clipped.values())
        for k, g in clipped.items():
            torch.testing.assert_close(took[k], g, rtol=1e-4, atol=1e-5 * scale, msg=lambda m, k=k: f"{label} {k}: {m}")
        # AdamW's step as the fork's, on the gradient this step took (the fork's to rounding: where that gradient
        # is within rounding of 0, g / (|g| + ε) is not, and its weight may move by up to lr either way)
        _, _, adamw = fork_step(initial[name], took, None)
        for k, w in adamw.items():
            torch.testing.assert_close(result["final"][name][k], w, rtol=1e-6, atol=LR * 1e-4,
                                       msg=lambda m, k=k: f"{label} {k}: {m}")  # fmt: skip


@pytest.mark.parametrize("algorithm", OBJECTIVES)
def test_one_rank_steps_as_the_fork_at_any_micro_batch(fork, raw_tiny_model, algorithm, monkeypatch):
    """Micro-batches of 1 and 2 prompts (4 and 8 responses; packed, and padded rows), a token budget and the
    budget resolved from auto for a made-up device, clip binding and not: the fork's
    gradient (its micro-batch of 8 responses over the mini-batch's 32, a quarter of the whole mini-batch's sum for
    GRPO and PPO; the mini-batch's mean for PACS), clipped as the fork clips, stepped as its AdamW steps."""
    import pacs.train.update.packing as packing

    batch, forks = fork
    initial, grads = forks[algorithm]
    split, parts = [], packing.parts
    monkeypatch.setattr(packing, "parts", lambda *a, **k: split.append(parts(*a, **k)) or split[-1])
    for binding in (False, True) if algorithm != "pacs" else (False,):
        clip, critic_clip = caps(grads, algorithm, binding)
        for layout, trainer in LAYOUTS.items():
            split.clear()
            result = trainer_update(raw_tiny_model, batch, run_config(algorithm, clip, critic_clip, **trainer),
                                    DistEnv())  # fmt: skip
            # the split layouts ran groups in parts of several micro-batches (the others never; PACS's update holds
            # whole groups, and its one on-policy mini-batch has no other pass)
            expected = layout.startswith("split") and algorithm != "pacs"
            assert (max(map(len, split), default=0) > 1) == expected, (layout, split)
            if trainer.get("max_tokens_per_micro_batch") == "auto":
                assert 4 * 524 < result["sizes"]["max_tokens_per_micro_batch"] < 8 * 4 * 524, result["sizes"]
            check_step(result, initial, grads, clip, critic_clip, f"{algorithm} {layout} binding={binding}")


def test_two_ranks_step_as_the_fork(fork, raw_tiny_model, tmp_path):
    """FSDP2 on two gloo ranks with token budgets, each objective, clip binding and not: the fork's step."""
    batch, forks = fork
    runs, checks = {}, {}
    for algorithm in OBJECTIVES:
        for binding in (False, True) if algorithm != "pacs" else (False,):
            clip, critic_clip = caps(forks[algorithm][1], algorithm, binding)
            name = f"{algorithm} fsdp tokens binding={binding}"
            runs[name] = run_config(algorithm, clip, critic_clip, strategy="fsdp", **LAYOUTS["tokens"])
            checks[name] = (algorithm, clip, critic_clip)
    batch_file, out = tmp_path / "batch.pt", tmp_path / "results.pt"
    torch.save(batch, batch_file)
    mp.spawn(trainer_update_worker, args=(2, free_port(), raw_tiny_model, batch_file, runs, out), nprocs=2, join=True)
    results = torch.load(out, weights_only=False)
    for name, (algorithm, clip, critic_clip) in checks.items():
        initial, grads = forks[algorithm]
        check_step(results[name], initial, grads, clip, critic_clip, name)


@pytest.mark.parametrize("family", ["qwen3-8b", "llama3.1-8b"])
def test_every_model_family_the_plan_knows_trains_a_step_packed_as_padded(fork, raw_tiny_model, tmp_path, family):
    """Each architecture the plan prices (pacs.models.shapes; Qwen2 is the fork's model above), narrowed to the tiny
    model's width and tokenizer with random weights: one GRPO step on packed rows with a shared prompt and a token
    budget gives the gradient of padded rows one at a time (fp32 rounding), and moves the weights."""
    from transformers import AutoTokenizer

    from pacs.models.shapes import model_config

    tokenizer = AutoTokenizer.from_pretrained(raw_tiny_model)
    tiny = AutoConfig.from_pretrained(raw_tiny_model)
    config = model_config(family, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                          num_key_value_heads=2, head_dim=16, vocab_size=tiny.vocab_size,
                          tie_word_embeddings=True, bos_token_id=tiny.bos_token_id, eos_token_id=tiny.eos_token_id,
                          pad_token_id=tiny.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    path = tmp_path / family
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(path)
    tokenizer.save_pretrained(path)
    batch = fork[0]
    packed, padded = (trainer_update(path, batch, run_config("grpo", None, None, **LAYOUTS[layout]), DistEnv())
                      for layout in ("tokens", "micro 2 padded"))  # fmt: skip
    [took], [reference] = packed["grads"]["policy"], padded["grads"]["policy"]
    scale = max(float(g.abs().max()) for g in reference.values())
    assert scale > 0
    for k, g in reference.items():
        torch.testing.assert_close(took[k], g, rtol=1e-4, atol=1e-5 * scale, msg=lambda m, k=k: f"{family} {k}: {m}")
    assert any(not torch.equal(packed["final"]["policy"][k], w) for k, w in packed["initial"]["policy"].items())
