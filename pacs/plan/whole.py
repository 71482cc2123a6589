"""The plan of a whole experiment (``Plan``): every training and evaluation job the workflow would run
(pacs.plan.jobs), what each asks SLURM for and how many times SLURM starts it under its limit, what each
training job's preflight needs, what a preemption without warning may cost, and the disk its runs hold."""

import math
from dataclasses import dataclass, field, replace

from pacs.config import ConfigError, from_dict
from pacs.plan.calibration import Calibration
from pacs.plan.disk import run_disk_bytes
from pacs.plan.jobs import (
    MIN_EVAL_SEQUENCES,
    PROBLEMS,
    Job,
    PlanSettings,
    check_kv,
    check_training,
    checkpoint_seconds,
    gb,
    plan_evaluation,
    plan_training,
    startup_seconds,
)


@dataclass
class Plan:
    jobs: list[Job]
    calibration: Calibration
    settings: PlanSettings
    preflight_steps: int = 2  # preflight.steps
    preflight_runtime: int | None = None  # preflight.runtime: minutes asked of SLURM; None: from the plan
    superseded_bytes: int = 0  # runs moved aside by a change of what they compute, still on disk (pacs.runs.directory)
    preflights: dict = field(default_factory=dict)  # {preflight's name: the training job it measures}

    @property
    def errors(self) -> list[str]:
        return [e for j in self.jobs for e in j.errors]

    def job(self, name: str) -> Job:
        return next(j for j in self.jobs if j.name == name)

    def runtime_minutes(self, *names: str) -> int | None:
        """The SLURM runtime of one job that does the named jobs one after the other (an evaluation job: its
        benchmarks)."""
        jobs = [self.job(name) for name in names]
        seconds = None if any(j.seconds is None for j in jobs) else sum(j.seconds for j in jobs)
        return replace(jobs[0], seconds=seconds).runtime_minutes(self.settings.runtime_margin)

    def segments(self, *names: str) -> int:
        """How many times SLURM starts the job that does the named jobs (an evaluation job: its benchmarks)."""
        jobs = [self.job(name) for name in names]
        cal, job = self.calibration, jobs[0]
        if job.kind == "evaluate":
            seconds = None if any(j.seconds is None for j in jobs) else sum(j.seconds for j in jobs)
            job = replace(job, seconds=seconds and seconds - (len(jobs) - 1) * cal.startup_s)  # one start-up a start
            return job.segments(self.settings.runtime_margin, cal.startup_s, 0.0)
        return job.segments(self.settings.runtime_margin, startup_seconds(job, cal), checkpoint_seconds(job, cal))

    def preflight_minutes(self, name: str) -> int | None:
        """The SLURM runtime of the preflight of training job ``name``: ``preflight.runtime`` where set, else what
        it needs (``preflight_seconds``) × ``plan.runtime_margin``, rounded up to 10 minutes; within max_runtime."""
        job = self.job(name)
        if self.preflight_runtime is not None:
            asked = self.preflight_runtime
        elif job.preflight_s is None:
            return None
        else:
            asked = int(math.ceil(job.preflight_s * self.settings.runtime_margin / 600) * 10)
        return asked if job.max_runtime is None else min(asked, job.max_runtime)

    def preemption_minutes(self, name: str) -> float | None:
        """Training: the most a preemption without warning loses, ``save_every`` mean steps (with a warning,
        SLURM's SIGTERM, the step in flight is saved; docs/long-runs.md, "Long runs")."""
        job = self.job(name)
        if job.seconds is None or not job.steps:
            return None
        return min(job.save_every, job.steps) * (job.seconds - startup_seconds(job, self.calibration)) / job.steps / 60

    def step_seconds(self, name: str) -> float | None:
        """Training job ``name``'s seconds a step, its start-up aside (None where the plan has no time for it)."""
        job = self.job(name)
        if job.seconds is None or not job.steps:
            return None
        return (job.seconds - startup_seconds(job, self.calibration)) / job.steps

    def figures(self, name: str) -> dict:
        """What the plan says of training job ``name``, to 3 significant figures: its GPU-hours, hours, seconds a
        step (its start-up aside), steps and GPUs (None where it has no time for it)."""
        job = self.job(name)
        three = lambda x: None if x is None else float(f"{x:.3g}")  # noqa: E731
        return {"gpu_hours": three(job.gpu_hours), "hours": three(job.seconds and job.seconds / 3600),
                "step_s": three(self.step_seconds(name)), "steps": job.steps, "gpus": job.gpus,
                "gpu": self.calibration.gpu}  # fmt: skip

    @property
    def disk_bytes(self) -> int:
        """Every run's peak disk together, and the superseded runs still on disk: the most the experiment holds if
        its runs train at once."""
        return sum(j.disk.get("peak", 0) for j in self.jobs) + self.superseded_bytes


