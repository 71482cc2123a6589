"""The training loop, one for every objective of ``pacs.algorithms.objectives.OBJECTIVES``.

Each step: draw the step's prompts; sample n responses each; score them with the verifier; compute
old log-probs (and reference log-probs or critic values when the objective needs them) once; let
the objective ``prepare`` the whole batch; then update over mini-batches of whole groups, with
micro-batches and gradient accumulation, critic first. Reading it top to bottom is the algorithm.
"""

import json
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist
from tqdm import tqdm

from pacs.algorithms.objectives import Objective, get_objective
from pacs.plan.memory import splits_groups
from pacs.ranks.distributed import DistEnv, all_gather_rows, all_reduce, barrier
from pacs.ranks.memory import peak_memory, phase
from pacs.runs import checkpoint as ckpt
from pacs.runs import retention
from pacs.runs.directory import check_run_dir, mark_trained, truncate_metrics
from pacs.runs.segments import JobOptions, Segment
from pacs.tensors.batch import Batch, add_value_states, pad_columns, token_logprobs, token_values
from pacs.train.sampling.generators import release_generators, schedule
from pacs.train.sampling.rollouts import build_engine, check_logprob_gap, logprob_gap, take_rewards
from pacs.train.sampling.staleness import RolloutSchedule
from pacs.train.sampling.stats import heldout_accuracy, rollout_stats
from pacs.train.settings.changes import changes_only_how
from pacs.train.settings.config import RunConfig, objective_config
from pacs.train.settings.prompts import load_prompts
from pacs.train.update.minibatch import (
    forward_pass,
    micro_plan,
    pack_group,
    policy_logprobs,
    sum_scale,
    update,
)
from pacs.train.update.models import Models, load_models, reset_reference, save_checkpoint
from pacs.train.update.sizes import resolve_sizes
from pacs.train.update.worst import largest_micro_batch, worst_batch, worst_lengths
from pacs.verify import VerifierPool
from pacs.verify.pool import node_workers

LogFn = Callable[[dict], None]


