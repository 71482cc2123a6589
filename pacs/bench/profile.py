"""Where an update's time goes: ``torch.profiler`` operator times summed by kernel family.

Each operator's self time (CUDA time on a GPU, CPU time on a CPU) goes to the first family whose pattern
its name matches; the families are those the throughput work talks about: the matrix multiplies (the
decoder's linear layers and the LM head), attention, the softmax/log-sum-exp work of the log-probs, the
element-wise kernels (norms, rotary embeddings, SwiGLU, residual adds, casts), copies and indexing, the
optimizer and the gradient-norm reduction, and collectives.
"""

import re

FAMILIES = (
    ("matmul", r"^aten::(mm|addmm|bmm|baddbmm|_addmm_activation|linear|matmul)_?$|gemm|cutlass|sm90_xmma|ampere_"),
    ("attention", r"attention|flash|fmha|flex|triton_tem"),  # triton_tem: FlexAttention's compiled templates
    ("softmax/logsumexp", r"softmax|logsumexp|^aten::exp"),
    ("optimizer", r"foreach|adam|^Optimizer|_fused_adam|norm_"),
    ("collectives", r"nccl|gloo|all_gather|reduce_scatter|all_reduce|c10d"),
    ("copy/index", r"copy|cat|index|gather|scatter|masked|fill|zero|clone|contiguous|slice|select|view|where"),
    ("element-wise", r"."),
)


# what one attention launch is: a CUDA kernel of the attention family; on CPU the attention operator as the model
# calls it (SDPA or FlexAttention, forward or backward), not the kernels it dispatches to
CPU_ATTENTION_OPS = r"^aten::scaled_dot_product_attention$|^aten::_scaled_dot_product_\w+_backward$|^flex_attention"


def family_of(name: str) -> str:
    return next(f for f, pattern in FAMILIES if re.search(pattern, name, re.IGNORECASE))


def kernel_families(profiler, cuda: bool) -> dict:
    """Seconds per family and the ten costliest operators, from a finished ``torch.profiler.profile``."""
    families: dict[str, float] = {f: 0.0 for f, _ in FAMILIES}
    ops = []
    for event in profiler.key_averages():
        us = event.self_device_time_total if cuda else event.self_cpu_time_total
        if us <= 0 or (cuda and event.device_type.name != "CUDA" and not event.self_device_time_total):
            continue
        families[family_of(event.key)] += us / 1e6
        ops.append((us / 1e6, event.key))
    total = sum(families.values())
    return {
        "seconds": total,
        "families": {f: {"seconds": s, "share": s / total if total else 0.0} for f, s in families.items()},
        "top_ops": [{"op": k, "seconds": s} for s, k in sorted(ops, reverse=True)[:10]],
    }


def attention_launches(profiler, cuda: bool) -> int:
    """Attention launches in a finished ``torch.profiler.profile``: forward, recompute and backward."""
    count = 0
    for event in profiler.key_averages():
        if cuda and event.device_type.name == "CUDA":
            count += event.count if family_of(event.key) == "attention" else 0
        elif not cuda and re.search(CPU_ATTENTION_OPS, event.key):
            count += event.count
    return count


def format_families(profile: dict) -> str:
    lines = [f"{'family':20s} {'s':>8s} {'share':>6s}"]
    for f, v in sorted(profile["families"].items(), key=lambda x: -x[1]["seconds"]):
        lines.append(f"{f:20s} {v['seconds']:8.3f} {v['share']:6.1%}")
    return "\n".join(lines)
