"""Training speed and learning on the tiny model: PACS, PACS without weights, GRPO and PPO, same budget.

Each variant trains from the same warm-started model on the toy task; reported: held-out greedy
accuracy before and after, seconds per step and per phase (means over steps), tokens/s.
"""

import os
import platform
import tempfile
from importlib.metadata import version
from pathlib import Path

import numpy as np

from pacs.train.config import resolve
from pacs.train.loop import train

VARIANTS = {
    "pacs": {"name": "pacs"},
    "pacs-no-weights": {"name": "pacs", "options": {"weighting": "none"}},
    "grpo": {"name": "grpo"},
    "ppo": {"name": "ppo"},
}
PHASES = ("generate", "score", "old_logprobs", "update", "step")


def bench_config(algorithm: dict, model: Path, data: Path, steps: int, seed: int) -> dict:
    """The toy-task run of ``config/run_tiny.yaml``, with logging off."""
    return {
        "algorithm": algorithm,
        "model": {"path": str(model)},
        "data": {"train_files": [str(data / "train.parquet")], "heldout_files": [str(data / "heldout.parquet")]},
        "rollout": {"n": 8, "max_response_length": 16},
        "optim": {"lr": 1e-4},
        "trainer": {"total_steps": steps, "batch_size": 32, "mini_batch_size": 32, "micro_batch_size": 8, "seed": seed},
        "checkpoint": {"save_every": steps},
        "eval": {"every": steps, "max_new_tokens": 16},
        "logging": {"wandb": "disabled", "progress_bar": False},
    }


def summarize(records: list[dict]) -> dict:
    steps = [r for r in records if "time/step" in r]
    accuracy = {r["step"]: r["eval/accuracy"] for r in records if "eval/accuracy" in r}
    first, last = min(accuracy), max(accuracy)
    return {
        "heldout_accuracy_before": accuracy[first],
        "heldout_accuracy_after": accuracy[last],
        "gain": accuracy[last] - accuracy[first],
        "steps": len(steps),
        **{f"seconds_{p}": float(np.mean([r[f"time/{p}"] for r in steps])) for p in PHASES},
        "tokens_per_s": float(np.mean([r["throughput/tokens_per_s"] for r in steps])),
    }


def run_train_bench(model: Path, data: Path, steps: int, seeds: list[int], variants: list[str]) -> dict:
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    results = {}
    for name in variants:
        for seed in seeds:
            with tempfile.TemporaryDirectory() as out:
                records = []
                train(resolve(bench_config(VARIANTS[name], model, data, steps, seed)), Path(out), log=records.append)
            results[f"{name}/seed{seed}"] = {"variant": name, "seed": seed, **summarize(records)}
    return {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "torch": version("torch")},
        "model": str(model),
        "results": results,
    }
