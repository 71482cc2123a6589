"""Where an update's time goes: ``torch.profiler``'s device time by kernel family, and attention calls per layer.

On a GPU the families sum the CUDA kernels, memory copies and memsets of the profiler's trace, each once: the
activities the device ran (trace categories ``kernel``, ``gpu_memcpy``, ``gpu_memset``), never the operators that
launched them (whose device time is those kernels' again), the annotation ranges drawn around them
(``gpu_user_annotation``: ``Optimizer.step#AdamW.step``) or host-side events (CUPTI's ``Command Buffer Full``).
Their sum adds up every stream's time: with several ranks the collectives run on streams of their own beside the
compute, so it can pass the step's GPU time (CUDA events around the step). Printed beside them, from the same
activities: the span from the first one's start to the last one's end, and the time the device was busy (the
union of the intervals) with compute (every family but communication) and with communication. Where the compute
ran on one stream, the sum is those two busy times, and the span is their union plus the time the device waited.
On a CPU, where there are no kernels, each operator's self CPU time stands in for its kernels'.

A kernel's family: communication where its name is a collective's (NCCL's ``ncclDevKernel_*``, gloo, c10d),
wherever it was launched; else the family of the host range its launch was made in (``RANGES``: FSDP2's
``record_function`` ranges ``FSDP::...`` and its ``fsdp::`` operators, whose kernels are FSDP's own copies: the
all-gather's copy-in with its cast to the compute dtype, the copy-out, the reduce-scatter's copy-in, the
gradients' division (none where NCCL averages them: fp32 and bf16 reductions) and accumulation; and the
optimizer's ``Optimizer.step#...``), found through the host call that launched it (same ``correlation``); else
the first family whose pattern its name matches (``FAMILIES``). By name alone FSDP2's own kernels
(``split_with_sizes_copy``, ``chunk_cat``) and foreach copies are FSDP's, other multi-tensor kernels (AdamW's,
the gradient norm's) the optimizer's, casts (torch's ``*_copy_kernel_cuda`` with a cast in its loads or its loop:
``LoadWithCast``, ``gpu_kernel_impl``, not ``gpu_kernel_impl_nocast``) element-wise, same-dtype copies
(``Memcpy DtoD``, strided ``direct_copy_kernel_cuda``) copy/index. The families are those the throughput work
talks about: attention (FlexAttention's Triton templates, flash and cuDNN kernels), the matrix multiplies (the
decoder's linear layers and the LM head: cuBLAS's ``nvjet`` and older ``gemm`` kernels, cutlass, xmma), the
softmax/log-sum-exp work of the log-probs, the optimizer and the gradient-norm reduction, communication, FSDP's
copies, copies and indexing, and the element-wise kernels (norms, rotary embeddings, SwiGLU, residual adds, casts).
"""

import bisect
import json
import math
import re
import tempfile
from pathlib import Path
from typing import NamedTuple

CAST = (r"(bfloat16|float16|float8)_copy_kernel_cuda|LoadWithCast|gpu_kernel_impl<at::native::direct_copy_kernel|"
        r"^aten::_to_copy$")  # fmt: skip
