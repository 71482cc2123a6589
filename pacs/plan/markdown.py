"""The plan as Markdown (``pacs plan``, ``results/<name>/plan.md``): one row per job, the totals, one step off, the
micro-batch sizes resolved for the GPU, and each distinct training job's memory by component."""

from pacs.plan.calibration import Calibration
from pacs.plan.jobs import Job, gb
from pacs.plan.overlap import format_overlap
from pacs.plan.whole import Plan


def train_hfu(cal: Calibration) -> str:
    """The update's HFU as the plan prices it: one figure, or one per width (interpolated between)."""
    widths = sorted(cal.train_hfu_by_width, key=int)
    by_width = ", ".join(f"{cal.train_hfu_by_width[w]:.3f} at width {w}" for w in widths)
    return f"{by_width} (interpolated in width)" if by_width else f"{cal.train_hfu:.3f}"


def figures(cal: Calibration) -> str:
    """Which pricing figures are measured, published or assumed."""
    return "; ".join(f"{k} {v}" for k, v in cal.sources().items())


def format_fits(jobs: list[Job]) -> list[str]:
    """The micro-batch sizes resolved for the GPU (``auto``), and the recompute a fixed budget needs."""
    lines = []
    sized = [f"{j.name}: {j.fit.tokens} tokens, {j.recomputing}/{j.layers} layers recomputing"
             for j in jobs if j.auto and j.fit.fits]  # fmt: skip
    if sized:
        lines += ["", "Micro-batches sized by memory (trainer.max_tokens_per_micro_batch and trainer.checkpoint_layers "
                  "auto, as each job resolves them on a GPU of this memory): " + "; ".join(sized) + "."]  # fmt: skip
    recompute = [f"{j.name} {j.fit.layers}/{j.layers}" for j in jobs if j.fit and not j.auto and j.fit.fits]
    if recompute:
        lines += ["", "Activation checkpointing, the fewest layers that must recompute for the micro-batch to fit "
                  f"(trainer.checkpoint_layers, or auto): {', '.join(recompute)}."]  # fmt: skip
    return lines


def minutes(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds / 60:.0f}"


def format_runtimes(plan: Plan) -> list[str]:
    """Per rule, each GPU job's SLURM runtime beside what the plan says it needs, how many times SLURM starts it
    under its limit, and what a preemption without warning costs a training run."""
    margin, cal = plan.settings.runtime_margin, plan.calibration
    rows = []
    for shape, name in plan.preflights.items():
        job = plan.job(name)
        if job.gpus:
            asked = plan.preflight_minutes(name) or "-"
            rows.append(f"| preflight_job | {shape} | {minutes(job.preflight_s)} | {asked} | {job.max_runtime or '-'} "
                        "| 1 | - |")  # fmt: skip
    for job in (j for j in plan.jobs if j.kind == "train" and j.seconds is not None):
        lost = plan.preemption_minutes(job.name)
        rows.append(f"| train_policy | {job.name.removeprefix('train/')} | {minutes(job.seconds)} | "
                    f"{job.runtime_minutes(margin)} | {job.max_runtime or '-'} | {plan.segments(job.name)} | "
                    f"{lost:.0f} ({job.save_every} steps) |")  # fmt: skip
    suites: dict[str, list[str]] = {}
    for job in (j for j in plan.jobs if j.kind == "evaluate" and j.seconds is not None):
        suites.setdefault(job.name.rsplit("/", 1)[0], []).append(job.name)
    for suite, names in suites.items():
        needed = sum(plan.job(n).seconds for n in names) - (len(names) - 1) * cal.startup_s
        rows.append(f"| evaluate_model | {suite.removeprefix('evaluate/')} | {minutes(needed)} | "
                    f"{plan.runtime_minutes(*names)} | {plan.job(names[0]).max_runtime or '-'} | "
                    f"{plan.segments(*names)} | - |")  # fmt: skip
    if not rows:
        return []
    return ["", "What each GPU job asks SLURM for (minutes): it needs the plan's time; it asks for that × "
            f"plan.runtime_margin ({margin:g}), rounded up to 10 minutes, within max_runtime (the partition's limit); "
            "past it, it stops in time and SLURM starts it again (starts). A preemption that gives no warning loses "
            "at most the steps since the last checkpoint (checkpoint.save_every); one announced by SIGTERM with time "
            "for the step in flight loses nothing.",
            "", "| rule | job | needs | asks for | max_runtime | starts | lost at a preemption without warning |",
            "|---|---|---|---|---|---|---|", *rows]  # fmt: skip


