"""The rollout-engine interface."""

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

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
    seed: int | None = None  # makes sampling reproducible for a given engine, model and prompt batch
    logprobs: bool = False  # return each sampled token's log-prob (Completion.logprobs) where the engine can

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
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        """For each prompt (token ids, chat template applied), ``params.n`` completions."""
        ...

    def update_weights(self, weights: Iterable[tuple[str, "Tensor"]]) -> None:
        """Sample from these weights from now on: full (unsharded) tensors under the HF checkpoint's names.
        An engine that shares its model with the trainer has nothing to do."""
        ...

    def release_memory(self) -> None:
        """Free what the engine holds on the device between rollouts (KV cache, weights) while the trainer
        updates; the next ``update_weights`` restores it. A no-op where there is nothing to free."""
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
    """A 32-bit seed for one (seed, step, rank, ...) combination; unrelated for neighbouring keys."""
    import numpy as np

    return int(np.random.SeedSequence(list(keys)).generate_state(1)[0])
