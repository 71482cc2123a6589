"""``pacs preflight``: a few steps of one training job on the job's own resources, every response at its maximum
length, so that what would fail hours into the run fails in minutes, and the plan's constants become
measurements.

Its spec (JSON; the workflow writes one per distinct training job shape, ``pacs.experiment.preflight_specs``):
``name`` (the plan's job), ``runs`` (the jobs it stands for), ``run`` (the run config), ``steps``, ``keys``
(where the run's keys live in the workflow config), ``memory`` (``limit``: bytes of the device the plan checks
against; ``plan``: the plan's peak per GPU; ``update``/``generate``: the plan's components) and ``eval``
(``benchmark``, ``data``, ``settings`` of the heaviest evaluation of its runs, or null).

In ``DIR``:
1. ``run.yaml`` and ``run/``: the run with ``steps`` steps, ``rollout.ignore_eos`` (every sample as long as
   ``rollout.max_response_length``), a checkpoint at the last step, no held-out evaluation and no wandb,
   trained by the command of the training job itself (``pacs train``: torchrun, srun across nodes). The first
   step pays for warm-up and the optimizer's state; the last one is the run's worst-case step. Each rank's
   peak memory (on a GPU torch's reserved peak, else the process's resident peak) is checked against
   ``memory.limit``.
2. The checkpoint read back: every file against the sizes and SHA-256 of its manifest, as a resume checks it.
3. ``eval/``: one evaluation chunk (``chunk_problems`` problems) of that checkpoint with the benchmark's
   settings, by ``pacs evaluate``.
4. ``preflight.json`` (the measurements, and the spec they were taken under) and ``preflight.md``, written
   only when every check passed; otherwise ``PreflightError``, naming the run and the keys to change.
"""

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from pacs.io import atomic_write_json, atomic_write_text
from pacs.train.segments import read_segments

OUT_OF_MEMORY = ("OutOfMemoryError", "out of memory", "CUDA error: out of memory")


class PreflightError(RuntimeError):
    """A training job that would fail: the message names the run and what to change."""


def preflight_run_config(run: dict, steps: int) -> dict:
    """The run as its preflight trains it."""
    if steps < 2:
        raise ValueError(f"preflight.steps must be >= 2 (the first step warms up), got {steps}")
    return {
        **run,
        "rollout": {**run["rollout"], "ignore_eos": True},
        "trainer": {**run["trainer"], "total_steps": steps},
        "checkpoint": {**run["checkpoint"], "save_every": steps, "keep_weights": None},
        "eval": {**run["eval"], "every": 0},
        "logging": {**run["logging"], "wandb": "disabled", "progress_bar": False},
    }


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def memory_change(spec: dict) -> str:
    from pacs.plan.jobs import memory_fixes

    memory, keys = spec["memory"], spec["keys"]
    return "; ".join(filter(None, (memory_fixes("update", memory["update"], keys),
                                   memory_fixes("generate", memory["generate"], keys))))  # fmt: skip


def train_failure(spec: dict, out: Path, code: int) -> PreflightError:
    history = read_segments(out)
    failed = next((h for h in reversed(history) if h["event"] == "failed"), None)
    done = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()
            if '"time/step"' in line] if (out / "metrics.jsonl").exists() else []  # fmt: skip
    at = f"in step {max(done, default=0) + 1} of {spec['steps']}" if history else "before its first step"
    error = failed["error"] if failed else f"exit status {code} (its log above)"
    change = memory_change(spec) if any(m in error for m in OUT_OF_MEMORY) else "what the error names"
    return PreflightError(f"{spec['name']}: the preflight's training failed {at}: {error}; change {change} "
                          f"(run directory {out})")  # fmt: skip


def check_memory(spec: dict, peaks: list[dict]) -> list[float]:
    """Each rank's peak bytes on its device; an error when one exceeds the device's memory."""
    device = [p.get("gpu_reserved", p["rss"]) * 1e9 for p in peaks]
    limit, worst = spec["memory"]["limit"], max(range(len(device)), key=lambda r: device[r])
    if limit is not None and device[worst] > limit:
        where = "reserved by torch on its GPU" if "gpu_reserved" in peaks[worst] else "resident (the process)"
        raise PreflightError(
            f"{spec['name']}: rank {worst} peaked at {_gb(device[worst])} {where} with every response at "
            f"{spec['run']['rollout']['max_response_length']} tokens, more than the {_gb(limit)} of a "
            f"{spec['memory']['device']} (the plan estimated {_gb(spec['memory']['plan'])}); "
            f"change {memory_change(spec)}"
        )
    return device


def run_training(spec: dict, out: Path, launcher: list[str]) -> dict:
    """Train the preflight's steps with the job's own launcher; the measurements of its records."""
    config = out / "run.yaml"
    atomic_write_text(config, yaml.safe_dump(preflight_run_config(spec["run"], spec["steps"]), sort_keys=False))
    run_dir = out / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    began = time.time()
    code = subprocess.run([*launcher, "--config", str(config), "--out", str(run_dir)]).returncode
    if code:
        raise train_failure(spec, run_dir, code)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "time/step" in r]
    history = read_segments(run_dir)
    start, stop = history[0], history[-1]
    longest = spec["run"]["rollout"]["max_response_length"]
    short = [s["step"] for s in steps if s["response_length/mean"] < longest]
    if short:
        raise PreflightError(f"{spec['name']}: steps {short} sampled responses shorter than "
                             "rollout.max_response_length although the preflight ignores stop tokens")  # fmt: skip
    last = steps[-1]
    return {
        "startup_s": start["time"] - began,
        "step_s": last["time/step"],
        "steps": [{k: v for k, v in s.items() if k.startswith(("time/", "throughput/")) or k == "step"} for s in steps],
        "tokens_per_s": last["throughput/tokens_per_s"],
        "checkpoint_s": stop["checkpoint_s"],
        "peaks": stop["peak_gb"],
        "logprob_gap_first_step": {k: steps[0][k] for k in steps[0] if k.startswith("rollout/logprob_gap")},
        "run_dir": str(run_dir),
    }