def plan_experiment(config: dict, runs: dict, evaluations: list[dict], models: dict[str, tuple[dict, str]],
                    measured: dict | None = None, superseded_bytes: int = 0) -> Plan:  # fmt: skip
    """The plan of what a workflow config describes (pacs.experiment.plan gives it): ``runs`` {(model, method):
    resolved run config}; ``evaluations``, each with its resolved evaluation config (``settings``) and its GPUs
    (``gpus``: a released model's own, method "released"); ``models`` {name: (spec, its config key)}, the trained
    and the released; ``measured`` {training job name: its preflight.json}; ``superseded_bytes``: runs moved aside
    still on disk."""
    from pacs.models.shapes import model_shape
    from pacs.plan.calibration import load_calibration

    settings = from_dict(PlanSettings, config.get("plan") or {}, "config: plan")
    if settings.gpu and settings.calibration:
        raise ConfigError("config: plan.gpu and plan.calibration both name a GPU; set one")
    cal = load_calibration(settings.calibration, settings.gpu)
    shapes = {m: model_shape(spec, where) for m, (spec, where) in models.items()}
    resources = config["resources"]

    def of(kind: str, key: str):
        return {**resources.get("default", {}), **resources.get(kind, {})}.get(key)

    jobs, heaviest = [], {}
    for (model, method), run in runs.items():
        name = f"train/{model}/{method}"
        job = plan_training(name, shapes[model], run, int(of("train", "gpu") or 0), settings, cal,
                            (measured or {}).get(name))  # fmt: skip
        check_training(job, cal, f"train (or methods.{method}.train)")
        kept = {e["step"] for e in evaluations if (e["model"], e["method"]) == (model, method)}
        job.disk = run_disk_bytes(job.checkpoint, run, sorted(kept | set(run["checkpoint"]["keep_weights"] or ())))
        job.max_runtime = of("train", "max_runtime")
        if job.segments(settings.runtime_margin, startup_seconds(job, cal), checkpoint_seconds(job, cal)) == 0:
            job.errors.append(f"{job.name}: resources.train.max_runtime {job.max_runtime} min leaves no time to "
                              f"train after the job's startup ({startup_seconds(job, cal):.0f} s) and a checkpoint "
                              f"({checkpoint_seconds(job, cal):.0f} s); raise it")  # fmt: skip
        jobs.append(job)
    for e in evaluations:
        bench = config["data"]["benchmarks"][e["benchmark"]]
        known = bench.get("problems") or PROBLEMS.get(e["benchmark"])
        if not bench.get("limit") and not known:
            raise ConfigError(f"config: data.benchmarks.{e['benchmark']}: the plan needs its number of problems; "
                              "set its problems (or limit)")  # fmt: skip
        problems = min(bench.get("limit") or known, known or math.inf)
        name = f"evaluate/{e['model']}/{e['method']}/step_{e['step']:06d}/{e['benchmark']}"
        job = plan_evaluation(name, shapes[e["model"]], e["settings"], problems, e["gpus"], settings, cal)
        keys = (f"released.{e['model']}.tensor_parallel_size (or eval.settings.vllm.gpu_memory_utilization, "
                "plan.gpu)" if e["method"] == "released" else "eval.settings.vllm.gpu_memory_utilization (or "
                ".tensor_parallel_size with more resources.evaluate.gpu)")  # fmt: skip
        check_kv(job, f"{keys} or eval.settings.max_tokens", MIN_EVAL_SEQUENCES)
        chunk = min(e["settings"]["chunk_problems"], problems)
        one = plan_evaluation(name, shapes[e["model"]], e["settings"], chunk, e["gpus"], settings, cal)
        job.chunk_s, job.max_runtime = one.seconds and one.seconds - cal.startup_s, of("evaluate", "max_runtime")
        room = job.max_runtime and job.max_runtime * 60 - cal.startup_s  # for chunks, after the start-up
        if room is not None and job.chunk_s and settings.runtime_margin * job.chunk_s > room:
            job.errors.append(f"{name}: one chunk ({chunk} problems × {e['settings']['n']}) needs "
                              f"{job.chunk_s / 60:.0f} min × plan.runtime_margin after the job's start-up, more than "
                              f"resources.evaluate.max_runtime {job.max_runtime} min leaves; lower chunk_problems "
                              f"(data.benchmarks.{e['benchmark']}.settings or eval.settings) or raise "
                              "resources.evaluate.max_runtime")  # fmt: skip
        jobs.append(job)
        if e["method"] not in ("base", "released"):  # what its run's preflight evaluates: the heaviest chunk
            weight = (e["settings"]["max_tokens"], e["settings"]["n"])
            if weight > heaviest.get((e["model"], e["method"]), ((0, 0), None))[0]:
                heaviest[(e["model"], e["method"])] = (weight, plan_evaluation(
                    name, shapes[e["model"]], e["settings"], chunk, int(of("train", "gpu") or 0), settings, cal))
    preflight = config.get("preflight") or {}
    plan = Plan(jobs, cal, settings, int(preflight.get("steps") or 2), preflight.get("runtime"), superseded_bytes)
    for job in (j for j in jobs if j.kind == "train"):
        model, method = job.name.split("/")[1:]
        job.chunk_s = heaviest.get((model, method), (None, Job("evaluate", "", 0, {}, 0, 0, 0, 0)))[1].seconds
        job.preflight_s = preflight_seconds(job, cal, plan.preflight_steps)
        if plan.preflight_runtime is None and job.max_runtime and job.preflight_s and \
                job.preflight_s > job.max_runtime * 60:  # fmt: skip
            job.errors.append(f"{job.name}: its preflight needs {job.preflight_s / 60:.0f} min (start-up, "
                              f"{plan.preflight_steps} steps and the worst case at the longest lengths, a "
                              "checkpoint written and read back, an evaluation chunk), more than "
                              f"resources.train.max_runtime {job.max_runtime} min; change preflight.steps, "
                              f"train (or methods.{method}.train).rollout.max_response_length or "
                              "resources.train.max_runtime, or set preflight.runtime (the minutes it may "
                              "run)")  # fmt: skip
    if settings.disk_quota is not None and plan.disk_bytes > settings.disk_quota * 1e9:
        superseded = f" (superseded runs, runs/*/*.superseded: {gb(superseded_bytes)})" if superseded_bytes else ""
        jobs[0].errors.append(f"the experiment's checkpoints peak at {gb(plan.disk_bytes)}{superseded}, more than "
                              f"plan.disk_quota ({settings.disk_quota:.0f} GB); change train.checkpoint.save_every, "
                              "train.checkpoint.keep_resumable, eval.checkpoints or eval.every (the steps whose "
                              "weights are kept), or run fewer models or methods at once")  # fmt: skip
    return plan


def longest_step_seconds(job: Job, cal: Calibration) -> float | None:
    """Training: one step with every response at its maximum length."""
    if job.seconds_longest is None or not job.steps:
        return None
    return (job.seconds_longest - startup_seconds(job, cal)) / job.steps


def preflight_seconds(job: Job, cal: Calibration, steps: int) -> float | None:
    """What a training job's preflight needs: its start-up, ``steps`` steps and the worst case's pass (one step
    more) at the maximum lengths, a checkpoint written and read back, and one chunk of its heaviest evaluation (its
    process's start-up included; ``job.chunk_s``)."""
    step = longest_step_seconds(job, cal)
    if step is None:
        return None
    return startup_seconds(job, cal) + (steps + 1) * step + 2 * checkpoint_seconds(job, cal) + (job.chunk_s or 0.0)