FAMILIES = (
    ("communication", r"nccl|gloo|c10d|^record_param_comms$"),
    ("fsdp copies", r"^fsdp::|split_with_sizes_copy|chunk_cat|_foreach_copy|"
                    r"multi_tensor_apply_kernel<.*Copy(Functor)?<"),  # FSDP2's own kernels; foreach copies  # fmt: skip
    ("attention", r"attention|flash|fmha|flex|triton_tem"),  # triton_tem: FlexAttention's compiled templates
    ("matmul", r"^aten::(mm|addmm|bmm|baddbmm|_addmm_activation|linear|matmul)_?$|gemm|nvjet|cutlass|xmma|cublas"),
    ("softmax/logsumexp", r"softmax|logsumexp|^aten::exp"),
    ("optimizer", r"foreach|adam|^Optimizer|multi_tensor"),
    ("element-wise", r"^triton_(poi|red|per)_|" + CAST),  # Inductor's fused point-wise and reduction kernels, casts
    ("copy/index", r"memcpy|memset|copy|cat|index|gather|scatter|masked|fill|zero|clone|contiguous|slice|select|"
                   r"view|where"),  # fmt: skip
    ("element-wise", r"."),
)
RANGES = (("fsdp copies", r"^(FSDP|fsdp)::"), ("optimizer", r"^Optimizer\.step#"))  # what runs inside them
DEVICE_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")  # what a GPU runs, in the profiler's trace categories
LAUNCHES = ("cuda_runtime", "cuda_driver")  # the host calls that launched them, in the trace's categories
HOST_RANGES = ("user_annotation", "cpu_op")  # record_function ranges and operators, on the threads that ran them
SDPA_CALL = "aten::scaled_dot_product_attention"  # padded rows' attention call


class Activity(NamedTuple):
    """A kernel, copy or memset the device ran, for ``seconds`` from ``start`` (seconds on the trace's clock),
    launched inside the host range ``within`` (one of ``RANGES``; "" where none)."""

    name: str
    seconds: float
    start: float = 0.0
    within: str = ""


def family_of(name: str, within: str = "") -> str:
    """The family of a kernel (on a CPU, an operator) called ``name`` launched inside the host range ``within``:
    communication by name, else the range's family, else the first family whose pattern the name matches."""
    by_name = next(f for f, pattern in FAMILIES if re.search(pattern, name, re.IGNORECASE))
    if by_name == "communication":
        return by_name
    return next((f for f, pattern in RANGES if re.search(pattern, within)), by_name)


def merged(spans: list[tuple[float, float, str]]) -> list[tuple[float, float, str]]:
    """``(start, end, name)`` spans sorted, those that overlap joined into one under the first one's name."""
    out: list[tuple[float, float, str]] = []
    for start, end, name in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(end, out[-1][1]), out[-1][2])
        else:
            out.append((start, end, name))
    return out


def launched_within(events: list[dict]) -> dict[int, str]:
    """The ``RANGES`` range each launch of a Chrome trace's ``events`` was made in (ranges inside one another count
    as the first), by the launch's ``correlation`` id: the launch's time inside a range on the same host thread."""
    ranges: dict[tuple, list] = {}
    for e in events:
        if e.get("cat") in HOST_RANGES and any(re.search(pattern, e["name"]) for _, pattern in RANGES):
            start = e.get("ts", 0)
            ranges.setdefault((e.get("pid"), e.get("tid")), []).append((start, start + e.get("dur", 0), e["name"]))
    spans = {thread: merged(r) for thread, r in ranges.items()}
    within = {}
    for e in events:
        correlation = e.get("args", {}).get("correlation")
        if e.get("cat") in LAUNCHES and correlation is not None and (thread := spans.get((e.get("pid"), e.get("tid")))):
            i = bisect.bisect_right(thread, (e.get("ts", 0), math.inf, "")) - 1
            if i >= 0 and e.get("ts", 0) <= thread[i][1]:
                within[correlation] = thread[i][2]
    return within


