"""Where every job of an experiment stands, from its results directory and the workflow's logs alone, beside its
plan (pacs.plan): the dict `pacs status --json` prints (its schema: docs/commands.md, "Where a run stands").
Nothing here writes a file or takes a lock; SLURM is asked (squeue, sacct) only where it answers."""

import json
import math
import re
import time
from collections import defaultdict
from pathlib import Path

from pacs import experiment
from pacs.slurm import EXIT_STOPPED, job_states
from pacs.status.jobs import RunFiles, log_tail, read_run
from pacs.status.workflow import read_workflow_log
from pacs.writer_lock import live_holder

SCHEMA = 1
RUNNING = ("RUNNING", "COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING")
TREND = 24  # the points of a run's reward trend kept
STOP_SEEN_S = 300.0  # Snakemake sees a job end within this (a SLURM executor's status checks)


def disk_bytes(root: Path) -> int:
    """Every file's size under ``root`` (links not followed)."""
    total, stack = 0, [Path(root)]
    while stack:
        try:
            entries = list(stack.pop().iterdir())
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_symlink():
                    continue
                if entry.is_dir():
                    stack.append(entry)
                else:
                    total += entry.stat().st_size
            except OSError:
                continue
    return total


def fresh(done: Path, what: Path) -> bool:
    """A run's trained.json no older than its what-config, as the workflow judges it (common.smk, ``finished``)."""
    try:
        return done.stat().st_mtime >= what.stat().st_mtime
    except FileNotFoundError:
        return done.exists()


def slurm_of(name: str, ids: list[str], states: dict) -> dict | None:
    if not ids:
        return None
    job = max(ids, key=int)
    return {"job": job, **states.get(job, {"state": None, "reason": None})}


def eta_seconds(left: int, pace: float | None, startup: float, usable: float | None, running: bool) -> float | None:
    """Seconds until a run's last step: its steps left at ``pace``, and a start-up for each start still to come
    (one a job of ``usable`` seconds of steps; every start but a running one's)."""
    if pace is None:
        return None
    remaining = left * pace
    starts = max(1, math.ceil(remaining / usable)) if usable and usable > 0 else 1
    return remaining + (starts - (1 if running else 0)) * startup


