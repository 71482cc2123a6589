"""Fused kernels for the update on CUDA, each a config key, each checked against the reference path (the GPU suite):

- ``trainer.liger_kernels``: Liger's Triton RMSNorm, SwiGLU and rotary-embedding kernels in the decoder layers
  (what verl's ``use_liger`` applies under FSDP2), in place of transformers' element-wise chains, which run in
  forward, recompute and backward; by default (null) on CUDA for Qwen2 and Qwen3 (``liger_on``). Liger patches
  the instances it is given (every RMSNorm of the model, Qwen3's ``q_norm``/``k_norm`` included from
  liger-kernel 0.8.5, and every MLP) and, process-wide, the model family's
  module in transformers: its ``apply_rotary_pos_emb``, its RMSNorm class and its MLP class. Every model of that
  family built later in the process (a reference, a critic, an evaluation's model) is then built from Liger's
  modules; the trainer passes each of its models here all the same (``pacs.train.update.models.spread``), so the policy,
  the reference and the critic compute alike. Not with ``trainer.compile`` (refused: ``TrainerConfig``; its
  default stays off under compile).
- ``trainer.attention_autotune``: the packed rows' FlexAttention compiled with autotuning, its backward
  included (``pacs.tensors.varlen``).
- ``optim.fused``: AdamW's fused CUDA kernel (one launch per parameter group) instead of its multi-tensor
  kernels; by default on CUDA (``adamw``).

On a CPU the reference path stays: a key that needs CUDA is an error there, naming it.
"""

import torch

CUDA_ONLY = ("liger_kernels", "attention_autotune")  # trainer keys
# families whose trainer path passed with Liger on an H100 (the GPU suite: FSDP2, bf16, checkpointing): Liger's by
# default on CUDA (trainer.liger_kernels null)
LIGER_BY_DEFAULT = ("qwen2", "qwen3")
LIGER_RELEASE = (0, 8, 5)  # the first that patches every norm of a Qwen3 instance


def check_device(trainer, device: str) -> None:
    """A trainer key that needs CUDA, set on a run whose ``device`` is not a GPU, is an error naming it."""
    for key in CUDA_ONLY:
        if getattr(trainer, key) and not str(device).startswith("cuda"):
            raise ValueError(f"trainer.{key} needs CUDA (Triton kernels) and this rank runs on {device}: set "
                             f"trainer.{key} false here")  # fmt: skip


def liger_on(trainer, device: str, family: str) -> bool:
    """Whether ``trainer.liger_kernels`` puts Liger's kernels in a model of ``family`` on ``device``: as set, or
    where it is null on CUDA for ``LIGER_BY_DEFAULT`` unless ``trainer.compile`` (which fuses the same chains)."""
    if trainer.liger_kernels is not None:
        return trainer.liger_kernels
    return str(device).startswith("cuda") and family in LIGER_BY_DEFAULT and not trainer.compile


def use_liger_kernels(model: torch.nn.Module) -> None:
    """Liger's RMSNorm, SwiGLU and RoPE kernels in ``model`` (a causal LM or a token classifier of a family Liger
    knows); its LM head and loss stay ours (``pacs.tensors.logprobs``)."""
    try:
        from liger_kernel.transformers.monkey_patch import MODEL_TYPE_TO_APPLY_LIGER_FN, _apply_liger_kernel_to_instance
    except ImportError as e:
        raise ImportError(f"trainer.liger_kernels (null: on for Qwen2 and Qwen3 on CUDA) needs the liger-kernel "
                          f"package (pip install -e '.[gpu]'), or set it false: {e}") from e
    from importlib.metadata import version

    found, need = version("liger-kernel"), ".".join(map(str, LIGER_RELEASE))
    if tuple(int(x) for x in found.split(".")[:3] if x.isdigit()) < LIGER_RELEASE:
        raise ImportError(f"trainer.liger_kernels needs liger-kernel >= {need} (before it Qwen3's q_norm and k_norm "
                          f"stay transformers' in a patched model, while models built later get Liger's); found "
                          f"{found}: pip install -U 'liger-kernel>={need}'")  # fmt: skip
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
