"""Snakemake runs of the repository's workflow, for tests/test_workflow.py (the tiny experiment, locally and
through SLURM) and tests/test_workflow_dag.py (lint, dry runs, bad configs, failing jobs): the command and its
environment, a run started now and awaited later, config overlays, a dry run's job counts, and the session's
toy data and tiny model placed where the workflow builds them."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
TINY = [str(REPO / "config" / "tiny.yaml"), str(REPO / "config" / "tiny_real.yaml")]
VLLM = str(REPO / "config" / "tiny_vllm.yaml")  # PACS with vLLM rollouts: the local run only, not SLURM's


def snakemake_command(workdir: Path, *args: str, polled: bool = False) -> list[str]:
    """snakemake on the repository's Snakefile with ``workdir`` as its working directory (results/ there); with
    ``polled``, polling SLURM at most every POLL_S."""
    start = [sys.executable, "-c", POLLED] if polled else [sys.executable, "-m", "snakemake"]
    return [*start, "-s", str(REPO / "Snakefile"), "--directory", str(workdir), *args]


# Snakemake's SLURM plugin waits 10 s longer after each poll that finds no job ended, up to 3 minutes (its
# load on slurmctld): it learned of the SLURM slice's 7-minute training job's end 63 s late, its test's worker idle
# meanwhile. The runs through SLURM here poll at most every POLL_S: none of their checks depends on when Snakemake
# learns of an end, only on the jobs' own records
POLL_S = 10
POLLED = ("from snakemake_interface_executor_plugins.executors.remote import RemoteExecutor\n"
          "interval = RemoteExecutor.next_seconds_between_status_checks\n"
          "RemoteExecutor.next_seconds_between_status_checks = interval.setter(\n"
          f"    lambda self, seconds: interval.fset(self, seconds if seconds is None else min(seconds, {POLL_S})))\n"
          "from snakemake.cli import main\n"
          "main()\n")  # fmt: skip


def slurm_snakemake_command(workdir: Path, *args: str) -> list[str]:
    """``snakemake_command`` through the SLURM profile (``--profile slurm``), polling SLURM at most every POLL_S."""
    return snakemake_command(workdir, "--profile", "slurm", *args, polled=True)


def venv_env(**extra: str) -> dict[str, str]:
    """This environment with this Python's bin first on PATH (rules call `pacs`), and ``extra``."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **extra}


# Snakemake's SLURM plugin asks `scontrol show config` at every start (its help text), which waits 9 s for a
# controller that is down (the local cluster, started and stopped by tests/test_workflow.py, leaves its config
# behind) and answers at once when no config is given: runs that use no cluster say so
NO_CLUSTER = {"SLURM_CONF": os.devnull}


def snakemake(workdir: Path, *args: str, timeout: int = 1800) -> subprocess.CompletedProcess:
    """Snakemake run here, without SLURM (``NO_CLUSTER``)."""
    return subprocess.run(snakemake_command(workdir, *args), capture_output=True, text=True, timeout=timeout,
                          env=venv_env(**NO_CLUSTER))  # fmt: skip


class Started:
    """A command started now and awaited later (``result``), its output in files rather than pipes that could
    fill: runs that mostly wait (on SLURM's polling, on each other's jobs) go side by side. ``timeout -k``
    ends it, and whatever it started in its process group, past ``timeout_s``."""

    def __init__(self, command: list[str], log: Path, env: dict, timeout_s: int, cwd: Path | None = None):
        self.out, self.err = open(log.with_suffix(".out"), "w+"), open(log.with_suffix(".err"), "w+")
        self.proc = subprocess.Popen(["timeout", "-k", "30", str(timeout_s), *command], stdout=self.out,
                                     stderr=self.err, text=True, env=env, cwd=cwd)  # fmt: skip

    def result(self) -> subprocess.CompletedProcess:
        code = self.proc.wait()
        outputs = []
        for f in (self.out, self.err):
            f.seek(0)
            outputs.append(f.read())
        return subprocess.CompletedProcess(self.proc.args, code, *outputs)

    def stop(self) -> None:
        """End it if it still runs (a test before its wait failed): timeout leads its process group."""
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, sig)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=60)
        self.out.close()
        self.err.close()


def pacs_status(workdir: Path, *configs: str, env: dict | None = None) -> dict:
    """`pacs status --json` on the workflow run from ``workdir`` with ``configs``, as a user runs it (the console
    script, a process of its own): its JSON."""
    done = subprocess.run(["pacs", "status", "--json", *configs], cwd=workdir, capture_output=True, text=True,
                          env=env or venv_env(), timeout=300)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return json.loads(done.stdout)


def job_gpu_hours(records: list[dict]) -> float:
    """A run's GPU-hours as its records hold them: each job's GPUs × the seconds from its launcher's start to its
    ``exit`` (or, where it ended without one, its last record)."""
    total, job = 0.0, None
    for record in [*records, {"event": "start"}]:
        if record["event"] == "start":
            if job:
                end = next((r["time"] for r in job if r["event"] == "exit"), job[-1]["time"])
                total += job[0]["gpus"] * (end - job[0]["launched"]) / 3600
            job = [record]
        elif job:
            job.append(record)
    return total


def overlay(path: Path, data: dict) -> str:
    path.write_text(yaml.safe_dump(data))
    return str(path)


def merged(base: dict, extra: dict) -> dict:
    """``extra`` merged into ``base`` key by key, as Snakemake merges config files."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


# What every full run ends with, once each: pass@k collected, the tables, figures and report, their wandb run
# (wandb offline, the default), and `all`
REPORT_JOBS = {"collect_pass_at_k": 1, "make_tables": 1, "make_figures": 1, "write_report": 1,
               "log_results_to_wandb": 1, "all": 1}  # fmt: skip
# the paper's v1 experiment (config/config.yaml), planned from a clone or from a deployment of the workflow
PAPER_JOBS = {
    "prepare_dataset": 5,  # deepscaler and four benchmarks
    "preflight_job": 6,  # 2 models × PPO, GRPO and PACS (the β sweep and PACS w/o weight share PACS's)
    "train_policy": 10,  # 2 models × 5 methods
    "evaluate_model": 12,  # 2 models × (base + 5 runs), each job on the 4 benchmarks
    **REPORT_JOBS,
}


def job_counts(output: str) -> dict[str, int]:
    """The "Job stats" table of a dry run: {rule: jobs}."""
    if "Nothing to be done" in output:
        return {}
    table = output.split("Job stats:")[1].split("total")[0]
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\w+)\s+(\d+)$", table, re.M)}


def place_built(workdir: Path, toy_data: Path, tiny_model: Path) -> None:
    """The workflow's toy data and tiny model in ``workdir``, as if built there already: the session's own
    (``pacs tiny-model`` builds the same weights as the workflow's rule), copied with their times (the model
    newer than its data), so that Snakemake builds neither again."""
    data = workdir / "results" / "tiny" / "data"
    data.mkdir(parents=True)
    for split in ("train", "heldout"):
        shutil.copy2(toy_data / f"{split}.parquet", data / f"toy_{split}.parquet")
    shutil.copytree(tiny_model, workdir / "results" / "tiny" / "models" / "tiny")