def run_entry(name: str, files: RunFiles, run: dict, job, plan, results: str, failure, slurm: dict | None,
              preflight: dict, now: float) -> dict:  # fmt: skip
    from pacs.plan.jobs import checkpoint_seconds, startup_seconds

    model, method = name.split("/")[1:]
    cal, total = plan.calibration, run["trainer"]["total_steps"]
    done = files.trained is not None and fresh(files.out / "trained.json",
                                               Path(f"{results}/configs/run_{model}_{method}.what.yaml"))  # fmt: skip
    last = files.jobs[-1] if files.jobs else None
    ended = last.ended() if last else None
    exit_ = last.exit() if last else None
    slurm_state = (slurm or {}).get("state")
    reason = None
    # a job that stopped, saved, exits 75, which Snakemake takes for a failure: that failure is the stop's
    stop_failure = ended is not None and ended["event"] == "stop" and failure is not None and (
        failure.time is None or failure.time <= last.end(False, now) + STOP_SEEN_S)  # fmt: skip
    if done:
        state = "done"
    elif files.live or slurm_state in RUNNING:
        state = "running"
    elif ended is not None and ended["event"] == "failed":
        state, reason = "failed", ended["error"]
    elif failure is not None and not stop_failure:
        state, reason = "failed", failure.message or "its job failed"
    elif exit_ is not None and exit_.get("code") not in (0, EXIT_STOPPED, None) and slurm_state != "PENDING":
        state, reason = "failed", f"its launcher exited with {exit_['code']}"
    elif last is not None:
        state = "stopped"
        if ended is not None:
            reason = ended["reason"] if ended["reason"] != "done" else "done: trained.json not yet written"
        else:
            signal = next((r["signal"] for r in last.records if r["event"] == "signal"), None)
            reason = f"ended without saving after {signal}" if signal else "ended without a stop (killed?)"
        if files.trained is not None and ended is not None and ended["reason"] == "done":
            state, reason = "waiting", "trained under a config that has changed what it computes: trains again"
    elif preflight["state"] in ("running", "failed"):
        state = "preflight" if preflight["state"] == "running" else "waiting"
    else:
        state = "waiting"
    if slurm_state == "PENDING" and state in ("stopped", "waiting"):
        reason = "; ".join(filter(None, [reason, f"SLURM job {slurm['job']} pending ({slurm['reason']})"]))
    startup = files.startup_s() or startup_seconds(job, cal)
    plan_step = plan.step_seconds(name)
    pace = files.pace(now)
    usable = job.max_runtime and job.max_runtime * 60 / plan.settings.runtime_margin - startup - checkpoint_seconds(
        job, cal)  # fmt: skip
    step = total if done else files.step
    left = None if state in ("done", "failed") else eta_seconds(total - step, pace or plan_step, startup, usable,
                                                                 state == "running")  # fmt: skip
    metrics = files.metrics
    return {
        "name": name, "model": model, "method": method, "dir": str(files.out), "state": state, "reason": reason,
        "step": step, "total_steps": total, "checkpoint": files.checkpoints[-1] if files.checkpoints else None,
        "jobs": len(files.jobs), "holder": files.holder, "slurm": slurm,
        "step_s": pace, "plan_step_s": plan_step,
        "gpus": last.gpus if last else job.gpus, "hours": files.hours(now), "gpu_hours": files.gpu_hours(now),
        "plan_gpu_hours": job.gpu_hours,
        "eta": None if left is None else now + left,
        "reward": [[m["step"], m["reward/mean"]] for m in metrics if "reward/mean" in m][-TREND:],
        "heldout": [[m["step"], m["eval/accuracy"]] for m in metrics if "eval/accuracy" in m],
        "log": str(files.out / "logs" / "jobs.log"),
        "log_tail": log_tail(files.out / "logs" / "jobs.log") if state in ("failed", "stopped") else [],
        "blocked_by": [],
    }  # fmt: skip


def preflight_entry(shape: str, spec: dict, passed: dict, finished: bool, plan, results: str, failure,
                    slurm: dict | None, now: float) -> dict:  # fmt: skip
    out = Path(f"{results}/preflight/{shape}")
    files = read_run(out / "run")
    job = plan.job(spec["name"])
    if spec["runs"][0] in passed:
        state, reason = "done", None
    elif files.live or live_holder(out) is not None or (slurm or {}).get("state") in RUNNING:
        state, reason = "running", None
    elif failure is not None:
        state, reason = "failed", failure.message or "the preflight failed"
    elif finished:
        state, reason = "done", "not needed: every run it stands for has trained"
    else:
        state, reason = "waiting", None
    log = f"{results}/logs/preflight/{shape}.log"
    return {"name": f"preflight/{shape}", "runs": spec["runs"], "state": state, "reason": reason, "slurm": slurm,
            "gpu_hours": files.gpu_hours(now), "plan_gpu_hours": job.preflight_s and job.preflight_s * job.gpus / 3600,
            "log": log, "log_tail": log_tail(Path(log)) if state == "failed" else [], "blocked_by": []}  # fmt: skip


