"""The plan of an experiment: for every training and evaluation job the workflow would run, its memory per
GPU, the tokens it generates and trains on, its FLOPs, and from those its hours, GPU-hours and a SLURM
runtime; a job that cannot fit its GPU is an error naming the run and the keys to change.

Tokens come from the config (batch, n, steps, problems × n) and two assumed means: prompt tokens
(``plan.mean_prompt_length``, default ``MEAN_PROMPT_TOKENS``) and response tokens
(``plan.mean_response_length``, default half of each job's maximum). FLOPs: 2·N per token in a forward
(N: the parameters that multiply, the LM head included, the input embedding not), three forwards' worth for
a forward and backward, plus attention, 4·q·c per token and layer for c tokens of context (half the
sequence on average under the causal mask). A step is its generation, priced by the decoding roofline
(``pacs.plan.decode``: each GPU generating its share of the step's responses, which wait for the longest), its
scoring (old log-probs of all but the on-policy first mini-batch, reference, critic values: forwards at the
calibration's ``score_hfu``), its ``epochs`` updates (forwards and backwards, plus the forward again of every
layer that recomputes in backward, at the width's ``train_hfu``, ``Calibration.hfu_at``: ``StepWork``), on all
the job's GPUs (with ``trainer.share_prompt`` the policy and reference take each prompt once for its n responses,
the critic every row whole), and the push of the new weights into each GPU's vLLM (``refit_seconds``); a job
adds ``startup_s``; its runtime is that times ``plan.runtime_margin``, rounded up to 10 minutes. An evaluation is
its decoding alone, each engine (``tensor_parallel_size`` GPUs) taking its share of the problems' samples.
"""

import math
from dataclasses import dataclass, field

from pacs.algorithms.options import get_algorithm
from pacs.config import from_dict
from pacs.data import HELDOUT_SIZE
from pacs.plan.calibration import Calibration
from pacs.plan.decode import decode_seconds, generation_seconds, spread
from pacs.plan.disk import checkpoint_bytes
from pacs.plan.fit import AUTO, Fit, fit_sizes, is_auto, usable_bytes
from pacs.plan.memory import DTYPE_BYTES, PHASES, dims, evaluation_memory, training_memory
from pacs.plan.overlap import splits

# DeepScaleR's problems average 219 characters (the 803-problem subset): about 70 Qwen tokens, plus 18 for
# the instruction and about 30 for the chat template
MEAN_PROMPT_TOKENS = 128
# test-split sizes of the benchmarks (the hub datasets pacs.data.sources names), and the toy task's default
PROBLEMS = {"math500": 500, "amc23": 40, "aime2024": 30, "aime2025": 30, "gsm8k": 1319, "beyondaime": 100,
            "gpqa": 198, "toy_heldout": HELDOUT_SIZE, "toy_code_heldout": HELDOUT_SIZE,
            "toy_choice_heldout": HELDOUT_SIZE}  # fmt: skip


@dataclass(frozen=True)
class PlanSettings:
    gpu: str | None = None  # a GPU of pacs.plan.calibration.GPUS; null: the calibration's, or an H100
    calibration: str | None = None  # a file written by `pacs bench gpu`; null: the documented defaults
    mean_prompt_length: int = MEAN_PROMPT_TOKENS
    mean_response_length: int | None = None  # assumed mean response tokens; null: half of each job's maximum
    runtime_margin: float = 1.5  # suggested SLURM runtime = estimate × this
    disk_quota: float | None = None  # GB the experiment may hold on disk; null: no check

    def __post_init__(self):
        if self.runtime_margin < 1:
            raise ValueError(f"plan.runtime_margin must be >= 1, got {self.runtime_margin}")


