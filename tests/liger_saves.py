"""Liger's RMSNorm, SwiGLU and rotary kernels on a CPU, for counting what they save for backward: their forward
kernels are Triton's, which a CPU cannot run, so each is replaced by torch computing the same outputs of the same
shapes and dtypes, while Liger's autograd functions, which decide what is saved (``ctx.save_for_backward``), stay
Liger's own (tests/test_plan.py)."""

import torch
import torch.nn.functional as F


def rms_norm_forward(X, W, eps, offset, casting_mode, row_mode):
    shape = X.shape
    X = X.view(-1, shape[-1])
    rstd = torch.rsqrt(X.float().pow(2).mean(-1) + eps)  # Liger's "llama" casting: the reciprocal norm in fp32
    Y = ((X.float() * rstd[:, None]).to(X.dtype) * (offset + W)).to(X.dtype)
    return Y.view(*shape), X, rstd, 0, 0, casting_mode


def swiglu_forward(a, b, gate_multiplier=1.0):
    shape = a.shape
    a, b = a.view(-1, shape[-1]), b.view(-1, shape[-1])
    return a, b, (F.silu(a * gate_multiplier) * b).view(*shape)


def rope_forward(q, k, cos, sin, position_ids=None, unsqueeze_dim=1, rotary_dim=None):
    def rotate(x):  # (B, L, H, D) contiguous, as Liger lays it out for its kernel
        half = x.shape[-1] // 2
        turned = torch.cat([-x[..., half:], x[..., :half]], -1)
        return x * cos.unsqueeze(2) + turned * sin.unsqueeze(2)

    q, k = (rotate(x.transpose(1, 2).contiguous()) for x in (q, k))
    return q.transpose(1, 2), k.transpose(1, 2), cos, sin


def liger_on_a_cpu(monkeypatch) -> None:
    """The kernels above in Liger's autograd functions for the test (``monkeypatch``), and transformers' Qwen2 and
    Qwen3 modules restored after it: Liger patches their RMSNorm and MLP classes and rotary function for the whole
    process."""
    from liger_kernel.ops import rms_norm, rope, swiglu
    from transformers.models.qwen2 import modeling_qwen2
    from transformers.models.qwen3 import modeling_qwen3

    for module in (modeling_qwen2, modeling_qwen3):
        for name, value in list(vars(module).items()):
            monkeypatch.setattr(module, name, value)  # restored at the test's end, whatever Liger sets meanwhile
    monkeypatch.setattr(rms_norm, "rms_norm_forward", rms_norm_forward)
    monkeypatch.setattr(swiglu, "swiglu_forward", swiglu_forward)
    monkeypatch.setattr(rope, "rope_forward", rope_forward)
