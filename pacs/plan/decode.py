"""Decoding priced by its roofline, sequence by sequence, as vLLM schedules it.

Each decoding iteration reads the engine's weights once and the KV cache of every sequence running, and
computes 2·N FLOPs per running sequence plus its attention (4·q·c per layer for a context of c tokens): its
time is the larger of those bytes over the GPU's memory bandwidth (``hbm_bytes_per_s``) and those FLOPs over
its peak (``peak_flops``), each at the share of the roofline decoding reaches (``decode_efficiency``).
Memory-bound with few sequences, compute-bound with many. vLLM admits waiting sequences while its KV cache
has room for their prompt and next tokens and fewer than ``max_num_seqs`` run (continuous batching);
transformers' ``generate`` runs ``prompt_batch_size × n`` sequences at once and each call lasts until its
longest response. A prompt's prefill is compute-bound. Either way a step waits for its longest response.

Response lengths (``spread``) follow an exponential distribution of the plan's mean, cut at the maximum: the
responses that would run longer stop at it, so a share reaches the cap, e^(−cap/θ) for scale θ, and with it
every step's longest response, for which the step waits. Where that tail comes from: RL rollouts of reasoning
models are right-skewed, and the one published clip ratio with its mean fits an exponential (verl's Qwen2-7B GRPO
log on GSM8K, ``eric-haibin-lin/verl-data``, ``gsm8k/qwen2-7b-fsdp2.log``: mean response 158 of a 1,024 cap,
``response_length/clip_ratio`` 0.000–0.001; the exponential gives 0.0015); at NeMo-RL's mean of 777 of 3,968, 0.6 %
of responses reach the cap, about one of each GPU's 256; at the paper configs' default mean (half the maximum)
20 %. θ is solved so that the capped lengths' mean is the plan's. (DeepScaleR's reference solutions, whose
shape ``pacs.plan.lengths`` keeps for the update benchmarks, end at 2.4 × their mean: no share at a cap.) The
simulation advances in strides of 1/128 of the longest response (lengths rounded up to whole strides), and of
more sequences than 8 times those that run at once it simulates that many and scales (their waves repeat), so a
plan with many jobs stays fast.
"""

import math

import numpy as np

from pacs.plan.memory import DTYPE_BYTES
from pacs.rollout.vllm import VLLMRolloutOptions

# a generator GPU's vLLM share of the card (vLLM's own default: it holds no training state), as the run's engine
GENERATOR_MEMORY_UTILIZATION = VLLMRolloutOptions.generator_memory_utilization
STRIDES = 128  # a response's longest length is simulated in this many strides
WAVES = 8  # sequences simulated: at most this many times those that run at once


def scale_of(mean: float, maximum: int) -> float:
    """The scale θ of the exponential whose lengths cut at ``maximum`` have mean ``mean``:
    θ (1 − e^(−maximum/θ)) = mean (bisection in log θ; the capped mean rises with θ towards ``maximum``)."""
    if not 0 < mean < maximum:
        raise ValueError(f"a mean response length must be in (0, {maximum}), got {mean}")
    low, high = math.log(mean), math.log(mean) + 60
    for _ in range(200):
        mid = (low + high) / 2
        theta = math.exp(mid)
        low, high = (mid, high) if theta * -math.expm1(-maximum / theta) < mean else (low, mid)
    return math.exp((low + high) / 2)


def capped_share(mean: float, maximum: int) -> float:
    """The share of responses at the cap ``maximum`` for mean ``mean`` (module docstring)."""
    return 1.0 if mean >= maximum else math.exp(-maximum / scale_of(mean, maximum))


def spread(count: int, maximum: int, mean: float) -> np.ndarray:
    """``count`` response lengths of mean near ``mean``, exponential cut at ``maximum`` (module docstring), at the
    quantiles (i + 1/2)/count, in a fixed arrival order unrelated to their lengths; every one at ``maximum``
    when ``mean`` is it."""
    if mean >= maximum:
        return np.full(count, maximum, dtype=np.int64)
    theta = scale_of(mean, maximum)
    lengths = np.minimum(-theta * np.log1p(-(np.arange(count) + 0.5) / count), maximum)
    lengths = np.clip(np.round(lengths), 1, maximum).astype(np.int64)
    return lengths[np.random.default_rng(0).permutation(count)]


def decode_seconds(d: dict, weight_bytes: float, kv_token_bytes: float, prompt: int, lengths: np.ndarray,
                   cal, capacity_tokens: float | None = None, wave: int | None = None,
                   split: int = 1) -> float:  # fmt: skip
    """Seconds for one GPU to generate ``lengths`` (one response each) to ``prompt``-token prompts.

    ``d``: the model's dims (``pacs.plan.memory.dims``); ``weight_bytes`` and ``kv_token_bytes``: what one
    engine holds of the weights and per token of KV cache, over its ``split`` GPUs (tensor parallel, which also
    splits the FLOPs). vLLM: ``capacity_tokens`` of KV cache and ``cal.max_num_seqs``; transformers: ``wave``
    sequences at a time, each wave until its longest (``capacity_tokens`` None). inf when not one fits."""
    key = (tuple(sorted(d.items())), weight_bytes, kv_token_bytes, prompt, lengths.tobytes(), cal, capacity_tokens,
           wave, split)  # fmt: skip
    if key not in _SEEN:  # a run's checkpoints are evaluated alike: each distinct job is simulated once
        _SEEN[key] = _decode_seconds(d, weight_bytes, kv_token_bytes, prompt, lengths, cal, capacity_tokens, wave,
                                     split)  # fmt: skip
    return _SEEN[key]