def benchmark_entry(config: dict, e: dict, settings: dict, out: Path) -> tuple[dict, float]:
    """One benchmark of an evaluation job: its state, problems sampled of its total; and the seconds its chunks
    took (their parquet metadata)."""
    spec = config["data"]["benchmarks"][e["benchmark"]]
    problems = spec.get("limit") or spec.get("problems")
    data = Path(experiment.data_file(config, e["benchmark"]))
    if data.is_file():
        import pyarrow.parquet as pq

        rows = pq.read_metadata(data).num_rows
        problems = min(problems or rows, rows)
    parts = sorted((out / "responses").glob("part_*.parquet")) if (out / "responses").is_dir() else []
    seconds = 0.0
    if parts:
        from pacs.io import parquet_metadata

        seconds = sum(float(parquet_metadata(p).get("chunk_s", 0.0)) for p in parts)
    done = (out / "metrics.json").is_file()
    sampled = problems if done else min(problems or math.inf, len(parts) * settings["chunk_problems"])
    state = "done" if done else ("sampling" if parts else "waiting")
    return {"benchmark": e["benchmark"], "state": state, "problems": problems,
            "sampled": None if sampled == math.inf else sampled}, seconds  # fmt: skip


def downstream(config: dict, runs: dict, specs: dict, evaluations: list[dict]) -> dict[str, set]:
    """``{job: the jobs that wait on it}``: data → preflights, runs and evaluations; a preflight → its runs; a run
    → its evaluations; an evaluation → the diversity of its model and benchmark, and the report."""
    edges: dict[str, set] = defaultdict(set)
    data = config["data"]
    train_sets = {data["train"], *([data["heldout"]] if data.get("heldout") else [])}
    for shape, spec in specs.items():
        for dataset in [*train_sets, *data["benchmarks"]]:
            edges[f"data/{dataset}"].add(f"preflight/{shape}")
        for name in spec["runs"]:
            edges[f"preflight/{shape}"].add(name)
    for model, method in runs:
        for dataset in train_sets:
            edges[f"data/{dataset}"].add(f"train/{model}/{method}")
    diversity = {d["model"]: d for d in experiment.diversity_jobs(config, runs)}
    for e in evaluations:
        name = eval_name(e)
        if e["method"] not in ("base", "released"):
            edges[f"train/{e['model']}/{e['method']}"].add(name)
        edges[f"data/{e['benchmark']}"].add(name)
        job = diversity.get(e["model"])
        if job is not None and job["benchmark"] == e["benchmark"]:
            edges[name].add(f"diversity/{e['model']}/{e['benchmark']}")
            edges[f"diversity/{e['model']}/{e['benchmark']}"].add("report")
        edges[name].add("report")
    return edges


def eval_name(e: dict) -> str:
    return f"evaluate/{e['model']}/{e['method']}/step_{int(e['step']):06d}"


