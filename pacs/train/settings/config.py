"""A training run's configuration: one YAML file, every key typed, defaults the official PACS/verl ones.

``load_run_config`` fills the algorithm-dependent defaults (gradient clip, L of the Dr. GRPO
aggregation) so that the resolved config written next to the run holds every value that was used.
"""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pacs.algorithms.options import ALGORITHMS, get_algorithm
from pacs.config import ConfigError, from_dict, read_yaml, to_dict
from pacs.rollout.vllm import VLLMRolloutOptions
from pacs.verify import CodeConfig, VerifyConfig


@dataclass(frozen=True)
class AlgorithmConfig:
    name: str  # pacs, grpo or ppo: a key of pacs.algorithms.options.ALGORITHMS
    options: dict[str, Any] = field(default_factory=dict)  # the objective's config (docs/trainer.md, "Objectives")


@dataclass(frozen=True)
class ModelConfig:
    path: str  # policy to start from: a hub id or a local HF directory
    critic_path: str | None = None  # PPO critic's base model; null: the policy's
    dtype: Literal["float32", "bfloat16"] = "float32"  # parameters, optimizer state and logits


@dataclass(frozen=True)
class DataConfig:
    train_files: list[str]  # prepared parquet files (pacs.data.schema), concatenated
    heldout_files: list[str] = field(default_factory=list)  # prepared files for greedy accuracy during training
    max_prompt_length: int = 512  # prompts longer than this (in tokens) are dropped and counted
    # the chat template's own variables, e.g. Qwen3's {enable_thinking: true}; a template ignores unknown ones
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    shuffle: bool = True  # a fresh seeded permutation each epoch


@dataclass(frozen=True)
class RolloutConfig:
    engine: Literal["hf", "vllm"] = "hf"  # hf: transformers generate on the policy itself; vllm: one engine per rank
    n: int = 8  # samples per prompt: one group
    temperature: float = 1.0  # sampling; the trainer's log-probs use the same temperature
    top_p: float = 1.0  # below 1 the engine's log-probs are of the nucleus; see max_logprob_gap
    max_response_length: int = 4096  # new tokens per sample
    ignore_eos: bool = False  # every sample runs to max_response_length (pacs preflight sets it: the worst case)
    prompt_batch_size: int = 64  # hf: prompts per generate call (vllm takes a rank's prompts at once)
    # engine options (docs/rollouts.md, "vLLM rollouts")
    vllm: VLLMRolloutOptions = field(default_factory=VLLMRolloutOptions)
    # stop when the mean |engine log-prob - trainer log-prob| over a step's response tokens exceeds this
    # (gross mismatch: another model, a dtype bug); null: never. Unset: by the compute dtype
    # (DEFAULT_LOGPROB_GAP). vllm only: hf samples from the policy itself
    max_logprob_gap: float | None = 1e-3
    # step t trains on rollouts sampled by the weights after update max(0, t - staleness)
    # (pacs.train.sampling.staleness); 0: on-policy, each step samples with the weights it updates
    staleness: int = 0
    # the job's last generator_ranks ranks only generate and score, the others train
    # (pacs.train.sampling.generators); 0: every rank generates and trains
    generator_ranks: int = 0

    def __post_init__(self):
        if self.max_logprob_gap is not None and self.max_logprob_gap <= 0:
            raise ValueError(f"rollout.max_logprob_gap must be > 0 or null, got {self.max_logprob_gap}")
        if self.staleness < 0:
            raise ValueError(f"rollout.staleness must be an integer >= 0, got {self.staleness}")
        if self.generator_ranks < 0:
            raise ValueError(f"rollout.generator_ranks must be an integer >= 0, got {self.generator_ranks}")
        if self.vllm.tensor_parallel_size != 1:
            raise ValueError(
                "rollout.vllm.tensor_parallel_size must be 1 (one engine per rank), "
                f"got {self.vllm.tensor_parallel_size}"
            )


@dataclass(frozen=True)
class OptimConfig:
    lr: float = 1e-6  # learning rate, constant
    weight_decay: float = 0.01  # AdamW
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW
    eps: float = 1e-8  # AdamW
    grad_clip: float | None = None  # max global grad norm; null: none (PACS); filled with 1.0 for PPO/GRPO
    critic_lr: float = 1e-5  # PPO critic's learning rate
    critic_grad_clip: float | None = 1.0  # PPO critic's max global grad norm; null: none
    # AdamW's fused kernel (pacs.tensors.kernels); null: fused on CUDA, torch's default (a loop) on a CPU
    fused: bool | None = None


