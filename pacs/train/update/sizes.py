"""The run's micro-batch sizes, resolved once per job on its own devices: ``trainer.max_tokens_per_micro_batch``
and ``trainer.checkpoint_layers`` of ``auto`` become what the memory plan fits (``pacs.plan.fit``).

The device's memory is a GPU's total memory (what torch reports, as the plan's GPUs are listed), or on a CPU the
host's memory over the ranks on it; the smallest over the ranks is taken, so every rank resolves the same sizes
(their micro-batches must stay in step). The sizes fit in ``trainer.memory_limit_gb`` where it is set, else in that
memory less the calibration's headroom (``pacs.plan.fit.usable_bytes``). The calibration is the one ``pacs plan``
prices the run with (``pacs train --calibration``, which the workflow passes from ``plan.calibration``; else the
defaults), so that the plan, the preflight and the run resolve one config alike on one device. The model's shape is
read from its config; the rest (vLLM's share, the reference, the critic) from the run's config, as ``pacs plan``
counts them.
"""

import dataclasses
import re
from pathlib import Path

import torch
from transformers import AutoConfig

from pacs.config import to_dict
from pacs.plan.calibration import Calibration, load_calibration
from pacs.plan.fit import Fit, fit_sizes, is_auto
from pacs.ranks.distributed import DistEnv, all_reduce
from pacs.train.settings.config import RunConfig, TrainerConfig


def device_memory(env: DistEnv) -> int:
    """Bytes of each rank's device (module docstring), the same on every rank."""
    if str(env.device).startswith("cuda"):
        mine = torch.cuda.get_device_properties(torch.device(env.device)).total_memory
    else:
        found = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.MULTILINE)
        if found is None:
            raise RuntimeError("/proc/meminfo has no MemTotal: set trainer.memory_limit_gb for the auto sizes")
        mine = int(found.group(1)) * 1024 // max(env.local_size, 1)
    return int(all_reduce(torch.tensor(mine, dtype=torch.int64), env, "min"))


def fit_trainer(t: TrainerConfig, shape, run: dict, env: DistEnv, needs_reference: bool, critic: bool,
                cal: Calibration) -> tuple[TrainerConfig, Fit, dict]:  # fmt: skip
    """``t`` with its auto sizes resolved by the memory plan for ``shape`` and ``run`` (a run's config as a dict)
    on this job's devices under calibration ``cal``, the plan's ``Fit``, and the record of it:
    ``max_tokens_per_micro_batch``, ``checkpoint_layers``, the bytes they fit in (``memory_bytes``), the
    device's (``device_bytes``), the plan's ``planned_bytes`` at those sizes and the calibration's ``source``."""
    device = device_memory(env)
    gpus = env.world_size if str(env.device).startswith("cuda") else 0
    trainer, fit = fit_sizes(shape, run, gpus, env.world_size, needs_reference, critic, device, cal)
    resolved = dataclasses.replace(t, max_tokens_per_micro_batch=trainer["max_tokens_per_micro_batch"],
                                   checkpoint_layers=trainer["checkpoint_layers"])  # fmt: skip
    sizes = {"max_tokens_per_micro_batch": fit.tokens, "checkpoint_layers": fit.layers, "memory_bytes": fit.usable,
             "device_bytes": device, "planned_bytes": fit.peak, "calibration": cal.source}  # fmt: skip
    return resolved, fit, sizes


def resolve_sizes(config: RunConfig, env: DistEnv, needs_reference: bool, critic: bool,
                  calibration: Path | None = None) -> tuple[RunConfig, dict]:  # fmt: skip
    """``config`` with its auto sizes resolved for this job's devices under the calibration file ``calibration``
    (None: the defaults), and what was resolved ({} when nothing was auto; ``fit_trainer``). A device that cannot
    hold one group at the maximum lengths is an error naming the keys."""
    if not is_auto(to_dict(config.trainer)):
        return config, {}
    shape = AutoConfig.from_pretrained(config.model.path)
    cal = load_calibration(calibration, None)
    resolved, fit, sizes = fit_trainer(config.trainer, shape, to_dict(config), env, needs_reference, critic, cal)
    memory = sizes["memory_bytes"]
    if not fit.fits:
        raise ValueError(f"trainer.max_tokens_per_micro_batch / trainer.checkpoint_layers auto: the smallest "
                         f"micro-batch at the maximum lengths ({fit.floor} tokens: a group, or a row where the update "
                         f"splits groups) plans {fit.peak / 1e9:.1f} GB per rank with "
                         f"{fit.layers if fit.layers is not None else 'every'} layer(s) recomputing, more than the "
                         f"{memory / 1e9:.1f} GB usable of this device's {sizes['device_bytes'] / 1e9:.1f} GB; run "
                         "pacs plan for the components and the keys to change (trainer.strategy fsdp, more GPUs, "
                         "rollout.max_response_length, trainer.memory_limit_gb)")  # fmt: skip
    if env.main:
        print(f"micro-batches sized for {memory / 1e9:.1f} GB per rank (planned {fit.peak / 1e9:.1f} GB, "
              f"{cal.source}): trainer.max_tokens_per_micro_batch {fit.tokens}, trainer.checkpoint_layers "
              f"{fit.layers}", flush=True)  # fmt: skip
    return dataclasses.replace(config, trainer=resolved), sizes
