"""The transformers ``generate`` engine: CPU or GPU, colocated with the policy it samples from."""

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

import torch
from transformers import GenerationConfig

from pacs.rollout.base import Completion, SamplingParams


class HFEngine:
    """Samples from ``model`` as it is now (weights are shared with the trainer, so there is nothing to sync).

    Prompts are left-padded and generated ``prompt_batch_size`` at a time. The model's own generation
    config (top_k 50, repetition penalties...) is ignored: only ``SamplingParams`` apply, as in verl.
    """

    pushed_dtype = None  # nothing is pushed: the engine samples from the trainer's own model object

    def __init__(self, model, tokenizer, stop_token_ids: list[int], prompt_batch_size: int = 64,
                 generate: Callable | None = None,
                 gathered: Callable[[], AbstractContextManager] | None = None):  # fmt: skip
        """``generate``: what to call instead of ``model.generate`` (same arguments): the trainer's, for a model
        whose parameters a wrapper gathers around its own forward (FSDP2). ``gathered``: a context around a
        whole ``generate`` call inside which the model's parameters are whole (the trainer's: FSDP2's shards
        gathered once, ``pacs.ranks.distributed.gathered``); transformers then keeps no ranks in step
        (``synced_gpus`` off): each decodes its own prompts to their own lengths."""
        self.generate_fn = generate or model.generate
        self.gathered = gathered
        self.model = model
        self.tokenizer = tokenizer
        self.stop_token_ids = list(stop_token_ids)
        self.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_token_ids[0]
        self.prompt_batch_size = prompt_batch_size

    def _generation_config(self, params: SamplingParams) -> GenerationConfig:
        greedy = params.temperature == 0
        return GenerationConfig(
            do_sample=not greedy,
            temperature=None if greedy else params.temperature,
            top_p=None if greedy else params.top_p,
            top_k=None if greedy else 0,
            max_new_tokens=params.max_tokens,
            num_return_sequences=params.n,
            eos_token_id=[] if params.ignore_eos else self.stop_token_ids,  # None would take the model's
            pad_token_id=self.pad_token_id,
        )

    def _complete(self, new_tokens: list[int], ignore_eos: bool = False) -> Completion:
        stops = [] if ignore_eos else [i for i, t in enumerate(new_tokens) if t in self.stop_token_ids]
        ids = tuple(new_tokens[: stops[0] + 1]) if stops else tuple(new_tokens)
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(ids, text, "stop" if stops else "length")

    @torch.no_grad()
    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        config = self._generation_config(params)
        was_training = self.model.training
        self.model.eval()
        out: list[list[Completion]] = []
        # fork_rng: a seeded call leaves the caller's global RNGs (CPU, and the CUDA device it samples on) as they were
        cuda = [torch.cuda.current_device()] if torch.cuda.is_available() else []
        alone = {"synced_gpus": False} if self.gathered else {}
        with torch.random.fork_rng(devices=cuda), (self.gathered or nullcontext)():
            if params.seed is not None:
                torch.manual_seed(params.seed)
            for start in range(0, len(prompts), self.prompt_batch_size):
                chunk = prompts[start : start + self.prompt_batch_size]
                width = max(len(p) for p in chunk)
                input_ids = torch.tensor([[self.pad_token_id] * (width - len(p)) + list(p) for p in chunk])
                attention_mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
                device = next(self.model.parameters()).device
                sequences = self.generate_fn(input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                                             generation_config=config, **alone)  # fmt: skip
                new = sequences[:, width:].tolist()
                for i in range(len(chunk)):
                    out.append([self._complete(new[i * params.n + j], params.ignore_eos) for j in range(params.n)])
        self.model.train(was_training)
        return out

    def update_weights(self, weights) -> None:
        """Nothing to push: the engine samples from the trainer's own model object."""

    def weight_fingerprints(self, shapes) -> dict:
        """Nothing was pushed, so nothing to check."""
        return {}

    def release_memory(self) -> None:
        """Nothing to free: generation holds no memory between calls."""

    def pooled_bytes(self) -> int:
        """Nothing of its own: it samples with the trainer's model and torch's default pool."""
        return 0

    def close(self) -> None:
        """Nothing to release: the model belongs to the caller."""