@dataclass(frozen=True)
class TrainerConfig:
    total_steps: int = 300  # training steps
    batch_size: int = 1024  # prompts per step (× n samples)
    mini_batch_size: int = 256  # prompts per optimizer step
    micro_batch_size: int = 4  # prompts per forward/backward on one rank; gradients accumulate
    # pack whole groups into micro-batches of at most this many tokens (padding counted) instead, dealing each
    # mini-batch's groups to ranks by tokens; auto: the largest the memory plan fits on this run's devices
    # (pacs.plan.fit), resolved once per job; null: micro_batch_size prompts
    max_tokens_per_micro_batch: int | Literal["auto"] | None = None
    epochs: int = 1  # passes over each step's batch
    # the loss scale of verl's micro-batch of this many responses per GPU (its ppo_micro_batch_size_per_gpu; the
    # paper's scripts: 8): a loss summed over responses (seq-mean-token-sum-norm, the actor's and the critic's)
    # is multiplied by it over the global mini-batch's responses, as verl's division by its gradient-accumulation
    # count and FSDP's mean over ranks scale it, whatever this run's micro-batches, token budget or ranks. null:
    # not multiplied, the gradient of the whole mini-batch's sum (docs/trainer.md, "The optimizer step")
    verl_micro_batch_size: int | None = 8
    seed: int = 0  # prompt order, sampling seeds and the critic's value head
    strategy: Literal["ddp", "fsdp"] = "ddp"  # how models spread over ranks: replicated, or FSDP2-sharded
    # fsdp: the dtype layers compute in (parameters all-gathered and cast; master weights, gradient reduction
    # and optimizer state stay in model.dtype / fp32); null: model.dtype. The rollout engine samples in it too
    compute_dtype: Literal["float32", "bfloat16"] | None = None
    gradient_checkpointing: bool = False  # recompute each decoder layer's activations in backward
    # torch.compile each decoder layer (dynamic shapes; attention stays eager): fuses the norms, rotary
    # embeddings, SwiGLU and residual adds; the first steps pay the compile. With share_prompt, needs
    # pack_sequences
    compile: bool = False
    # with gradient_checkpointing, only the first K decoder layers recompute (the rest keep their activations);
    # auto: the fewest with which the micro-batch fits this run's devices (pacs.plan.fit); null: every layer
    checkpoint_layers: int | Literal["auto"] | None = None
    # GB per rank the auto sizes fit in; null: the device's (a GPU's total memory, or a CPU host's over its ranks)
    memory_limit_gb: float | None = None
    # positions per chunk of the LM head in the log-prob and entropy computations; null: whole micro-batch logits
    logprob_chunk_size: int | None = 1024
    # each group's prompt through the policy and reference once, its keys and values read by its n responses
    # (pacs.tensors.logprobs); false: every row whole, as verl and TRL do
    share_prompt: bool = True
    # each micro-batch's rows laid end to end in one sequence without padding, attention kept within each row
    # (its group's prompt and itself; pacs.tensors.varlen); false: rows padded to the micro-batch's longest
    pack_sequences: bool = True
    # CUDA only (pacs.tensors.kernels): Liger's Triton RMSNorm, SwiGLU and RoPE kernels in the decoder
    # layers; null: on CUDA for Qwen2 and Qwen3 unless trainer.compile, off on a CPU
    liger_kernels: bool | None = None
    # CUDA only: the packed rows' FlexAttention compiled with autotuning (forward and backward kernels); its first
    # steps pay the tuning. Needs pack_sequences
    attention_autotune: bool = False
    # PACS v2: every K steps the reference becomes the current policy and the actor's AdamW state starts afresh
    # (for objectives with a reference: algorithm.options.reward_proxy reference, or a KL term); null: never
    reference_reset_every: int | None = None

    def __post_init__(self):
        for name in ("total_steps", "batch_size", "mini_batch_size", "micro_batch_size", "epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"trainer.{name} must be >= 1, got {getattr(self, name)}")
        if self.checkpoint_layers not in (None, "auto") and self.checkpoint_layers < 0:
            raise ValueError(f"trainer.checkpoint_layers must be >= 0, auto or null, got {self.checkpoint_layers}")
        if self.checkpoint_layers == "auto" and not self.gradient_checkpointing:
            raise ValueError("trainer.checkpoint_layers auto chooses how many layers recompute: it needs "
                             "trainer.gradient_checkpointing true")  # fmt: skip
        for name in ("max_tokens_per_micro_batch", "logprob_chunk_size", "reference_reset_every",
                     "verl_micro_batch_size"):
            if getattr(self, name) not in (None, "auto") and getattr(self, name) < 1:
                raise ValueError(f"trainer.{name} must be >= 1 or null, got {getattr(self, name)}")
        if self.memory_limit_gb is not None and self.memory_limit_gb <= 0:
            raise ValueError(f"trainer.memory_limit_gb must be > 0 or null, got {self.memory_limit_gb}")
        if self.compute_dtype not in (None, "float32") and self.strategy != "fsdp":
            raise ValueError(f"trainer.compute_dtype {self.compute_dtype} needs trainer.strategy fsdp")
        if self.batch_size % self.mini_batch_size:
            raise ValueError(
                f"trainer.mini_batch_size {self.mini_batch_size} must divide trainer.batch_size {self.batch_size}"
            )
        if self.attention_autotune and not self.pack_sequences:
            raise ValueError("trainer.attention_autotune tunes the packed rows' FlexAttention: it needs "
                             "trainer.pack_sequences true")  # fmt: skip
        if self.compile and self.liger_kernels:
            # Dynamo fails tracing Liger's autograd functions inside a compiled layer (seen on an H200, torch 2.11,
            # liger-kernel 0.8.5: an AssertionError in overwrite_tensor_vt_proxy at LigerRMSNormFunction.apply,
            # Qwen2 and Qwen3 alike)
            raise ValueError("trainer.compile and trainer.liger_kernels cannot both be on: Dynamo does not trace "
                             "Liger's kernels inside a compiled layer; choose one (both fuse the norms, RoPE and "
                             "SwiGLU)")  # fmt: skip
        if self.compile and self.share_prompt and not self.pack_sequences:
            # padded rows share the prompt through a KV cache that each layer calls with its own layer_idx:
            # Dynamo specializes on it and compiles every layer anew, past its recompile limit on deep models
            raise ValueError(
                "trainer.compile with trainer.share_prompt needs trainer.pack_sequences true (the "
                "padded shared-prompt path recompiles every layer); or set trainer.share_prompt false"
            )


@dataclass(frozen=True)
class CheckpointConfig:
    save_every: int = 20  # steps between checkpoints; the last step is always saved
    keep_resumable: int = 2  # the newest K checkpoints keep what a resume reads (K >= 2: one may be broken)
    keep_weights: list[int] | None = None  # older ones keep their HF weights only at these steps; null: all
    stop_margin: float = 1.5  # a job stops when margin × (a step + a checkpoint) would pass its end time

    def __post_init__(self):
        if self.save_every < 1:
            raise ValueError(f"checkpoint.save_every must be >= 1, got {self.save_every}")
        if self.keep_resumable < 2:
            raise ValueError(f"checkpoint.keep_resumable must be >= 2 (a resume falls back past a broken newest "
                             f"checkpoint to the one before it), got {self.keep_resumable}")  # fmt: skip
        if self.stop_margin < 1:
            raise ValueError(f"checkpoint.stop_margin must be >= 1, got {self.stop_margin}")


@dataclass(frozen=True)
class EvalConfig:
    every: int = 0  # greedy held-out accuracy every K steps, and before the first and after the last; 0: never
    max_new_tokens: int = 4096  # new tokens per held-out answer


@dataclass(frozen=True)
class LoggingConfig:
    # offline: files under DIR/wandb; auto: online where logged in (wandb login, WANDB_API_KEY), else offline
    wandb: Literal["offline", "online", "disabled", "auto"] = "offline"
    project: str = "pacs"  # wandb project
    run_name: str | None = None  # null: the output directory's name
    progress_bar: bool = True  # console progress bar
    # the plan's figures for this run (the workflow writes them: GPU-hours, seconds a step, steps, GPUs), in its
    # wandb run's config beside the hours and GPU-hours it logs (progress/...)
    plan: dict | None = None


@dataclass(frozen=True)
class VerifierConfig:
    # verifier processes per rank; null: this rank's share of the cores it may run on, but one (node_workers)
    workers: int | None = None
    options: VerifyConfig = field(default_factory=VerifyConfig)  # how a math dataset's answers are scored
    code: CodeConfig = field(default_factory=CodeConfig)  # how a code dataset's programs are run and judged


@dataclass(frozen=True)
class RunConfig:
    algorithm: AlgorithmConfig  # the objective and its options
    model: ModelConfig  # the policy (and PPO's critic) to start from
    data: DataConfig  # prepared training and held-out files
    rollout: RolloutConfig = field(default_factory=RolloutConfig)  # how responses are sampled
    optim: OptimConfig = field(default_factory=OptimConfig)  # AdamW of the actor and the critic
    trainer: TrainerConfig = field(default_factory=TrainerConfig)  # steps, batches and how the update runs
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)  # how often to save, what to keep
    eval: EvalConfig = field(default_factory=EvalConfig)  # greedy held-out accuracy during training
    logging: LoggingConfig = field(default_factory=LoggingConfig)  # wandb and the console
    verifier: VerifierConfig = field(default_factory=VerifierConfig)  # how rewards are scored


