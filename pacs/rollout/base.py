"""The rollout-engine interface."""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor

FINISH_REASONS = ("stop", "length")


class StaleRolloutError(RuntimeError):
    """The engine's log-probs of its own samples disagree with the trainer's policy: it samples from
    other weights than the ones being trained."""


@dataclass(frozen=True)
class SamplingParams:
    n: int = 1  # completions per prompt
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    max_tokens: int = 4096  # new tokens per completion
    # sample j of prompt i draws with seed + i·n + j (sample_seeds): reproducible for a given engine, model and
    # prompts; calls whose seed blocks do not overlap (rollout_seed, eval_seed) share no seed
    seed: int | None = None
    logprobs: bool = False  # return each sampled token's log-prob (Completion.logprobs) where the engine can
    # sample on past stop tokens: every completion is max_tokens long, its finish_reason "length" (a
    # preflight's worst case for memory and time); the distribution sampled from is unchanged
    ignore_eos: bool = False

    def __post_init__(self):
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError(f"sampling: n and max_tokens must be >= 1, got n={self.n}, max_tokens={self.max_tokens}")
        if self.temperature < 0 or not 0 < self.top_p <= 1:
            raise ValueError(
                f"sampling: need temperature >= 0 and 0 < top_p <= 1, got {self.temperature}, {self.top_p}"
            )
        if self.temperature == 0 and self.n > 1:
            raise ValueError("sampling: greedy decoding (temperature 0) gives n identical completions; use n=1")


@dataclass(frozen=True)
class Completion:
    token_ids: tuple[int, ...]  # generated tokens, ending with the stop token when finish_reason is "stop"
    text: str  # decoded without special tokens
    finish_reason: str  # "stop": a stop token was generated; "length": max_tokens reached
    # log-prob of each generated token under the distribution it was sampled from (temperature applied),
    # as the engine computed it; None when the engine does not report them
    logprobs: tuple[float, ...] | None = None


class RolloutEngine(Protocol):
    # the dtype the engine holds pushed weights in; None for an engine that samples from the trainer's model
    pushed_dtype: str | None

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt (token ids, chat template applied), ``params.n`` completions."""
        ...

    def update_weights(self, weights: Iterable[tuple[str, "Tensor"]]) -> None:
        """Sample from these weights from now on: full (unsharded) tensors under the HF checkpoint's names.
        An engine that shares its model with the trainer has nothing to do."""
        ...

    def weight_fingerprints(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, int | None]:
        """``pacs.rollout.fingerprint`` of each weight the engine samples with, by checkpoint name (None: held in a
        layout that cannot be read back); ``shapes`` are the pushed tensors'. Only where ``pushed_dtype`` is set."""
        ...

    def release_memory(self) -> None:
        """Free what the engine holds on the device between rollouts (KV cache, weights) while the trainer
        updates; the next ``update_weights`` restores it. A no-op where there is nothing to free."""
        ...

    def pooled_bytes(self) -> int:
        """Device bytes the engine holds in a memory pool of its own that torch's caching allocator counts as
        reserved whether the engine is awake or asleep (vLLM's sleep mode); 0 for an engine without one."""
        ...

    def close(self) -> None:
        """Release what the engine holds (processes, device memory)."""
        ...


def stop_token_ids(generation_config, tokenizer) -> list[int]:
    """As vLLM stops: on the tokenizer's eos and on every eos of the model's generation config."""
    eos = generation_config.eos_token_id if generation_config is not None else None
    ids = [*(eos if isinstance(eos, list) else [eos]), tokenizer.eos_token_id]
    return list(dict.fromkeys(i for i in ids if i is not None))


def derived_seed(*keys: int) -> int:
    """A 32-bit seed for one (seed, rank, ...) combination; unrelated for neighbouring keys."""
    return int(np.random.SeedSequence(list(keys)).generate_state(1)[0])


# Sampling seeds. A generate call with seed s gives sample j of prompt i the seed s + i·n + j (vLLM: request i
# gets s + i·n and its j-th child s + i·n + j, ``vllm/v1/engine/parallel_sampling.py``), so one call's seeds are
# the block [s, s + prompts·n). Each call of a run gets a block of its own: the block number packs the call's
# key exactly (a training step and rank, or an evaluation chunk), shifted by a hash of the run's seed, so that
# no two samples of a run share a seed and different run seeds draw different samples. Seeds stay below
# 2^62: vLLM keeps them in int64 (Model Runner V2 hashes them with the position into its Gumbel noise).
CALL_BITS = 24  # samples one call may draw (prompts × n): 16.7 M
STEP_BITS, RANK_BITS = 24, 13  # training: 16.7 M steps, 8,192 ranks
BLOCK_BITS = 1 + STEP_BITS + RANK_BITS  # a bit for training / evaluation, then the key's fields
CHUNK_BITS = BLOCK_BITS - 1  # evaluation chunks


def _block_seed(seed: int, block: int) -> int:
    shift = int(np.random.SeedSequence([seed, 0x5EED]).generate_state(1, np.uint64)[0])
    return ((block + shift) % (1 << BLOCK_BITS)) << CALL_BITS


def rollout_seed(seed: int, step: int, rank: int) -> int:
    """The seed of training step ``step``'s generate call on ``rank`` (one call per rank and step)."""
    if not (0 <= step < 1 << STEP_BITS and 0 <= rank < 1 << RANK_BITS):
        raise ValueError(f"sampling seeds: step {step} or rank {rank} out of range")
    return _block_seed(seed, (step << RANK_BITS) | rank)


def eval_seed(seed: int, chunk: int) -> int:
    """The seed of evaluation chunk ``chunk``'s generate call."""
    if not 0 <= chunk < 1 << CHUNK_BITS:
        raise ValueError(f"sampling seeds: chunk {chunk} out of range")
    return _block_seed(seed, (1 << CHUNK_BITS) | chunk)


def sample_seeds(seed: int, prompts: int, n: int) -> list[int]:
    """Each request's seed in a call: prompt i's is seed + i·n (its samples, seed + i·n + j)."""
    if prompts * n > 1 << CALL_BITS:
        raise ValueError(f"sampling seeds: one call draws at most {1 << CALL_BITS} samples, not {prompts} × {n}")
    return [seed + i * n for i in range(prompts)]
