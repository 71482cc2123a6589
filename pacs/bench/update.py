"""Memory and speed of the training update alone, per rank, for a model built from a shape with random weights.

Each strategy runs in its own ``torchrun`` (``python -m pacs.bench.update`` on every rank): the model is built from
``pacs.models.shapes`` on the meta device, spread as the trainer spreads it (``pacs.train.update.models.spread``:
ddp or FSDP2, compute dtype, activation checkpointing, Liger), materialised on the rank's device with transformers'
random initialisation (``built_model``: no fp32 copy of the whole model is made on the host first), and given
``steps`` AdamW updates on random token sequences. An update is a mini-batch of ``rows`` rows per rank in
micro-batches of whole groups, by ``trainer.max_tokens_per_micro_batch`` (first-fit as the trainer packs them;
``auto``: the memory plan's for this device, ``bench_sizes``; null: every row in one), each a forward and backward
of ``PolicyScorer`` (the log-probs of the response positions, in chunks) under the mean response log-prob as loss,
gradients accumulated, then one optimizer step: the cost of any objective's update, which adds only elementwise
maths. The first step creates the optimizer state and is timed apart. With ``profile`` one more step runs under
``torch.profiler`` (``pacs.bench.profile``): where its time goes by kernel family and, on a GPU, its busy share: the
GPU's compute over the step's span, below 1 where the GPU waited for the host.

Memory is the peak while updating, the model's construction left out: on CPU the peak resident memory after the
high-water mark is reset once the model is spread (``/proc/self/clear_refs``), less what the process held before
building the model (interpreter, torch, process group), with glibc returning freed buffers to the OS
(``MALLOC_MMAP_THRESHOLD_``) as a GPU allocator frees them; on GPU the peak allocated CUDA memory (``peak_bytes`` of
each rank), and beside it the peak the caching allocator reserved (``peak_reserved_bytes``: what the device must
have free; None on CPU). What the run holds per rank is reported beside it: parameters, gradients and AdamW's two
moments in fp32, 16 bytes per parameter, all of it on every rank under ddp and 1/world of it under fsdp.
"""

import gc
import json
import os
import sys
import time

from pacs.bench.ranks import BUILT, rank_main, run_ranks

# what the field measures for comparable work, to read tokens/s per GPU and MFU beside (pytorch/torchtitan
# docs/performance.md: Llama 3.1 8B, 8 H100s, FSDP2, local batch 2 of 8,192 tokens, selective recompute)
ANCHORS = ("torchtitan Llama 3.1 8B on H100 (FSDP2, selective recompute): 5,762 tokens/s/GPU, 6,667 with "
           "torch.compile; 33-39 % MFU")  # fmt: skip


