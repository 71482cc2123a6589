"""Checkpoints that are complete or absent, and the resume that makes a killed run end bitwise as if never killed.

``DIR/checkpoints/step_000020/`` holds the policy consolidated in HF format (safetensors, config,
tokenizer, generation config, as transformers saves them: vLLM and transformers load it as it is),
``critic/`` for PPO, ``reference/`` once a reference reset has made the reference a snapshot of the
policy, ``optimizer/`` (the optimizers' states, written by ``torch.distributed.checkpoint``: each rank
writes its own shards, so no rank ever holds the whole state), ``trainer_state.pt`` (step, counters,
the step of the last reference reset) and ``rng_rank{r}.pt`` per rank. It is written under a ``.tmp``
name and renamed when every file is on disk, so a crash mid-write leaves only a ``.tmp`` directory,
which resume deletes.
"""

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


def save_models(staging: Path, policy, tokenizer, critic, full: dict, reference=None) -> None:
    """``full["policy"]`` (and ``full["critic"]``, ``full["reference"]``): every full tensor by name, gathered
    from the shards. The reference is saved once a reset has made it a snapshot of the policy."""
    policy.save_pretrained(staging, state_dict=full["policy"], safe_serialization=True)
    tokenizer.save_pretrained(staging)
    if critic is not None:
        critic.save_pretrained(staging / "critic", state_dict=full["critic"], safe_serialization=True)
    if reference is not None:
        reference.save_pretrained(staging / "reference", state_dict=full["reference"], safe_serialization=True)


def save_optimizers(staging: Path, pairs: dict) -> None:
    """``pairs``: name -> (module, optimizer). A collective: every rank writes its shards into ``optimizer/``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    dcp.save({k: get_optimizer_state_dict(m, o) for k, (m, o) in pairs.items()}, checkpoint_id=staging / "optimizer")


def load_optimizers(path: Path, pairs: dict) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    state = {k: get_optimizer_state_dict(m, o) for k, (m, o) in pairs.items()}
    dcp.load(state, checkpoint_id=path / "optimizer")
    for k, (m, o) in pairs.items():
        set_optimizer_state_dict(m, o, state[k])


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


def save_rank_state(staging: Path, rank: int) -> None:
    torch.save(rng_state(), staging / f"rng_rank{rank}.pt")


def save_counters(staging: Path, state: dict) -> None:
    torch.save(state, staging / "trainer_state.pt")


def publish(staging: Path, root: Path, step: int, keep_last: int | None) -> Path:
    """Make the staged checkpoint visible in one rename, then drop the oldest beyond ``keep_last``."""
    for f in staging.rglob("*"):
        if f.is_file():
            with open(f, "rb") as handle:
                os.fsync(handle.fileno())
    final = checkpoint_dir(root, step)
    if final.exists():  # the same step saved by an earlier attempt that died after its rename
        shutil.rmtree(final)
    os.replace(staging, final)
    if keep_last is not None:
        for _, old in complete_checkpoints(root)[:-keep_last]:
            shutil.rmtree(old)
    return final


def load_trainer_state(path: Path, rank: int, optimizers: dict) -> tuple[dict, dict | None]:
    """Loads the optimizers' states into ``optimizers`` (name -> (module, optimizer)); returns the counters
    and this rank's RNG state (None if the checkpoint came from fewer ranks)."""
    load_optimizers(path, optimizers)
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    rng = path / f"rng_rank{rank}.pt"
    return state, (torch.load(rng, weights_only=False) if rng.exists() else None)
