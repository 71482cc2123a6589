"""What a run trains and samples from: the models (loaded from the start or from a checkpoint), spread over
ranks, their checkpoints, and PACS v2's reference reset.

A checkpoint (``pacs.runs.checkpoint``) holds the policy in HF format in the compute dtype, what the rollout
engine and evaluation read; where that is below ``model.dtype`` (fsdp computing in bfloat16 over fp32 master
weights) the masters go beside the optimizers' states, so that a resume continues from the same bits.
"""

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

from pacs import collector
from pacs.algorithms.objectives import Objective
from pacs.ranks.distributed import DistEnv, barrier, full_tensors, wrap
from pacs.runs import checkpoint as ckpt
from pacs.runs import retention
from pacs.tensors.kernels import adamw, check_device, liger_on, use_liger_kernels
from pacs.tensors.logprobs import PolicyScorer
from pacs.tensors.varlen import use_varlen_attention
from pacs.train.settings.config import RunConfig, TrainerConfig, compute_dtype


@dataclass
class Models:
    """What a run trains and samples from. ``policy`` is the HF model (its parameters sharded under fsdp);
    ``policy_module`` the ``PolicyScorer`` around it and ``critic_module`` the critic, as DDP or FSDP spread
    them; ``reference`` a scorer, sharded under fsdp."""

    tokenizer: object
    policy: torch.nn.Module
    policy_module: torch.nn.Module
    optimizer: torch.optim.Optimizer
    reference: torch.nn.Module | None = None
    critic: torch.nn.Module | None = None
    critic_module: torch.nn.Module | None = None
    critic_optimizer: torch.optim.Optimizer | None = None
    skipped_steps: int = 0
    reference_step: int = 0  # the step whose policy the reference is (0: the starting model)


def scorer_of(model: torch.nn.Module, trainer: TrainerConfig) -> PolicyScorer:
    return PolicyScorer(model, trainer.logprob_chunk_size, trainer.share_prompt, trainer.pack_sequences,
                        trainer.attention_autotune)  # fmt: skip


def spread(model: torch.nn.Module, trainer: TrainerConfig, env: DistEnv, trained: bool = True) -> torch.nn.Module:
    """``model`` on this rank's device, spread over the ranks as ``trainer.strategy`` says, with Liger's kernels
    where ``trainer.liger_kernels`` asks (null: on CUDA for Qwen2 and Qwen3), activation checkpointing when it is
    trained and ``trainer.gradient_checkpointing`` is on; a model that is not trained is left unwrapped where
    nothing needs synchronising (one rank, or ddp)."""
    hf = model.model if isinstance(model, PolicyScorer) else model
    check_device(trainer, env.device)
    if liger_on(trainer, env.device, hf.config.model_type):
        use_liger_kernels(hf)
    if trainer.compile:  # before the layers are sharded, as torchtitan does; the attention call stays eager
        for layer in hf.base_model.layers:
            layer.compile(dynamic=True)
    if trainer.gradient_checkpointing and trained:
        hf.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        hf.train()  # transformers checkpoints only in training mode (dropout is 0 in these models)
        if trainer.checkpoint_layers is not None:  # the later layers keep their activations
            for layer in hf.base_model.layers[trainer.checkpoint_layers :]:
                layer.gradient_checkpointing = False
    if not trained and (trainer.strategy == "ddp" or not dist.is_initialized()):
        return model.to(env.device)
    compute = getattr(torch, trainer.compute_dtype) if trainer.compute_dtype else None
    return wrap(model, env, trainer.strategy, compute)


