"""Every key of a run's config (``RunConfig``, pacs.train.settings.config), as what a run computes or only how.

A change of **how** (``HOW``) leaves the run's result what it was up to the rounding of its sums: micro-batch sizes
and token budgets, recompute, memory limits, vLLM's memory and engine options that change no sample, compile and
kernels, logging, checkpoint cadence and retention, the stop margin, the verifier's processes. A run stopped or
killed resumes under such a change from its last checkpoint (pacs.runs.directory records the change, its old and
new values and the step, in ``segments.jsonl``); a finished run is left as it is, and the workflow reruns nothing
(its training rule reads only the keys of **what**, ``what_part``). Any other change (``WHAT``: the method, its
options, data, model, lengths, sampling, steps, seeds, learning rate …) starts the run again.

Keys are dotted paths into the run config as ``to_dict`` writes it; an entry names a key or a whole section
(``algorithm.options``: every option of every objective). tests/test_train_config.py fails on a key of the
dataclasses that neither table names, and on one named in both.
"""

HOW = (
    "trainer.micro_batch_size",
    "trainer.max_tokens_per_micro_batch",
    "trainer.strategy",  # ddp or fsdp: the same update, reduced in another order
    "trainer.gradient_checkpointing",
    "trainer.checkpoint_layers",
    "trainer.compile",
    "trainer.memory_limit_gb",
    "trainer.logprob_chunk_size",
    "trainer.share_prompt",
    "trainer.pack_sequences",
    "trainer.liger_kernels",
    "trainer.attention_autotune",
    "optim.fused",
    "rollout.max_logprob_gap",  # a guard: it stops a run, it changes no sample
    "rollout.vllm.max_model_len",
    "rollout.vllm.gpu_memory_utilization",
    "rollout.vllm.generator_memory_utilization",
    "rollout.vllm.kv_cache_gib",
    "rollout.vllm.tensor_parallel_size",
    "rollout.vllm.enforce_eager",
    "rollout.vllm.sleep_level",
    "checkpoint",
    "logging",
    "eval.every",  # when held-out accuracy is logged, not what the policy learns
    "verifier.workers",
)

WHAT = (
    "algorithm",
    "model",
    "data",
    "rollout.engine",
    "rollout.n",
    "rollout.temperature",
    "rollout.top_p",
    "rollout.max_response_length",
    "rollout.ignore_eos",
    "rollout.prompt_batch_size",  # hf: one seed for the step, drawn batch after batch
    "rollout.staleness",
    "rollout.generator_ranks",
    "optim.lr",
    "optim.weight_decay",
    "optim.betas",
    "optim.eps",
    "optim.grad_clip",
    "optim.critic_lr",
    "optim.critic_grad_clip",
    "trainer.total_steps",
    "trainer.batch_size",
    "trainer.mini_batch_size",
    "trainer.epochs",
    "trainer.verl_micro_batch_size",  # the loss scale
    "trainer.seed",
    "trainer.compute_dtype",
    "trainer.reference_reset_every",
    "eval.max_new_tokens",
    "verifier.options",
    "verifier.code",
)


def entry(key: str, table: tuple[str, ...]) -> str | None:
    """The entry of ``table`` that names ``key`` (itself or a section above it), or None."""
    return next((e for e in table if key == e or key.startswith(e + ".")), None)


def changes_only_how(key: str) -> bool:
    """A dotted key of the run config changes only how the run computes; an unclassified key counts as what."""
    return entry(key, HOW) is not None and entry(key, WHAT) is None


def what_part(run: dict, prefix: str = "") -> dict:
    """``run`` (a run config as a dict) without its keys of how: what the workflow's training rule reads."""
    kept = {}
    for name, value in run.items():
        key = f"{prefix}{name}"
        if changes_only_how(key):
            continue
        if isinstance(value, dict) and entry(key, WHAT) is None:
            value = what_part(value, key + ".")
        kept[name] = value
    return kept
