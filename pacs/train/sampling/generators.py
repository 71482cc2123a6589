"""Generator ranks (``rollout.generator_ranks`` g): the job's last g ranks only generate and score; the others
train among themselves, and overlap their update with the generators' next batch (``rollout.staleness`` k ≥ 1).

The ranks meet over three kinds of process group (``pacs.train.sampling.link``): the trainers' group, the link
between trainer 0 and the generators, and each generator's vLLM's world of one.

The exchange, in the same order on both sides (gloo matches messages in order; an op out of order would hang):
the trainers start the generators at their update (``hello``: the step and the weights' directory), check what
each holds against their own weights' fingerprint before its first sample, then, step t:
take batch t (received earlier when k ≥ 1), update, receive batch t + k (sampled meanwhile by the weights after
update t), push the weights after update t + 1 (each tensor once, in the engine's dtype) and check each
generator's fingerprints of what it then holds. A generator samples step s with the weights after update
max(0, s − k) and sends it (asynchronously, so a push it must take first is never blocked by it): token ids,
the engine's log-probs of them (``hf``: its own forward's, with the weights that sampled), finish reasons,
the verifier's verdicts, the update and fingerprint of its weights. Trainer 0 deals each trainer its share,
every prompt's group whole. The batches in flight live on the trainers, so a checkpoint holds them
(``pacs.train.sampling.staleness``); steps past the run's end are sampled as the colocated schedule does.

What goes wrong is named: a push not applied or applied in part (the generator's fingerprints against the
trainers'), a push sent twice or out of sequence (the header's update against the generator's), a batch sampled
before its push (``check_sampled``); each stops the run with ``StaleRolloutError``. A generator ignores SIGTERM and
SIGUSR1: the trainers stop at a segment's end, saving, and the job's end takes the generators with it.
"""

import signal
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from pacs.ranks.distributed import DistEnv
from pacs.ranks.memory import TRACKER
from pacs.rollout import Completion, SamplingParams
from pacs.rollout.base import StaleRolloutError, stop_token_ids
from pacs.rollout.fingerprint import fingerprint, weights_fingerprint
from pacs.tensors.batch import rollout_batch
from pacs.train.sampling.link import BATCHES, finish
from pacs.train.sampling.rollouts import (
    check_push,
    engine_options,
    policy_weights,
    sampled_logprobs,
    step_prompts,
    step_rows,
)
from pacs.train.sampling.staleness import RolloutSchedule, Sampled, check_sampled, done
from pacs.train.settings.config import RunConfig, compute_dtype

# --- the trainers' side ----------------------------------------------------------------------------------------


def schedule(config: RunConfig, engine, models, prompts, pool, scorer, env: DistEnv, start: int,
             resume: Path | None) -> RolloutSchedule:  # fmt: skip
    """This rank's rollouts: its own engine's on the colocated schedule, or, beside generator ranks, theirs."""
    if env.role is None:
        return RolloutSchedule(config, engine, models, prompts, pool, scorer, env, start, resume)
    return RemoteRollouts(config, engine, models, prompts, env, start, resume)


