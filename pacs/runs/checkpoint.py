"""Checkpoints that are complete or absent, and the resume that makes a killed run end bitwise as if never killed.

``DIR/checkpoints/step_000020/`` holds the policy consolidated in HF format (safetensors, config,
tokenizer, generation config, as transformers saves them: vLLM and transformers load it as it is) in the
run's compute dtype (``trainer.compute_dtype``, else ``model.dtype``: what the trainer and the rollout
engine compute in, and what evaluation runs), ``critic/`` for PPO (in ``model.dtype``: only a resume reads
it), ``reference/`` once a reference reset has made the reference a snapshot of the policy (in the compute
dtype, the only precision it is used in), ``resume/`` (what only a resume reads, written by
``torch.distributed.checkpoint``, each rank its own shards so that no rank ever holds the whole: the
optimizers' states and, where the HF weights are in a lower dtype than ``model.dtype``, the policy's master
weights), ``trainer_state.pt`` (step, counters, the step of the last reference reset), ``rng_rank{r}.pt``
per rank (and ``inflight_rank{r}.pt``, the batches sampled ahead with ``rollout.staleness`` ≥ 1), and
``manifest.json`` (every file's size and checksum: ``pacs.runs.retention``). It is written under a ``.tmp``
name and renamed when every file is on disk, so a crash mid-write leaves only a ``.tmp`` directory, which
resume deletes.
"""

import json
import os
import random
import re
import shutil
from pathlib import Path

import numpy as np
import torch

PATTERN = re.compile(r"^step_(\d{6,})$")


def checkpoint_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step_{step:06d}"


def complete_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint, oldest first."""
    if not Path(root).is_dir():
        return []
    found = [(int(m.group(1)), p) for p in Path(root).iterdir() if p.is_dir() and (m := PATTERN.match(p.name))]
    return sorted(found)


def latest_checkpoint(root: Path) -> tuple[int, Path] | None:
    found = complete_checkpoints(root)
    return found[-1] if found else None


def remove_partial(root: Path) -> list[Path]:
    """Delete what a crash mid-write left behind; returns what was deleted."""
    partial = [p for p in Path(root).glob(".step_*.tmp")] if Path(root).is_dir() else []
    for p in partial:
        shutil.rmtree(p)
    return partial


def staging_dir(root: Path, step: int) -> Path:
    return Path(root) / f".{checkpoint_dir(root, step).name}.tmp"


def save_hf(model, directory: Path, state_dict: dict, dtype: str | None = None) -> None:
    """``model`` in HF format from its full tensors, cast to ``dtype`` (its config says so) or as they are. A
    tied weight is written once, under the name its parameter has (the embedding's)."""
    state_dict = _own_weights(model, state_dict)
    if dtype is not None:
        cast = getattr(torch, dtype)
        state_dict = {k: v.to(cast) if v.is_floating_point() else v for k, v in state_dict.items()}
    model.save_pretrained(directory, state_dict=state_dict, safe_serialization=True)
    if dtype is not None:  # transformers writes the dtype of the live (master) parameters
        config = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps({**config, "dtype": dtype}, indent=2, sort_keys=True) + "\n")


def save_models(staging: Path, policy, tokenizer, critic, full: dict, dtype: str, reference=None) -> None:
    """``full["policy"]`` (and ``full["critic"]``, ``full["reference"]``): every full tensor by name, gathered
    from the shards. The policy and the reference are written in ``dtype`` (the run's compute dtype), the critic
    as it is. The reference is saved once a reset has made it a snapshot of the policy."""
    save_hf(policy, staging, full["policy"], dtype)
    tokenizer.save_pretrained(staging)
    if critic is not None:
        save_hf(critic, staging / "critic", full["critic"])
    if reference is not None:
        save_hf(reference, staging / "reference", full["reference"], dtype)