@dataclass
class Job:
    kind: str  # train | evaluate
    name: str  # train/<model>/<method> or evaluate/<model>/<method>/step_<step>/<benchmark>
    gpus: int  # 0: a CPU job (no time estimate, no memory check)
    memory: dict  # phase -> {component: bytes per GPU}; kv_cache: the engine's weights, cache, per sequence
    generated_tokens: int
    trained_tokens: int  # through a forward and backward (actor and critic)
    scored_tokens: int  # through a forward only
    flops: float
    seconds: float | None = None
    errors: list[str] = field(default_factory=list)
    checkpoint: dict = field(default_factory=dict)  # training: bytes on disk of one checkpoint, by part
    disk: dict = field(default_factory=dict)  # training: peak and final bytes under retention (plan.disk)
    seconds_longest: float | None = None  # training: every response at its maximum length
    max_runtime: int | None = None  # minutes a job may run (resources.train.max_runtime); None: no limit
    # measured by the run's preflight (pacs.runs.preflight), in place of the calibration's constants
    startup_s: float | None = None
    checkpoint_s: float | None = None
    # training: the micro-batch's sizes resolved for the GPU where the run says auto (pacs.plan.fit), or, with
    # gradient checkpointing at a fixed budget, the fewest layers that must recompute; and the model's layers
    fit: Fit | None = None
    auto: bool = False
    layers: int = 0
    recomputing: int = 0  # training: the layers that recompute in backward (``recomputing``)
    limit: int | None = None  # training: the bytes per GPU its phases must plan within (pacs.plan.fit.usable_bytes)
    # training on 2 GPUs or more: the colocated step, then each split into generator and trainer GPUs
    splits: list = field(default_factory=list)
    steps: int = 0  # training: its steps
    save_every: int = 0  # training: steps between checkpoints (what a preemption without warning may cost)
    # seconds of one evaluation chunk (evaluate: its own; train: the heaviest chunk its preflight evaluates)
    chunk_s: float | None = None
    preflight_s: float | None = None  # training: what its preflight needs (``preflight_seconds``)

    @property
    def peak_bytes(self) -> int:
        return max(sum(v.values()) for k, v in self.memory.items() if k != "kv_cache")

    @property
    def gpu_hours(self) -> float | None:
        return None if self.seconds is None else self.seconds * self.gpus / 3600

    def runtime_minutes(self, margin: float) -> int | None:
        """The SLURM runtime of the job (of each of its segments, under ``max_runtime``)."""
        if self.seconds is None:
            return None
        whole = int(math.ceil(self.seconds * margin / 600) * 10)
        return whole if self.max_runtime is None else min(whole, self.max_runtime)

    def segments(self, margin: float, startup_s: float, checkpoint_s: float) -> int:
        """Starts of the job under ``max_runtime`` (SLURM starts it again after each stop before its limit): each
        starts up, works, and (training) writes one checkpoint more when it stops."""
        if self.seconds is None or self.max_runtime is None:
            return 1
        usable = self.max_runtime * 60 - startup_s - margin * checkpoint_s
        if usable <= 0:
            return 0  # never: an error says so
        return max(1, math.ceil((self.seconds - startup_s) * margin / usable))


def forward_flops(d: dict, tokens: float, context: float, head: bool = True) -> float:
    """FLOPs of one forward over ``tokens`` tokens with ``context`` tokens of mean attention context."""
    matmul = d["layers"] * d["layer_params"] + (d["vocab"] * d["h"] if head else d["h"])
    return 2 * matmul * tokens + 4 * d["layers"] * d["q"] * context * tokens