def experiment_status(config: dict, now: float | None = None, slurm: bool = True) -> dict:
    """The status of the experiment ``config`` describes (a workflow config, as ``pacs.experiment`` reads it),
    from the working directory's results and Snakemake's logs."""
    now = time.time() if now is None else now
    results = experiment.results_dir(config)
    runs = experiment.run_configs(config)
    plan = experiment.plan(config, runs)
    specs = experiment.preflight_specs(config, runs, plan)
    passed = experiment.measured_preflights(config, specs)
    evaluations = experiment.evaluations(config, runs)
    settings = experiment.evaluation_settings(config, runs)
    wlog = read_workflow_log(Path.cwd())
    failure = lambda output: wlog.failed.get(output) if not Path(output).exists() else None  # noqa: E731

    files = {(m, k): read_run(Path(f"{results}/runs/{m}/{k}")) for m, k in runs}
    suites: dict[tuple, list[dict]] = defaultdict(list)
    for e in evaluations:
        suites[(e["model"], e["method"], int(e["step"]))].append(e)
    ids = {f"train/{m}/{k}": [j.slurm_job for j in f.jobs if j.slurm_job] + wlog.submitted.get(("train_policy",
           f"{m}_{k}"), []) for (m, k), f in files.items()}  # fmt: skip
    ids |= {f"preflight/{s}": wlog.submitted.get(("preflight_job", s), []) for s in specs}
    ids |= {eval_name({"model": m, "method": k, "step": s}): wlog.submitted.get(("evaluate_model", f"{m}_{k}_{s:06d}"),
            []) for m, k, s in suites}  # fmt: skip
    states = job_states([max(v, key=int) for v in ids.values() if v]) if slurm else {}

    finished = {n for (m, k), f in files.items() if f.trained is not None for n in [f"train/{m}/{k}"]}
    preflights = {}
    for shape, spec in specs.items():
        name = f"preflight/{shape}"
        preflights[name] = preflight_entry(shape, spec, passed, all(r in finished for r in spec["runs"]), plan,
                                           results, failure(f"{results}/preflight/{shape}/preflight.json"),
                                           slurm_of(name, ids[name], states), now)  # fmt: skip
    shape_of = {name: f"preflight/{shape}" for shape, spec in specs.items() for name in spec["runs"]}
    trained = {}
    for (m, k), run in runs.items():
        name = f"train/{m}/{k}"
        trained[name] = run_entry(name, files[(m, k)], run, plan.job(name), plan, results,
                                  failure(f"{results}/runs/{m}/{k}/trained.json"), slurm_of(name, ids[name], states),
                                  preflights[shape_of[name]], now)  # fmt: skip
    evaluated = {}
    for (m, k, s), suite in suites.items():
        name = eval_name({"model": m, "method": k, "step": s})
        out = Path(f"{results}/eval/{m}/{k}/step_{s:06d}")
        benchmarks, seconds = [], 0.0
        for e in suite:
            entry, took = benchmark_entry(config, e, settings[experiment.eval_config_name(config, e)],
                                          out / e["benchmark"])  # fmt: skip
            benchmarks.append(entry)
            seconds += took
        gpus = experiment.eval_gpus(config, suite[0])
        planned = [plan.job(f"{name}/{e['benchmark']}") for e in suite]
        if (out / "evaluations.json").is_file():
            state = "done"
        elif live_holder(out) is not None or (slurm_of(name, ids[name], states) or {}).get("state") in RUNNING:
            state = "running"
        elif failure(f"{out}/evaluations.json") is not None:
            state = "failed"
        elif any(b["state"] != "waiting" for b in benchmarks):
            state = "stopped"
        else:
            state = "waiting"
        fail = failure(f"{out}/evaluations.json") if state == "failed" else None
        evaluated[name] = {
            "name": name, "model": m, "method": k, "step": s, "state": state,
            "reason": fail and (fail.message or "the evaluation failed"), "benchmarks": benchmarks,
            "slurm": slurm_of(name, ids[name], states), "gpus": gpus, "gpu_hours": seconds * gpus / 3600,
            "plan_gpu_hours": None if any(j.seconds is None for j in planned) else sum(j.gpu_hours for j in planned),
            "plan_s": None if any(j.seconds is None for j in planned) else sum(j.seconds for j in planned),
            "log": f"{out}/jobs.log", "log_tail": log_tail(out / "jobs.log") if state == "failed" else [],
            "blocked_by": [],
        }  # fmt: skip

    # what waits on a failure: everything downstream of a failed job that is not done
    entries = {**preflights, **trained, **evaluated}
    edges = downstream(config, runs, specs, evaluations)
    failed = {n: {"name": n, "rule": f.rule, "log": f.log, "message": f.message,
                  "log_tail": entries[n]["log_tail"] if n in entries else log_tail(Path(f.log)) if f.log else []}
              for output, f in wlog.failed.items() if not Path(output).exists()
              for n in [job_of(output, results)]
              if n and entries.get(n, {}).get("state", "failed") == "failed"}  # a stop's exit 75 is not  # fmt: skip
    for name, entry in entries.items():
        if entry["state"] == "failed":
            failed.setdefault(name, {"name": name, "rule": None, "log": entry["log"], "message": entry["reason"],
                                     "log_tail": entry["log_tail"]})  # fmt: skip
    blocked: dict[str, list[str]] = {}
    for source in failed:
        seen, todo = set(), [source]
        while todo:
            for after in edges.get(todo.pop(), ()):
                if after not in seen and (entries.get(after, {}).get("state") != "done"):
                    seen.add(after)
                    todo.append(after)
        blocked[source] = sorted(seen)
        for after in seen:
            if after in entries:
                entries[after]["blocked_by"].append(source)

    # the end of `all`: each run's estimated end, then its evaluations; the rest from now, if every job starts when
    # it can (queue waits not counted)
    ends = []
    for name, entry in entries.items():
        if entry["state"] == "done":
            continue
        if entry["state"] == "failed" or entry["blocked_by"]:
            ends = None
            break
        if name.startswith("train/"):
            after = max((evaluated[e]["plan_s"] or 0.0 for e in edges.get(name, ()) if e in evaluated), default=0.0)
            ends.append(None if entry["eta"] is None else entry["eta"] + after)
        elif name.startswith("evaluate/") and entry["method"] in ("base", "released"):
            ends.append(None if entry["plan_s"] is None else now + entry["plan_s"])
    planned = [j.gpu_hours for j in plan.jobs] + [p["plan_gpu_hours"] for p in preflights.values()]
    priced = [h for h in planned if h is not None]
    return {
        "schema": SCHEMA,
        "experiment": config["name"],
        "results": results,
        "time": now,
        "slurm": bool(states),
        "wandb": wandb_state(config, results),
        "runs": list(trained.values()),
        "preflights": list(preflights.values()),
        "evaluations": list(evaluated.values()),
        "totals": {
            "gpu_hours": sum(e["gpu_hours"] for e in entries.values()),
            "plan_gpu_hours": sum(priced),
            "unpriced_jobs": len(planned) - len(priced),  # jobs the plan has no time for (a CPU job's evaluation)
            "disk_bytes": disk_bytes(Path(results)),
            "plan_disk_bytes": plan.disk_bytes,
            "eta": None if ends is None or any(t is None for t in ends) else max(ends, default=now),
            "report": Path(f"{results}/REPORT.md").is_file(),
            "states": {kind: count_states(group) for kind, group in (("runs", trained), ("preflights", preflights),
                                                                      ("evaluations", evaluated))},  # fmt: skip
        },
        "failed": list(failed.values()),
        "blocked": blocked,
        "workflow_log": str(wlog.path) if wlog.path else None,
    }


