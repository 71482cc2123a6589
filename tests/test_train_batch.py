import pytest
import torch
from helpers import N, fixed_batch, one_update
from transformers import AutoModelForCausalLM

from pacs.ranks.distributed import DistEnv
from pacs.rollout import Completion
from pacs.tensors.batch import add_value_states, group_slices, rollout_batch, token_logprobs, trimmed
from pacs.tensors.logprobs import PolicyScorer
from pacs.train.sampling.rollouts import step_rows

VARIANTS = [
    ("pacs", {}),
    ("pacs", {"weighting": "none", "score": "grpo"}),
    ("grpo", {"loss_agg_mode": "token-mean"}),
    ("grpo", {"loss_agg_mode": "seq-mean-token-sum-norm", "max_response_length": 12}),
    ("ppo", {"loss_agg_mode": "seq-mean-token-mean"}),
]


def test_rollout_layout_left_padded_prompts_right_padded_responses():
    completions = [
        [Completion((7, 8, 2), "", "stop"), Completion((9,), "", "length")],
        [Completion((5, 2), "", "stop")] * 2,
    ]
    b = rollout_batch([[1, 2, 3], [4]], completions, pad_token_id=0)
    assert b["input_ids"].tolist() == [[1, 2, 3, 7, 8, 2], [1, 2, 3, 9, 0, 0], [0, 0, 4, 5, 2, 0], [0, 0, 4, 5, 2, 0]]
    assert b["response_mask"].tolist() == [[1, 1, 1], [1, 0, 0], [1, 1, 0], [1, 1, 0]]
    assert b["position_ids"][2].tolist()[2:5] == [0, 1, 2]
    t = trimmed({k: v[2:] for k, v in b.items()})
    assert t["input_ids"].tolist() == [[4, 5, 2]] * 2 and t["response_mask"].shape == (2, 2)