def update_batch(vocab: int, rows: int, n: int, prompt_length: int, response_length: int, distribution: str,
                 seed: int):  # fmt: skip
    """A micro-batch laid out as rollouts are (``pacs.tensors.batch.rollout_batch``): ``rows`` rows in groups of
    n with one random prompt each, responses of random tokens and lengths from ``distribution``
    (``pacs.plan.lengths``), trimmed as the trainer trims them."""
    import torch

    from pacs.plan.lengths import response_lengths
    from pacs.rollout import Completion
    from pacs.tensors.batch import rollout_batch, trimmed

    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, vocab, (prompt_length,), generator=g).tolist() for _ in range(rows // n)]
    lengths = iter(response_lengths(rows, response_length, distribution, seed))
    groups = [[Completion(torch.randint(1, vocab, (next(lengths),), generator=g).tolist(), "", "length")
               for _ in range(n)] for _ in prompts]  # fmt: skip
    return trimmed(rollout_batch(prompts, groups, 0))


def batch_work(batch, n: int, shared: bool, packed: bool) -> dict:
    """Tokens of the micro-batch: the rows' own (prompt + response each), the positions the decoder must see
    (each group's prompt once when ``shared``), the positions it computes (padding included unless
    ``packed``), and the keys attended summed over those positions (causal; a shared prompt's keys are read
    by each of its responses)."""
    from pacs.train.update.packing import lengths

    prompt, response = (x.tolist() for x in lengths(batch))
    rows, width = batch["input_ids"].shape
    width_t = batch["response_mask"].shape[1]
    firsts = range(0, rows, n) if shared else range(rows)
    needed = sum(prompt[i] for i in firsts) + sum(response)  # each row's prompt when not shared: firsts all
    keys = sum(p * (p + 1) // 2 for p in (prompt[i] for i in firsts))
    keys += sum(t * p + t * (t + 1) // 2 for p, t in zip(prompt, response, strict=True))
    computed = needed if packed else (len(firsts) * (width - width_t) + rows * width_t if shared else rows * width)
    return {"row_tokens": sum(prompt) + sum(response), "needed_positions": needed, "computed_positions": computed,
            "response_tokens": sum(response), "attended_keys": keys,
            "padding_share": 1 - needed / computed}  # fmt: skip


def update_worker(shape: str, overrides: dict, trainer: dict, rows: int, prompt_length: int, response_length: int,
                  steps: int, peak_flops: float | None, group_size: int = 1, lengths: str = "fixed",
                  profile: bool = False, optim: dict | None = None) -> dict | None:  # fmt: skip
    """One rank's measurement (inside torchrun, or alone); rank 0 returns every rank's, the others None.
    ``optim``: keys of ``OptimConfig`` for AdamW (``fused``)."""
    import torch
    import torch.distributed as dist

    from pacs.config import from_dict
    from pacs.models.shapes import model_config
    from pacs.plan.memory import dims
    from pacs.ranks.distributed import init_distributed, total_norm
    from pacs.ranks.memory import reset_resident_peak, resident_peak, status_bytes
    from pacs.tensors.batch import token_logprobs, trimmed
    from pacs.tensors.kernels import adamw
    from pacs.train.settings.config import OptimConfig, TrainerConfig
    from pacs.train.update import packing
    from pacs.train.update.minibatch import micro_batch
    from pacs.train.update.packing import Micro

    t = from_dict(TrainerConfig, trainer)
    # fsdp alone: FSDP2 over a group of one, bf16 compute over fp32 master weights on one device
    env = init_distributed(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                           int(os.environ.get("LOCAL_RANK", 0)), fsdp=t.strategy == "fsdp")  # fmt: skip
    cuda = env.device.startswith("cuda")
    alone = t.strategy == "fsdp" and not env.active
    config = model_config(shape, **overrides)
    t, sizes = bench_sizes(t, config, env, rows, group_size, prompt_length, response_length)
    rss_before_model = status_bytes("VmRSS")  # the interpreter, torch and the process group
    torch.manual_seed(0)
    began = time.perf_counter()
    model, module = built_model(config, t, env)
    if cuda:
        torch.cuda.synchronize()
    build_s = time.perf_counter() - began
    if env.main:  # run_ranks's time limit for the part counts from here
        print(f"{BUILT}{build_s:.3f} s", flush=True)
    optimizer = adamw(module.parameters(), 1e-6, from_dict(OptimConfig, optim or {}, "optim"), env.device)
    del model
    gc.collect()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    rss_after_setup, reset = status_bytes("VmRSS"), reset_resident_peak()
    batch = update_batch(config.vocab_size, rows, group_size, prompt_length, response_length, lengths, 1000 + env.rank)
    plan = [Micro(list(range(rows // group_size)))]  # the whole mini-batch at once, or by the token budget
    group = (group_size if t.share_prompt else 1) if t.pack_sequences else None
    if t.max_tokens_per_micro_batch:
        prompt, response = packing.lengths(batch)
        plan = packing.pack(list(range(rows // group_size)), prompt, response, group_size,
                            t.max_tokens_per_micro_batch, group)  # fmt: skip
    micros, works = [], []
    for micro in plan:  # trimmed, with its packed layout built on the host, on the device: as the trainer's
        rows_of = micro.rows(group_size)
        works.append(batch_work(trimmed({k: v[rows_of] for k, v in batch.items()}), group_size,
                                t.share_prompt and group_size > 1, t.pack_sequences))  # fmt: skip
        micros.append(micro_batch(batch, micro, group_size, env.device, group))
    work = {k: sum(w[k] for w in works) for k in works[0] if k != "padding_share"}
    work["padding_share"] = 1 - work["needed_positions"] / work["computed_positions"]
    responses = sum(int(m["response_mask"].sum()) for m in micros)

    def step() -> float:
        """One update of the mini-batch, a forward and backward per micro-batch, one optimizer step; returns
        the host's seconds per micro-batch's forward and backward: on a GPU, with nothing in them waiting for the
        device, the time to issue their kernels. Its loss and gradient norm go to ``losses`` and ``norms`` (finite:
        the model built from random weights computes)."""
        began, total = time.perf_counter(), 0.0
        for micro in micros:
            logprobs, _ = token_logprobs(module, micro, 1.0, None, group_size)
            loss = -logprobs.sum() / responses
            loss.backward()
            total = total + loss.detach()
        host_s = (time.perf_counter() - began) / len(micros)
        norm = total_norm(torch.nn.utils.clip_grad_norm_(module.parameters(), 1.0))
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        norms.append(float(norm))  # waits for the step on GPU
        losses.append(float(total))
        return host_s

    seconds, host, losses, norms = [], [], [], []
    for _ in range(steps):
        start = time.perf_counter()
        host.append(step())
        seconds.append(time.perf_counter() - start)
    d = dims(config)
    n = d["params"]
    step_s = sum(seconds[1:]) / (len(seconds) - 1) if len(seconds) > 1 else seconds[0]
    # the update's FLOPs (forward and backward, recompute not counted): the linear layers over the positions
    # the decoder must see, the LM head over the response tokens, attention over the keys each position reads
    linear = 6 * d["layers"] * d["layer_params"] * work["needed_positions"]
    linear += 6 * d["vocab"] * d["h"] * work["response_tokens"]
    attention = 3 * 4 * d["layers"] * d["q"] * work["attended_keys"]
    # and the forward again of the layers that recompute in backward (what the GPU does beside the model's FLOPs)
    recomputing = 0
    if t.gradient_checkpointing:
        recomputing = d["layers"] if t.checkpoint_layers is None else t.checkpoint_layers
    recompute = recomputing / d["layers"] * (2 * d["layers"] * d["layer_params"] * work["needed_positions"]
                                             + attention / 3)  # fmt: skip
    peak_rss = resident_peak()
    peak_gpu = int(torch.cuda.max_memory_allocated()) if cuda else None
    peak_reserved = int(torch.cuda.max_memory_reserved()) if cuda else None  # the allocator's cache included
    mine = {
        "rank": env.rank,
        "peak_bytes": peak_gpu if cuda else peak_rss - rss_before_model,
        "peak_reserved_bytes": peak_reserved,
        "peak_rss_bytes": peak_rss,
        "rss_before_model_bytes": rss_before_model,
        "rss_after_setup_bytes": rss_after_setup,
        "peak_reset_after_setup": reset,
        "work": work, "linear_flops": linear, "attention_flops": attention, "recompute_flops": recompute,
        **({"peak_gpu_bytes": peak_gpu} if cuda else {}),
    }  # fmt: skip
    ranks = [mine]
    if env.active:
        ranks = [None] * env.world_size
        dist.all_gather_object(ranks, mine)
    out = None
    if env.main:
        state = 16 * n // (env.world_size if t.strategy == "fsdp" else 1)
        flops = sum(r["linear_flops"] + r["attention_flops"] for r in ranks)
        mfu = {}
        if peak_flops:
            recomputed = sum(r["recompute_flops"] for r in ranks)
            mfu = {"mfu": flops / step_s / peak_flops / env.world_size,
                   "hfu": (flops + recomputed) / step_s / peak_flops / env.world_size,
                   "mfu_attention": sum(r["attention_flops"] for r in ranks) / step_s / peak_flops / env.world_size}
        out = {
            "shape": shape, "overrides": overrides, "parameters": n, "world_size": env.world_size,
            "device": env.device, "strategy": t.strategy if env.active or alone else "single", "trainer": trainer,
            "rows_per_rank": rows, "group_size": group_size, "lengths": lengths, "prompt_length": prompt_length,
            "response_length": response_length, "steps": steps, "build_s": build_s, "first_step_s": seconds[0],
            "step_s": step_s, "losses": losses[:steps], "grad_norms": norms[:steps], "micro_batches": len(micros),
            "sizes": sizes,
            "host_s_per_micro_batch": sum(host[1:]) / (len(host) - 1) if len(host) > 1 else host[0],
            "tokens_per_s": sum(r["work"]["row_tokens"] for r in ranks) / step_s,
            "padding_share": 1 - sum(r["work"]["needed_positions"] for r in ranks)
            / sum(r["work"]["computed_positions"] for r in ranks),
            "optimizer": "fused" if optimizer.defaults["fused"] else "default", "update_flops": flops, **mfu,
            "state_bytes_per_rank": state, "ranks": ranks,
        }  # fmt: skip
    if profile:  # one more step, profiled, once what the timed steps measured is out: should the profile run past
        # a time limit (pacs bench gpu's parts), that much is kept (run_ranks)
        if out is not None:
            print(json.dumps(out), flush=True)
        profiled = profile_step(step, cuda)
        if out is not None:
            calls = profiled.pop("attention_calls")
            out["profile"] = {**profiled, "attention_calls_per_layer": calls / config.num_hidden_layers / len(micros)}
    return out


def built_model(config, t, env):
    """``config``'s causal LM in fp32 with random weights, and the ``PolicyScorer`` around it spread as
    ``pacs.train.update.models.spread`` spreads it (trainer config ``t``), built on the meta device and materialised
    on this rank's device: no full copy is initialised on the host and copied over (for a 7B-wide slice, minutes on
    one CPU thread), and under FSDP2 each rank materialises its shards only. The values are transformers' own
    initialisation (``initialize_weights``: normal weights at ``initializer_range``, unit norms, and the rotary
    ``inv_freq`` computed again, which ``to_empty`` leaves as uninitialised memory); tied embeddings stay tied.
    Returns ``(model, module)``."""
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from pacs.train.update.models import scorer_of, spread

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    sharded = t.strategy == "fsdp" and dist.is_initialized()  # else spread moves or broadcasts real tensors
    if not sharded:
        model.to_empty(device=env.device)
        model.tie_weights()  # to_empty gives each module its own tensor: the LM head its own copy of the embeddings
    module = spread(scorer_of(model, t), t, env)
    if sharded:  # FSDP2 keeps a shared parameter shared through to_empty
        module.to_empty(device=env.device)
    model.initialize_weights()
    if config.tie_word_embeddings:
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight, "the LM head came untied"
    return model, module


def profile_step(step, cuda: bool) -> dict:
    """``step()`` under ``torch.profiler``: its time by kernel family (``pacs.bench.profile``), its attention calls
    and, on a GPU, its time on the device and its busy share: the GPU's compute over the step's span, below 1
    where the GPU waited (for the host, or NCCL)."""
    import torch

    from pacs.bench.profile import attention_calls, kernel_families

    activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=activities) as prof:
        if cuda:  # the step's time on the device, beside the kernels' sum
            began, ended = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            began.record()
        step()
        if cuda:
            ended.record()
            ended.synchronize()
    out = {**kernel_families(prof, cuda), "attention_calls": attention_calls(prof)}
    if cuda:
        out["step_gpu_s"] = began.elapsed_time(ended) / 1e3
        out["busy_share"] = out["compute_busy_s"] / out["step_gpu_s"]
    return out


def bench_sizes(t, shape, env, rows: int, group_size: int, prompt_length: int, response_length: int):
    """The trainer config with ``auto`` sizes resolved as a run on this device resolves them (``pacs.plan.fit``,
    ``pacs.train.update.sizes``) for a mini-batch of ``rows`` rows per rank in groups of ``group_size``, and what they
    resolved to ({} when none was auto)."""
    from pacs.config import to_dict
    from pacs.plan.calibration import Calibration
    from pacs.plan.fit import is_auto
    from pacs.train.update.sizes import fit_trainer

    if not is_auto(to_dict(t)):
        return t, {}
    run = {"model": {"dtype": "float32"}, "data": {"max_prompt_length": prompt_length},
           "trainer": {**to_dict(t), "batch_size": rows // group_size * env.world_size,
                       "mini_batch_size": rows // group_size * env.world_size},
           "rollout": {"n": group_size, "max_response_length": response_length, "engine": "hf",
                       "prompt_batch_size": 1, "vllm": {}}}  # fmt: skip
    resolved, fit, sizes = fit_trainer(t, shape, run, env, False, False, Calibration())
    return resolved, {**sizes, "fits": fit.fits}


def measure(nproc: int, shape: str, overrides: dict, trainer: dict, rows: int, prompt_length: int,
            response_length: int, steps: int, peak_flops: float | None = None, timeout_s: float = 3600,
            build_timeout_s: float | None = None, **batch) -> dict:  # fmt: skip
    """``update_worker`` on ``nproc`` ranks (``run_ranks``: ``timeout_s`` from the model's build when
    ``build_timeout_s`` is given). ``batch``: ``group_size``, ``lengths``, ``profile``."""
    spec = {"shape": shape, "overrides": overrides, "trainer": trainer, "rows": rows, "prompt_length": prompt_length,
            "response_length": response_length, "steps": steps, "peak_flops": peak_flops, **batch}  # fmt: skip
    return run_ranks("pacs.bench.update", nproc, spec, timeout_s, build_timeout_s)


def run_update_bench(shape: str, overrides: dict, strategies: list[str], nproc: int, trainer: dict, rows: int,
                     prompt_length: int, response_length: int, steps: int, peak_flops: float | None = None,
                     variants: dict[str, dict] | None = None, **batch) -> dict:  # fmt: skip
    """Each strategy (``single``: one process; ``ddp``/``fsdp`` on ``nproc`` ranks), and each variant of
    the trainer options (name: options over ``trainer``, and AdamW's under ``optim``), on the same update."""
    results = []
    for name, options in (variants or {"": {}}).items():
        options = dict(options)
        optim = options.pop("optim", {})
        for strategy in strategies:
            ranks = 1 if strategy == "single" else nproc
            t = {**trainer, **options, "strategy": "ddp" if strategy == "single" else strategy}
            r = measure(ranks, shape, overrides, t, rows, prompt_length, response_length, steps, peak_flops,
                        optim=optim, **batch)  # fmt: skip
            results.append({"variant": name, **r})
    return {"results": results}


if __name__ == "__main__":
    sys.exit(rank_main(update_worker, None))
