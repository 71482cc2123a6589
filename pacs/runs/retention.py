"""Which checkpoints a run keeps, and which one it resumes from.

- **Manifest.** Every checkpoint is published with ``manifest.json``: each file's size and SHA-256, hashed by
  the ranks in turn (rank r the files r, r + world, … in name order), written before the rename that makes
  the checkpoint visible.
- **Resume.** A run resumes from its newest *resumable* checkpoint (one that still holds ``trainer_state.pt``)
  whose files match its manifest. One that does not (a truncated file, a missing one, no manifest) is set
  aside as ``.step_N.broken`` with the reason printed, and the next older one is tried; the set-aside copy is
  deleted when the run publishes that step again.
- **Retention** (``checkpoint.keep_resumable``, ``checkpoint.keep_weights``). The newest K checkpoints keep
  everything a resume reads. An older one keeps only its HF weights (policy, tokenizer) if its step is one
  that evaluation reads (``keep_weights``; null: every step), else it is deleted. K is at least 2, so that a
  broken newest checkpoint always has a whole one beside it.
"""

import hashlib
import json
import shutil
from pathlib import Path

from pacs.io import atomic_write_json
from pacs.ranks.distributed import DistEnv, barrier, gather_objects
from pacs.runs import checkpoint as ckpt

MANIFEST = "manifest.json"
# what only a resume reads; the rest of a checkpoint is the policy in HF format and its tokenizer
RESUME_ONLY = ("resume", "critic", "reference", "trainer_state.pt", "rng_rank*.pt", "inflight_rank*.pt")


def _files(directory: Path) -> list[Path]:
    return sorted(p for p in directory.rglob("*") if p.is_file() and p.name != MANIFEST)


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _hashed(directory: Path, names: list[str], env: DistEnv) -> dict[str, str]:
    """``{name: sha256}`` of ``names`` (relative to ``directory``), each rank hashing every world_size-th."""
    mine = {n: _digest(directory / n) for n in names[env.rank :: env.world_size]}
    return {k: v for part in gather_objects(mine, env) for k, v in part.items()}


def digests(directory: Path, env: DistEnv) -> dict[str, list]:
    """``{relative path: [bytes, sha256]}`` of every file under ``directory``, each rank hashing its share."""
    names = [str(f.relative_to(directory)) for f in _files(directory)]
    hashed = _hashed(directory, names, env)
    return {n: [(directory / n).stat().st_size, hashed[n]] for n in names}


def write_manifest(directory: Path, env: DistEnv) -> None:
    """A collective: every rank hashes its share; rank 0 writes the manifest."""
    files = digests(directory, env)
    if env.main:
        atomic_write_json(directory / MANIFEST, {"files": files})


def problems(directory: Path, env: DistEnv) -> list[str]:
    """What is wrong with ``directory`` against its manifest (every rank gets the same list); [] if whole."""
    manifest = directory / MANIFEST
    if not manifest.is_file():
        return [f"no {MANIFEST} (it is written last, before the checkpoint is published)"]
    try:
        expected = json.loads(manifest.read_text())["files"]
    except (ValueError, KeyError) as e:
        return [f"{MANIFEST} unreadable ({e})"]
    found = {str(f.relative_to(directory)): f.stat().st_size for f in _files(directory)}
    out = [f"{name}: missing" for name in sorted(set(expected) - set(found))]
    out += [f"{name}: {found[name]} bytes, the manifest says {size}" for name, (size, _) in sorted(expected.items())
            if name in found and found[name] != size]  # fmt: skip
    if out:
        return out
    names = sorted(expected)
    hashed = _hashed(directory, names, env)
    return [f"{n}: its SHA-256 differs from the manifest's" for n in names if hashed[n] != expected[n][1]]


def resumable(directory: Path) -> bool:
    return (directory / "trainer_state.pt").is_file()


def broken_dir(root: Path, step: int) -> Path:
    return Path(root) / f".{ckpt.checkpoint_dir(root, step).name}.broken"


def resume_point(root: Path, env: DistEnv, say=print) -> tuple[int, Path] | None:
    """The newest resumable checkpoint whose files match its manifest; the broken ones newer than it are set
    aside (``broken_dir``), each named with what is wrong. A collective."""
    for step, path in reversed(ckpt.complete_checkpoints(root)):
        if not resumable(path):
            continue
        wrong = problems(path, env)
        if not wrong:
            return step, path
        if env.main:
            say(f"{path}: not resumable, skipped and set aside as {broken_dir(root, step).name}: " + "; ".join(wrong))
            shutil.rmtree(broken_dir(root, step), ignore_errors=True)
            path.rename(broken_dir(root, step))
        barrier(env)
    return None


def strip_to_weights(directory: Path) -> None:
    """Delete what only a resume reads; the manifest then lists what is left."""
    for pattern in RESUME_ONLY:
        for p in directory.glob(pattern):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    manifest = directory / MANIFEST
    if manifest.is_file():
        files = json.loads(manifest.read_text())["files"]
        kept = {str(f.relative_to(directory)) for f in _files(directory)}
        atomic_write_json(manifest, {"files": {k: v for k, v in files.items() if k in kept}})


def kept_weights(config_steps: list[int] | None, file: Path | None) -> list[int] | None:
    """The steps whose HF weights outlive retention: the JSON list in ``file`` (``pacs train --keep-weights``,
    read at every save, so that the workflow can add one while a run trains), else ``checkpoint.keep_weights``."""
    if file is None:
        return config_steps
    try:
        steps = json.loads(Path(file).read_text())
    except (OSError, ValueError) as e:
        raise ValueError(f"--keep-weights {file}: not a readable JSON list of steps ({e})") from e
    if not isinstance(steps, list) or not all(isinstance(s, int) for s in steps):
        raise ValueError(f"--keep-weights {file}: expected a JSON list of steps, got {steps!r}")
    return steps


def retain(root: Path, keep_resumable: int, keep_weights: list[int] | None) -> list[str]:
    """Apply retention to the published checkpoints of ``root`` (rank 0, after a publish); returns what it did."""
    done = []
    found = ckpt.complete_checkpoints(root)
    whole = [(s, p) for s, p in found if resumable(p)][-keep_resumable:]
    for step, path in found:
        if (step, path) in whole:
            continue
        if keep_weights is None or step in keep_weights:
            if resumable(path):
                strip_to_weights(path)
                done.append(f"{path.name}: resume state deleted, HF weights kept")
        else:
            shutil.rmtree(path)
            done.append(f"{path.name}: deleted")
    return done