def read_back(spec: dict, root: Path) -> dict:
    from pacs.train.checkpoint import complete_checkpoints
    from pacs.train.distributed import DistEnv
    from pacs.train.retention import problems

    began = time.perf_counter()
    saved = complete_checkpoints(root)
    if not saved:
        raise PreflightError(f"{spec['name']}: the preflight wrote no complete checkpoint under {root}")
    step, path = saved[-1]
    wrong = problems(path, DistEnv())
    if wrong:
        raise PreflightError(f"{spec['name']}: the checkpoint {path} does not read back as written: "
                             f"{'; '.join(wrong)}; check the file system under the run's directory")  # fmt: skip
    size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return {"checkpoint": str(path), "checkpoint_bytes": size, "read_back_s": time.perf_counter() - began}


def evaluate_chunk(spec: dict, checkpoint: str, out: Path) -> dict:
    """One chunk of the heaviest evaluation, on the checkpoint, by ``pacs evaluate`` (a fresh process)."""
    settings = spec["eval"]["settings"]
    limit = min(settings["chunk_problems"], settings["limit"] or settings["chunk_problems"])
    config = out / "eval.yaml"
    atomic_write_text(config, yaml.safe_dump({**settings, "limit": limit}, sort_keys=False))
    command = [sys.executable, "-m", "pacs.cli", "evaluate", "--config", str(config), "--model", checkpoint,
               "--data", spec["eval"]["data"], "--out", str(out / "eval"), "--restart-on-change"]  # fmt: skip
    shutil.rmtree(out / "eval", ignore_errors=True)
    if subprocess.run(command).returncode:
        raise PreflightError(f"{spec['name']}: one evaluation chunk of {spec['eval']['benchmark']} failed (the "
                             "error above); change eval.settings (or the benchmark's n)")  # fmt: skip
    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    return {"benchmark": spec["eval"]["benchmark"], "problems": limit, "samples": limit * settings["n"],
            **{k: metrics["throughput"][k] for k in ("engine_start_s", "generate_s", "samples_per_s", "tokens_per_s")}}


def preflight(spec: dict, out: Path, launcher: list[str]) -> dict:
    """Run the spec's preflight in ``out`` (module docstring); its ``preflight.json``, or ``PreflightError``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "preflight.json").unlink(missing_ok=True)
    train = run_training(spec, out, launcher)
    device = check_memory(spec, train["peaks"])
    result = {"name": spec["name"], "runs": spec["runs"], **train, "device_peak_bytes": device,
              "plan_peak_bytes": spec["memory"]["plan"], "limit_bytes": spec["memory"]["limit"],
              **read_back(spec, Path(train["run_dir"]) / "checkpoints"), "spec": spec}  # fmt: skip
    result["eval"] = evaluate_chunk(spec, result["checkpoint"], out) if spec["eval"] else None
    atomic_write_text(out / "preflight.md", format_preflight(result))
    atomic_write_json(out / "preflight.json", result)
    return result


def format_preflight(r: dict) -> str:
    phases = [k for k in r["steps"][-1] if k.startswith("time/") and k != "time/step"]
    gap = ", ".join(f"{k.split('_')[-1]} {v:.3g}" for k, v in r["logprob_gap_first_step"].items())
    lines = [f"# Preflight of {r['name']}" + (f" (also {', '.join(r['runs'][1:])})" if len(r["runs"]) > 1 else ""),
             "", f"{len(r['steps'])} steps, every response at {r['spec']['run']['rollout']['max_response_length']} "
             f"tokens, on the job's own resources ({len(r['peaks'])} rank(s)).", "",
             "| step | s/step | " + " | ".join(f"{p.removeprefix('time/')} s" for p in phases) + " | tokens/s |",
             "|---" * (len(phases) + 3) + "|"]  # fmt: skip
    for s in r["steps"]:
        lines.append(f"| {s['step']} | {s['time/step']:.2f} | " + " | ".join(f"{s[p]:.2f}" for p in phases)
                     + f" | {s['throughput/tokens_per_s']:.0f} |")  # fmt: skip
    limit = r["limit_bytes"]
    lines += ["", "| rank | peak (measured) | plan | device |", "|---|---|---|---|"]
    lines += [f"| {rank} | {_gb(b)} | {_gb(r['plan_peak_bytes'])} | {_gb(limit) if limit else '-'} |"
              for rank, b in enumerate(r["device_peak_bytes"])]  # fmt: skip
    lines += ["", f"- start-up (launch to the first step): {r['startup_s']:.1f} s",
              f"- checkpoint: {_gb(r['checkpoint_bytes'])} written in {r['checkpoint_s']:.1f} s, read back against "
              f"its manifest in {r['read_back_s']:.1f} s",
              f"- sampler/trainer log-prob gap at step 1: {gap or 'none (hf samples from the policy itself)'}"]
    if r["eval"]:
        e = r["eval"]
        lines.append(f"- evaluation chunk ({e['benchmark']}): {e['samples']} samples, engine start "
                     f"{e['engine_start_s']:.1f} s, {e['samples_per_s']:.1f} samples/s, {e['tokens_per_s']:.0f} "
                     "tokens/s")  # fmt: skip
    return "\n".join(lines) + "\n"