_SEEN: dict = {}


def _decode_seconds(d: dict, weight_bytes: float, kv_token_bytes: float, prompt: int, lengths: np.ndarray, cal,
                    capacity_tokens: float | None, wave: int | None, split: int) -> float:  # fmt: skip
    count = len(lengths)
    if count == 0:
        return 0.0
    # many more sequences than run at once: simulate WAVES times as many as run (the arrival order is unrelated
    # to length, so a prefix is a fair sample of them) and scale, as the waves repeat
    at_once = wave or min(cal.max_num_seqs, capacity_tokens // (prompt + float(lengths.mean())))
    sample = max(WAVES * int(at_once), 1)
    if count > sample:
        return count / sample * decode_seconds(d, weight_bytes, kv_token_bytes, prompt, lengths[:sample], cal,
                                               capacity_tokens, wave, split)  # fmt: skip
    stride = max(1, math.ceil(int(lengths.max()) / STRIDES))
    todo = np.ceil(lengths / stride).astype(np.int64) * stride  # tokens each sequence generates
    matmul = (d["layers"] * d["layer_params"] + d["vocab"] * d["h"]) / split
    attention = 4 * d["layers"] * d["q"] / split  # FLOPs per token of context
    bandwidth = cal.hbm_bytes_per_s * cal.decode_efficiency
    flops = cal.peak_flops * cal.decode_efficiency
    prefill = (2 * matmul * prompt + attention * prompt * prompt / 2) / (cal.peak_flops * cal.score_hfu)  # a forward
    seconds, waiting = 0.0, 0
    done = np.zeros(0, dtype=np.int64)  # tokens generated so far, per running sequence
    left = np.zeros(0, dtype=np.int64)  # tokens still to generate, per running sequence
    while waiting < count or len(left):
        if capacity_tokens is None:  # transformers: the next wave once the last has ended
            admit = 0 if len(left) else min(wave or count, count - waiting)
        else:  # vLLM: while the cache holds every running sequence's next stride, and the new prompts'
            held = float(np.sum(prompt + done + stride))
            room = count if math.isinf(capacity_tokens) else int((capacity_tokens - held) // (prompt + stride))
            admit = max(0, min(count - waiting, cal.max_num_seqs - len(left), room))
            if admit == 0 and not len(left):
                return math.inf
        if admit:
            done = np.concatenate([done, np.zeros(admit, dtype=np.int64)])
            left = np.concatenate([left, todo[waiting:waiting + admit]])
            seconds += admit * prefill
            waiting += admit
        steps = int(left[left > 0].min()) if capacity_tokens is None else int(left.min())
        steps = min(steps, stride)
        running = len(left)  # transformers decodes a wave's finished sequences too; vLLM holds none
        context = float(np.sum(prompt + done + steps / 2))  # mean context of each iteration, summed
        read = weight_bytes + kv_token_bytes * context
        computed = 2 * matmul * running + attention * context
        seconds += steps * max(read / bandwidth, computed / flops)
        done, left = done + steps, left - steps
        if capacity_tokens is None:
            if not np.any(left > 0):  # transformers: the wave ends with its longest
                done, left = done[:0], left[:0]
        else:
            keep = left > 0
            done, left = done[keep], left[keep]
    return seconds


def generation_seconds(d: dict, run: dict, gpus: int, memory: dict, cal, prompt: int, mean: float,
                       generators: int = 0) -> float:  # fmt: skip
    """Seconds of one step's generation: each of the job's GPUs (or of its ``generators`` GPUs, which hold
    only the engine, at ``GENERATOR_MEMORY_UTILIZATION`` of the card) generating its share of the step's
    responses, their lengths spread around ``mean`` (every one at the maximum when ``mean`` is it)."""
    t, r = run["trainer"], run["rollout"]
    engines = generators or max(gpus, 1)
    share = math.ceil(t["batch_size"] * r["n"] / engines)
    longest = r["max_response_length"]
    lengths = spread(share, longest, mean)
    b = DTYPE_BYTES[t["compute_dtype"] or run["model"]["dtype"]]
    weights, per_token = d["params"] * b, d["kv_bytes_per_token_fp"] * b
    if r["engine"] != "vllm":  # transformers: prompt_batch_size prompts' samples at once, each call to its longest
        return decode_seconds(d, weights, per_token, prompt, lengths, cal, wave=r["prompt_batch_size"] * r["n"])
    if generators:
        cache = GENERATOR_MEMORY_UTILIZATION * cal.memory_bytes - weights - cal.vllm_overhead_bytes
    else:
        cache = memory["kv_cache"]["cache"] if gpus else math.inf  # a CPU's: not what bounds it
    return decode_seconds(d, weights, per_token, prompt, lengths, cal, capacity_tokens=cache / per_token)