def check_sizes(config: RunConfig, env: DistEnv) -> None:
    t = config.trainer
    if not (env.active or dist.is_initialized()) and t.compute_dtype not in (None, config.model.dtype):
        raise ValueError(f"trainer.compute_dtype {t.compute_dtype} applies to fsdp in a process group, which pacs "
                         f"train makes (of one process, where there is one); without one the run would compute in "
                         f"model.dtype ({config.model.dtype})")  # fmt: skip
    if t.batch_size % env.world_size or (t.mini_batch_size // env.world_size) % t.micro_batch_size:
        raise ValueError(
            f"with {env.world_size} rank(s), trainer.batch_size ({t.batch_size}) and trainer.mini_batch_size "
            f"({t.mini_batch_size}) must split evenly over ranks, and each rank's share of a mini-batch into "
            f"trainer.micro_batch_size ({t.micro_batch_size}) prompts"
        )


def prepare_whole_batch(objective: Objective, batch: Batch, n: int, options, env: DistEnv) -> dict:
    """``prepare`` sees the global batch (whitening and group statistics span all ranks); each rank keeps its rows."""
    local_rows, width = batch["response_mask"].shape
    gathered = {k: all_gather_rows(v, env) for k, v in batch.items() if k not in ("input_ids", "attention_mask")}
    prepared = objective.prepare(gathered, n, options)
    start = env.rank * local_rows
    return {
        k: v[start : start + local_rows, :width] if v.dim() == 2 else v[start : start + local_rows]
        for k, v in prepared.items()
    }


def critic_values(critic, micro: Batch, config: RunConfig) -> torch.Tensor:
    t = config.trainer
    return token_values(critic, micro, t.pack_sequences, config.rollout.n if t.share_prompt else 1)


def fresh_rows(config: RunConfig, env: DistEnv) -> int:
    """How many of this rank's first rows the actor update scores with the weights that sampled them: the
    first mini-batch, when there is one epoch (a second would revisit those rows after the weights moved).
    Their old log-probs (and logged entropy) come from the update's own forward instead of a pass before it."""
    t = config.trainer
    return t.mini_batch_size // env.world_size * config.rollout.n if t.epochs == 1 else 0


def score_batch(batch: Batch, config: RunConfig, models: Models, env: DistEnv,
                fresh: int | None = None) -> torch.Tensor:  # fmt: skip
    """Old log-probs (of the rows past ``fresh``, default ``fresh_rows``), reference log-probs and values, once per
    step: none needs rewards. Returns the policy's entropy (B, T) for logging (0 on fresh rows)."""
    n = config.rollout.n
    temperature = config.rollout.temperature or 1.0
    policy, reference, critic = models.policy_module, models.reference, models.critic_module
    fresh = fresh_rows(config, env) if fresh is None else fresh
    device, shape, pack = env.device, batch["response_mask"].shape, pack_group(config)
    batch["old_logprobs"], entropy = torch.zeros(shape), torch.zeros(shape)
    if fresh < shape[0]:
        rest = {k: v[fresh:] for k, v in batch.items()}
        batch["old_logprobs"][fresh:], entropy[fresh:] = policy_logprobs(rest, config, policy, env)
    plan = micro_plan(batch, n, config, env) if reference is not None or critic is not None else []
    if reference is not None:
        (batch["ref_logprobs"],) = forward_pass(
            batch, plan, n, lambda m: token_logprobs(reference, m, temperature, None, n)[:1], device, pack
        )
    if critic is not None:
        (batch["values"],) = forward_pass(batch, plan, n, lambda m: [critic_values(critic, m, config)], device, pack)
    return entropy


def update_models(batch: Batch, config: RunConfig, models: Models, env: DistEnv, entropy: torch.Tensor) -> dict:
    """The critic's update (PPO), then the actor's; their metrics prefixed critic/ and actor/. The actor's
    forward on the first ``fresh_rows`` rows gives their old log-probs (into ``batch``) and logged entropy
    (into ``entropy``): gathered over ranks after the update, since token budgets deal rows to other ranks."""
    objective, options, n = get_objective(config.algorithm.name), objective_config(config), config.rollout.n
    t, temperature = config.trainer, config.rollout.temperature or 1.0
    policy, critic, record = models.policy_module, models.critic_module, {}
    (rows, width), fresh = batch["response_mask"].shape, fresh_rows(config, env)
    wide = int(all_reduce(torch.tensor(width), env, "max")) if fresh else width
    seen = torch.zeros(2, env.world_size * fresh, wide)  # old log-probs and entropy of every rank's fresh rows
    scored = []  # (rows in `seen`, their log-probs, entropy) on the device, copied to `seen` after the update
    index = torch.arange(rows)
    batch["row"] = torch.where(index < fresh, index + env.rank * fresh, -1)  # a fresh row's place in `seen`
    sizes = dict(n=n, mini_rows=t.mini_batch_size // env.world_size * n, micro_rows=t.micro_batch_size * n,
                 epochs=t.epochs, env=env, max_tokens=t.max_tokens_per_micro_batch, pack=pack_group(config),
                 sum_scale=sum_scale(config), split=splits_groups(t))  # fmt: skip
    if critic is not None:
        states = "value_mask" if "value_mask" in batch else "response_mask"  # the critic's (add_value_states)

        def critic_loss(micro: Batch):
            return objective.value_loss({**micro, "new_values": critic_values(critic, micro, config)}, options)

        metrics = update(critic, models.critic_optimizer, critic_loss, batch, objective.value_reduction(options),
                         grad_clip=config.optim.critic_grad_clip, mask=states, **sizes)  # fmt: skip
        record.update({f"critic/{k}": v for k, v in metrics.items()})
        models.skipped_steps += metrics["skipped_steps"]

    def actor_loss(micro: Batch):
        with_entropy = "entropy" in objective.needs(options)
        row = micro.pop("row")  # on the host
        on_policy = bool((row != -1).all())  # a micro-batch lies in one mini-batch: all fresh or none
        mode = "grad" if with_entropy else "no_grad" if on_policy else None
        logprobs, ent = token_logprobs(policy, micro, temperature, mode, n)
        if on_policy:  # the weights that sampled these rows score them: their old log-probs are these
            micro["old_logprobs"] = logprobs.detach()
            if (row >= 0).all():
                scored.append((row, logprobs.detach().float(), ent.detach().float()))
        return objective.loss({**micro, "logprobs": logprobs, **({"entropy": ent} if with_entropy else {})},
                              n, options)  # fmt: skip

    actor = {**sizes, "split": splits_groups(t, objective.algorithm.whole_groups)}  # PACS's loss reads whole groups
    metrics = update(policy, models.optimizer, actor_loss, batch, objective.reduction(options),
                     grad_clip=config.optim.grad_clip, **actor)  # fmt: skip
    del batch["row"]
    for row, logprobs, ent in scored:  # to the host now that the update has been issued
        seen[0, row], seen[1, row] = pad_columns(logprobs.cpu(), wide), pad_columns(ent.cpu(), wide)
    if fresh:
        mine = all_reduce(seen, env)[:, env.rank * fresh : (env.rank + 1) * fresh, :width]
        batch["old_logprobs"][:fresh], entropy[:fresh] = mine[0], mine[1]
    models.skipped_steps += metrics["skipped_steps"]
    record.update({f"actor/{k}": v for k, v in metrics.items()})
    record["actor/lr"] = models.optimizer.param_groups[0]["lr"]
    return record


def worst_case(config: RunConfig, models: Models, env: DistEnv, engine) -> dict:
    """The preflight's last measurement (``pacs train --worst-case``): a step's no-grad pass and update, without
    its sampling, of the largest micro-batches the token budget packs (``pacs.train.update.worst``: random tokens,
    every prompt at its longest), counted in the step's memory phases. Returns the budget and the positions of the
    largest micro-batch on any rank."""
    t, n, layout = config.trainer, config.rollout.n, pack_group(config)
    objective, options = get_objective(config.algorithm.name), objective_config(config)
    split = splits_groups(t, objective.algorithm.whole_groups)  # as the update packs them
    lengths = worst_lengths(t.max_tokens_per_micro_batch, config.data.max_prompt_length,
                            config.rollout.max_response_length, n, layout, t.mini_batch_size // env.world_size, split)
    groups = len(lengths) * env.world_size  # one mini-batch of them: its micro-batches as the budget packs them
    probe = replace(config, trainer=replace(t, batch_size=groups, mini_batch_size=groups, epochs=1))
    batch = worst_batch(lengths, config.data.max_prompt_length, n, models.policy.config.vocab_size, env.rank)
    engine.release_memory()  # as after a step's sampling
    if "values" in objective.needs(options):
        add_value_states(batch, config.rollout.max_response_length)
    with phase("no_grad", engine):
        entropy = score_batch(batch, probe, models, env, fresh=0)
    batch["sampler_logprobs"] = batch["old_logprobs"].clone()
    batch["rewards"] = (torch.arange(len(lengths) * n) % 2).float()  # both outcomes in every group
    batch.update(prepare_whole_batch(objective, batch, n, options, env))
    with phase("update", engine):
        update_models(batch, probe, models, env, entropy)
    largest = largest_micro_batch(batch, n, t.max_tokens_per_micro_batch, layout, split)
    return {"budget": t.max_tokens_per_micro_batch, "groups": lengths,
            "largest_micro_batch": int(all_reduce(torch.tensor(largest), env, "max"))}  # fmt: skip


def train_step(step: int, config: RunConfig, models: Models, rollouts: RolloutSchedule, env: DistEnv) -> dict:
    """One step: its rollouts (sampled now, or ``rollout.staleness`` steps ago); while the verifier scores,
    old log-probs (of rows the update does not score on-policy), reference log-probs and values; then rewards
    and prepare, critic and actor updates, the log-prob gap's guard, and the new weights into the engine,
    checked there tensor by tensor."""
    timer, engine = {"start": time.perf_counter()}, rollouts.engine
    batch, completions, pending, staleness = rollouts.take(step, timer)
    objective, options = get_objective(config.algorithm.name), objective_config(config)
    if "values" in objective.needs(options):  # the critic's states: one more after a response that stopped
        add_value_states(batch, config.rollout.max_response_length)
    with phase("no_grad", engine):
        entropy = score_batch(batch, config, models, env)  # while the verifier scores
    timer["old_logprobs"] = time.perf_counter()
    verdicts = take_rewards(batch, pending)
    timer["score"] = time.perf_counter()  # the wait for the verifier beyond those passes
    batch.update(prepare_whole_batch(objective, batch, config.rollout.n, options, env))
    with phase("update", engine):
        record = {"step": step + 1, **update_models(batch, config, models, env, entropy)}
    timer["update"] = time.perf_counter()
    # the old log-probs of the first mini-batch came from the update itself: the guard runs after it, before
    # the weights reach the engine or a checkpoint, so a stopped run resumes from weights it can trust
    gap = logprob_gap(batch, env)
    check_logprob_gap(step + 1, gap, config.rollout.max_logprob_gap)
    record.update(gap)
    record.update(rollouts.push(step + 1, models.policy))  # a collective under fsdp; then checked
    timer["weight_push"] = time.perf_counter()

    record.update(rollout_stats(batch, completions, verdicts, rollouts.prompts.task, config.rollout.n, env))
    record.update(staleness)
    mask = batch["response_mask"]
    ent = all_reduce(torch.stack([torch.where(mask, entropy, 0.0).sum(), mask.sum().float()]), env)
    record["policy/entropy"] = float(ent[0] / ent[1])
    record["skipped_steps_total"] = models.skipped_steps
    record.update(peak_memory(env))
    phases = list(timer)
    record.update({f"time/{b}": timer[b] - timer[a] for a, b in zip(phases, phases[1:], strict=False)})
    record["time/step"] = timer["weight_push"] - timer["start"]
    record["throughput/tokens_per_s"] = record.pop("tokens") / record["time/step"]
    return record


def train(
    config: RunConfig, out: Path, env: DistEnv | None = None, log: LogFn | None = None, job: JobOptions | None = None
) -> dict:
    """Run, resume, or find finished the training run in ``out``; returns a short summary. The job stops
    early, saved, when its time or a signal says so (``pacs.runs.segments``): status "stopped".

    Every step's record goes to ``out/metrics.jsonl`` and to ``log`` (rank 0 only).
    """
    env, job = env or DistEnv(), job or JobOptions()
    out, root, t = Path(out), Path(out) / "checkpoints", config.trainer
    objective, options = get_objective(config.algorithm.name), objective_config(config)
    check_sizes(config, env)
    if env.main:
        out.mkdir(parents=True, exist_ok=True)
        check_run_dir(out, config, job.restart_on_change, changes_only_how)  # a change of how: resumed, recorded
        ckpt.remove_partial(root)
    barrier(env)
    latest = retention.resume_point(root, env)
    start = latest[0] if latest else 0
    if start >= t.total_steps:
        release_generators(env, start)  # nothing for them to sample either
        if env.main:
            mark_trained(out, start)
        return {"status": "complete", "start_step": start, "final_step": start}
    needs = objective.needs(options)
    config, sizes = resolve_sizes(config, env, "ref_logprobs" in needs, objective.value_loss is not None,
                                  job.calibration)  # fmt: skip
    models = load_models(config, objective, needs, latest[1] if latest else None, env)

    data = config.data
    prompts = load_prompts(data.train_files, models.tokenizer, data.max_prompt_length, data.chat_template_kwargs)
    heldout = None
    if config.data.heldout_files:
        heldout = load_prompts(data.heldout_files, models.tokenizer, data.max_prompt_length, data.chat_template_kwargs)
    resume = latest[1] if latest else None
    start_weights = resume or config.model.path
    heldout_size = len(heldout.token_ids) if heldout else 0
    engine = build_engine(
        config, models.policy, models.tokenizer, start_weights, heldout_size, env, models.policy_module
    )
    metrics_path = out / "metrics.jsonl"

    timed_out: list[int] = []  # steps with answers past the verifier's deadline: rewards the machine's load chose

    def emit(record: dict) -> None:
        if record.get("verifier/timeout"):
            timed_out.append(record["step"])
        if env.main:
            with open(metrics_path, "a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")
            if log:
                log(record)

    def evaluate(step: int) -> dict:
        every = config.eval.every
        if heldout is None or every == 0 or (step % every and step != t.total_steps):
            return {}
        return heldout_accuracy(engine, heldout.token_ids, heldout.golds, pool.score, config.eval.max_new_tokens, env,
                                heldout.task)  # fmt: skip

    def save(step: int) -> None:
        began = time.perf_counter()
        save_checkpoint(root, step, models, config, env, job.keep_weights, rollouts.state())
        segment.took(step, checkpoint_s=time.perf_counter() - began)

    if env.main:
        truncate_metrics(metrics_path, start)
    workers = config.verifier.workers or node_workers(env.local_size)
    show = env.main and config.logging.progress_bar
    with (
        VerifierPool(config.verifier.options, workers=workers, code=config.verifier.code) as pool,
        ThreadPoolExecutor(1, thread_name_prefix="verifier") as scorer,
        closing(engine),
        Segment(out, env, config.checkpoint.stop_margin, job) as segment,
    ):
        segment.begin(start, sizes)
        rollouts = schedule(config, engine, models, prompts, pool, scorer, env, start, resume)
        if start == 0:  # the data as trained on, and the starting accuracy when evaluation is on
            emit({"step": 0, "data/prompts": len(prompts.token_ids), "data/prompts_dropped": prompts.dropped,
                  "verifier/workers": workers, **evaluate(0)})  # fmt: skip
        bar = tqdm(total=t.total_steps, initial=start, disable=not show, desc=config.algorithm.name, unit="step")
        for step in range(start, t.total_steps):
            began = time.perf_counter()
            reset = bool(t.reference_reset_every) and step > 0 and step % t.reference_reset_every == 0
            if reset:  # before the step: its samples' proxy is 0 until its update moves the policy
                reset_reference(step, config, models)
            record = train_step(step, config, models, rollouts, env)
            if t.reference_reset_every:
                record.update({"reference/reset": int(reset), "reference/step": models.reference_step})
            record.update(evaluate(step + 1))
            segment.took(step + 1, step_s=time.perf_counter() - began)
            saved = (step + 1) % config.checkpoint.save_every == 0 or step + 1 == t.total_steps
            if saved:
                save(step + 1)
            stop = segment.must_stop() if step + 1 < t.total_steps else ""
            if stop and not saved:  # the time for this checkpoint was kept free at the last check
                save(step + 1)
            emit(record)
            bar.update(1)
            bar.set_postfix(reward=f"{record['reward/mean']:.3f}", refresh=False)
            if stop:
                segment.stop(step + 1, stop)
                return {"status": "stopped", "reason": stop, "start_step": start, "final_step": step + 1,
                        "timed_out_steps": timed_out}  # fmt: skip
        bar.close()
        worst = worst_case(config, models, env, engine) if job.worst_case and t.max_tokens_per_micro_batch else None
        segment.stop(t.total_steps, "done", worst)
    if env.main:
        mark_trained(out, t.total_steps)  # the workflow's output of the run's training
    return {"status": "trained", "start_step": start, "final_step": t.total_steps, "timed_out_steps": timed_out}
