"""Where a step's rollouts come from, on a fixed schedule: step t trains on rollouts sampled by the weights
after update max(0, t − k) (``rollout.staleness`` k). The schedule is in steps, not in time, so a run is
reproducible and resumes exactly. k = 0 is the on-policy path (each step samples with the weights it
updates), taken as it always was.

With k ≥ 1 on the ranks that train: step t samples step t + k's batch (its prompts and its seed, as an
on-policy run draws them) with the weights after update t, before its own update, and trains on step t's,
sampled k steps earlier; step 0 samples steps 0 … k with the starting weights. The last steps sample
past the run's end as every step does, so that a preflight's last step and checkpoint are whole ones (k
batches generated for nothing at the end of a run). The loss then knows three
policies: the behaviour policy (the engine's log-probs of its samples; for ``hf``, the trainer's forward
right after sampling, with the weights that sampled), the old policy (the trainer's weights before this
step's update) and the current one; the truncated importance ratio π_old / π_behaviour
(``algorithm.options.tis_cap``, required) corrects for the difference.

Each batch carries the update step of the weights that sampled it and their fingerprint (``vllm``: of the
tensors the engine holds readably, as the last checked push left them; ``hf`` samples from the policy object
itself and has none). A batch used at step t from other weights than those after update max(0, t − k) stops
the run with ``StaleRolloutError`` naming the updates (``check_sampled``). On these ranks a push that goes
wrong is stopped before by the push's own check (``pacs.train.sampling.rollouts.push_weights``); this check holds the
queue of batches, saved and resumed, to the schedule. At a checkpoint the k batches sampled
ahead, with their verdicts, are saved inside it (``inflight_rank{r}.pt``, in its manifest) and loaded on
resume, never sampled again from newer weights; a resumed ``vllm`` engine is checked against the trainer's
weights before its first sample.
"""

import time
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from pathlib import Path

import torch

from pacs.ranks.distributed import DistEnv
from pacs.ranks.memory import phase
from pacs.rollout.base import StaleRolloutError
from pacs.rollout.fingerprint import weights_fingerprint
from pacs.tensors.batch import Batch
from pacs.train.sampling.rollouts import push_weights, rollout
from pacs.train.settings.config import RunConfig
from pacs.train.update.minibatch import policy_logprobs


@dataclass
class Sampled:
    """A batch sampled ahead of the step that trains on it."""

    weights_step: int  # the number of updates behind the weights that sampled it
    fingerprint: str | None  # theirs (pacs.rollout.fingerprint.weights_fingerprint); None for hf
    batch: Batch
    completions: list
    verdicts: Future | list  # the verifier's, pending or done


def check_sampled(step: int, staleness: int, weights_step: int, fingerprint: str | None,
                  expected: dict[int, str | None]) -> dict:  # fmt: skip
    """Step ``step`` may train only on a batch sampled by the weights after update max(0, step − staleness),
    whose fingerprint is ``expected`` of that update. Returns the step's ``rollout/staleness`` (updates
    between the weights that sampled and those updated) and ``rollout/weights_step``."""
    want = max(0, step - staleness)
    if weights_step != want:
        when = "newer" if weights_step > want else "older"
        raise StaleRolloutError(
            f"step {step}: its rollouts were sampled by the weights after update {weights_step}, {when} than the "
            f"weights after update {want} that rollout.staleness {staleness} schedules"
        )
    if want not in expected or fingerprint != expected[want]:
        raise StaleRolloutError(
            f"step {step}: its rollouts were sampled by weights with fingerprint {fingerprint}, not the trainer's "
            f"after update {want} ({expected.get(want, 'never recorded')})"
        )
    return {"rollout/staleness": step - weights_step, "rollout/weights_step": weights_step}


def done(value) -> Future:
    future = Future()
    future.set_result(value)
    return future