DEFAULT_GRAD_CLIP = {"pacs": None, "grpo": 1.0, "ppo": 1.0}
# A check for gross mismatch (another model, a dtype or template bug); a stale or partial push is caught
# exactly by the push's fingerprint check. float32: the tiny model on CPU, engine and trainer in the same
# dtype, gives per-step mean gaps of at most 3e-7 over 320 steps. bfloat16: published engine-trainer gaps are
# an RMS of 0.022 nats per token (Qwen2.5-7B), a spread of 0.05 with p95 0.11 and max 0.48 (Qwen2.5-0.5B),
# means of 0.011 to 0.036 (Qwen3-4B), growing over training and with length: 0.25 is 5 times the largest
# published spread (docs/rollouts.md cites them).
DEFAULT_LOGPROB_GAP = {"float32": 1e-3, "bfloat16": 0.25}


def compute_dtype(config: RunConfig) -> str:
    """The dtype the policy computes in: what the rollout engine samples in, checkpoints are written in and
    evaluations run in (fp32 master weights stay in ``model.dtype``)."""
    return config.trainer.compute_dtype or config.model.dtype


def objective_config(config: RunConfig):
    """The objective's own config dataclass, built from ``algorithm.options``."""
    return from_dict(get_algorithm(config.algorithm.name).options, config.algorithm.options, "algorithm.options")


