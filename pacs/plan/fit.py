"""Micro-batches sized by memory: ``trainer.max_tokens_per_micro_batch: auto`` and ``trainer.checkpoint_layers:
auto`` resolved to what the memory plan (``pacs.plan.memory.training_memory``) fits on a device.

- A budget is at least one group at the maximum lengths, the positions the trainer computes for it
  (``pacs.plan.memory.group_tokens``: packed with its prompt shared, ``max_prompt_length`` + n ×
  ``max_response_length``), where the update holds whole groups (PACS) (the **floor**: a smaller budget would still
  run such a group alone); where it splits a group above the budget (GRPO, PPO: ``pacs.plan.memory.floor_tokens``),
  one row at those lengths. At most a rank's share of a mini-batch at those lengths (the **cap**: one micro-batch
  per mini-batch; more buys nothing).
- ``checkpoint_layers: auto``: the fewest decoder layers recomputing in backward with which the budget fits;
  with both keys auto, with which the floor fits. Recompute is work that only memory asks for, so it is bought
  first, and only as much as one group needs.
- ``max_tokens_per_micro_batch: auto``: the largest budget, from the floor in steps of ``STEP`` tokens up to the
  cap, that fits with those layers recomputing (``checkpoint_layers`` as set or resolved; every layer where it
  is null; none without ``gradient_checkpointing``). Larger micro-batches run larger matrix multiplies and fewer
  launches per token; the optimizer step is the same whatever the budget (``trainer.verl_micro_batch_size``).

A budget fits when the phases it sizes, the no-grad pass (old and reference log-probs, values) and the update
(the critic's and the actor's), plan at most the usable memory per GPU (``usable_bytes``): ``trainer.memory_limit_gb``
where it is set, else the device's memory less the calibration's ``memory_headroom`` (5 % by default: the caching
allocator's blocks no tensor fills, and what the plan's arithmetic misses); the plan's phases include
``overhead_bytes`` (the CUDA context, NCCL). The same test is the plan's own check (``pacs.plan.jobs.check_training``).
A fixed value of either key is kept as it is.
"""

import math
from dataclasses import dataclass

from pacs.plan.memory import dims, floor_tokens, group_tokens, training_memory

AUTO = "auto"
STEP = 1024  # tokens between the budgets tried
SIZED = ("no_grad", "update")  # the phases a micro-batch's size changes


@dataclass(frozen=True)
class Fit:
    tokens: int | None  # trainer.max_tokens_per_micro_batch as run (None: micro_batch_size prompts)
    layers: int | None  # trainer.checkpoint_layers as run (None: every layer)
    peak: int  # the planned bytes per GPU of the larger sized phase
    fits: bool  # False: not even the smallest choice fits (then the run is sized by it, and the plan says so)
    floor: int  # one group at the maximum lengths, tokens
    cap: int  # a rank's share of a mini-batch at the maximum lengths, tokens
    usable: int  # the bytes per GPU it fits in (usable_bytes)


def is_auto(trainer: dict) -> bool:
    return AUTO in (trainer.get("max_tokens_per_micro_batch"), trainer.get("checkpoint_layers"))


def usable_bytes(trainer: dict, device_bytes: int, cal) -> int:
    """The bytes per GPU a training job's phases must plan within: ``trainer.memory_limit_gb`` where set (as it is:
    a limit set by hand is its own margin), else ``device_bytes`` less the calibration's ``memory_headroom``."""
    limit = trainer.get("memory_limit_gb")
    return int(limit * 1e9) if limit is not None else int(device_bytes * (1 - cal.memory_headroom))


def fit_sizes(shape, run: dict, gpus: int, ranks: int, needs_reference: bool, critic: bool, device_bytes: int,
              cal) -> tuple[dict, Fit]:  # fmt: skip
    """The run's trainer section with its ``auto`` keys resolved for a device of ``device_bytes`` (module
    docstring), and the ``Fit`` behind it; ``gpus`` as ``training_memory`` takes it (0: a CPU process),
    ``ranks`` the ranks that share a mini-batch, ``cal`` the calibration (``pacs.plan.calibration``) whose
    overheads and headroom count."""
    t = run["trainer"]
    floor = floor_tokens(run)
    cap = max(math.ceil(t["mini_batch_size"] / ranks) * group_tokens(run)[0], floor)
    layers_all = dims(shape)["layers"]
    usable = usable_bytes(t, device_bytes, cal)

    def peak(tokens, layers) -> int:
        trainer = {**t, "max_tokens_per_micro_batch": tokens, "checkpoint_layers": layers}
        memory = training_memory(shape, {**run, "trainer": trainer}, gpus, needs_reference, critic, device_bytes,
                                 cal)  # fmt: skip
        return max(sum(memory[p].values()) for p in SIZED)

    def fits(tokens, layers) -> bool:
        return peak(tokens, layers) <= usable

    tokens, layers = t["max_tokens_per_micro_batch"], t.get("checkpoint_layers")
    if layers == AUTO:  # TrainerConfig refuses it without gradient_checkpointing
        sized = floor if tokens == AUTO else tokens
        layers = next((k for k in range(layers_all + 1) if fits(sized, k)), layers_all)
    if tokens == AUTO:
        steps = math.ceil((cap - floor) / STEP)
        low, high = 0, steps  # the largest k whose budget fits, or 0
        while low < high:
            mid = (low + high + 1) // 2
            if fits(min(floor + mid * STEP, cap), layers):
                low = mid
            else:
                high = mid - 1
        tokens = min(floor + low * STEP, cap)
    most = peak(tokens, layers)
    return ({**t, "max_tokens_per_micro_batch": tokens, "checkpoint_layers": layers},
            Fit(tokens, layers, most, most <= usable, floor, cap, usable))  # fmt: skip
