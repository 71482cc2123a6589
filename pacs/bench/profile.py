"""Where an update's time goes: ``torch.profiler``'s device time by kernel family, and attention calls per layer.

On a GPU the families sum the CUDA kernels, memory copies and memsets of the profiler's trace, each once: the
activities the device ran (trace categories ``kernel``, ``gpu_memcpy``, ``gpu_memset``), never the operators that
launched them (whose device time is those kernels' again), the annotation ranges drawn around them
(``gpu_user_annotation``: ``Optimizer.step#AdamW.step``) or host-side events (CUPTI's ``Command Buffer Full``).
Their sum is the device's busy time, printed beside the step's GPU time (CUDA events around the step): the two
agree where the device never waits for the host. On a CPU, where there are no kernels, each operator's self CPU
time stands in for its kernels'.

A kernel goes to the first family whose pattern its name matches; the families are those the throughput work
talks about: attention (FlexAttention's Triton templates, flash and cuDNN kernels), the matrix multiplies (the
decoder's linear layers and the LM head: cuBLAS's ``nvjet`` and older ``gemm`` kernels, cutlass, xmma), the
softmax/log-sum-exp work of the log-probs, the optimizer and the gradient-norm reduction, collectives, copies
and indexing, and the element-wise kernels (norms, rotary embeddings, SwiGLU, residual adds, casts).
"""

import json
import re
import tempfile
from pathlib import Path

FAMILIES = (
    ("attention", r"attention|flash|fmha|flex|triton_tem"),  # triton_tem: FlexAttention's compiled templates
    ("matmul", r"^aten::(mm|addmm|bmm|baddbmm|_addmm_activation|linear|matmul)_?$|gemm|nvjet|cutlass|xmma|cublas"),
    ("softmax/logsumexp", r"softmax|logsumexp|^aten::exp"),
    ("optimizer", r"foreach|adam|^Optimizer|multi_tensor"),
    ("collectives", r"nccl|gloo|all_gather|reduce_scatter|all_reduce|c10d"),
    ("element-wise", r"^triton_(poi|red|per)_"),  # Inductor's fused point-wise and reduction kernels
    ("copy/index", r"memcpy|memset|copy|cat|index|gather|scatter|masked|fill|zero|clone|contiguous|slice|select|"
                   r"view|where"),  # fmt: skip
    ("element-wise", r"."),
)
DEVICE_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")  # what a GPU runs, in the profiler's trace categories
SDPA_CALL = "aten::scaled_dot_product_attention"  # padded rows' attention call


def family_of(name: str) -> str:
    return next(f for f, pattern in FAMILIES if re.search(pattern, name, re.IGNORECASE))


def device_activities(profiler) -> list[tuple[str, float]]:
    """``(name, seconds)`` of every kernel, copy and memset the device ran in a finished ``torch.profiler.profile``
    (from its Chrome trace, whose categories say which events those are)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        profiler.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    return [(e["name"], e.get("dur", 0) / 1e6) for e in events if e.get("cat") in DEVICE_ACTIVITIES]


def families_of(timed: list[tuple[str, float]]) -> dict:
    """Seconds and share per family of ``(name, seconds)`` pairs, their sum, and the ten costliest names."""
    families: dict[str, float] = dict.fromkeys([f for f, _ in FAMILIES], 0.0)
    by_name: dict[str, float] = {}
    for name, seconds in timed:
        families[family_of(name)] += seconds
        by_name[name] = by_name.get(name, 0.0) + seconds
    total = sum(families.values())
    top = sorted(by_name.items(), key=lambda x: -x[1])[:10]
    return {
        "seconds": total,
        "families": {f: {"seconds": s, "share": s / total if total else 0.0} for f, s in families.items()},
        "top": [{"name": k, "seconds": s} for k, s in top],
    }


def kernel_families(profiler, cuda: bool) -> dict:
    """``families_of`` the device's kernels on a GPU; of the operators' self CPU time on a CPU."""
    if cuda:
        return {"measure": "CUDA kernels, copies and memsets", **families_of(device_activities(profiler))}
    timed = [(e.key, e.self_cpu_time_total / 1e6) for e in profiler.key_averages() if e.self_cpu_time_total > 0]
    return {"measure": "operators' self CPU time", **families_of(timed)}


def attention_calls(profiler) -> int:
    """Calls of the model's attention function in a finished ``torch.profiler.profile`` (forward and any
    recompute; a backward is not a call), counted on the host: ``ATTENTION_CALL`` ranges, or where there are
    none (padded rows) SDPA operators."""
    from torch.autograd import DeviceType

    from pacs.train.varlen import ATTENTION_CALL

    host = [e for e in profiler.events() if e.device_type == DeviceType.CPU]
    calls = sum(e.name == ATTENTION_CALL for e in host)
    return calls or sum(e.name == SDPA_CALL for e in host)


def format_families(profile: dict) -> str:
    lines = [f"{'family':20s} {'s':>8s} {'share':>6s}   ({profile['measure']})"]
    for f, v in sorted(profile["families"].items(), key=lambda x: -x[1]["seconds"]):
        lines.append(f"{f:20s} {v['seconds']:8.3f} {v['share']:6.1%}")
    lines.append(f"{'sum':20s} {profile['seconds']:8.3f}")
    if "step_gpu_s" in profile:
        lines.append(f"{'step on the GPU':20s} {profile['step_gpu_s']:8.3f}   (CUDA events around the step)")
    return "\n".join(lines)
