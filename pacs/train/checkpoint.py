"""Checkpoints that are complete or absent, and the resume that makes a killed run end bitwise as if never killed.

``DIR/checkpoints/step_000020/`` holds the policy in HF format (safetensors, config, tokenizer,
generation config, as transformers saves them), ``critic/`` for PPO, ``trainer_state.pt``
(optimizers, step, counters) and ``rng_rank{r}.pt`` per rank. It is written under a ``.tmp`` name
and renamed when every file is on disk, so a crash mid-write leaves only a ``.tmp`` directory,
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


def save_models(staging: Path, policy, tokenizer, critic=None) -> None:
    policy.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    if critic is not None:
        critic.save_pretrained(staging / "critic", safe_serialization=True)


def rng_state() -> dict:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}


def set_rng_state(state: dict) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])


def save_rank_state(staging: Path, rank: int) -> None:
    torch.save(rng_state(), staging / f"rng_rank{rank}.pt")


def save_trainer_state(staging: Path, state: dict) -> None:
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


def load_trainer_state(path: Path, rank: int) -> tuple[dict, dict | None]:
    """The trainer state and this rank's RNG state (None if the checkpoint came from fewer ranks)."""
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    rng = path / f"rng_rank{rank}.pt"
    return state, (torch.load(rng, weights_only=False) if rng.exists() else None)