def save_resume_state(staging: Path, optimizers: dict, masters: dict) -> None:
    """``optimizers``: name -> (module, optimizer); ``masters``: name -> module whose parameters the HF weights
    do not hold exactly. A collective: every rank writes its shards into ``resume/``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    state = {k: get_optimizer_state_dict(m, o) for k, (m, o) in optimizers.items()}
    state.update({k: _own_weights(m, get_model_state_dict(m)) for k, m in masters.items()})
    dcp.save(state, checkpoint_id=staging / "resume")


def load_resume_state(path: Path, optimizers: dict, masters: dict) -> None:
    """What ``save_resume_state`` wrote, into the optimizers and the master modules."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    flags = {k: kernel_flags(o) for k, (_, o) in optimizers.items()}
    state = {k: get_optimizer_state_dict(m, o) for k, (m, o) in optimizers.items()}
    state.update({k: _own_weights(m, get_model_state_dict(m)) for k, m in masters.items()})
    dcp.load(state, checkpoint_id=path / "resume")
    for k, (m, o) in optimizers.items():
        set_optimizer_state_dict(m, o, state[k])
        set_kernel_flags(o, flags[k])  # load_state_dict took the saved groups' flags: this run's config chooses
    for k, m in masters.items():
        missing = set_model_state_dict(m, state[k], options=StateDictOptions(strict=False)).missing_keys
        if set(missing) - _tied_names(m):
            raise RuntimeError(f"{path / 'resume'}: no master weights for {sorted(set(missing) - _tied_names(m))}")


# The param-group keys that choose how torch's Adam/AdamW steps (which kernels), not what it computes
KERNEL_FLAGS = ("fused", "foreach", "capturable", "differentiable")


def kernel_flags(optimizer) -> list[dict]:
    """Each param group's implementation flags (``KERNEL_FLAGS``), as the optimizer was built with them."""
    return [{k: g[k] for k in KERNEL_FLAGS if k in g} for g in optimizer.param_groups]


def set_kernel_flags(optimizer, flags: list[dict]) -> None:
    """Give each param group the implementation flags ``flags`` (``kernel_flags``: those the run's config built
    it with), which ``Optimizer.load_state_dict`` replaced by the checkpoint's, and each state's ``step`` the
    place those kernels keep it in (``Adam.__setstate__``), not the one the checkpoint's flags chose: fp32 on the
    parameter's device for the fused or capturable kernels, which read it there; on the CPU for the others, which
    read it as a number (on a GPU, a wait for the device per parameter and step)."""
    for group, own in zip(optimizer.param_groups, flags, strict=True):
        group.update(own)
        on_device = group.get("fused") or group.get("capturable")
        for p in group["params"]:
            step = optimizer.state.get(p, {}).get("step")
            if torch.is_tensor(step):
                optimizer.state[p]["step"] = step.to(p.device, torch.float32) if on_device else step.cpu()


def _tied_names(module) -> set[str]:
    """State-dict names that are another name's parameter (a tied LM head)."""
    return set(module.state_dict()) - {n for n, _ in module.named_parameters()} - {n for n, _ in module.named_buffers()}


def _own_weights(module, state: dict) -> dict:
    """``state`` without the names of tied weights: each tensor once."""
    tied = _tied_names(module)
    return {k: v for k, v in state.items() if k not in tied}


def rng_state() -> dict:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_rank_state(staging: Path, rank: int, inflight: dict | None = None) -> None:
    """This rank's RNG state, and the batches it sampled ahead (``pacs.train.sampling.staleness``) where there are."""
    torch.save(rng_state(), staging / f"rng_rank{rank}.pt")
    if inflight is not None:
        torch.save(inflight, staging / f"inflight_rank{rank}.pt")


def save_counters(staging: Path, state: dict) -> None:
    torch.save(state, staging / "trainer_state.pt")


def publish(staging: Path, root: Path, step: int) -> Path:
    """Make the staged checkpoint visible in one rename (replacing a set-aside broken copy of the same step)."""
    for f in staging.rglob("*"):
        if f.is_file():
            with open(f, "rb") as handle:
                os.fsync(handle.fileno())
    final = checkpoint_dir(root, step)
    if final.exists():  # the same step saved by an earlier attempt that died after its rename
        shutil.rmtree(final)
    os.replace(staging, final)
    shutil.rmtree(Path(root) / f".{final.name}.broken", ignore_errors=True)
    return final


def load_trainer_state(path: Path, rank: int, optimizers: dict, masters: dict) -> tuple[dict, dict | None]:
    """Loads the optimizers' states into ``optimizers`` (name -> (module, optimizer)) and the master weights
    into ``masters`` (name -> module); returns the counters and this rank's RNG state (None if the checkpoint
    came from fewer ranks)."""
    load_resume_state(path, optimizers, masters)
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    rng = path / f"rng_rank{rank}.pt"
    return state, (torch.load(rng, weights_only=False) if rng.exists() else None)
