"""`pacs bench gpu`: the plan's constants measured on this machine's GPU, written as a calibration file.

- **Training update**: one FSDP2 rank (a process group of one), bf16 compute over fp32 master weights,
  activation checkpointing, chunked log-probs, rows packed without padding, for models built from Qwen2.5
  shapes with random weights (``pacs.bench.update``): one group of ``rows`` responses to one 512-token prompt
  (shared, as training shares it), response lengths from DeepScaleR's distribution up to 4,096
  (``pacs.bench.lengths``). ``train_mfu`` is that update's FLOPs (6·N per position the decoder must see, the
  LM head over the response tokens, attention over the keys each position reads; recompute not counted)
  per second over the GPU's peak, from the largest shape measured; the peak memory is reported beside the
  plan's estimate of it (``pacs.plan.memory.training_memory``), a check of the memory model on this GPU.
- **Memory bandwidth**: a device-to-device copy of 1 GiB (bytes read and written per second), the
  ``hbm_bytes_per_s`` the plan's decoding roofline reads the weights and KV cache at (``pacs.plan.decode``);
  ``max_num_seqs`` as vLLM 0.32 sets it for this GPU's memory.
- **Generation**: transformers' ``generate`` (the GPU machine may have no vLLM), a batch of random prompts,
  sampling a fixed number of new tokens, written under ``measured`` only: transformers' generation is several
  times slower than vLLM's and would not predict the workflow's rollouts or evaluations, so the roofline's
  ``decode_efficiency`` stays the default.

It needs CUDA; ``allow_cpu`` runs the same code on the CPU (tests), where the figures mean nothing for a GPU.
"""

import dataclasses
import time
from collections.abc import Callable

from pacs.plan.calibration import Calibration

# dense bf16 peak FLOP/s by device name, from the vendors' data sheets
PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L40S": 362e12, "B200": 2250e12}


def peak_flops_of(name: str) -> float | None:
    return next((v for k, v in PEAK_FLOPS.items() if k in name.upper()), None)


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


def run_gpu_bench(shapes: list[str], overrides: dict, rows: int, prompt_length: int, response_length: int,
                  steps: int, generate_batch: int, new_tokens: int, peak_flops: float | None,
                  allow_cpu: bool = False, done: Callable[[dict], None] = lambda calibration: None,
                  say: Callable[[str], None] = lambda line: None) -> dict:  # fmt: skip
    """The measurements and the calibration (``Calibration`` keys plus ``measured``) they give. ``say`` hears
    each measurement begin and end; ``done`` gets the calibration of what is measured so far after each (the
    largest shape's ``train_mfu`` yet), so that a bench stopped midway leaves what it measured."""
    import torch

    from pacs.bench.update import measure
    from pacs.models.shapes import model_config
    from pacs.plan.jobs import forward_flops
    from pacs.plan.memory import dims, training_memory

    cuda = torch.cuda.is_available()
    if not cuda and not allow_cpu:
        raise ValueError("pacs bench gpu measures a CUDA GPU and none is visible (torch.cuda.is_available() is False)")
    name = torch.cuda.get_device_name(0) if cuda else "cpu"
    memory = torch.cuda.get_device_properties(0).total_memory if cuda else None
    peak = peak_flops or peak_flops_of(name)
    if peak is None:
        raise ValueError(f"the peak bf16 FLOP/s of {name!r} is not known: give --peak-flops")
    trainer = {"strategy": "fsdp", "compute_dtype": "bfloat16", "gradient_checkpointing": True,
               "logprob_chunk_size": 1024}  # fmt: skip
    length = prompt_length + response_length
    run = {"model": {"dtype": "float32"}, "data": {"max_prompt_length": prompt_length},
           "trainer": {**trainer, "max_tokens_per_micro_batch": rows * length, "batch_size": 1},
           "rollout": {"n": 1, "max_response_length": response_length, "engine": "hf", "prompt_batch_size": 1,
                       "vllm": {}}}  # fmt: skip
    updates, generations = [], []
    default = Calibration()
    say("memory bandwidth: a device-to-device copy of " + ("1 GiB" if cuda else "64 MiB (CPU)"))
    bandwidth = copy_bandwidth(2**30 if cuda else 2**26)
    say(f"memory bandwidth: {bandwidth / 1e9:.0f} GB/s")
    # vLLM 0.32's LLM class: 1024 sequences at once on GPUs of 70 GB or more but the A100, 256 on others
    sequences = 1024 if (memory or 0) >= 70 * 2**30 and "A100" not in name.upper() else 256

    def calibration() -> dict:
        measured = [u["shape"] for u in updates]
        return {
            "gpu": name,
            "memory_bytes": memory or default.memory_bytes,
            "peak_flops": peak,
            "train_mfu": updates[-1]["train_mfu"] if updates else default.train_mfu,
            "hbm_bytes_per_s": bandwidth,
            "decode_efficiency": default.decode_efficiency,
            "max_num_seqs": sequences,
            "source": f"pacs bench gpu on {name}, {time.strftime('%Y-%m-%d')}: train_mfu of "
                      f"{measured[-1] if measured else 'no shape (the default)'}; measured {measured}; memory "
                      "bandwidth of a device copy; decode_efficiency the default",
            "measured": {"updates": updates, "generations_transformers": generations},
        }  # fmt: skip

    for shape in shapes:
        config = model_config(shape, **overrides)
        say(f"{shape}: {steps} update steps of {rows} rows ({prompt_length} + up to {response_length} tokens)")
        result = measure(1, shape, overrides, trainer, rows, prompt_length, response_length, steps, peak,
                         group_size=rows, lengths="deepscaler")  # fmt: skip
        planned = training_memory(config, run, 1, False, False, 0, 0, 0)["update"]
        updates.append({**result, "train_mfu": result["mfu"],
                        "planned_update_bytes": sum(planned.values()), "planned": planned})  # fmt: skip
        say(f"{shape}: update {result['tokens_per_s']:.0f} tokens/s, train MFU {result['mfu']:.3f}, peak "
            f"{result['ranks'][0]['peak_bytes'] / 1e9:.2f} GB (planned {sum(planned.values()) / 1e9:.2f} GB)")
        done(calibration())
        say(f"{shape}: transformers generate, {generate_batch} sequences x {new_tokens} tokens")
        g = generation_worker(shape, overrides, generate_batch, prompt_length, new_tokens)
        context = prompt_length + new_tokens / 2
        gen_flops = forward_flops(dims(config), generate_batch * (new_tokens + prompt_length), context)
        mfu = gen_flops / g["seconds"] / peak
        generations.append({**g, "generate_mfu": mfu})
        say(f"{shape}: transformers generate {g['tokens_per_s']:.0f} tokens/s (MFU {mfu:.3f})")
        done(calibration())
    result = calibration()
    assert set(result) - {"measured"} <= {f.name for f in dataclasses.fields(Calibration)}
    return result