def device_timeline(profiler) -> list[Activity]:
    """Every kernel, copy and memset the device ran in a finished ``torch.profiler.profile`` (from its Chrome
    trace, whose categories say which events those are), with the host range each was launched in."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        profiler.export_chrome_trace(str(path))
        events = json.loads(path.read_text()).get("traceEvents", [])
    within = launched_within(events)
    return [Activity(e["name"], e.get("dur", 0) / 1e6, e.get("ts", 0) / 1e6,
                     within.get(e.get("args", {}).get("correlation"), ""))
            for e in events if e.get("cat") in DEVICE_ACTIVITIES]  # fmt: skip


def device_activities(profiler) -> list[tuple[str, float]]:
    """``(name, seconds)`` of every kernel, copy and memset the device ran (``device_timeline``)."""
    return [(a.name, a.seconds) for a in device_timeline(profiler)]


def families_of(timed: list[tuple]) -> dict:
    """Seconds and share per family of ``Activity``s (or ``(name, seconds)`` pairs), their sum, and the ten
    costliest names."""
    families: dict[str, float] = dict.fromkeys([f for f, _ in FAMILIES], 0.0)
    by_name: dict[str, float] = {}
    for a in (Activity(*t) for t in timed):
        families[family_of(a.name, a.within)] += a.seconds
        by_name[a.name] = by_name.get(a.name, 0.0) + a.seconds
    total = sum(families.values())
    top = sorted(by_name.items(), key=lambda x: -x[1])[:10]
    return {
        "seconds": total,
        "families": {f: {"seconds": s, "share": s / total if total else 0.0} for f, s in families.items()},
        "top": [{"name": k, "seconds": s} for k, s in top],
    }


def busy_times(activities: list[Activity]) -> dict:
    """Of a step's ``activities``: the span from the first one's start to the last one's end, and the time the
    device was busy (the union of their intervals) with any of them, with compute (every family but
    communication) and with communication."""

    def busy(of: list[Activity]) -> float:
        return sum(end - start for start, end, _ in merged([(a.start, a.start + a.seconds, "") for a in of]))

    compute, communication = [], []
    for a in activities:
        (communication if family_of(a.name, a.within) == "communication" else compute).append(a)
    first = min((a.start for a in activities), default=0.0)
    last = max((a.start + a.seconds for a in activities), default=0.0)
    return {
        "span_s": last - first,
        "busy_s": busy(activities),
        "compute_busy_s": busy(compute),
        "communication_busy_s": busy(communication),
    }


def kernel_families(profiler, cuda: bool) -> dict:
    """``families_of`` the device's kernels and their ``busy_times`` on a GPU; of the operators' self CPU time on a
    CPU."""
    if cuda:
        activities = device_timeline(profiler)
        return {"measure": "CUDA kernels, copies and memsets", **families_of(activities), **busy_times(activities)}
    timed = [(e.key, e.self_cpu_time_total / 1e6) for e in profiler.key_averages() if e.self_cpu_time_total > 0]
    return {"measure": "operators' self CPU time", **families_of(timed)}


def attention_calls(profiler) -> int:
    """Calls of the model's attention function in a finished ``torch.profiler.profile`` (forward and any
    recompute; a backward is not a call), counted on the host: ``ATTENTION_CALL`` ranges, or where there are
    none (padded rows) SDPA operators."""
    from torch.autograd import DeviceType

    from pacs.tensors.varlen import ATTENTION_CALL

    host = [e for e in profiler.events() if e.device_type == DeviceType.CPU]
    calls = sum(e.name == ATTENTION_CALL for e in host)
    return calls or sum(e.name == SDPA_CALL for e in host)


def format_families(profile: dict) -> str:
    lines = [f"{'family':20s} {'s':>8s} {'share':>6s}   ({profile['measure']})"]
    for f, v in sorted(profile["families"].items(), key=lambda x: -x[1]["seconds"]):
        lines.append(f"{f:20s} {v['seconds']:8.3f} {v['share']:6.1%}")
    lines.append(f"{'sum':20s} {profile['seconds']:8.3f}   (every stream's time)")
    if "step_gpu_s" in profile:
        lines.append(f"{'step on the GPU':20s} {profile['step_gpu_s']:8.3f}   (CUDA events around the step)")
    if "span_s" in profile:
        both = profile["compute_busy_s"] + profile["communication_busy_s"] - profile["busy_s"]
        lines += [f"{'first to last':20s} {profile['span_s']:8.3f}   (first kernel's start to the last one's end)",
                  f"{'compute busy':20s} {profile['compute_busy_s']:8.3f}   (union of every family but communication)",
                  f"{'communication busy':20s} {profile['communication_busy_s']:8.3f}   (union of its kernels)",
                  f"{'both at once':20s} {both:8.3f}   (compute beside communication)"]  # fmt: skip
    return "\n".join(lines)
