"""`pacs bench gpu`: the plan's constants measured on this machine's GPU in one sitting, written as a calibration
file (``plan.calibration``).

Each part runs in a process of its own, so one slow part (a compile, an out-of-memory) is recorded as such and
cannot cost the others; the file is written after each part, so a bench stopped midway leaves what it measured. A
part's time limit (``part_s``) counts from when its model is built (``pacs.bench.ranks.run_ranks``): the process's
start, its imports and the build have a limit of their own (``build_s``), so a wide slice's build does not eat its
steps' time; each row records its build's seconds (``build_s``). Models are built on the meta device and
materialised on the GPU with random weights (``pacs.bench.update.built_model``): no fp32 copy is initialised on the
host first. The parts:

- **Memory bandwidth**: a device-to-device copy of 1 GiB (bytes read and written per second), the
  ``hbm_bytes_per_s`` the plan's decoding roofline reads the weights and KV cache at (``pacs.plan.decode``);
  ``max_num_seqs`` as vLLM 0.32 sets it for this GPU's memory.
- **Training updates** of models built from Qwen2.5 shapes with random weights (``pacs.bench.update``), as the
  paper configs train: one FSDP2 rank (a process group of one), bf16 compute over fp32 master weights, chunked
  log-probs, rows packed without padding, a group's prompt shared, and micro-batches sized by memory
  (``trainer.max_tokens_per_micro_batch`` and ``trainer.checkpoint_layers`` auto, ``pacs.plan.fit``): a
  mini-batch of ``rows`` rows per GPU (the paper's 256 prompts × 8 responses over 64 GPUs: 32) in groups of
  ``group_size`` to ``prompt_length``-token prompts, response lengths from DeepScaleR's distribution up to
  ``response_length`` (``pacs.plan.lengths``), one optimizer step each. Each shape of ``shapes`` and a
  slice of ``slice_shape`` (its width, with as many decoder layers as the memory plan fits on this GPU: the 7B
  shape's matrices on one card), with Liger's kernels and without (on a CPU, without: they are Triton's).
  MFU is the update's FLOPs (6·N per position the decoder must see, the LM head over the response tokens,
  attention over the keys each position reads; recompute not counted) per second over the GPU's peak (dense bf16,
  ``PEAK_FLOPS`` by the exact name torch gives the card, or ``peak_flops``); HFU adds the forward again of the
  layers that recompute (what the plan prices a run's update by, whatever its checkpointing); on a GPU one more
  step is profiled for the busy share, the GPU's compute over the step's span (below 1 the GPU waited for the
  host). Each update's
  peak memory, allocated and reserved by the caching allocator (what the card must have free), is reported beside
  the plan's estimate of it.
- **Memory beside the tensors**: the CUDA context and cuBLAS's workspace (the device's use beside torch's
  allocator, in the process that measures the bandwidth), written as ``overhead_bytes`` with an allowance for
  NCCL's buffers (``NCCL_BYTES``, assumed: one rank has no communicator); the largest ratio of torch's reserved
  to allocated peak over the updates, written as ``memory_headroom`` (the share of the card the allocator's
  unfilled blocks take at that ratio, never below the default). vLLM's CUDA graphs while it sleeps
  (``vllm_graph_bytes``) stay the default: no vLLM here.
- **Generation** (``generate_batch`` > 0): transformers' ``generate`` (the GPU machine may have no vLLM), written
  under ``measured`` only: several times slower than vLLM's, it would not predict the workflow's rollouts or
  evaluations, so the roofline's ``decode_efficiency`` stays the default.

What it cannot measure: collectives (every part is one rank: a multi-GPU step adds FSDP2's all-gathers and
reduce-scatters, less what overlaps compute, which the MFU does not see); vLLM's decoding (above); trained weights
(random weights and tokens: the update's kernels do not depend on the values, only the response lengths do, and
those follow DeepScaleR's).

The file's ``train_hfu_by_width`` holds each shape's HFU (hidden size: HFU) with the kernels a run uses by
default (Liger on CUDA), which ``pacs plan`` interpolates in width; ``train_hfu`` the largest full shape's, for
any other reader. Its forward-only and decoding figures (``score_hfu``, ``decode_efficiency``, ``refit_bytes_per_s``)
stay the published defaults. It needs CUDA; ``allow_cpu`` runs the same code on the CPU (tests),
where the figures mean nothing for a GPU.
"""

import dataclasses
import json
import subprocess
import time
from collections.abc import Callable

from pacs.plan.calibration import Calibration