def format_plan(plan: Plan) -> str:
    """The plan as Markdown: one row per job, totals, and each distinct training job's memory by component."""
    margin = plan.settings.runtime_margin
    cal = plan.calibration
    lines = [f"GPU: {cal.gpu}, {gb(cal.memory_bytes)} (a training step plans within {1 - cal.memory_headroom:.0%} of "
             f"it, or a run's trainer.memory_limit_gb), peak {cal.peak_flops / 1e12:.0f} TFLOP/s, memory "
             f"{cal.hbm_bytes_per_s / 1e12:.2f} TB/s; update HFU {train_hfu(cal)} (recompute counted), forwards "
             f"alone {cal.score_hfu:.2f}, decoding at {cal.decode_efficiency:.2f} of its roofline, vLLM's "
             f"max_num_seqs {cal.max_num_seqs}, the weight push into vLLM {cal.refit_bytes_per_s / 1e9:.1f} GB/s; "
             f"{cal.source}", "", f"The figures: {figures(cal)} (pacs.plan.calibration; docs/plan-vs-published.md).",
             "", "| job | GPUs | GB/GPU | generated tokens | trained tokens | PFLOP | hours | hours (longest) | "
             "GPU-hours | runtime (min) | segments | disk peak (GB) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for j in plan.jobs:
        hours = "-" if j.seconds is None else f"{j.seconds / 3600:.2f}"
        longest = "-" if j.seconds_longest is None else f"{j.seconds_longest / 3600:.2f}"
        gpu_hours = "-" if j.gpu_hours is None else f"{j.gpu_hours:.1f}"
        runtime = j.runtime_minutes(margin) or "-"
        segments = plan.segments(j.name) if j.seconds is not None else "-"
        disk = f"{j.disk['peak'] / 1e9:.0f}" if j.disk else "-"
        lines.append(f"| {j.name} | {j.gpus} | {j.peak_bytes / 1e9:.2f} | {j.generated_tokens:.3g} | "
                     f"{j.trained_tokens:.3g} | {j.flops / 1e15:.3g} | {hours} | {longest} | {gpu_hours} | "
                     f"{runtime} | {segments} | {disk} |")  # fmt: skip
    timed = [j for j in plan.jobs if j.seconds is not None]
    total = sum(j.gpu_hours for j in timed)
    lines += ["", f"Total: {len(plan.jobs)} jobs, {sum(j.flops for j in plan.jobs) / 1e18:.3g} EFLOP, "
              f"{total:.0f} GPU-hours ({sum(j.gpu_hours for j in timed if j.kind == 'train'):.0f} training, "
              f"{sum(j.gpu_hours for j in timed if j.kind == 'evaluate'):.0f} evaluation); every response at its "
              f"maximum length: {sum(j.seconds_longest * j.gpus / 3600 for j in timed if j.seconds_longest):.0f} "
              "training GPU-hours.",
              "", f"Disk: checkpoints peak at {gb(plan.disk_bytes)} if every run trains at once, and "
              f"{gb(sum(j.disk.get('final', 0) for j in plan.jobs) + plan.superseded_bytes)} stay when all are done"
              + (f" (plan.disk_quota {quota:.0f} GB)" if (quota := plan.settings.disk_quota) else "")
              + (f"; of them {gb(plan.superseded_bytes)} are runs moved aside by a change of what they compute "
                 "(runs/<model>/<method>.superseded/: delete them once you no longer need them)"
                 if plan.superseded_bytes else "") + "."]  # fmt: skip
    lines += format_runtimes(plan)
    lines += format_overlap(plan.jobs)
    measured = [j.name for j in plan.jobs if j.startup_s is not None]
    if measured:
        lines += ["", f"Measured by pacs preflight (hours, runtime, segments): {', '.join(measured)}; every other "
                  "job from the constants above."]  # fmt: skip
    lines += format_fits(plan.jobs)
    seen = set()
    for j in plan.jobs:
        key = (j.kind, tuple(sorted((p, tuple(sorted(v.items()))) for p, v in j.memory.items())),
               tuple(j.checkpoint.items()))
        if key in seen:
            continue
        seen.add(key)
        lines += ["", f"Memory per GPU of {j.name}" + (" (and jobs like it)" if j.kind == "train" else "") + ":"]
        for phase, parts in j.memory.items():
            if phase == "kv_cache":
                lines.append(
                    f"- vLLM: weights {gb(parts['weights'])}, KV cache {gb(max(parts['cache'], 0))}, "
                    f"{gb(parts['per_sequence'])} per sequence of {parts['max_model_len']} tokens"
                    + (f" ({parts['cache'] // parts['per_sequence']} sequences at once)" if j.gpus else "")
                )
            else:
                shown = ", ".join(f"{k} {gb(v)}" for k, v in parts.items() if v)
                lines.append(f"- {phase}: {gb(sum(parts.values()))} ({shown})")
        if j.checkpoint:
            shown = ", ".join(f"{k} {gb(v)}" for k, v in j.checkpoint.items() if v)
            lines.append(f"- one checkpoint on disk: {gb(sum(j.checkpoint.values()))} ({shown}); the run's "
                         f"{j.disk['checkpoints']} checkpoints peak at {gb(j.disk['peak'])} under retention, "
                         f"{gb(j.disk['final'])} at the end")  # fmt: skip
    if plan.errors:
        lines += ["", "Does not fit:", *[f"- {e}" for e in plan.errors]]
    return "\n".join(lines) + "\n"