class RolloutSchedule:
    """This rank's rollouts of each step (``take``), told of every update and push (``updated``); with
    k ≥ 1, the batches sampled ahead, saved with a checkpoint (``state``) and loaded on resume."""

    def __init__(self, config: RunConfig, engine, models, prompts, pool, scorer: Executor, env: DistEnv,
                 start: int, resume: Path | None):  # fmt: skip
        self.config, self.engine, self.models, self.prompts, self.pool, self.scorer, self.env = (
            config, engine, models, prompts, pool, scorer, env)  # fmt: skip
        self.k, self.pad = config.rollout.staleness, models.tokenizer.pad_token_id or 0
        self.weights_step, self.fingerprint = start, None  # of the weights the engine samples with
        self.expected: dict[int, str | None] = {}  # the trainer's weights' fingerprint after each recent update
        self.ahead: dict[int, Sampled] = {}
        if self.k:  # a resumed engine is checked before its first sample
            self.updated(start, push_weights(start, engine, models.policy, push=False)[1])
            if resume is not None:
                self.load(resume, start)

    def take(self, step: int, timer: dict) -> tuple[Batch, list, Future, dict]:
        """Step ``step``'s batch, completions, pending verdicts, and its staleness record ({} when k = 0)."""
        if not self.k:
            return (*rollout(step, self.config, self.engine, self.prompts, self.pool, self.pad, self.env, timer,
                             self.scorer), {})  # fmt: skip
        for s in range(step, step + self.k + 1):  # past the run's end too: every step generates as many
            if s not in self.ahead:  # sampled with the weights after update `step`
                self.ahead[s] = self.sample(s, timer)
        self.engine.release_memory()  # once all are sampled: asleep, vLLM holds no weights until the next push
        taken = self.ahead.pop(step)
        record = check_sampled(step, self.k, taken.weights_step, taken.fingerprint, self.expected)
        pending = taken.verdicts if isinstance(taken.verdicts, Future) else done(taken.verdicts)
        return taken.batch, taken.completions, pending, record

    def sample(self, step: int, timer: dict) -> Sampled:
        c, env = self.config, self.env
        batch, completions, verdicts = rollout(step, c, self.engine, self.prompts, self.pool, self.pad, env, timer,
                                               self.scorer, release=False)  # fmt: skip
        if "sampler_logprobs" not in batch:
            with phase("no_grad", self.engine):
                # the behaviour policy's, from the trainer's forward while it holds the weights that sampled
                batch["sampler_logprobs"] = policy_logprobs(batch, c, self.models.policy_module, env)[0]
            timer["generate"] = time.perf_counter()
        return Sampled(self.weights_step, self.fingerprint, batch, completions, verdicts)

    def push(self, step: int, policy) -> dict:
        """After update ``step``: its weights into the engine, checked there tensor by tensor (a collective
        under fsdp). Returns the record."""
        pushed, held = push_weights(step, self.engine, policy)
        self.updated(step, held)
        return pushed

    def updated(self, step: int, held: dict[str, int]) -> None:
        """After update ``step``, its weights pushed and checked: the engine holds ``held`` (name ->
        fingerprint of each tensor it holds readably, equal to the trainer's; {} for hf)."""
        if self.k:
            self.updated_to(step, weights_fingerprint(held) if held else None)

    def updated_to(self, step: int, digest: str | None) -> None:
        """The engine samples with the weights after update ``step`` from now on, of digest ``digest``."""
        self.weights_step, self.fingerprint = step, digest
        self.expected[step] = digest
        for s in [s for s in self.expected if s < step - self.k]:
            del self.expected[s]

    def state(self) -> dict | None:
        """What a checkpoint keeps of this rank's schedule (the verdicts waited for); None when k = 0."""
        if not self.k:
            return None
        for sampled in self.ahead.values():
            if isinstance(sampled.verdicts, Future):
                sampled.verdicts = sampled.verdicts.result()
        ahead = {s: dict(vars(v)) for s, v in self.ahead.items()}  # the completions and verdicts as they are
        return {"staleness": self.k, "ranks": self.env.world_size, "weights_step": self.weights_step,
                "fingerprint": self.fingerprint, "expected": dict(self.expected), "ahead": ahead}  # fmt: skip

    def load(self, checkpoint: Path, start: int) -> None:
        first, path = Path(checkpoint) / "inflight_rank0.pt", Path(checkpoint) / f"inflight_rank{self.env.rank}.pt"
        if first.is_file() and (ranks := torch.load(first, weights_only=False)["ranks"]) != self.env.world_size:
            raise StaleRolloutError(f"{first}: saved by a run of {ranks} ranks, whose batches in flight are their "
                                    f"shares of each step's prompts; resume it on {ranks} ranks, not "
                                    f"{self.env.world_size}")  # fmt: skip
        if not path.is_file():
            raise StaleRolloutError(f"{path}: missing; rollout.staleness {self.k} resumes from the batches "
                                    "sampled ahead, which a checkpoint of this run's rank count and staleness "
                                    "holds")  # fmt: skip
        state = torch.load(path, weights_only=False)
        want = list(range(start, start + self.k))
        if state["staleness"] != self.k or state["weights_step"] != start or sorted(state["ahead"]) != want:
            raise StaleRolloutError(f"{path}: holds steps {sorted(state['ahead'])} sampled ahead at update "
                                    f"{state['weights_step']} with staleness {state['staleness']}; this run resumes "
                                    f"at update {start} with staleness {self.k} and needs steps {want}")  # fmt: skip
        if state["fingerprint"] != self.fingerprint:
            raise StaleRolloutError(f"{path}: the run's weights after update {start} had fingerprint "
                                    f"{state['fingerprint']}; the engine resumed holds {self.fingerprint}")  # fmt: skip
        self.expected = state["expected"]
        self.ahead = {s: Sampled(**v) for s, v in state["ahead"].items()}
