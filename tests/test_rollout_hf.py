import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from pacs.data.schema import prompt_token_ids, read_prepared
from pacs.models.tiny import eos_token_ids
from pacs.rollout import SamplingParams
from pacs.rollout.hf import HFEngine


@pytest.fixture(scope="module")
def engine(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    return HFEngine(model, tokenizer, eos_token_ids(tokenizer), prompt_batch_size=3)


@pytest.fixture(scope="module")
def prompts(engine, toy_data):
    return prompt_token_ids(engine.tokenizer, read_prepared(toy_data / "heldout.parquet")["prompt"][:5])


def test_n_completions_per_prompt_with_finish_reasons(engine, prompts):
    out = engine.generate(prompts, SamplingParams(n=4, temperature=1.0, max_tokens=16, seed=0))
    assert [len(g) for g in out] == [4] * 5
    stops = set(engine.stop_token_ids)
    for c in (c for g in out for c in g):
        assert 1 <= len(c.token_ids) <= 16
        assert (c.finish_reason == "stop") == (c.token_ids[-1] in stops)
        assert not stops & set(c.token_ids[:-1])  # nothing after the first stop token
        assert c.text == engine.tokenizer.decode(c.token_ids, skip_special_tokens=True)
    assert any(c.finish_reason == "stop" for g in out for c in g)


def test_length_limit_and_seeded_sampling(engine, prompts):
    short = engine.generate(prompts, SamplingParams(n=2, max_tokens=2, seed=1))
    assert all(len(c.token_ids) <= 2 for g in short for c in g)
    assert any(c.finish_reason == "length" for g in short for c in g)
    state = torch.get_rng_state()
    a = engine.generate(prompts, SamplingParams(n=3, max_tokens=8, seed=5))
    b = engine.generate(prompts, SamplingParams(n=3, max_tokens=8, seed=5))
    assert a == b
    assert torch.equal(state, torch.get_rng_state())  # a seeded call leaves the global RNG alone
    assert a != engine.generate(prompts, SamplingParams(n=3, max_tokens=8, seed=6))


def test_greedy_ignores_the_models_sampling_defaults(engine, prompts):
    greedy = engine.generate(prompts, SamplingParams(n=1, temperature=0.0, max_tokens=8))
    again = engine.generate(prompts, SamplingParams(n=1, temperature=0.0, max_tokens=8, seed=3))
    assert greedy == again
    with pytest.raises(ValueError, match="greedy"):
        SamplingParams(n=2, temperature=0.0)


def test_ignore_eos_samples_every_completion_to_its_maximum(engine, prompts):
    """A preflight's worst case: where sampling stops at a stop token, with ignore_eos it goes on, and every
    completion is max_tokens long."""
    normal = engine.generate(prompts, SamplingParams(n=4, max_tokens=16, seed=0))
    forced = engine.generate(prompts, SamplingParams(n=4, max_tokens=16, seed=0, ignore_eos=True))
    assert any(c.finish_reason == "stop" for g in normal for c in g)
    assert all(len(c.token_ids) == 16 and c.finish_reason == "length" for g in forced for c in g)