def mean_response(settings: PlanSettings, maximum: int) -> int:
    return min(settings.mean_response_length or maximum // 2, maximum)


@dataclass(frozen=True)
class StepWork:
    """FLOPs of one training step by how the GPU runs them (``pacs.plan.calibration``): its generation, its
    forwards alone (old and reference log-probs, critic values: at ``score_hfu``), its forwards and backwards
    (model FLOPs) and the forwards of the layers that recompute in backward (both at the width's ``train_hfu``)."""

    generate: float
    score: float
    train: float
    recompute: float

    @property
    def update(self) -> float:
        """The model FLOPs of scoring and update (recompute not counted: it is the GPU's work, not the model's)."""
        return self.score + self.train

    def update_seconds(self, cal, width: int, gpus: int) -> float:
        return (self.score / cal.score_hfu + (self.train + self.recompute) / cal.hfu_at(width)) / (cal.peak_flops
                                                                                                 * max(gpus, 1))


def recomputing(run: dict, layers: int) -> int:
    """The decoder layers whose forward runs again in backward: none without ``gradient_checkpointing``, every
    one where ``checkpoint_layers`` is null, else that many (``auto`` resolved before)."""
    t = run["trainer"]
    if not t["gradient_checkpointing"]:
        return 0
    k = t.get("checkpoint_layers")
    return layers if k is None or k == AUTO else min(int(k), layers)


def step_flops(d: dict, run: dict, needs: frozenset, critic: bool, prompt: int, response: int) -> StepWork:
    """FLOPs of one training step's generation and update for mean lengths ``prompt`` and ``response``."""
    t, r = run["trainer"], run["rollout"]
    rows, length = t["batch_size"] * r["n"], prompt + response
    fresh = t["mini_batch_size"] if t["epochs"] == 1 else 0

    def policy(prompts: int) -> int:  # tokens the policy or reference computes for these prompts' rows
        return prompts * (prompt + r["n"] * response) if t["share_prompt"] else prompts * r["n"] * length

    generate = forward_flops(d, rows * response + t["batch_size"] * prompt, prompt + response / 2)
    trained = t["epochs"] * policy(t["batch_size"])
    train = 3 * forward_flops(d, trained, length / 2)
    score = forward_flops(d, policy(t["batch_size"] - fresh) + policy(t["batch_size"]) * ("ref_logprobs" in needs),
                          length / 2)  # fmt: skip
    share = recomputing(run, d["layers"]) / d["layers"]
    recompute = share * forward_flops(d, trained, length / 2, head=False)
    if critic:  # the critic takes every row whole
        score += forward_flops(d, rows * length, length / 2, head=False)
        train += 3 * forward_flops(d, t["epochs"] * rows * length, length / 2, head=False)
        recompute += share * forward_flops(d, t["epochs"] * rows * length, length / 2, head=False)
    return StepWork(generate, score, train, recompute)


def refit_seconds(d: dict, run: dict, cal) -> float:
    """The colocated step's push of the new weights (compute dtype) into the GPU's own engine (``pacs.rollout``)."""
    if not run["trainer"]["total_steps"] or run["rollout"]["engine"] != "vllm":
        return 0.0  # transformers' generate samples with the policy's own weights
    return d["params"] * DTYPE_BYTES[run["trainer"]["compute_dtype"] or run["model"]["dtype"]] / cal.refit_bytes_per_s


def plan_training(name: str, shape, run: dict, gpus: int, settings: PlanSettings, cal: Calibration,
                  measured: dict | None = None) -> Job:  # fmt: skip
    """The job's memory, tokens and FLOPs; its hours from the calibration's MFUs, or from ``measured`` (its
    preflight.json): the measured start-up, and steps of the measured seconds at the maximum response length,
    scaled to the mean length by the FLOPs model's ratio of the two."""
    algorithm = get_algorithm(run["algorithm"]["name"])
    needs = algorithm.needs(from_dict(algorithm.options, run["algorithm"]["options"], "algorithm.options"))
    critic = algorithm.critic
    auto, fit = is_auto(run["trainer"]), None
    if auto or (run["trainer"]["gradient_checkpointing"] and gpus):
        asked = run["trainer"] if auto else {**run["trainer"], "checkpoint_layers": AUTO}
        trainer, fit = fit_sizes(shape, {**run, "trainer": asked}, gpus, max(gpus, 1), "ref_logprobs" in needs,
                                 critic, cal.memory_bytes, cal)  # fmt: skip
        if auto:
            run = {**run, "trainer": trainer}
    memory = training_memory(shape, run, gpus, "ref_logprobs" in needs, critic, cal.memory_bytes, cal)
    d, t, r = dims(shape), run["trainer"], run["rollout"]
    rows = t["batch_size"] * r["n"]
    prompt = min(settings.mean_prompt_length, run["data"]["max_prompt_length"])
    response = mean_response(settings, r["max_response_length"])
    length = prompt + response
    fresh = t["mini_batch_size"] if t["epochs"] == 1 else 0
    scored = (t["batch_size"] - fresh) * r["n"] * length  # old log-probs
    scored += rows * length * (("ref_logprobs" in needs) + critic)
    trained = t["epochs"] * rows * length
    work = step_flops(d, run, needs, critic, prompt, response)
    steps = t["total_steps"]
    job = Job("train", name, gpus, memory, steps * rows * response, steps * trained * (1 + critic), steps * scored,
              steps * (work.generate + work.update), checkpoint=checkpoint_bytes(shape, run, critic))  # fmt: skip
    job.fit, job.auto, job.layers, job.recomputing = fit, auto, d["layers"], recomputing(run, d["layers"])
    job.steps, job.save_every = steps, run["checkpoint"]["save_every"]
    job.limit = usable_bytes(run["trainer"], cal.memory_bytes, cal)

    refit = refit_seconds(d, run, cal) if gpus else 0.0

    def modeled(mean: float) -> float:  # seconds of one step, responses of mean length ``mean``
        updated = step_flops(d, run, needs, critic, prompt, round(mean)).update_seconds(cal, d["h"], gpus)
        return generation_seconds(d, run, gpus, memory, cal, prompt, mean) + updated + refit

    longest = modeled(r["max_response_length"])
    if measured:
        job.startup_s, job.checkpoint_s = measured["startup_s"], measured["checkpoint_s"]
        job.seconds_longest = job.startup_s + steps * measured["step_s"]
        job.seconds = job.startup_s + steps * measured["step_s"] * modeled(response) / longest
    elif gpus:
        job.seconds = cal.startup_s + steps * modeled(response)
        job.seconds_longest = cal.startup_s + steps * longest
    if gpus >= 2:
        job.splits = splits(d, run, gpus, memory, cal, prompt, response, work, refit, startup_seconds(job, cal))
    return job


def plan_evaluation(name: str, shape, settings_: dict, problems: int, gpus: int, settings: PlanSettings,
                    cal: Calibration) -> Job:  # fmt: skip
    memory = evaluation_memory(shape, settings_, gpus, cal.memory_bytes, cal)
    d = dims(shape)
    prompt, response = settings.mean_prompt_length, mean_response(settings, settings_["max_tokens"])
    generated = problems * settings_["n"] * response
    flops = forward_flops(d, generated + problems * prompt, prompt + response / 2)
    job = Job("evaluate", name, gpus, memory, generated, 0, 0, flops)
    if gpus:
        b = 2 if settings_["dtype"] == "auto" else DTYPE_BYTES[settings_["dtype"]]
        tp = settings_["vllm"]["tensor_parallel_size"]
        engines = max(gpus // tp, 1)
        samples = math.ceil(problems * settings_["n"] / engines)
        lengths = spread(samples, settings_["max_tokens"], response)
        weights, per_token = d["params"] * b / tp, d["kv_bytes_per_token_fp"] * b / tp
        if settings_["engine"] == "hf":
            wave = settings_.get("prompt_batch_size", 64) * settings_["n"]
            seconds = decode_seconds(d, weights, per_token, prompt, lengths, cal, wave=wave, split=tp)
        else:
            cache = memory["kv_cache"]["cache"] / per_token
            seconds = decode_seconds(d, weights, per_token, prompt, lengths, cal, capacity_tokens=cache, split=tp)
        job.seconds = cal.startup_s + seconds
    return job


def gb(n: float) -> str:
    return f"{n / 1e9:.1f} GB"


MEMORY_FIXES = {"parameters": "trainer.strategy fsdp or more resources.train.gpu", "gradients": "trainer.strategy fsdp",
                "optimizer": "trainer.strategy fsdp or more resources.train.gpu",
                "reference": "trainer.strategy fsdp", "gathered": "trainer.compute_dtype bfloat16",
                "activations": "trainer.gradient_checkpointing, trainer.max_tokens_per_micro_batch or "
                               "trainer.micro_batch_size", "logits": "trainer.logprob_chunk_size",
                "backward": "trainer.max_tokens_per_micro_batch or trainer.logprob_chunk_size",
                "vllm graphs": "rollout.vllm.enforce_eager",
                "forward": "trainer.max_tokens_per_micro_batch or trainer.micro_batch_size",
                "vllm": "rollout.vllm.gpu_memory_utilization", "sampling": "rollout.prompt_batch_size",
                "vllm (awake)": "rollout.vllm.sleep_level 1 or 2", "overhead": ""}  # fmt: skip


def memory_fixes(parts: dict, keys: str) -> str:
    """The keys to change for a training job's phase over its GPU's memory: those of the phase's three
    largest ``parts`` (the plan's components); ``keys``: where the run's keys live."""
    return "; ".join(dict.fromkeys(f"{keys}.{MEMORY_FIXES[k]}" for k, v in largest(parts) if MEMORY_FIXES.get(k)))


def largest(parts: dict, count: int = 3) -> list[tuple[str, int]]:
    """A phase's ``count`` largest components, largest first, none of 0 bytes."""
    return [kv for kv in sorted(parts.items(), key=lambda kv: -kv[1]) if kv[1]][:count]


def check_training(job: Job, cal: Calibration, keys: str) -> None:
    """Errors for a training job on GPUs that does not fit (``job.limit``); ``keys``: where its run's keys live."""
    if not job.gpus:
        return
    for phase in PHASES:
        parts = job.memory[phase]
        total = sum(parts.values())
        if total > job.limit:
            listed = ", ".join(f"{k} {gb(v)}" for k, v in largest(parts, len(parts)))
            usable = (f"{gb(job.limit)} usable of a {cal.gpu}'s {gb(cal.memory_bytes)} (its headroom "
                      f"{cal.memory_headroom:.0%}, or {keys}.trainer.memory_limit_gb)")  # fmt: skip
            job.errors.append(f"{job.name}: the {phase} phase needs {gb(total)} per GPU ({listed}), more than the "
                              f"{usable}; change {memory_fixes(parts, keys)}")  # fmt: skip
    check_kv(job, f"{keys}.rollout.vllm.gpu_memory_utilization or {keys}.rollout.max_response_length")


# an evaluation holding fewer sequences at once is bound by memory bandwidth (every decoding step reads all the
# weights for the few sequences in flight), far slower than its FLOPs say: LIMO (32B) on one H100 holds 3
MIN_EVAL_SEQUENCES = 8


def check_kv(job: Job, keys: str, fewest: int = 1) -> None:
    kv = job.memory.get("kv_cache")
    if job.gpus and kv and kv["cache"] < fewest * kv["per_sequence"]:
        what = "one sequence" if fewest == 1 else f"the {fewest} sequences at once an evaluation needs to run at speed"
        job.errors.append(f"{job.name}: vLLM's share holds {gb(max(kv['cache'], 0))} of KV cache after its "
                          f"{gb(kv['weights'])} of weights per GPU, less than {what} of {kv['max_model_len']} "
                          f"tokens ({gb(kv['per_sequence'])} each); change {keys}")  # fmt: skip


def checkpoint_seconds(job: Job, cal: Calibration) -> float:
    if job.checkpoint_s is not None:
        return job.checkpoint_s
    return sum(job.checkpoint.values()) / cal.checkpoint_bytes_per_s


def startup_seconds(job: Job, cal: Calibration) -> float:
    return job.startup_s if job.startup_s is not None else cal.startup_s