class RemoteRollouts(RolloutSchedule):
    """The trainers' rollouts from the generator ranks: ``take``, ``push`` and ``state`` as the colocated
    schedule's; the batches in flight (received, not yet trained on) are its ``ahead``."""

    def __init__(self, config: RunConfig, engine, models, prompts, env: DistEnv, start: int, resume: Path | None):
        """``engine``: the trainers' own, for held-out evaluation only."""
        self.config, self.engine, self.models, self.prompts, self.env = config, engine, models, prompts, env
        self.role, self.k, self.pad = env.role, config.rollout.staleness, models.tokenizer.pad_token_id or 0
        self.total = config.trainer.total_steps
        self.dtype = getattr(torch, compute_dtype(config))
        self.expected: dict[int, str | None] = {}
        self.ahead: dict[int, Sampled] = {}
        self.received = start - 1 + (self.k if start else 0)  # the last step whose batch is here
        self.waited = 0.0  # seconds the trainers waited for batches since the last step's record (k = 0: at its start)
        self.generated: dict = {}  # the generators' own seconds of the last batch received
        self.generator_memory: dict = {}  # the largest generator's peaks so far, GB
        if self.role.link is not None:
            for j in range(self.role.generators):
                self.role.link.send({"start": start, "weights": str(resume or config.model.path)}, 1 + j)
        self.weights_step, self.fingerprint = start, self.check(start, push=False)[0]
        self.expected[start] = self.fingerprint
        if resume is not None and self.k:
            self.load(resume, start)

    def take(self, step: int, timer: dict):
        self.through(step)
        taken = self.ahead.pop(step)
        record = check_sampled(step, self.k, taken.weights_step, taken.fingerprint, self.expected)
        timer["generate"] = time.perf_counter()  # the wait for a batch not yet here (k = 0)
        return taken.batch, taken.completions, done(taken.verdicts), record

    def push(self, step: int, policy) -> dict:
        """After update ``step``: the batch sampled meanwhile, then the new weights to the generators, checked.
        Returns the record."""
        self.through(step - 1 + self.k)  # the batch sampled while the trainers updated (k >= 1)
        record = {"time/wait_generators": self.waited, **{f"time/generator_{k}": v for k, v in self.generated.items()},
                  **{f"memory/generator_peak_{k}_gb": v for k, v in self.generator_memory.items()}}  # fmt: skip
        self.waited = 0.0
        digest, record["rollout/push_checked_tensors"] = self.check(step, push=True, policy=policy)
        self.updated_to(step, digest)
        return record

    def through(self, step: int) -> None:
        """Receive every batch up to ``step``'s."""
        while self.received < step:
            began = time.perf_counter()
            self.received += 1
            self.ahead[self.received] = self.receive(self.received)
            self.waited += time.perf_counter() - began

    def receive(self, step: int) -> Sampled:
        """Step ``step``'s batch from every generator, checked against the schedule, this rank's share of it."""
        message = None
        if self.role.link is not None:
            parts = [self.role.link.recv(1 + j, BATCHES) for j in range(self.role.generators)]
            message = {"parts": parts, "expected": self.expected}
        if self.env.active:
            box = [message]
            dist.broadcast_object_list(box, src=0)
            message = box[0]
        self.expected = message["expected"]
        by_row, first = {}, message["parts"][0]
        for part in message["parts"]:
            if part["step"] != step:
                raise StaleRolloutError(f"step {step}: generator {part['generator']} sent step {part['step']}'s "
                                        "batch in its place")  # fmt: skip
            check_sampled(step, self.k, part["weights_step"], part["fingerprint"], self.expected)
            by_row.update(zip(part["rows"], zip(part["completions"], part["verdicts"], strict=True), strict=True))
        self.generated = first["seconds"]
        self.generator_memory = {
            k: max(part["memory"].get(k, 0.0) for part in message["parts"]) for k in first["memory"]
        }
        mine = step_prompts(step, self.config, len(self.prompts.token_ids), self.env)
        completions = [by_row[i][0] for i in mine]
        verdicts = [v for i in mine for v in by_row[i][1]]
        batch = rollout_batch([self.prompts.token_ids[i] for i in mine], completions, self.pad)
        batch["sampler_logprobs"] = sampled_logprobs(completions, batch["response_mask"].shape[1])
        return Sampled(first["weights_step"], first["fingerprint"], batch, completions, verdicts)

    def check(self, step: int, push: bool, policy=None) -> tuple[str | None, int]:
        """The trainers' weights after update ``step`` (every trainer gathers each tensor under fsdp), pushed to the
        generators when ``push``, and each generator's fingerprints of what it then holds checked against them.
        Returns their digest (the generators') and the number of tensors checked."""
        link, pushed = self.role.link, {}
        if push and link is not None:
            for j in range(self.role.generators):
                link.send({"push": step}, 1 + j)
        for name, tensor in policy_weights(self.models.policy if policy is None else policy):
            if link is None:  # a collective under fsdp: every trainer gathers, trainer 0 alone checks and sends
                continue
            tensor = tensor.to(self.dtype)
            pushed[name] = (tuple(tensor.shape), fingerprint(tensor))
            if push:
                link.broadcast(tensor.to(link.device).contiguous())
        digest, checked = None, 0
        if link is not None:
            if not push:
                for j in range(self.role.generators):
                    link.send({"check": {name: shape for name, (shape, _) in pushed.items()}}, 1 + j)
            held = {}
            for j in range(self.role.generators):
                reply = link.recv(1 + j)
                if "error" in reply:
                    raise StaleRolloutError(f"step {step}: generator {j}: {reply['error']}")
                held[j] = weights_fingerprint({n: v for n, v in reply["held"].items() if v is not None})
                when = "after the weight push" if push else "started from the checkpoint"
                try:
                    checked = check_push(step, pushed, reply["held"], f"{when} (generator {j})")
                except StaleRolloutError as e:
                    if push and held[j] == self.expected.get(step - 1):
                        raise StaleRolloutError(f"{e} (it holds the weights after update {step - 1}: the push of "
                                                f"update {step} was not applied)") from None  # fmt: skip
                    raise
                checked = checked["rollout/push_checked_tensors"]
            if len(set(held.values())) > 1:
                raise StaleRolloutError(f"step {step}: the generators hold different weights: {held}")
            digest = held[0]
        if self.env.active:
            box = [(digest, checked)]
            dist.broadcast_object_list(box, src=0)
            digest, checked = box[0]
        return digest, checked