# beside every MFU this bench gives: what its parts cannot see
ONE_RANK = ("one rank, no collectives: a multi-GPU step adds all-gather and reduce-scatter time the MFU does not "
            "see")  # fmt: skip

# NCCL's buffers per rank, which one rank cannot measure: assumed, the default overhead_bytes' 2 GiB less a CUDA
# context's half GiB (pacs.plan.calibration)
NCCL_BYTES = int(1.5 * 2**30)
# dense bf16 peak FLOP/s by the name torch.cuda.get_device_name gives the card, from NVIDIA's data sheets (half
# their figures "with sparsity"); the same chip differs by form factor: an H100 PCIe runs at 0.76 of an SXM's
PEAK_FLOPS = {
    "NVIDIA H100 80GB HBM3": 989e12,  # H100 SXM
    "NVIDIA H100 PCIe": 756e12,
    "NVIDIA H100 NVL": 835e12,
    "NVIDIA H200": 989e12,  # H200 SXM
    "NVIDIA H200 NVL": 835e12,
    "NVIDIA A100-SXM4-80GB": 312e12,
    "NVIDIA A100-SXM4-40GB": 312e12,
    "NVIDIA A100 80GB PCIe": 312e12,
    "NVIDIA A100-PCIE-40GB": 312e12,
    "NVIDIA L40S": 362e12,
    "NVIDIA B200": 2250e12,
}


def peak_flops_of(name: str) -> float:
    """The dense bf16 peak FLOP/s of the card torch names ``name``, matched exactly but for case and spacing: a
    card not in ``PEAK_FLOPS`` is an error, not priced as a relative (its MFU would be off by their ratio)."""

    def normal(x: str) -> str:
        return " ".join(x.split()).upper()

    peak = {normal(k): v for k, v in PEAK_FLOPS.items()}.get(normal(name))
    if peak is None:
        raise ValueError(f"the dense bf16 peak FLOP/s of {name!r} is not in pacs.bench.gpu.PEAK_FLOPS (cards: "
                         f"{', '.join(PEAK_FLOPS)}): give --peak-flops from its data sheet")  # fmt: skip
    return peak


def generation_worker(shape: str, overrides: dict, batch: int, prompt_length: int, new_tokens: int) -> dict:
    """transformers' generate on this device, bf16 (fp32 on CPU), random weights and prompts: tokens/s."""
    import torch
    from transformers import AutoModelForCausalLM

    from pacs.models.shapes import model_config

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    config = model_config(shape, **overrides)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype).to(device).eval()
    ids = torch.randint(0, config.vocab_size, (batch, prompt_length), device=device)
    mask = torch.ones_like(ids)

    def run(tokens: int) -> float:
        start = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                                 do_sample=True, temperature=1.0, top_p=1.0, top_k=0, pad_token_id=0)  # fmt: skip
        if device == "cuda":
            torch.cuda.synchronize()
        assert out.shape[1] == prompt_length + tokens
        return time.perf_counter() - start

    run(min(8, new_tokens))  # warm-up
    seconds = run(new_tokens)
    return {"shape": shape, "overrides": overrides, "batch": batch, "prompt_length": prompt_length,
            "new_tokens": new_tokens, "seconds": seconds, "tokens_per_s": batch * new_tokens / seconds}  # fmt: skip


def context_bytes() -> int | None:
    """The GPU memory in use beside what torch's allocator reserves (the CUDA context, cuBLAS's workspaces after a
    matmul): the plan's ``overhead_bytes`` less NCCL's buffers (one rank here: no communicator). None on a CPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    a = torch.ones(1024, 1024, device="cuda", dtype=torch.bfloat16)
    (a @ a).sum().item()  # cuBLAS's handle and workspace, as a training step creates them
    free, total = torch.cuda.mem_get_info()
    return int(total - free - torch.cuda.memory_reserved())


def reserved_over_allocated(updates: list[dict]) -> float | None:
    """The largest ratio of torch's reserved to allocated peak over the updates measured (the caching allocator's
    blocks no tensor fills: what the plan's ``memory_headroom`` is for). None where none was measured on a GPU."""
    ratios = [u["ranks"][0]["peak_reserved_bytes"] / u["ranks"][0]["peak_bytes"] for u in updates
              if "ranks" in u and u["ranks"][0].get("peak_reserved_bytes")]  # fmt: skip
    return max(ratios, default=None)