def test_value_states_add_the_state_after_a_response_that_stopped():
    """verl's critic mask over responses padded to max_response_length: a response of 3 tokens has 4 states, one
    cut at the limit its 3; the batch gains a padding column where the longest has one more, and micro-batches
    keep it through trimming."""
    completions = [[Completion((7, 8, 2), "", "stop"), Completion((9,), "", "stop")]]
    b = rollout_batch([[1, 2, 3]], completions, pad_token_id=0)
    b["sampler_logprobs"] = torch.ones(2, 3)
    add_value_states(b, max_response_length=5)
    assert b["value_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert b["response_mask"].tolist() == [[1, 1, 1, 0], [1, 0, 0, 0]] and b["input_ids"].shape == (2, 7)
    assert b["sampler_logprobs"][:, 3].tolist() == [0, 0] and b["attention_mask"][:, -1].tolist() == [0, 0]
    assert trimmed(b)["value_mask"].shape == (2, 4)
    assert trimmed({k: v[1:] for k, v in b.items()})["value_mask"].shape == (1, 2)
    cut = rollout_batch([[1, 2, 3]], completions, pad_token_id=0)
    assert add_value_states(cut, max_response_length=3)["value_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]


def test_padded_logprobs_equal_unpadded_ones(raw_tiny_model, toy_data):
    """Left padding, position ids and the shift by one must give each row its own unpadded log-probs."""
    batch = fixed_batch(raw_tiny_model, toy_data, prompts=3)
    model = AutoModelForCausalLM.from_pretrained(raw_tiny_model)
    logprobs, entropy = token_logprobs(PolicyScorer(model, chunk_size=5), batch, 1.0, "no_grad")
    for i in range(batch["input_ids"].shape[0]):
        ids = batch["input_ids"][i][batch["attention_mask"][i].bool()]
        length = int(batch["response_mask"][i].sum())
        alone = torch.log_softmax(model(input_ids=ids[None]).logits[0, -length - 1 : -1].float(), -1)
        expected = alone.gather(-1, ids[-length:, None]).squeeze(-1)
        torch.testing.assert_close(logprobs[i, :length], expected, atol=1e-5, rtol=1e-5)
    assert (entropy[batch["response_mask"]] > 0).all()


def test_groups_are_never_split():
    batch = {"response_mask": torch.ones(16, 3, dtype=torch.bool), "group": torch.arange(16) // N}
    slices = list(group_slices(batch, 2 * N, N))
    assert [s["group"].tolist() for s in slices] == [[0] * 4 + [1] * 4, [2] * 4 + [3] * 4]
    with pytest.raises(ValueError, match="groups of 4 must stay whole"):
        list(group_slices(batch, 6, N))
    with pytest.raises(ValueError, match="groups"):
        list(group_slices({k: v[:12] for k, v in batch.items()}, 8, N))  # 12 rows: slices of 8 would split one


def test_step_rows_cover_each_epoch_once():
    rows = [step_rows(s, 10, 3, seed=1, shuffle=True) for s in range(6)]
    assert all(len(r) == 3 for r in rows)
    assert len(set(map(int, [x for r in rows[:3] for x in r]))) == 9  # epoch 0: 3 steps, 9 distinct prompts
    assert not all((a == b).all() for a, b in zip(rows[:3], rows[3:], strict=True))  # epoch 1: a new order
    with pytest.raises(ValueError, match="batch_size"):
        step_rows(0, 2, 3, seed=0, shuffle=False)


@pytest.mark.parametrize("algorithm, options", VARIANTS)
def test_micro_batches_and_logprob_chunks_do_not_change_the_update(raw_tiny_model, toy_data, algorithm, options):
    """One prompt per micro-batch, four, a token budget (micro-batches of 1 to 3 groups), and the full-logits
    log-probs instead of chunks: the same update."""
    batch = fixed_batch(raw_tiny_model, toy_data)
    runs = {
        "micro 1": dict(micro_prompts=1),
        "micro 4": dict(micro_prompts=4),
        "tokens": dict(micro_prompts=1, max_tokens=600),  # groups cost 180: micro-batches of 3 and 1
        "full logits": dict(micro_prompts=2, chunk_size=None),
    }
    out = {
        k: one_update(raw_tiny_model, batch, algorithm, options, DistEnv(), mini_prompts=4, **v)
        for k, v in runs.items()
    }
    start = AutoModelForCausalLM.from_pretrained(raw_tiny_model).state_dict()
    one, critic_one, m1 = out["micro 1"]
    assert any(not torch.equal(p, start[k]) for k, p in one.items())
    for name, (policy, critic, metrics) in out.items():
        for k, p in one.items():
            torch.testing.assert_close(policy[k], p, atol=2e-6, rtol=1e-5, msg=f"{name}: {k}")
        if critic_one is not None:
            for k, p in critic_one.items():
                torch.testing.assert_close(critic[k], p, atol=2e-6, rtol=1e-5, msg=f"{name}: critic {k}")
        assert metrics["optimizer_steps"] == 2
        assert metrics["loss"] == pytest.approx(m1["loss"], rel=1e-4, abs=1e-6), name


def test_non_finite_gradients_skip_the_step_and_are_counted():
    from pacs.train.update.minibatch import update

    model = torch.nn.Linear(1, 1)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    ones = torch.ones(8, 4, dtype=torch.long)
    batch = {"input_ids": ones, "attention_mask": ones, "position_ids": ones.cumsum(-1) - 1,
             "response_mask": torch.ones(8, 2, dtype=torch.bool), "x": torch.ones(8)}  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    def nan_loss(micro):
        return model(micro["x"][:, None]).sum() * float("nan"), {}

    metrics = update(model, optimizer, nan_loss, batch, "sequences", n=2, mini_rows=4, micro_rows=2, epochs=1,
                     grad_clip=None, env=DistEnv())  # fmt: skip
    assert (metrics["skipped_steps"], metrics["optimizer_steps"]) == (2, 2)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())

    def loss(micro):
        return model(micro["x"][:, None]).sum(), {}

    assert update(model, optimizer, loss, batch, "sequences", 2, 4, 2, 1, None, DistEnv())["skipped_steps"] == 0
    assert not torch.equal(model.weight, before["weight"])


@pytest.mark.parametrize("algorithm", ["pacs", "grpo", "ppo"])
@pytest.mark.parametrize("mini_batch_size", [8, 4])
def test_old_logprobs_from_the_update_forward_equal_a_separate_pass(raw_tiny_model, toy_data, tmp_path, monkeypatch,
                                                                    algorithm, mini_batch_size):  # fmt: skip
    """The first mini-batch's old log-probs and logged entropy taken from the update's forward, against the
    pass before the update for every row: the same bits, the same metrics, the same weights after."""
    from conftest import write_run_config

    from pacs.algorithms.objectives import get_objective
    from pacs.train import loop
    from pacs.train.settings.config import load_run_config, objective_config
    from pacs.train.update.models import load_models

    trainer = {"batch_size": 8, "mini_batch_size": mini_batch_size, "micro_batch_size": 2}
    path = write_run_config(tmp_path / "run.yaml", raw_tiny_model, toy_data, algorithm={"name": algorithm},
                            trainer=trainer, rollout={"n": N})  # fmt: skip
    config = load_run_config(path)
    objective = get_objective(algorithm)
    batch = fixed_batch(raw_tiny_model, toy_data)

    def step() -> tuple:
        models = load_models(config, objective, objective.needs(objective_config(config)), None, DistEnv())
        b = {k: v.clone() for k, v in batch.items()}
        entropy = loop.score_batch(b, config, models, DistEnv())
        b.update(loop.prepare_whole_batch(objective, b, N, objective_config(config), DistEnv()))
        record = loop.update_models(b, config, models, DistEnv(), entropy)
        return b["old_logprobs"], entropy, record, models.policy.state_dict()

    fresh = step()
    monkeypatch.setattr(loop, "fresh_rows", lambda config, env: 0)
    separate = step()
    assert torch.equal(fresh[0], separate[0]) and torch.equal(fresh[1], separate[1])
    assert (fresh[0][batch["response_mask"]] < 0).all()  # every row's old log-probs were filled in
    assert fresh[2] == separate[2]
    assert all(torch.equal(v, separate[3][k]) for k, v in fresh[3].items())