def count_states(entries: dict) -> dict[str, int]:
    counts: dict[str, int] = defaultdict(int)
    for entry in entries.values():
        counts[entry["state"]] += 1
    return dict(counts)


def job_of(output: str, results: str) -> str | None:
    """The status's name of the job whose output a failure names."""
    rel = output[len(results) + 1 :] if output.startswith(results + "/") else output
    patterns = ((r"runs/([^/]+)/([^/]+)/trained\.json", "train/{}/{}"), (r"preflight/([^/]+)/preflight\.json",
                "preflight/{}"), (r"eval/([^/]+)/([^/]+)/(step_\d+)/evaluations\.json", "evaluate/{}/{}/{}"),
                (r"data/([^/]+)\.parquet", "data/{}"), (r"diversity/([^/]+)/([^/]+)\.json", "diversity/{}/{}"),
                (r"REPORT\.md", "report"))  # fmt: skip
    for pattern, name in patterns:
        found = re.fullmatch(pattern, rel)
        if found:
            return name.format(*found.groups())
    return rel


def wandb_state(config: dict, results: str) -> dict:
    """The experiment's wandb mode as its jobs resolve it, and how to upload its offline runs."""
    from pacs.wandb_runs import resolve_mode

    configured = experiment.wandb_logging(config)["mode"]
    mode, why = resolve_mode(configured)
    offline = sorted(str(p) for p in Path(results).glob("**/wandb/offline-run-*"))
    return {"configured": configured, "mode": mode, "why": why, "offline_runs": len(offline),
            "sync": f"wandb sync $(find {results} -type d -name 'offline-run-*')" if offline else None}  # fmt: skip


def to_json(status: dict) -> str:
    return json.dumps(status, indent=1, default=str)