# --- the generators' side ----------------------------------------------------------------------------------------


class OwnPolicy:
    """A generator's ``hf`` engine: transformers' ``generate`` on a copy of the policy of its own, in the
    trainer's compute dtype, whose weights the trainers push; its log-probs of each sample are its forward's."""

    def __init__(self, config: RunConfig, weights: str, device: str):
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from pacs.rollout.hf import HFEngine
        from pacs.train.update.models import scorer_of

        self.config = config
        self.pushed_dtype = compute_dtype(config)
        self.model = AutoModelForCausalLM.from_pretrained(weights, dtype=getattr(torch, self.pushed_dtype)).to(device)
        self.model.requires_grad_(False)
        self.tokenizer = AutoTokenizer.from_pretrained(config.model.path)
        stops = stop_token_ids(self.model.generation_config, self.tokenizer)
        self.hf = HFEngine(self.model, self.tokenizer, stops, config.rollout.prompt_batch_size)
        self.scorer = scorer_of(self.model, config.trainer)

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        from pacs.train.update.minibatch import policy_logprobs

        completions = self.hf.generate(prompts, params)
        batch = rollout_batch(prompts, completions, self.hf.pad_token_id)
        with torch.no_grad():
            logprobs = policy_logprobs(batch, self.config, self.scorer, DistEnv(device=str(self.model.device)))[0]
        flat = iter(logprobs.tolist())
        return [[replace(c, logprobs=tuple(next(flat)[: len(c.token_ids)])) for c in group] for group in completions]

    def update_weights(self, weights) -> None:
        state = self.model.state_dict()
        for name, tensor in weights:
            state[name].copy_(tensor)

    def weight_fingerprints(self, shapes) -> dict[str, int]:
        return {name: fingerprint(tensor) for name, tensor in self.model.state_dict().items()}

    def close(self) -> None:
        """Nothing to release."""


def generator_engine(config: RunConfig, weights: str, device: str, generators: int):
    """A generator's engine, started from ``weights``: vLLM alone on its device (no sleep, most of the memory:
    ``rollout.vllm.generator_memory_utilization``), or ``OwnPolicy``."""
    r = config.rollout
    if r.engine == "hf":
        return OwnPolicy(config, weights, device)
    from transformers import AutoConfig, AutoTokenizer, GenerationConfig

    from pacs.rollout.base import derived_seed
    from pacs.rollout.vllm import VLLMEngine

    alone = replace(r.vllm, sleep_level=0, gpu_memory_utilization=r.vllm.generator_memory_utilization)
    options = engine_options(config, alone, AutoConfig.from_pretrained(weights).max_position_embeddings)
    try:
        generation = GenerationConfig.from_pretrained(weights)
    except OSError:
        generation = None
    stops = stop_token_ids(generation, AutoTokenizer.from_pretrained(config.model.path))
    per_generator = config.trainer.batch_size * r.n // generators + r.n  # its share of a step's samples
    seed = derived_seed(config.trainer.seed, 1 << 13)  # apart from every training rank's
    return VLLMEngine(weights, stops, seed, compute_dtype(config), per_generator, options, in_process=True)


def release_generators(env: DistEnv, step: int) -> None:
    """Trainer 0 of a run already complete at ``step``: each generator rank learns that there is nothing to do
    (instead of where the trainers start), and ends."""
    if env.role is not None and env.role.link is not None:
        for j in range(env.role.generators):
            env.role.link.send({"start": step, "complete": True}, 1 + j)