def resolve(data: dict) -> RunConfig:
    """Check every key and fill the defaults that depend on the algorithm."""
    data = dict(data or {})
    algorithm = data.get("algorithm")
    name = algorithm.get("name") if isinstance(algorithm, dict) else None
    if name not in ALGORITHMS:
        raise ConfigError(f"algorithm.name: {name!r} is not one of {sorted(ALGORITHMS)}")
    optim = dict(data.get("optim") or {})
    optim.setdefault("grad_clip", DEFAULT_GRAD_CLIP.get(name))
    data["optim"] = optim
    rollout, model, trainer = dict(data.get("rollout") or {}), data.get("model"), data.get("trainer")
    dtype = model.get("dtype", "float32") if isinstance(model, dict) else "float32"
    dtype = (trainer.get("compute_dtype") if isinstance(trainer, dict) else None) or dtype  # what log-probs see
    stale = rollout.get("staleness", 0)
    stale = stale if isinstance(stale, int) and stale > 0 else 0  # anything else: from_dict says what is wrong
    if stale and rollout.get("max_logprob_gap") is not None:
        raise ConfigError(f"rollout.max_logprob_gap: with rollout.staleness {stale} the engine's log-probs come "
                          "from weights up to that many updates older than the trainer's, so their gap measures "
                          "the policy's movement, not the engine; set it to null (the weight push is still "
                          "checked exactly)")  # fmt: skip
    default_gap = None if stale else DEFAULT_LOGPROB_GAP.get(dtype, DEFAULT_LOGPROB_GAP["float32"])
    rollout.setdefault("max_logprob_gap", default_gap)
    data["rollout"] = rollout
    config = from_dict(RunConfig, data)
    options = objective_config(config)
    correction = "sampler_logprobs" in get_algorithm(name).needs(options)
    if config.rollout.staleness and not correction:
        raise ConfigError(f"algorithm.options.tis_cap: rollout.staleness {config.rollout.staleness} trains on "
                          "samples from older weights than the policy's; the truncated importance ratio against "
                          "them is required (e.g. tis_cap: 2, verl's default)")  # fmt: skip
    if correction and config.rollout.engine != "vllm" and not config.rollout.staleness:
        raise ConfigError(f"algorithm.options.tis_cap: rollout correction weighs by the engine's log-probs of its "
                          f"samples, which rollout.engine {config.rollout.engine} does not report (hf samples from "
                          "the policy itself: no mismatch to correct, unless rollout.staleness >= 1); use "
                          "rollout.engine vllm")  # fmt: skip
    if config.trainer.reference_reset_every and "ref_logprobs" not in get_algorithm(name).needs(options):
        raise ConfigError(f"trainer.reference_reset_every: {name} with these algorithm.options has no reference to "
                          "reset (PACS: reward_proxy reference; PPO, GRPO: a KL coefficient)")  # fmt: skip
    keys = {f.name for f in dataclasses.fields(options)}
    if "max_response_length" in keys and options.max_response_length is None:
        options = dataclasses.replace(options, max_response_length=config.rollout.max_response_length)
    if "value_loss_agg_mode" in keys and options.value_loss_agg_mode is None:  # the actor's, as the fork's critic
        options = dataclasses.replace(options, value_loss_agg_mode=options.loss_agg_mode)
    if config.verifier.code.grading is None:  # a code reward: the judge, close to an online judge's
        code = dataclasses.replace(config.verifier.code, grading="judge")
        config = dataclasses.replace(config, verifier=dataclasses.replace(config.verifier, code=code))
    return dataclasses.replace(config, algorithm=AlgorithmConfig(name, to_dict(options)))


def load_run_config(path: Path) -> RunConfig:
    try:
        return resolve(read_yaml(path))
    except ConfigError as e:
        raise ConfigError(f"{path}: {e}") from e