def copy_bandwidth(nbytes: int, repeats: int = 5) -> float:
    """Bytes read and written per second by a device-to-device copy of ``nbytes`` (CUDA, or the CPU's memory)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    source = torch.ones(nbytes, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    target.copy_(source)  # warm-up
    if device == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        target.copy_(source)
    if device == "cuda":
        torch.cuda.synchronize()
    return 2 * nbytes * repeats / (time.perf_counter() - start)


def update_run(rows: int, group_size: int, prompt_length: int, response_length: int, trainer: dict) -> dict:
    """The run config (as ``pacs.plan.memory`` reads it) of one rank's update of ``rows`` rows in groups."""
    return {"model": {"dtype": "float32"}, "data": {"max_prompt_length": prompt_length},
            "trainer": {**trainer, "batch_size": rows // group_size, "mini_batch_size": rows // group_size},
            "rollout": {"n": group_size, "max_response_length": response_length, "engine": "hf",
                        "prompt_batch_size": 1, "vllm": {}}}  # fmt: skip


def slice_layers(name: str, overrides: dict, run: dict, memory: int, gpus: int) -> int:
    """The most decoder layers of shape ``name`` whose update the memory plan fits in ``memory`` (at least 1)."""
    from pacs.models.shapes import model_config
    from pacs.plan.fit import fit_sizes

    cal = Calibration()
    for layers in range(model_config(name, **overrides).num_hidden_layers, 0, -1):
        shape = model_config(name, **{**overrides, "num_hidden_layers": layers})
        if fit_sizes(shape, run, gpus, 1, False, False, memory, cal)[1].fits:
            return layers
    return 1


def update_part(shape: str, overrides: dict, trainer: dict, run: dict, steps: int, peak: float, part_s: float,
                cuda: bool, build_s: float = 300.0) -> dict:  # fmt: skip
    """One update measurement in its own process (``pacs.bench.update.measure``) under ``part_s`` seconds from
    its model's build, the start and the build under ``build_s``, with the plan's estimate of its peak; a failure
    or a timeout is recorded under ``error`` (with the build's seconds where it was built)."""
    from pacs.bench.ranks import BUILT
    from pacs.bench.update import measure
    from pacs.models.shapes import model_config
    from pacs.plan.memory import training_memory

    config, r = model_config(shape, **overrides), run["rollout"]
    row = {"shape": shape, "hidden_size": config.hidden_size}
    try:
        result = measure(1, shape, overrides, trainer, run["trainer"]["mini_batch_size"] * r["n"],
                         run["data"]["max_prompt_length"], r["max_response_length"], steps, peak, timeout_s=part_s,
                         build_timeout_s=build_s, group_size=r["n"], lengths="deepscaler", profile=cuda)  # fmt: skip
    except subprocess.TimeoutExpired as e:  # the timed steps' result where it was out before the profiled step
        out = (e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout or "").splitlines()
        built = [float(line.removeprefix(BUILT).split()[0]) for line in out if line.startswith(BUILT)]
        if not built:
            return {**row, "error": f"timed out after {build_s:.0f} s before its model was built"}
        measured = [line for line in out if line.startswith("{")]
        if not measured:
            return {**row, "build_s": built[0], "error": f"timed out {part_s:.0f} s after its model was built"}
        result = {**json.loads(measured[-1]), "profile_error": f"the profiled step timed out after {part_s:.0f} s"}
    except RuntimeError as e:  # the part's process failed: its error, and the other parts run
        return {**row, "error": str(e)[-1000:]}
    sized = {**run["trainer"], **{k: result["sizes"][k] for k in ("max_tokens_per_micro_batch", "checkpoint_layers")}}
    bare = Calibration(overhead_bytes=0, vllm_overhead_bytes=0, vllm_graph_bytes=0)  # what torch allocates alone
    planned = training_memory(config, {**run, "trainer": sized}, 1 if cuda else 0, False, False, 0, bare)["update"]
    return {**row, **result, "planned_update_bytes": sum(planned.values()), "planned": planned,
            "busy_share": result.get("profile", {}).get("busy_share")}  # fmt: skip


def gigabytes(nbytes: int | None, digits: int = 2) -> str:
    """``nbytes`` in GB, or '-' where there is no such figure (the reserved memory on a CPU)."""
    return "-" if nbytes is None else f"{nbytes / 1e9:.{digits}f}"


def part_summary(row: dict) -> str:
    if "error" in row:
        return f"FAILED: {row['error'].strip().splitlines()[-1] if row['error'].strip() else 'no message'}"
    z, rank = row["sizes"], row["ranks"][0]
    busy = f", busy {row['busy_share']:.2f}" if row["busy_share"] is not None else ""
    busy += f" ({row['profile_error']})" if "profile_error" in row else ""
    return (f"{row['tokens_per_s']:.0f} tokens/s, MFU {row['mfu']:.3f}, HFU {row['hfu']:.3f}{busy}, "
            f"{row['micro_batches']} micro-batch(es) "
            f"of at most {z['max_tokens_per_micro_batch']} tokens, {z['checkpoint_layers']} layers recomputing, peak "
            f"{gigabytes(rank['peak_bytes'])} GB (reserved {gigabytes(rank.get('peak_reserved_bytes'))} GB, planned "
            f"{gigabytes(row['planned_update_bytes'])} GB), built in {row['build_s']:.1f} s")  # fmt: skip


def run_gpu_bench(shapes: list[str], overrides: dict, slice_shape: str | None, rows: int, group_size: int,
                  prompt_length: int, response_length: int, steps: int, part_s: float, generate_batch: int,
                  new_tokens: int, peak_flops: float | None, allow_cpu: bool = False,
                  done: Callable[[dict], None] = lambda calibration: None,
                  say: Callable[[str], None] = lambda line: None, build_s: float = 300.0) -> dict:  # fmt: skip
    """The measurements and the calibration (``Calibration`` keys plus ``measured``) they give (module docstring).
    ``say`` hears each part begin and end; ``done`` gets the calibration of what is measured so far after each.
    Each update part has ``part_s`` seconds once its model is built, and ``build_s`` for its start and build."""
    import torch

    from pacs.models.shapes import model_config
    from pacs.plan.jobs import forward_flops
    from pacs.plan.memory import dims

    cuda = torch.cuda.is_available()
    if not cuda and not allow_cpu:
        raise ValueError("pacs bench gpu measures a CUDA GPU and none is visible (torch.cuda.is_available() is False)")
    for name in [*shapes, *([slice_shape] if slice_shape else [])]:
        model_config(name, **overrides)  # an unknown shape fails here, before any part runs
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    memory = torch.cuda.get_device_properties(0).total_memory if cuda else None
    peak = peak_flops or peak_flops_of(name)  # an unknown card fails here, before any part runs
    trainer = {"strategy": "fsdp", "compute_dtype": "bfloat16", "gradient_checkpointing": True, "checkpoint_layers":
               "auto", "max_tokens_per_micro_batch": "auto", "logprob_chunk_size": 1024}  # fmt: skip
    run = update_run(rows, group_size, prompt_length, response_length, trainer)
    variants = {"liger": True, "no liger": False} if cuda else {"no liger": False}
    default = "liger" if cuda else "no liger"  # what a run uses (trainer.liger_kernels null)
    updates, generations, began = [], [], time.perf_counter()
    parts = [(shape, {}) for shape in shapes]
    if slice_shape:
        from pacs.ranks.distributed import DistEnv
        from pacs.train.update.sizes import device_memory

        layers = slice_layers(slice_shape, overrides, run, memory or device_memory(DistEnv()), 1 if cuda else 0)
        parts.append((slice_shape, {"num_hidden_layers": layers}))
    names = [shape + (f" ({extra['num_hidden_layers']} layers)" if extra else "") for shape, extra in parts]
    say(f"{len(parts) * len(variants) + 1} parts, each under {part_s:.0f} s once its model is built (under "
        f"{build_s:.0f} s): updates of {', '.join(names)}, {' and '.join(variants)}; then the memory bandwidth (in "
        "this process, which holds no GPU memory before)")  # fmt: skip
    bandwidth, beside = None, None  # beside: the device's use beside torch's allocator
    # vLLM 0.32's LLM class: 1024 sequences at once on GPUs of 70 GB or more but the A100, 256 on others
    sequences = 1024 if (memory or 0) >= 70 * 2**30 and "A100" not in name.upper() else 256
    fallback = Calibration()

    def calibration() -> dict:
        ok = [u for u in updates if "mfu" in u and u["variant"] == default]
        full = [u for u in ok if u["slice"] is None]
        ratio = reserved_over_allocated(ok)
        measured_memory = {
            # the allocator's unfilled blocks at the ratio measured, as a share of the card (never below the default)
            **({"memory_headroom": max(fallback.memory_headroom, 1 - 1 / ratio)} if ratio else {}),
            # the CUDA context and cuBLAS, and the default's allowance for NCCL's buffers (one rank here)
            **({"overhead_bytes": beside + NCCL_BYTES} if beside is not None else {}),
        }
        return {
            "gpu": name,
            "memory_bytes": memory or fallback.memory_bytes,
            "peak_flops": peak,
            "train_hfu": full[-1]["hfu"] if full else fallback.train_hfu,
            "train_hfu_by_width": {str(u["hidden_size"]): u["hfu"] for u in ok},
            "hbm_bytes_per_s": bandwidth or fallback.hbm_bytes_per_s,
            "decode_efficiency": fallback.decode_efficiency,
            "max_num_seqs": sequences,
            **measured_memory,
            "source": f"pacs bench gpu on {name}, {time.strftime('%Y-%m-%d')}: train HFU by width of "
                      f"{[u['shape'] for u in ok] or 'no shape (the default)'} ({default}); memory bandwidth of a "
                      f"device copy{'' if bandwidth else ' (not yet measured: the default)'}; decode_efficiency the "
                      f"default; {ONE_RANK}",
            "measured": {"updates": updates, "generations_transformers": generations, "context_bytes": beside,
                         "reserved_over_allocated": ratio,
                         "not_measured": "vLLM's CUDA graphs while it sleeps (no vLLM here): vllm_graph_bytes stays "
                                         "the default; NCCL's buffers (one rank)"},  # fmt: skip
        }  # fmt: skip

    for (shape, extra), named in zip(parts, names, strict=True):
        for variant, liger in variants.items():
            label = f"{named} {variant}"
            say(f"{label}: {steps} updates of {rows} rows in groups of {group_size} ({prompt_length} + up to "
                f"{response_length} tokens), at most {part_s:.0f} s once built")  # fmt: skip
            row = update_part(shape, {**overrides, **extra}, {**trainer, "liger_kernels": liger}, run, steps, peak,
                              part_s, cuda, build_s)  # fmt: skip
            updates.append({"slice": extra.get("num_hidden_layers"), "variant": variant, **row})
            say(f"{label}: {part_summary(row)} [{time.perf_counter() - began:.0f} s]")
            done(calibration())
    say("memory bandwidth: a device-to-device copy of " + ("1 GiB" if cuda else "64 MiB (CPU)"))
    bandwidth = copy_bandwidth(2**30 if cuda else 2**26)
    say(f"memory bandwidth: {bandwidth / 1e9:.0f} GB/s")
    beside = context_bytes()
    if beside is not None:
        say(f"CUDA context and cuBLAS: {beside / 1e9:.2f} GB beside torch's allocator")
    done(calibration())
    if generate_batch:
        for shape in shapes:
            say(f"{shape}: transformers generate, {generate_batch} sequences x {new_tokens} tokens")
            config = model_config(shape, **overrides)
            g = generation_worker(shape, overrides, generate_batch, prompt_length, new_tokens)
            context = prompt_length + new_tokens / 2
            gen_flops = forward_flops(dims(config), generate_batch * (new_tokens + prompt_length), context)
            generations.append({**g, "generate_mfu": gen_flops / g["seconds"] / peak})
            say(f"{shape}: transformers generate {g['tokens_per_s']:.0f} tokens/s")
            done(calibration())
    result = calibration()
    assert set(result) - {"measured"} <= {f.name for f in dataclasses.fields(Calibration)}
    return result


def format_calibration(calibration: dict) -> str:
    """The updates of a calibration as a Markdown table, and the field's figures to read them beside."""
    from pacs.bench.update import ANCHORS

    lines = ["| shape | layers | Liger | tokens/micro-batch | recomputing | micro-batches | s/step | tokens/s/GPU | "
             "MFU | HFU | busy | peak GB | reserved GB | planned GB | build s |", "|---" * 15 + "|"]  # fmt: skip
    for u in calibration["measured"]["updates"]:
        if "error" in u:
            lines.append(f"| {u['shape']} | {u['slice'] or 'all'} | {u['variant']} | {part_summary(u)} |")
            continue
        z, busy = u["sizes"], u["busy_share"]
        lines.append(f"| {u['shape']} | {u['slice'] or 'all'} | {u['variant']} | {z['max_tokens_per_micro_batch']} | "
                     f"{z['checkpoint_layers']} | {u['micro_batches']} | {u['step_s']:.2f} | {u['tokens_per_s']:.0f} | "
                     f"{u['mfu']:.3f} | {u['hfu']:.3f} | {'-' if busy is None else f'{busy:.2f}'} | "
                     f"{gigabytes(u['ranks'][0]['peak_bytes'], 1)} | "
                     f"{gigabytes(u['ranks'][0].get('peak_reserved_bytes'), 1)} | "
                     f"{gigabytes(u['planned_update_bytes'], 1)} | {u['build_s']:.1f} |")  # fmt: skip
    return "\n".join([*lines, "", f"MFU of {ONE_RANK}.", f"Anchors: {ANCHORS}."])
