"""One step off, priced: a run's N GPUs split into g that only generate and N − g that only train, overlapped.

With ``rollout.staleness`` 1 the generators sample step t + 1's batch while the trainers update on step t's,
so a step takes the longer of the two, plus the push of the new weights from trainers to generators
(the weights in the compute dtype at ``push_bytes_per_s``); the colocated step adds its own push, into each
GPU's engine (``refit_bytes_per_s``). A generator holds only its engine: its vLLM takes
``GENERATOR_MEMORY_UTILIZATION`` of the card, a larger KV cache than a colocated engine's share, so more
sequences run at once. Decoding is priced by its roofline (``pacs.plan.decode``): splitting the GPUs is
cheaper than taking turns when generation on fewer GPUs keeps the bandwidth busier, and dearer when a step
waits on its longest response either way. The colocated step (every GPU generates, then every GPU trains) is
today's path and ``rollout.staleness`` 0 or 1 with no generator GPUs.
"""

from dataclasses import dataclass

from pacs.plan.decode import generation_seconds
from pacs.plan.memory import DTYPE_BYTES

IDLE_FLAG = 0.5  # a role idle more than this share of the step is flagged


@dataclass(frozen=True)
class Split:
    generators: int  # 0: colocated (every GPU generates, then every GPU trains)
    generate_s: float
    update_s: float  # scoring and update, on the trainer GPUs
    push_s: float
    step_s: float
    gpu_hours: float

    @property
    def idle(self) -> tuple[float, float]:
        """The share of a step the generators and the trainers wait (colocated: neither waits on the other)."""
        if not self.generators:
            return 0.0, 0.0
        return 1 - self.generate_s / self.step_s, 1 - self.update_s / self.step_s


def splits(d: dict, run: dict, gpus: int, memory: dict, cal, prompt: int, mean: float, work, refit: float,
           startup_s: float) -> list[Split]:  # fmt: skip
    """The colocated step (its ``refit`` the push into each GPU's own engine), then every split of the run's
    ``gpus`` GPUs into g = 1 … gpus − 1 generators; ``work``: the step's ``pacs.plan.jobs.StepWork``."""
    steps = run["trainer"]["total_steps"]

    def update(trainers: int) -> float:
        return work.update_seconds(cal, d["h"], trainers)

    def split(g: int, generate: float, trained: float, push: float, step: float) -> Split:
        return Split(g, generate, trained, push, step, gpus * (startup_s + steps * step) / 3600)

    generate, trained = generation_seconds(d, run, gpus, memory, cal, prompt, mean), update(gpus)
    out = [split(0, generate, trained, refit, generate + trained + refit)]
    b = DTYPE_BYTES[run["trainer"]["compute_dtype"] or run["model"]["dtype"]]
    push = d["params"] * b / cal.push_bytes_per_s
    for g in range(1, gpus):
        generate = generation_seconds(d, run, gpus, memory, cal, prompt, mean, generators=g)
        trained = update(gpus - g)
        out.append(split(g, generate, trained, push, max(generate, trained) + push))
    return out


def best(options: list[Split]) -> Split:
    """The split of fewest GPU-hours (the colocated step among them)."""
    return min(options, key=lambda s: s.gpu_hours)


def format_overlap(jobs) -> list[str]:
    """Markdown lines: for each training job on 2 GPUs or more, the colocated step beside its best split, and
    the splits whose generators or trainers idle more than half the step."""
    rows = [j for j in jobs if j.splits]
    if not rows:
        return []
    lines = ["", "One step off (rollout.staleness 1): g of a run's GPUs only generate while the rest train, a step "
             "the longer of the two plus the weight push; the g of fewest GPU-hours beside the colocated step "
             "(every GPU generates, then trains). Seconds per step at the mean response length.", "",
             "| run | GPUs | colocated s/step (generate + update) | colocated GPU-hours | best g | generate s | "
             "score + update s | push s | s/step | GPU-hours | idle: generators, trainers |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    flagged = []
    for j in rows:
        here, chosen = j.splits[0], best(j.splits)
        idle = chosen.idle
        lines.append(f"| {j.name} | {j.gpus} | {here.step_s:.1f} ({here.generate_s:.1f} + {here.update_s:.1f}) | "
                     f"{here.gpu_hours:.0f} | {chosen.generators} | {chosen.generate_s:.1f} | {chosen.update_s:.1f} "
                     f"| {chosen.push_s:.2f} | {chosen.step_s:.1f} | {chosen.gpu_hours:.0f} | "
                     f"{idle[0]:.0%}, {idle[1]:.0%} |")  # fmt: skip
        for s in j.splits[1:]:
            roles = [r for r, share in zip(("generators", "trainers"), s.idle, strict=True) if share > IDLE_FLAG]
            if roles and s is chosen:
                flagged.append(f"- {j.name} at g = {s.generators}: its {' and '.join(roles)} idle more than half "
                               f"the step ({s.idle[0]:.0%}, {s.idle[1]:.0%})")  # fmt: skip
    if flagged:
        lines += ["", "Idle more than half the step at the best split:", *flagged]
    return lines
