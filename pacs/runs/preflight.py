"""``pacs preflight``: a few steps of one training job on the job's own resources, every response at its maximum
length, so that what would fail hours into the run fails in minutes, and the plan's constants become
measurements.

Its spec (JSON; the workflow writes one per distinct training job shape, ``pacs.experiment.preflight_specs``):
``name`` (the plan's job), ``runs`` (the jobs it stands for), ``run`` (the run config), ``steps``, ``keys``
(where the run's keys live in the workflow config), ``memory`` (``limit``: bytes of the device the plan checks
against; ``plan``: the plan's peak per GPU; ``generate``/``no_grad``/``update``: the plan's components of each
phase, ``pacs.plan.memory``) and ``eval``
(``benchmark``, ``data``, ``settings`` of the heaviest evaluation of its runs, or null).

In ``DIR``:
1. ``run.yaml`` and ``run/``: the run with ``steps`` steps, ``rollout.ignore_eos`` (every sample as long as
   ``rollout.max_response_length``), a checkpoint at the last step, no held-out evaluation and no wandb,
   trained by the command of the training job itself (``pacs train``: torchrun, srun across nodes, with
   ``--worst-case``). The first step pays for warm-up and the optimizer's state; the last one is the run's
   slowest step. Every group at the maximum lengths packs one group per micro-batch where a token budget
   holds less than two, so after its last step the job also runs a no-grad pass and an update of the largest
   micro-batches the budget packs (``pacs.train.loop.worst_case``: the positions of the budget, within a group's
   rounding); its largest micro-batch under 90 % of what the run can pack fails the preflight. Each rank's
   peak memory in each phase (``pacs.ranks.memory``: on a GPU the device's use, the CUDA context, NCCL and vLLM
   awake included, a sleeping vLLM's pool not, beside torch's reserved and allocated peaks; else the process's
   resident peak) is checked against ``memory.limit`` (``trainer.memory_limit_gb`` where set, else the device's),
   and on a GPU against the plan's usable bytes (``memory.usable``, the card less the headroom: ``check_reserved``);
   beside generator ranks (``rollout.generator_ranks``), the largest generator's peak too. The sizes a
   ``trainer`` key of ``auto`` resolved to on those devices (``pacs.train.update.sizes``, with the plan's
   calibration: ``pacs preflight --calibration``) are reported beside the plan's (``memory.sizes``).
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
from pacs.plan.memory import PHASES, group_tokens, update_splits_groups
from pacs.runs.segments import EXIT_STOPPED, read_segments

OUT_OF_MEMORY = ("OutOfMemoryError", "out of memory", "CUDA error: out of memory")
FILLED = 0.9  # of the positions the run can pack into a micro-batch, at least, in the preflight's largest


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
        # its steps to the end: it stops for its job's time limit only when the next step could not finish in it
        "checkpoint": {**run["checkpoint"], "save_every": steps, "keep_weights": None, "stop_margin": 1.0},
        "eval": {**run["eval"], "every": 0},
        "logging": {**run["logging"], "wandb": "disabled", "progress_bar": False},
    }


def _gb(n: float) -> str:
    return f"{n / 1e9:.3g} GB"


def memory_change(spec: dict, phases=PHASES) -> str:
    """The keys of the plan's largest components in ``phases`` (all of them when an out-of-memory error does
    not say which phase ran out)."""
    from pacs.plan.jobs import memory_fixes

    memory, keys = spec["memory"], spec["keys"]
    fixes = [memory_fixes(memory[p], keys) for p in phases if p in memory]
    if memory.get("sizes"):  # sizes of auto: a lower limit makes them smaller, whatever the plan's arithmetic missed
        fixes.insert(0, f"{keys}.trainer.memory_limit_gb (below the device's: the auto sizes then fit in less)")
    return "; ".join(dict.fromkeys(f for fix in fixes for f in fix.split("; ") if f))


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


def phase_bytes(peaks: dict) -> dict[str, float]:
    """One rank's bytes per phase on its device: the device's use on a GPU, else the resident peak."""
    return {phase: p.get("device", p["rss"]) * 1e9 for phase, p in peaks["phases"].items()}


def check_memory(spec: dict, peaks: list[dict]) -> list[dict[str, float]]:
    """Each rank's bytes per phase (``phase_bytes``); an error naming the rank and phase when one exceeds the
    device's memory, with the plan's figure and largest components for that phase."""
    from pacs.plan.jobs import largest

    used = [phase_bytes(p) for p in peaks]
    limit = spec["memory"]["limit"]
    measured = [(r, phase) for r, u in enumerate(used) for phase in u]
    rank, phase = max(measured, key=lambda rp: used[rp[0]][rp[1]], default=(0, None))
    if limit is not None and phase is not None and used[rank][phase] > limit:
        where = "in use on its GPU" if "device" in peaks[rank]["phases"][phase] else "resident (the process)"
        plan = spec["memory"].get(phase, {})  # a spec written before the plan counted this phase has none
        parts = ", ".join(f"{k} {_gb(v)}" for k, v in largest(plan))
        raise PreflightError(
            f"{spec['name']}: rank {rank} peaked at {_gb(used[rank][phase])} {where} in the {phase} phase (the "
            f"plan's largest parts of it: {parts}) with every response at "
            f"{spec['run']['rollout']['max_response_length']} tokens, more than the {_gb(limit)} of a "
            f"{spec['memory']['device']} (the plan estimated {_gb(sum(plan.values()))}); "
            f"change {memory_change(spec, [phase])}"
        )
    check_reserved(spec, peaks)
    return used


def check_reserved(spec: dict, peaks: list[dict]) -> None:
    """On GPUs, each rank's use of its device in each phase (torch's reserved peak: its tensors and the caching
    allocator's blocks no tensor fills, less a sleeping vLLM's pool, with the CUDA context and NCCL: what the
    plan's phases count) against the plan's usable bytes (``memory.usable``: the card less the headroom, or
    ``trainer.memory_limit_gb``): an error naming the rank, the phase and by how much, before any out-of-memory
    error: the preflight's two steps fragment the allocator less than a run's hundreds of mixed lengths."""
    usable = spec["memory"].get("usable")
    if not usable:
        return
    for rank, p in enumerate(peaks):
        for phase, measured in p["phases"].items():
            if "device" not in measured:
                continue  # a CPU's resident peak: no allocator to fragment, no plan of it
            used = measured["device"] * 1e9
            if used > usable:
                plan = sum(spec["memory"].get(phase, {}).values())
                raise PreflightError(
                    f"{spec['name']}: rank {rank} used {_gb(used)} of its GPU in the {phase} phase (torch's "
                    f"reserved {_gb(measured.get('torch', 0.0) * 1e9)}), {_gb(used - usable)} over the {_gb(usable)} "
                    f"the plan may use (it planned {_gb(plan)}): it has not run out of memory in two steps, but a "
                    f"run's mixed lengths fragment the allocator more; change {memory_change(spec, [phase])}"
                )  # fmt: skip


def check_generator_memory(spec: dict, peaks: dict) -> float | None:
    """The largest generator rank's bytes (``memory/generator_peak_*`` of the run's last step, GB: the device's
    use on a GPU, else the resident peak), None without generator ranks; an error when it exceeds the device."""
    if not peaks:
        return None
    used, limit = peaks.get("device", peaks["rss"]) * 1e9, spec["memory"]["limit"]
    if limit is not None and used > limit:
        where = "in use on its GPU" if "device" in peaks else "resident (the process)"
        longest = spec["run"]["rollout"]["max_response_length"]
        raise PreflightError(f"{spec['name']}: a generator rank peaked at {_gb(used)} {where} with every response "
                             f"at {longest} tokens, more than the {_gb(limit)} of a {spec['memory']['device']}; lower "
                             f"{spec['keys']}.rollout.vllm.generator_memory_utilization (or "
                             "rollout.max_response_length)")  # fmt: skip
    return used


def run_training(spec: dict, out: Path, launcher: list[str]) -> dict:
    """Train the preflight's steps with the job's own launcher; the measurements of its records."""
    config = out / "run.yaml"
    atomic_write_text(config, yaml.safe_dump(preflight_run_config(spec["run"], spec["steps"]), sort_keys=False))
    run_dir = out / "run"
    shutil.rmtree(run_dir, ignore_errors=True)
    began = time.time()
    code = subprocess.run([*launcher, "--config", str(config), "--out", str(run_dir), "--worst-case"]).returncode
    if code == EXIT_STOPPED:
        reason = next((h["reason"] for h in reversed(read_segments(run_dir)) if h["event"] == "stop"), "time limit")
        if reason != "time limit":  # a preemption's SIGTERM, a cancel, a stop asked: nothing wrong with the run
            raise PreflightError(f"{spec['name']}: the preflight's training was stopped ({reason}) before its "
                                 f"{spec['steps']} steps ended; run it again (run directory {run_dir})")  # fmt: skip
        raise PreflightError(f"{spec['name']}: the preflight's training stopped for its job's time limit before its "
                             f"{spec['steps']} steps ended; raise preflight.runtime (and resources.train.max_runtime "
                             f"if it caps it) (run directory {run_dir})")  # fmt: skip
    if code:
        raise train_failure(spec, run_dir, code)
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if "time/step" in r]
    history = read_segments(run_dir)
    start, stop = history[0], [h for h in history if h["event"] == "stop"][-1]
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
        "sizes": start.get("sizes"),  # trainer keys of auto, as the job resolved them on its devices
        "cuda_allocator": start.get("cuda_allocator"),
        "peaks": stop["peak_gb"],  # the trainers' (the worst case's included); the generators' come with each batch
        "worst_case": stop.get("worst_case"),
        "generator_peaks": {
            k.removeprefix("memory/generator_peak_").removesuffix("_gb"): v
            for k, v in last.items()
            if k.startswith("memory/generator_peak_")
        },  # fmt: skip
        "logprob_gap_first_step": {k: steps[0][k] for k in steps[0] if k.startswith("rollout/logprob_gap")},
        "run_dir": str(run_dir),
    }


def check_worst_case(spec: dict, train: dict) -> dict | None:
    """The largest micro-batch the preflight measured beside what the run can pack: the token budget, or a rank's
    whole share of a mini-batch at the maximum lengths where that is less (one group at least); an error when it
    fell under ``FILLED`` of it. None without a budget (micro_batch_size prompts: the steps' own are the largest)."""
    run, sizes = spec["run"], train["sizes"] or {}
    budget = sizes.get("max_tokens_per_micro_batch") or run["trainer"]["max_tokens_per_micro_batch"]
    if not budget:
        return None
    worst = train["worst_case"]
    if worst is None:
        raise PreflightError(f"{spec['name']}: the preflight's training recorded no worst case (pacs train "
                             "--worst-case): its largest micro-batches were not measured")  # fmt: skip
    full = group_tokens(run)[0]
    shares = -(-run["trainer"]["mini_batch_size"] // len(train["peaks"]))  # groups of a rank's share of a mini-batch
    reachable = min(budget, shares * full)
    if not update_splits_groups(run):  # its budget is set (the run's own, or auto)
        reachable = max(full, reachable)  # a group above the budget runs whole
    if worst["largest_micro_batch"] < FILLED * reachable:
        largest = worst["largest_micro_batch"]
        raise PreflightError(f"{spec['name']}: the preflight's largest micro-batch held {largest} positions, under "
                             f"{FILLED:.0%} of the {reachable} the run can pack with trainer.max_tokens_per_micro_batch"
                             f" {budget}: the memory of the run's largest micro-batches was not measured (a defect of "
                             "pacs.train.update.worst: report it)")  # fmt: skip
    return {**worst, "reachable": reachable}


def read_back(spec: dict, root: Path) -> dict:
    from pacs.ranks.distributed import DistEnv
    from pacs.runs.checkpoint import complete_checkpoints
    from pacs.runs.retention import problems

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


def pacs_command() -> list[str]:
    """The `pacs` command this process was started as (the workflow's jobs run `pacs`, found on their PATH), so that
    the preflight's training and evaluation run as the jobs they stand for do; else this interpreter's
    ``-m pacs.cli`` (started as ``python -m pacs.cli``)."""
    found = shutil.which(sys.argv[0]) if Path(sys.argv[0]).name == "pacs" else None  # a path, or looked up on PATH
    return [found] if found else [sys.executable, "-m", "pacs.cli"]


def evaluate_chunk(spec: dict, checkpoint: str, out: Path, pacs: list[str]) -> dict:
    """One chunk of the heaviest evaluation, on the checkpoint, by ``pacs evaluate`` (a fresh process)."""
    settings = spec["eval"]["settings"]
    limit = min(settings["chunk_problems"], settings["limit"] or settings["chunk_problems"])
    config = out / "eval.yaml"
    atomic_write_text(config, yaml.safe_dump({**settings, "limit": limit}, sort_keys=False))
    command = [*pacs, "evaluate", "--config", str(config), "--model", checkpoint,
               "--data", spec["eval"]["data"], "--out", str(out / "eval"), "--restart-on-change",
               "--wandb", "disabled"]  # fmt: skip
    shutil.rmtree(out / "eval", ignore_errors=True)
    if subprocess.run(command).returncode:
        raise PreflightError(f"{spec['name']}: one evaluation chunk of {spec['eval']['benchmark']} failed (the "
                             "error above); change eval.settings (or the benchmark's n)")  # fmt: skip
    metrics = json.loads((out / "eval" / "metrics.json").read_text())
    return {
        "benchmark": spec["eval"]["benchmark"],
        "problems": limit,
        "samples": limit * settings["n"],
        **{k: metrics["throughput"][k] for k in ("engine_start_s", "generate_s", "samples_per_s", "tokens_per_s")},
    }


def preflight(spec: dict, out: Path, pacs: list[str], train_flags: list[str]) -> dict:
    """Run the spec's preflight in ``out`` (module docstring) by the command ``pacs`` (``pacs_command``): ``pacs
    train TRAIN_FLAGS``, as its job launches it, then ``pacs evaluate``; its ``preflight.json``, or
    ``PreflightError``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "preflight.json").unlink(missing_ok=True)
    train = run_training(spec, out, [*pacs, "train", *train_flags])
    used = check_memory(spec, train["peaks"])
    train["worst_case"] = check_worst_case(spec, train)
    result = {"name": spec["name"], "runs": spec["runs"], **train, "phase_bytes": used,
              "generator_peak_bytes": check_generator_memory(spec, train["generator_peaks"]),
              "device_peak_bytes": [max(u.values(), default=0.0) for u in used],
              "plan_peak_bytes": spec["memory"]["plan"],
              "plan_phase_bytes": {p: sum(spec["memory"].get(p, {}).values()) for p in PHASES},
              "limit_bytes": spec["memory"]["limit"],
              **read_back(spec, Path(train["run_dir"]) / "checkpoints"), "spec": spec}  # fmt: skip
    result["eval"] = evaluate_chunk(spec, result["checkpoint"], out, pacs) if spec["eval"] else None
    atomic_write_text(out / "preflight.md", format_preflight(result))
    atomic_write_json(out / "preflight.json", result)
    return result


def memory_table(r: dict) -> list[str]:
    """Each phase's measured peak (the largest rank's) beside the plan's figure and largest components."""
    from pacs.plan.jobs import largest

    gpu = "device" in r["peaks"][0]["phases"].get("update", {})
    what = ("the device's use (torch's reserved peak, less a sleeping vLLM's pool, with the CUDA context, NCCL "
            "and vLLM awake), and torch's reserved and allocated peaks" if gpu else "the process's resident peak")
    limit = r["limit_bytes"]
    lines = [f"Peak memory per phase (the steps', then the largest micro-batches': the worst case): measured, {what}, "
             f"on the largest of {len(r['peaks'])} rank(s); the plan's figure for the phase (limit: "
             f"{_gb(limit) if limit else '-'}).", "",
             "| phase | measured | reserved | allocated | plan | the plan's largest parts |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for phase in PHASES:
        measured = max((u[phase] for u in r["phase_bytes"] if phase in u), default=None)
        torch_gb = {k: max((p["phases"].get(phase, {}).get(k, 0.0) for p in r["peaks"]), default=0.0) * 1e9
                    for k in ("torch", "allocated")}  # fmt: skip
        parts = ", ".join(f"{k} {_gb(v)}" for k, v in largest(r["spec"]["memory"].get(phase, {})))
        lines.append(f"| {phase} | {_gb(measured) if measured is not None else '-'} | "
                     f"{_gb(torch_gb['torch']) if gpu else '-'} | {_gb(torch_gb['allocated']) if gpu else '-'} | "
                     f"{_gb(r['plan_phase_bytes'][phase])} | {parts} |")  # fmt: skip
    return lines


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
    lines += ["", *memory_table(r)]
    lines += [
        "",
        f"- start-up (launch to the first step): {r['startup_s']:.1f} s",
        f"- checkpoint: {_gb(r['checkpoint_bytes'])} written in {r['checkpoint_s']:.1f} s, read back against "
        f"its manifest in {r['read_back_s']:.1f} s",
        f"- sampler/trainer log-prob gap at step 1: {gap or 'none (hf samples from the policy itself)'}",
    ]
    if r.get("sizes"):
        z, planned = r["sizes"], r["spec"]["memory"].get("sizes")
        plan = (f" (the plan's, for a {r['spec']['memory']['device']}: {planned['max_tokens_per_micro_batch']} "
                f"tokens, {planned['checkpoint_layers']} layers)" if planned else "")  # fmt: skip
        lines.append(f"- micro-batches sized by memory for {_gb(z['memory_bytes'])} per rank: "
                     f"trainer.max_tokens_per_micro_batch {z['max_tokens_per_micro_batch']}, trainer.checkpoint_layers "
                     f"{z['checkpoint_layers']} (planned peak {_gb(z['planned_bytes'])}){plan}")  # fmt: skip
    if r.get("worst_case"):
        w = r["worst_case"]
        allocator = r.get("cuda_allocator") or "its defaults"
        lines.append(f"- the largest micro-batch measured: {w['largest_micro_batch']} positions, "
                     f"{w['largest_micro_batch'] / w['budget']:.0%} of the token budget {w['budget']} (the run can "
                     f"pack {w['reachable']}); torch's allocator: {allocator}")  # fmt: skip
    if r.get("generator_peak_bytes") is not None:
        lines.append(f"- generator ranks: the largest peaked at {_gb(r['generator_peak_bytes'])} (the device's use on "
                     "a GPU, else the process's resident peak)")  # fmt: skip
    if r["eval"]:
        e = r["eval"]
        lines.append(f"- evaluation chunk ({e['benchmark']}): {e['samples']} samples, engine start "
                     f"{e['engine_start_s']:.1f} s, {e['samples_per_s']:.1f} samples/s, {e['tokens_per_s']:.0f} "
                     "tokens/s")  # fmt: skip
    return "\n".join(lines) + "\n"