class Generator:
    """One generator rank's engine and the weights it holds, as the link brings them."""

    def __init__(self, config: RunConfig, env: DistEnv, hello: dict):
        """``hello``: trainer 0's first message, where the trainers start."""
        self.config, self.env, self.role, self.link = config, env, env.role, env.role.link
        self.start, self.held = hello["start"], hello["start"]
        self.engine = generator_engine(config, hello["weights"], env.device, self.role.generators)
        self.dtype = getattr(torch, compute_dtype(config))
        self.manifest: dict[str, tuple] = {}
        self.take()  # the check before the first sample

    def take(self, want: int | None = None) -> None:
        """The next message from trainer 0: the check of the weights the engine started from (``want`` None), or
        the push of the weights after update ``want``. Replies with the fingerprints of what the engine then
        holds, or with what is wrong (and stops)."""
        message, error = self.link.recv(0), ""
        if "push" in message:
            update = message["push"]
            if want is None or update != want:
                error = (f"the push of update {update} arrived where update {want} was due (this generator holds "
                         f"the weights after update {self.held}): a push out of sequence")  # fmt: skip
            self.engine.update_weights(self.received())
            self.held = update
        else:
            self.manifest = message["check"]
        held = {} if error else self.engine.weight_fingerprints(self.manifest)
        self.digest = weights_fingerprint({name: value for name, value in held.items() if value is not None})
        self.link.send({"error": error} if error else {"held": held}, 0)
        if error:
            raise StaleRolloutError(f"generator {self.role.generator}: {error}")

    def weights_for(self, step: int) -> int:
        """The update whose weights sample step ``step``: max(0, step − k)."""
        return max(0, step - self.config.rollout.staleness)

    def received(self) -> Iterator[tuple[str, torch.Tensor]]:
        """The pushed tensors, one at a time as the engine loads them."""
        for name, shape in self.manifest.items():
            tensor = torch.empty(shape, dtype=self.dtype, device=self.link.device)
            self.link.broadcast(tensor)
            yield name, tensor

    def fingerprint(self) -> str:
        """The digest of what the engine held at its last check: the weights it samples with until the next push."""
        return self.digest


def serve(config: RunConfig, env: DistEnv) -> int:
    """A generator's whole run (module docstring): returns 0 when the trainers need no more batches."""
    from transformers import AutoTokenizer

    from pacs.train.settings.prompts import load_prompts
    from pacs.verify import VerifierPool
    from pacs.verify.pool import node_workers

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):  # the trainers stop the job, saved
        signal.signal(s, signal.SIG_IGN)
    k, total, data, role = config.rollout.staleness, config.trainer.total_steps, config.data, env.role
    hello = role.link.recv(0)  # where the trainers start
    if hello.get("complete"):  # a run finished before this job: nothing to sample (release_generators)
        return 0
    generator = Generator(config, env, hello)
    tokenizer = AutoTokenizer.from_pretrained(config.model.path)
    prompts = load_prompts(data.train_files, tokenizer, data.max_prompt_length, data.chat_template_kwargs)
    pending = []
    workers = config.verifier.workers or node_workers(env.local_size)
    with VerifierPool(config.verifier.options, workers=workers, code=config.verifier.code) as pool:
        # past the run's end as the colocated schedule samples: a last checkpoint holds k batches in flight too
        for s in range(generator.start + k if generator.start else 0, total + k if k else total):
            waited = time.perf_counter()
            while generator.held < generator.weights_for(s):
                generator.take(generator.held + 1)
            part = sample(s, config, generator.engine, prompts, pool, role.generator, role.generators)
            part.update(generator=role.generator, weights_step=generator.held, fingerprint=generator.fingerprint())
            part["seconds"]["idle"] = time.perf_counter() - waited - sum(part["seconds"].values())
            part["memory"] = {k: v for k, v in TRACKER.peaks().items() if k in ("rss", "gpu", "device")}
            finish(pending)
            pending = generator.link.send(part, 0, BATCHES, wait=False)  # a push may come first: the trainers take it
        while generator.held < total:  # the last updates' pushes, checked as every other
            generator.take(generator.held + 1)
        finish(pending)
    generator.engine.close()
    return 0


def sample(step: int, config: RunConfig, engine, prompts, pool, j: int, generators: int) -> dict:
    """Generator ``j``'s share of step ``step``'s prompts (a contiguous part of the step's rows), sampled and
    scored: what it sends the trainers."""
    from pacs.train.sampling.rollouts import sampling_params

    t, n = config.trainer, config.rollout.n
    rows = np.array_split(step_rows(step, len(prompts.token_ids), t.batch_size, t.seed, config.data.shuffle),
                          generators)[j]  # fmt: skip
    began = time.perf_counter()
    completions = engine.generate([prompts.token_ids[i] for i in rows], sampling_params(step, config, j))
    generated = time.perf_counter()
    golds, texts = [prompts.golds[i] for i in rows for _ in range(n)], [c.text for g in completions for c in g]
    verdicts = pool.score(golds, texts, prompts.task)
    return {"step": step, "rows": rows.tolist(), "completions": completions,
            "verdicts": [verdicts[i * n : (i + 1) * n] for i in range(len(rows))],
            "seconds": {"generate": generated - began, "score": time.perf_counter() - generated}}  # fmt: skip