def load_models(config: RunConfig, objective: Objective, needs: frozenset, resume: Path | None, env: DistEnv) -> Models:
    """The policy (and critic) from the latest checkpoint when resuming, else from ``model``; the reference
    is the starting model, or the policy of the last reset that the checkpoint saved (``reference/``). Every
    model is held in ``model.dtype``; a resume reads the policy's master weights where the checkpoint has them."""
    torch.manual_seed(config.trainer.seed)  # the critic's new value head
    t, dtype = config.trainer, getattr(torch, config.model.dtype)
    policy = AutoModelForCausalLM.from_pretrained(resume or config.model.path, dtype=dtype)
    policy_module = spread(scorer_of(policy, t), t, env)
    models = Models(AutoTokenizer.from_pretrained(config.model.path), policy, policy_module,
                    adamw(policy_module.parameters(), config.optim.lr, config.optim, env.device))  # fmt: skip
    if "ref_logprobs" in needs:
        snapshot = resume / "reference" if resume else None
        start = snapshot if snapshot and snapshot.is_dir() else config.model.path
        reference = AutoModelForCausalLM.from_pretrained(start, dtype=dtype)
        reference.eval().requires_grad_(False)
        models.reference = spread(scorer_of(reference, t), t, env, trained=False)
    if objective.value_loss is not None:
        path = resume / "critic" if resume else (config.model.critic_path or config.model.path)
        critic_config = AutoConfig.from_pretrained(path, num_labels=1, classifier_dropout=0.0)
        models.critic = AutoModelForTokenClassification.from_pretrained(path, config=critic_config, dtype=dtype)
        if t.pack_sequences:
            use_varlen_attention(models.critic, t.attention_autotune)
        models.critic_module = spread(models.critic, t, env)
        models.critic_optimizer = adamw(models.critic_module.parameters(), config.optim.critic_lr, config.optim,
                                        env.device)  # fmt: skip
    if resume:
        masters = master_modules(config, models)
        state, rng = ckpt.load_trainer_state(resume, env.rank, optimizer_modules(models), masters)
        models.skipped_steps, models.reference_step = state["skipped_steps"], state.get("reference_step", 0)
        if rng is not None:
            ckpt.set_rng_state(rng)
    collector.working()  # the models are loaded (pacs.collector)
    return models


def optimizer_modules(models: Models) -> dict:
    """The optimizers by checkpoint name, each with the module whose parameters it steps."""
    pairs = {"optimizer": (models.policy_module, models.optimizer)}
    if models.critic_optimizer is not None:
        pairs["critic_optimizer"] = (models.critic_module, models.critic_optimizer)
    return pairs


def master_modules(config: RunConfig, models: Models) -> dict:
    """The modules whose weights the HF files do not hold exactly, by checkpoint name: the policy when it
    computes in a lower dtype than its master weights (its HF weights are in the compute dtype)."""
    return {"policy": models.policy_module} if compute_dtype(config) != config.model.dtype else {}


def save_checkpoint(root: Path, step: int, models: Models, config: RunConfig, env: DistEnv,
                    keep_weights: Path | None = None, inflight: dict | None = None) -> None:  # fmt: skip
    """The models consolidated in HF format by rank 0 (the policy in the compute dtype), the optimizers and
    any master weights the HF files lack sharded by every rank (DCP), each rank's ``inflight`` batches sampled
    ahead (``pacs.train.sampling.staleness``), a manifest; then, published, the older checkpoints thinned as
    ``checkpoint.keep_resumable`` and ``keep_weights`` (or the file ``keep_weights``) say."""
    staging = ckpt.staging_dir(root, step)
    if env.main:
        ckpt.remove_partial(root)
        staging.mkdir(parents=True)
    barrier(env)
    full = {}
    reference = models.reference.model if models.reference is not None and models.reference_step else None
    for name, model in (("policy", models.policy), ("critic", models.critic), ("reference", reference)):
        if model is not None:  # gathering is a collective under fsdp; only rank 0 keeps the tensors
            full[name] = {k: v.cpu() for k, v in full_tensors(model) if env.main}
    if env.main:
        dtype = compute_dtype(config)
        ckpt.save_models(staging, models.policy, models.tokenizer, models.critic, full, dtype, reference)
        ckpt.save_counters(staging, {"step": step, "skipped_steps": models.skipped_steps,
                                     "reference_step": models.reference_step})  # fmt: skip
    del full
    ckpt.save_resume_state(staging, optimizer_modules(models), master_modules(config, models))
    ckpt.save_rank_state(staging, env.rank, inflight)
    barrier(env)
    retention.write_manifest(staging, env)
    if env.main:
        ckpt.publish(staging, root, step)
        kept = retention.kept_weights(config.checkpoint.keep_weights, keep_weights)
        for line in retention.retain(root, config.checkpoint.keep_resumable, kept):
            print(f"{root}/{line}", flush=True)
    barrier(env)


@torch.no_grad()
def reset_reference(step: int, config: RunConfig, models: Models) -> None:
    """The reference becomes the policy as it is now (shard for shard under fsdp) and the actor's AdamW
    state starts afresh: PACS v2's periodic hard reset (``trainer.reference_reset_every``)."""
    reference, policy = models.reference.model.named_parameters(), models.policy.named_parameters()
    for (name, r), (other, p) in zip(reference, policy, strict=True):
        assert name == other, f"reference {name} against policy {other}"
        r.copy_(p)
    device = next(models.policy_module.parameters()).device
    models.optimizer = adamw(models.policy_module.parameters(), config.optim.lr, config.optim, str(device))
    models.reference_step = step
