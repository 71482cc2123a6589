"""A training step's rollouts: the engine the trainer samples with, this rank's prompts sampled and scored,
the weight push after each update and its check, and the guard against an engine far from the policy.

The engine is one per rank for the whole run (``rollout.engine``): ``hf`` samples from the policy object
itself; ``vllm`` is started once from the run's starting weights (or the resumed checkpoint) and gets
the policy's full weights pushed after every update. Whichever the engine, the trainer computes the
old log-probs itself (``pacs.train.loop``); where the engine reports its own log-probs of the sampled
tokens (``batch["sampler_logprobs"]``), the gap between the two is logged every step and bounds
``rollout.max_logprob_gap``, a check for gross mismatch. Stale or partial pushes are caught exactly, at any
learning rate, by ``push_weights``: the fingerprint of every tensor pushed against the engine's.
"""

import time
from collections.abc import Iterator
from concurrent.futures import Executor, Future
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from pacs.ranks.distributed import DistEnv, all_reduce, full_tensors, gathered
from pacs.ranks.memory import phase
from pacs.rollout import Completion, RolloutEngine, SamplingParams
from pacs.rollout.base import StaleRolloutError, derived_seed, rollout_seed, stop_token_ids
from pacs.rollout.fingerprint import fingerprint
from pacs.tensors.batch import Batch, rollout_batch
from pacs.train.settings.config import RunConfig, compute_dtype


def build_engine(config: RunConfig, policy, tokenizer, start: Path | str, heldout_prompts: int, env: DistEnv,
                 root: torch.nn.Module | None = None) -> RolloutEngine:  # fmt: skip
    """This rank's engine; ``start`` holds the weights the policy starts from (model or checkpoint); ``root``:
    the module spreading the policy over ranks (``PolicyScorer``, wrapped)."""
    stops = stop_token_ids(policy.generation_config, tokenizer)
    r = config.rollout
    if r.engine == "hf" or r.generator_ranks:  # beside generator ranks, the trainers sample only to evaluate
        return hf_engine(policy, tokenizer, stops, r.prompt_batch_size, root)
    from pacs.rollout.vllm import VLLMEngine

    options = engine_options(config, r.vllm, policy.config.max_position_embeddings)
    per_rank = max(config.trainer.batch_size * r.n, heldout_prompts) // env.world_size + 1
    seed = derived_seed(config.trainer.seed, env.rank)
    # sample in the dtype the trainer computes in
    return VLLMEngine(str(start), stops, seed, compute_dtype(config), per_rank, options, in_process=True)


def engine_options(config: RunConfig, options, positions: int):
    """The vLLM options with ``max_model_len`` set, when null, to what the run's longest prompt and response
    need, within the model's reach (``positions``)."""
    if options.max_model_len is not None:
        return options
    r = config.rollout
    return replace(options, max_model_len=min(config.data.max_prompt_length + r.max_response_length, positions))


def hf_engine(policy, tokenizer, stops: list[int], prompt_batch_size: int, root: torch.nn.Module | None):
    """transformers' ``generate`` on the policy itself. Under FSDP2 (``root`` sharded) each call gathers the
    policy once (``gathered``) and runs inside the root's forward (FSDP2 sets itself up on the root's first
    forward): no collective per decoded token, so ranks generate their own prompts to their own lengths."""
    from torch.distributed.fsdp import FSDPModule

    from pacs.rollout.hf import HFEngine

    if not isinstance(root, FSDPModule):
        return HFEngine(policy, tokenizer, stops, prompt_batch_size)
    return HFEngine(policy, tokenizer, stops, prompt_batch_size, lambda **kwargs: root(generate=kwargs),
                    lambda: gathered(root))  # fmt: skip


def policy_weights(policy: torch.nn.Module) -> Iterator[tuple[str, Tensor]]:
    """Full tensors under the HF checkpoint's names, one at a time, a tied ``lm_head.weight`` included (the
    state dict lists both names of a tied tensor, unlike ``save_pretrained``). Under fsdp each is
    all-gathered: every rank must consume the iterator."""
    yield from full_tensors(policy)


