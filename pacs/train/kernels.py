"""Fused kernels for the update on CUDA, each a config key, each checked against the reference path (the GPU suite):

- ``trainer.liger_kernels``: Liger's Triton RMSNorm, SwiGLU and rotary-embedding kernels in the decoder layers
  (what verl's ``use_liger`` applies under FSDP2), in place of transformers' element-wise chains, which run in
  forward, recompute and backward. Liger patches the instances it is given and, for the rotary embedding,
  the model family's module in transformers: every model of that family in the process then uses it.
- ``trainer.attention_autotune``: the packed rows' FlexAttention compiled with autotuning, its backward
  included (``pacs.train.varlen``).
- ``optim.fused``: AdamW's fused CUDA kernel (one launch per parameter group) instead of its multi-tensor
  kernels; by default on CUDA (``adamw``).

On a CPU the reference path stays: a key that needs CUDA is an error there, naming it.
"""

import torch

CUDA_ONLY = ("liger_kernels", "attention_autotune")  # trainer keys


def check_device(trainer, device: str) -> None:
    """A trainer key that needs CUDA, set on a run whose ``device`` is not a GPU, is an error naming it."""
    for key in CUDA_ONLY:
        if getattr(trainer, key) and not str(device).startswith("cuda"):
            raise ValueError(f"trainer.{key} needs CUDA (Triton kernels) and this rank runs on {device}: set "
                             f"trainer.{key} false here")  # fmt: skip


def use_liger_kernels(model: torch.nn.Module) -> None:
    """Liger's RMSNorm, SwiGLU and RoPE kernels in ``model`` (a causal LM or a token classifier of a family Liger
    knows); its LM head and loss stay ours (``pacs.train.logprobs``)."""
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN, _apply_liger_kernel_to_instance
    except ImportError as e:
        raise ImportError(f"trainer.liger_kernels needs the liger-kernel package (pip install -e '.[gpu]'): {e}") from e
    family = model.config.model_type
    if family not in MODEL_TYPE_TO_APPLY_LIGER_FN:
        raise ValueError(f"trainer.liger_kernels: Liger has no kernels for {family} models: set it false")
    _apply_liger_kernel_to_instance(model, rope=True, rms_norm=True, swiglu=True, cross_entropy=False,
                                    fused_linear_cross_entropy=False)  # fmt: skip


def adamw(params, lr: float, optim, device: str) -> torch.optim.AdamW:
    """AdamW as ``optim`` configures it; fused where ``optim.fused`` says so (null: on CUDA), else torch's
    default (multi-tensor kernels on a GPU, a loop on a CPU)."""
    fused = optim.fused if optim.fused is not None else str(device).startswith("cuda")
    return torch.optim.AdamW(params, lr=lr, betas=optim.betas, eps=optim.eps, weight_decay=optim.weight_decay,
                             fused=fused or None)  # fmt: skip