def step_rows(step: int, num_prompts: int, batch_size: int, seed: int, shuffle: bool) -> np.ndarray:
    """The global prompt rows of a step; an epoch is a seeded permutation, its incomplete tail dropped."""
    steps_per_epoch = num_prompts // batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"trainer.batch_size {batch_size} exceeds the {num_prompts} training prompts")
    epoch, k = divmod(step, steps_per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(num_prompts) if shuffle else np.arange(num_prompts)
    return order[k * batch_size : (k + 1) * batch_size]


def rank_share(rows: np.ndarray, mini_batch_size: int, env: DistEnv) -> np.ndarray:
    """This rank's prompts: its slice of every global mini-batch, so that each optimizer step sees the same
    global mini-batch of prompts whatever the number of ranks."""
    per_rank = mini_batch_size // env.world_size
    return np.concatenate(
        [mini[env.rank * per_rank : (env.rank + 1) * per_rank] for mini in np.split(rows, len(rows) // mini_batch_size)]
    )


def step_prompts(step: int, config: RunConfig, num_prompts: int, env: DistEnv) -> np.ndarray:
    t = config.trainer
    return rank_share(step_rows(step, num_prompts, t.batch_size, t.seed, config.data.shuffle), t.mini_batch_size, env)


def rollout(step: int, config: RunConfig, engine: RolloutEngine, prompts, pool, pad_token_id: int, env: DistEnv,
            timer: dict, scorer: Executor, release: bool = True):  # fmt: skip
    """This rank's share of the step's prompts, n samples each: (batch, completions, verdicts), where verdicts
    is a future: the verifier of the prompts' task (math-verify, or code run on its tests) scores on ``scorer``
    (a thread driving the worker processes) while the trainer computes what does not need rewards. ``batch``
    gets ``rewards`` from ``take_rewards``. The engine then frees its memory for the update unless ``release``
    is False (more to sample first: a sleeping vLLM holds no weights until the next push)."""
    n = config.rollout.n
    mine = step_prompts(step, config, len(prompts.token_ids), env)
    token_ids = [prompts.token_ids[i] for i in mine]
    with phase("generate", engine):  # the engine awake beside the trainer's state, before it sleeps
        completions = engine.generate(token_ids, sampling_params(step, config, env.rank))
    timer["generate"] = time.perf_counter()
    if release:
        engine.release_memory()
    golds, texts = [prompts.golds[i] for i in mine for _ in range(n)], [c.text for g in completions for c in g]
    verdicts = scorer.submit(pool.score, golds, texts, prompts.task)  # the reward: the verifier's score
    batch = rollout_batch(token_ids, completions, pad_token_id)
    sampled = sampled_logprobs(completions, batch["response_mask"].shape[1])
    if sampled is not None:  # the distribution each token was drawn from: the gap, and rollout correction
        batch["sampler_logprobs"] = sampled
    return batch, completions, verdicts


def sampling_params(step: int, config: RunConfig, rank: int) -> SamplingParams:
    """How step ``step`` samples on ``rank`` (a training rank, or a generator's index): with the engine's
    log-probs, and a block of seeds of its own."""
    r = config.rollout
    return SamplingParams(n=r.n, temperature=r.temperature, top_p=r.top_p, max_tokens=r.max_response_length,
                          seed=rollout_seed(config.trainer.seed, step, rank), logprobs=True,
                          ignore_eos=r.ignore_eos)  # fmt: skip


def take_rewards(batch: Batch, verdicts: Future) -> list:
    """Wait for the verdicts of ``rollout``; their scores become ``batch["rewards"]`` (B,)."""
    done = verdicts.result()
    batch["rewards"] = torch.tensor([v.score for v in done], dtype=torch.float32)
    return done


def sampled_logprobs(completions: list[list[Completion]], width: int) -> Tensor | None:
    """The engine's log-prob of each sampled token (B, T), 0 past a response's end; None if it gave none."""
    flat = [c for group in completions for c in group]
    if any(c.logprobs is None for c in flat):
        return None
    out = torch.zeros(len(flat), width)
    for i, c in enumerate(flat):
        out[i, : len(c.logprobs)] = torch.tensor(c.logprobs)
    return out


def logprob_gap(batch: Batch, env: DistEnv) -> dict:
    """Mean and max |engine log-prob - trainer old log-prob| over every rank's response tokens; {} for an
    engine that reports no log-probs."""
    if "sampler_logprobs" not in batch:
        return {}
    mask = batch["response_mask"]
    gap = (batch["sampler_logprobs"] - batch["old_logprobs"]).abs()[mask]
    total, count = all_reduce(torch.stack([gap.sum().double(), torch.tensor(float(gap.numel()))]), env).tolist()
    return {
        "rollout/logprob_gap_mean": total / max(count, 1.0),
        "rollout/logprob_gap_max": float(all_reduce(gap.max() if gap.numel() else torch.tensor(0.0), env, "max")),
    }


def check_logprob_gap(step: int, gap: dict, limit: float | None) -> None:
    """Stop before the weights are pushed or saved: a policy-gradient step on samples from a distribution this
    far from the policy's is silently wrong."""
    mean = gap.get("rollout/logprob_gap_mean")
    if limit is not None and mean is not None and mean > limit:
        raise StaleRolloutError(
            f"step {step}: the rollout engine's log-probs of its own samples differ from the policy's by "
            f"{mean:.4g} on average (max {gap['rollout/logprob_gap_max']:.4g}) > rollout.max_logprob_gap {limit}: "
            "the engine samples from another model than the one trained (or top_p < 1, a dtype mismatch; "
            "docs/rollouts.md)"
        )


def push_weights(step: int, engine: RolloutEngine, policy: torch.nn.Module, push: bool = True) -> tuple[dict, dict]:
    """The policy's full weights into the engine, then the check that it holds exactly them: the fingerprint of
    each tensor pushed (cast to the dtype the engine keeps) against the engine's own. Any tensor the engine
    holds that differs (a push missed, partial or gone wrong, at any learning rate) stops the run, naming the
    step and the tensors. Under fsdp every rank gathers every tensor (a collective), pushed or not. ``push``
    False: the check alone (an engine started from a checkpoint, before its first sample). Returns the
    record and the fingerprints of the tensors the engine holds readably, by name ({} for ``hf``)."""
    if engine.pushed_dtype is None:  # the engine samples from the policy object itself
        return {}, {}
    dtype, pushed = getattr(torch, engine.pushed_dtype), {}

    def weights() -> Iterator[tuple[str, Tensor]]:
        for name, tensor in policy_weights(policy):
            pushed[name] = (tuple(tensor.shape), fingerprint(tensor.to(dtype)))
            yield name, tensor

    stream = weights()
    if push:
        engine.update_weights(stream)
    for _ in stream:  # what the engine did not take is fingerprinted too, and gathered on every rank
        pass
    held = engine.weight_fingerprints({name: shape for name, (shape, _) in pushed.items()})
    when = "after the weight push" if push else "started from the checkpoint"
    return check_push(step, pushed, held, when), {name: value for name, value in held.items() if value is not None}


def check_push(step: int, pushed: dict[str, tuple], held: dict[str, int | None],
               when: str = "after the weight push") -> dict:  # fmt: skip
    """``pushed``: name -> (shape, fingerprint) of what the trainer sent (or holds); ``held``: name -> the
    engine's fingerprint (None: unreadable there). Raises ``StaleRolloutError`` naming what differs."""
    readable = sorted(name for name, value in held.items() if value is not None)
    unknown = [name for name in readable if name not in pushed]
    differ = [name for name in readable if name in pushed and pushed[name][1] != held[name]]
    if not readable:
        raise StaleRolloutError(f"step {step}: the rollout engine holds no weight that can be read back to check the "
                                "push")  # fmt: skip
    if unknown or differ:
        what = [f"{name} (never pushed)" for name in unknown] + differ
        raise StaleRolloutError(
            f"step {step}: {when} the rollout engine holds other weights than the trainer's: "
            f"{len(what)} of {len(readable)} tensors differ: {', '.join(what[:8])}{' ...' if len(what) > 8 else ''}"
        )
    return {"rollout/push_checked_tensors": len(readable)}
