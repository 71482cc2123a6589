"""The Snakemake workflow's tiny experiment end to end, run locally and through SLURM side by side, what reruns
when its config changes, a run through SLURM in time-limited segments, and three SLURM jobs of a run whose
teardown outlasts a job's limit (beside them all). The local run's jobs are forked from a warm process
(tests/warm_pacs.py); SLURM's are its own. Lint, dry runs, bad configs and a failing job:
tests/test_workflow_dag.py."""

import json
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest
import torch
import warm_pacs
import yaml
from conftest import write_run_config
from helpers import read_wandb_run, threads, wandb_runs, wandb_table
from safetensors.torch import load_file
from slurm_events import interrupt_training, mid_step, release_held
from workflow_runs import (
    REPO,
    REPORT_JOBS,
    TINY,
    VLLM,
    Started,
    job_counts,
    job_gpu_hours,
    merged,
    overlay,
    pacs_status,
    place_built,
    slurm_snakemake_command,
    snakemake,
    snakemake_command,
    venv_env,
)

from pacs.cli import main
from pacs.runs import checkpoint as ckpt
from pacs.runs.segments import EXIT_STOPPED, read_segments


@pytest.fixture(scope="module")
def cluster():
    """A real single-node SLURM cluster (../shared/slurm, or PACS_SLURM_DIR), started for this module if it can
    be; the reasons it cannot (the SLURM tests fail on them in CI and skip elsewhere, see ``slurm_cluster``)."""
    import importlib.util

    scripts = Path(os.environ.get("PACS_SLURM_DIR", REPO.parent / "shared" / "slurm")).resolve()
    problems = []
    if not (scripts / "start-local-slurm.sh").is_file():
        problems.append(f"no start-local-slurm.sh in {scripts} (set PACS_SLURM_DIR)")
    if os.geteuid() != 0:
        problems.append("starting the SLURM daemons needs root")
    if importlib.util.find_spec("snakemake_executor_plugin_slurm") is None:
        problems.append("snakemake-executor-plugin-slurm is not installed (pip install -e '.[slurm]')")
    if problems:
        yield problems
        return
    # 4 job slots on 2 cores (SLURM's per-job overhead overlaps); 2 fake GPUs (null devices) to schedule GPU jobs; a
    # partition `high` whose jobs preempt the default one's, requeued after a minute's grace (a warning as sites give
    # it); KillWait at its local default, 5 s: a requeue or a cancel leaves no time for a 20-s step
    env = {**os.environ, "SLURM_CPUS": "4", "SLURM_GPUS": "2", "SLURM_PREEMPT": "1", "SLURM_GRACE_TIME": "60",
           "SLURM_KILL_WAIT": "5"}  # fmt: skip
    done = subprocess.run(["bash", str(scripts / "start-local-slurm.sh")], env=env, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    yield []
    subprocess.run(["bash", str(scripts / "stop-local-slurm.sh")], capture_output=True, timeout=120)


@pytest.fixture
def slurm_cluster(cluster):
    """The SLURM cluster: required in CI, else skipped, naming what is missing."""
    if cluster:
        if os.environ.get("CI"):
            pytest.fail("; ".join(cluster))
        pytest.skip("; ".join(cluster))


# The local run trains 10 steps of 16 prompts (config/tiny.yaml: 40 of 32; the β sweep's two updates a step kept)
# with checkpoints, evaluations and in-training evaluations at 5 and 10, and samples the first HELDOUT of the toy
# task's 200 held-out problems: the same jobs and files; no assertion needs the longer training or the larger samples
PROMPTS, HELDOUT = 16, 100
SHORT = {"train": {"trainer": {"total_steps": 10, "batch_size": PROMPTS, "mini_batch_size": PROMPTS},
                   "checkpoint": {"save_every": 5}, "eval": {"every": 5}},
         "methods": {"pacs_beta": {"train": {"trainer": {"mini_batch_size": PROMPTS // 2}}}},
         "eval": {"checkpoints": [5, "last"]}, "data": {"benchmarks": {"toy_heldout": {"limit": HELDOUT}}}}  # fmt: skip


# The SLURM run's training is decided by time: jobs of LIMIT_MIN minutes (SLURM's limits are whole minutes; the
# preflight's start-up under this machine's load took 90 s, so no less), each step made STEP_DELAY_S longer
# (PACS_STEP_DELAY_S, pacs.slurm) so that the steps, not the machine, take the time; a job stops once 1.5 × (a step +
# a checkpoint + a teardown) would pass its end time (35 s once a checkpoint is measured). A start after the first
# interruption resumes at step 2 or less and can train at most 8 steps (20 s of start-up + 8 × 21 s + 35 s < 240 s
# < 20 + 9 × 21 + 35): SEGMENTED_STEPS make it stop for its limit.
LIMIT_MIN, STEP_DELAY_S, SEGMENTED_STEPS = 4, 20, 12


def slurm_config(workdir: Path, shared_data: Path, tiny_model: Path) -> str:
    """What the SLURM run adds is the SLURM path, not the computations (the local tiny run does all of
    those): one method trained on 2 (fake) GPUs, as the paper configs spread it (FSDP2; here with transformers
    rollouts, each rank generating from the gathered policy), evaluated with the base model on the toy task
    (its first HELDOUT problems, as the local run's) and one real benchmark, from the tiny model the other tests
    share (building it is a job like the others), and the reports. The training runs in segments under a limit
    of LIMIT_MIN minutes a job (and its preflight within it): the plan's start-up for a job, 10 minutes by
    default, is the calibration's ``startup_s``, here 60 s, until the preflight measures it."""
    config = merged(*(yaml.safe_load(Path(f).read_text()) for f in TINY))
    config["models"]["tiny"] = {**config["models"]["tiny"], "path": str(tiny_model)}
    del config["models"]["tiny"]["build"]
    config["methods"] = {"pacs": config["methods"]["pacs"]}
    config["released"], config["diversity"] = {}, {}  # evaluate-only models and diversity: the local run's
    config["data"]["benchmarks"] = {b: config["data"]["benchmarks"][b] for b in ("toy_heldout", "math500")}
    config["data"]["prepare"] = {"math500": config["data"]["prepare"]["math500"]}
    calibration = workdir / "calibration.json"
    calibration.write_text(json.dumps({"startup_s": 60.0, "source": "tests/test_workflow.py: a CPU job's start-up"}))
    config = merged(config, {"data": {"source": "local", "local_dir": str(shared_data),
                                      "benchmarks": {"toy_heldout": {"limit": HELDOUT}}},
                             "resources": {"train": {"gpu": 2, "max_runtime": LIMIT_MIN}},
                             "plan": {"calibration": str(calibration)},
                             "train": {"trainer": {"total_steps": SEGMENTED_STEPS, "strategy": "fsdp"},
                                       "checkpoint": {"save_every": 2}},
                             "eval": {"checkpoints": ["last"]}})  # fmt: skip
    return overlay(workdir / "slurm.yaml", config)


STOPPED_STEPS = 3
STOPPED_RUN = "results/stopped/runs/tiny/pacs/trained.json"


def stop_config(workdir: Path, shared_data: Path, tiny_model: Path) -> str:
    """The SLURM slice's config as a second experiment whose one training job (on a CPU, one rank) a user stops
    mid-step with `pacs stop`, its steps (STEP_DELAY_S) longer than the cluster's KillWait."""
    config = yaml.safe_load(Path(slurm_config(workdir, shared_data, tiny_model)).read_text())
    config = merged(config, {"name": "stopped", "resources": {"train": {"gpu": 0, "max_runtime": None}},
                             "train": {"trainer": {"total_steps": STOPPED_STEPS, "strategy": "ddp"}}})  # fmt: skip
    return overlay(workdir / "stopped.yaml", config)


class Later:
    """A command started once the SLURM jobs ``after`` have left the queue, ``before()`` first (``Started``
    otherwise)."""

    def __init__(self, command: list[str], log: Path, env: dict, timeout_s: int, after: list[str], before=None):
        self.started: Started | None = None
        self.ready = threading.Event()

        def start() -> None:
            queued = ["squeue", "-h", "-j", ",".join(after)]
            while subprocess.run(queued, capture_output=True, text=True).stdout.strip():
                time.sleep(5)
            if before is not None:
                before()
            self.started = Started(command, log, env, timeout_s)
            self.ready.set()

        threading.Thread(target=start, daemon=True).start()

    def result(self) -> subprocess.CompletedProcess:
        self.ready.wait()
        return self.started.result()

    def stop(self) -> None:
        if self.started is not None:
            self.started.stop()


def stop_mid_step(workdir: Path, config: str, env: dict, run: Later, log: list[dict], timeout_s: float) -> None:
    """`pacs stop` at a random moment of the second step of the stopped experiment's training; once that run of the
    workflow has ended, the workflow's next run (both in ``log``)."""
    trained = workdir / "results" / "stopped" / "runs" / "tiny" / "pacs"
    job, step = mid_step(trained, 1, time.monotonic() + timeout_s, random.Random(1), 8.0)
    done = subprocess.run(["pacs", "stop", config], cwd=workdir, env=env, capture_output=True, text=True)
    log.append({"time": time.time(), "job": job, "in_flight": step, "returncode": done.returncode,
                "output": done.stdout + done.stderr, "first": run.result()})  # fmt: skip
    log[-1]["status"] = pacs_status(workdir, config)  # between the two runs of the workflow
    log[-1]["again"] = subprocess.run(slurm_snakemake_command(workdir, STOPPED_RUN, "--configfile", config),
                                      capture_output=True, text=True, env=env, timeout=timeout_s)  # fmt: skip


def data_placed(source: Path, target: Path):
    """``before`` for a ``Later``: the prepared data of ``source`` (a results directory) placed in ``target``, which
    prepares the same files (one job less on the machine)."""

    def place() -> None:
        (target / "data").mkdir(parents=True, exist_ok=True)
        for f in (source / "data").glob("*.parquet"):
            shutil.copy2(f, target / "data" / f.name)

    return place


def real_overlay(workdir: Path) -> str:
    """config/tiny_real.yaml with MATH-500 only: its three other subsets are evaluated by the same code (CI
    time)."""
    real = yaml.safe_load((REPO / "config" / "tiny_real.yaml").read_text())
    for section in ("prepare", "benchmarks"):
        real["data"][section] = {"math500": real["data"][section]["math500"]}
    return overlay(workdir / "real.yaml", real)


# A job whose teardown (what follows its ranks' stop: wandb's finish, an engine's shutdown, the processes' exit)
# takes longer than its step, here a sleep after the run; on the first job a preemption's signal after its first
# step (STOP_AFTER), as SLURM's warning signal sends it. Each step is made TEARDOWN_STEP_S longer (PACS_STEP_DELAY_S),
# so that the time, not this machine's load (a step of the tiny run took 4 to 18 s beside the other tests, a job's
# start-up 8 to 60 s), decides the stops: the second job (3 minutes) has time for a step and a checkpoint after its
# first step (at most 60 + 2 × 48 s), and whatever its start-up, not for the teardown after them (more than
# 2 × 30 + 125 s; with a teardown of 110 s a start-up of 8 s once left time for them). Only the first job's teardown
# decides a stop (the longest measured); the later two are short (SHORT_TEARDOWN_S), which saves the CI minutes
TEARDOWN_S, TEARDOWN_STEP_S, SHORT_TEARDOWN_S = 125, 30, 5
TEARDOWN_JOB = """
import os, signal, sys, time
from pacs.train import launch
from pacs.runs import segments

took, run = segments.Segment.took, launch.run

def took_then_signalled(self, step, step_s=0.0, checkpoint_s=0.0):
    took(self, step, step_s, checkpoint_s)
    if step_s and step == int(os.environ.get("STOP_AFTER", 0)):
        os.kill(os.getpid(), signal.SIGUSR1)

def run_then_torn_down(*args):
    code = run(*args)
    time.sleep(float(os.environ["TEARDOWN_S"]))
    return code

segments.Segment.took, launch.run = took_then_signalled, run_then_torn_down
if __name__ == "__main__":
    from pacs.cli import main

    sys.exit(main(["train", *sys.argv[1:]]))
"""


def submit_slow_teardown_jobs(root: Path, tiny_model: Path, toy_data: Path) -> list[str]:
    """Three jobs of one 3-step run (stop margin 1) through sbatch, each after the one before: a 5-minute job
    stopped by a signal after its first step, whose teardown lasts TEARDOWN_S, a 3-minute job, a 5-minute job,
    both torn down in SHORT_TEARDOWN_S. Their SLURM ids."""
    config = write_run_config(root / "run.yaml", tiny_model, toy_data, trainer={"total_steps": 3},
                              checkpoint={"save_every": 1, "stop_margin": 1.0})  # fmt: skip
    (root / "job.py").write_text(TEARDOWN_JOB)
    jobs: list[str] = []
    for attempt, minutes, stop, teardown in ((1, 5, 1, TEARDOWN_S), (2, 3, 0, SHORT_TEARDOWN_S),
                                             (3, 5, 0, SHORT_TEARDOWN_S)):  # fmt: skip
        train = [sys.executable, str(root / "job.py"), "--config", str(config), "--out", str(root / "run")]
        command = ["sbatch", "--parsable", f"--time={minutes}", "--cpus-per-task=1", "--mem=2000",
                   f"--output={root}/job{attempt}.log", f"--chdir={root}",
                   f"--export=ALL,TEARDOWN_S={teardown},STOP_AFTER={stop},OMP_NUM_THREADS={threads()},"
                   f"PACS_STEP_DELAY_S={TEARDOWN_STEP_S}",
                   *[f"--dependency=afterany:{j}" for j in jobs[-1:]],
                   "--wrap", f"exec {shlex.join(train)}"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=venv_env(SBATCH_PARTITION="debug"))
        assert done.returncode == 0, done.stderr
        jobs.append(done.stdout.strip().split(";")[0])
    return jobs


# An evaluation longer than its job's limit (sbatch --time=EVAL_LIMIT_MIN, each of its CHUNKS chunks made
# CHUNK_DELAY_S longer by PACS_CHUNK_DELAY_S): it stops between chunks before its limit and requeues itself
EVAL_LIMIT_MIN, CHUNK_DELAY_S, CHUNKS = 2, 20, 6
EVAL_FLAGS = ["--engine", "hf", "--n", "2", "--limit", str(20 * CHUNKS), "--chunk-problems", "20", "--max-tokens",
              "16", "--workers", "1", "--wandb", "disabled"]  # fmt: skip


def submit_requeued_evaluation(root: Path, tiny_model: Path, toy_data: Path, after: list[str]) -> list[str]:
    """`pacs evaluate --requeue` as one requeueable SLURM job of EVAL_LIMIT_MIN minutes, once the jobs ``after``
    ended (the machine less loaded); its SLURM id."""
    evaluate = [sys.executable, "-m", "pacs.cli", "evaluate", "--model", str(tiny_model), "--data",
                str(toy_data / "heldout.parquet"), "--out", str(root / "eval"), "--requeue", *EVAL_FLAGS]  # fmt: skip
    command = ["sbatch", "--parsable", f"--time={EVAL_LIMIT_MIN}", "--requeue", "--open-mode=append",
               "--cpus-per-task=1", "--mem=2000", f"--output={root}/eval.log", f"--chdir={root}",
               f"--export=ALL,PACS_CHUNK_DELAY_S={CHUNK_DELAY_S},OMP_NUM_THREADS={threads()}",
               f"--dependency=afterany:{after[-1]}", "--wrap", f"exec {shlex.join(evaluate)}"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=venv_env(SBATCH_PARTITION="debug"))
    assert done.returncode == 0, done.stderr
    return [done.stdout.strip().split(";")[0]]


def slurm_job_ended(job: str) -> str | None:
    """None while SLURM may still run ``job`` (pending, held, running or requeued); once it has ended, how
    (its state, or that SLURM no longer lists it) and what `scontrol show job` says of it."""
    listed = subprocess.run(["squeue", "-h", "-j", job, "-t", "all", "-o", "%T"], capture_output=True, text=True)
    state = listed.stdout.strip()
    if state in {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "REQUEUED", "REQUEUE_HOLD", "SUSPENDED"}:
        return None
    shown = subprocess.run(["scontrol", "show", "job", job], capture_output=True, text=True)
    return f"job {job}: {state or 'no longer listed'}\n{shown.stdout}{shown.stderr}"


# the local run's jobs that start as a user's, through the `pacs` console script (the others are forked warm): GRPO's
# training and its evaluation at step 5
COLD_JOBS = r"--config \S*/run_tiny_grpo\.yaml|--suite \S*/grpo/step_000005\.yaml"


@pytest.fixture(scope="module")
def warm():
    """The local run's `pacs` (``warm_pacs``): each job forked from one process that has imported torch,
    transformers, wandb and pacs, rather than an interpreter importing them again."""
    return warm_pacs.shared()


@pytest.fixture(scope="module")
def experiments(shared_data, cluster, toy_data, tiny_model, warm, tmp_path_factory):
    """The tiny experiment run locally (`snakemake --cores 2`) and its slice through SLURM (`snakemake
    --profile slurm all`, where a cluster is up), started side by side: the SLURM run mostly waits on its
    jobs and on the plugin's polling. The local run starts from the session's toy data and warm-started tiny
    model (``place_built``: the same files as its rules build; the released random model is still built by the
    workflow's rule). {"local": (workdir, Started), "slurm": (workdir, configfile, Started)}."""
    started = {}
    workdir = tmp_path_factory.mktemp("workflow")
    place_built(workdir, toy_data, tiny_model)
    real_overlay(workdir)
    overlay(workdir / "local.yaml", merged(SHORT, {"data": {"source": "local", "local_dir": str(shared_data)}}))
    command = snakemake_command(workdir, "--cores", "2", "--configfile", *configfiles(workdir))
    env = {**warm.environ(), "PATH": f"{warm.bin}{os.pathsep}{venv_env()['PATH']}",
           warm_pacs.COLD: COLD_JOBS, warm_pacs.COLD_LOG: str(workdir.parent / "cold_jobs.txt")}  # fmt: skip
    started["local"] = (workdir, Started(command, workdir.parent / "workflow_local", env, 3600))
    if not cluster:
        # `snakemake --profile slurm` as the README sets it up: the bare name resolves through
        # ~/.config/snakemake/slurm (here XDG_CONFIG_HOME) to workflow/profiles/slurm
        root = tmp_path_factory.mktemp("slurm")
        (root / "xdg" / "snakemake").mkdir(parents=True)
        (root / "xdg" / "snakemake" / "slurm").symlink_to(REPO / "workflow" / "profiles" / "slurm")
        (root / "run").mkdir()
        config = slurm_config(root / "run", shared_data, tiny_model)
        env = venv_env(XDG_CONFIG_HOME=str(root / "xdg"), SBATCH_PARTITION="debug",
                       PACS_STEP_DELAY_S=str(STEP_DELAY_S))  # fmt: skip
        # the run's config, as the workflow writes it when it reads its config (a dry run here), trained beside it
        # in one uninterrupted job: the reference of the segmented run's weights (once the SLURM run's data job
        # has written the data)
        done = subprocess.run(snakemake_command(root / "run", "-n", "--configfile", config), capture_output=True,
                              text=True, env=env)  # fmt: skip
        assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
        command = slurm_snakemake_command(root / "run", "all", "--configfile", config)
        started["slurm"] = (root / "run", config, Started(command, root / "snakemake", env, 3600))
        # its training requeued mid-step, then preempted (tests/slurm_events.py); every requeued job's hold released
        done, interrupted = threading.Event(), []
        run_dir = root / "run" / "results" / "tiny" / "runs" / "tiny" / "pacs"
        # and `pacs status` while its second start trains (test_pacs_status_says_where_every_job_stands)
        status = lambda: pacs_status(root / "run", config)  # noqa: E731
        driver = threading.Thread(target=interrupt_training, args=(run_dir, interrupted, 2400, 0, status),
                                  daemon=True)  # fmt: skip
        driver.start()
        started["interruptions"] = (driver, interrupted, release_held(done), done)
        data = " ".join(f"results/tiny/data/toy_{split}.parquet" for split in ("train", "heldout"))
        train = shlex.join([sys.executable, "-m", "pacs.cli", "train", "--config",
                            "results/tiny/configs/run_tiny_pacs.yaml", "--out", str(root / "reference"),
                            "--nproc-per-node", "2"])  # fmt: skip
        command = ["bash", "-c", f"for f in {data}; do while [ ! -f $f ]; do sleep 2; done; done; exec {train}"]
        started["reference"] = (root / "reference", Started(command, root / "reference", venv_env(), 1800,
                                                             root / "run"))  # fmt: skip
        teardown = tmp_path_factory.mktemp("teardown")
        started["teardown"] = (teardown, submit_slow_teardown_jobs(teardown, tiny_model, toy_data))
        evaluation = tmp_path_factory.mktemp("evaluation")
        started["evaluation"] = (evaluation, submit_requeued_evaluation(evaluation, tiny_model, toy_data,
                                                                        started["teardown"][1]))  # fmt: skip
        # a second experiment, stopped by `pacs stop` mid-step (test_a_stop_saves_the_step_in_flight_and_lasts)
        (root / "stop").mkdir()
        stopping = stop_config(root / "stop", shared_data, tiny_model)
        command = slurm_snakemake_command(root / "stop", STOPPED_RUN, "--configfile", stopping)
        asked = []
        # it starts once the teardown's jobs have ended, when this machine's load is lower, with the slice's data
        later = Later(command, root / "stop.log", env, 1800, after=started["teardown"][1],
                      before=data_placed(root / "run" / "results" / "tiny", root / "stop" / "results" / "stopped"))
        stopper = threading.Thread(target=stop_mid_step, args=(root / "stop", stopping, env, later, asked, 2400),
                                   daemon=True)  # fmt: skip
        stopper.start()
        started["stop"] = (root / "stop", stopping, stopper, asked, later)
    yield started
    for name, (*_, run) in started.items():
        if isinstance(run, (Started, Later)):
            run.stop()
        elif name == "interruptions":
            run.set()  # the hold releaser ends
        else:  # SLURM jobs
            subprocess.run(["scancel", *run], capture_output=True)


@pytest.fixture(scope="module")
def tiny_run(experiments) -> Path:
    """`snakemake --cores 2` on config/tiny.yaml + the real-benchmark and vLLM overlays, trained 10 steps
    (SHORT), data from local files."""
    workdir, run = experiments["local"]
    done = run.result()
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    return workdir


def configfiles(workdir: Path, *extra: dict) -> list[str]:
    """The local run's config files (config/tiny.yaml, MATH-500 of the real subsets, PACS with vLLM, and its
    overlay local.yaml: data from local files, SHORT), then ``extra``."""
    files = [TINY[0], str(workdir / "real.yaml"), VLLM, str(workdir / "local.yaml")]
    return files + [overlay(workdir / f"extra{i}.yaml", e) for i, e in enumerate(extra)]


def test_a_warm_pacs_is_the_pacs_command(warm, tmp_path):
    """The local run's `pacs` (a job forked from the warm server) answers as the `pacs` command: the same output
    and exit code."""
    real, before = Path(sys.executable).parent / "pacs", warm.jobs()
    for argv in (["plan", "--help"], ["plan", "missing.yaml"], ["no-such-verb"]):
        runs = [subprocess.run([pacs, *argv], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                               env=warm.environ()) for pacs in ("pacs", real)]  # fmt: skip
        assert [(r.returncode, r.stdout, r.stderr) for r in runs[:1]] == [(r.returncode, r.stdout, r.stderr)
                                                                          for r in runs[1:]], argv  # fmt: skip
    assert runs[0].returncode == 2
    assert str(warm.bin) in subprocess.run(["sh", "-c", "command -v pacs"], env=warm.environ(), capture_output=True,
                                           text=True).stdout  # fmt: skip
    assert warm.jobs() == before + 3  # the server forked them (not the real command, run where it is not reached)


@pytest.mark.slow
def test_tiny_experiment_end_to_end(tiny_run):
    results = tiny_run / "results" / "tiny"
    # a training and an evaluation job started through the `pacs` console script, as a user's (COLD_JOBS), to their
    # end: the workflow finished (tiny_run), with GRPO's checkpoint and its step-5 evaluation among its outputs
    cold = (tiny_run.parent / "cold_jobs.txt").read_text().splitlines()
    assert sorted(line.split()[0] for line in cold) == ["evaluate", "train"], cold
    assert (results / "runs/tiny/grpo/checkpoints/step_000010/model.safetensors").is_file()
    assert list((results / "eval/tiny/grpo/step_000005").glob("*/metrics.json"))
    table = pd.read_csv(results / "report" / "pass_at_k.csv")
    # the numbers come from this run's evaluations
    for e in json.loads((results / "report" / "manifest.json").read_text())["evaluations"]:
        metrics = json.loads((tiny_run / e["metrics"]).read_text())
        rows = table[(table["model"] == e["model"]) & (table["method"] == e["method"]) & (table["step"] == e["step"])
                     & (table["benchmark"] == e["benchmark"])]  # fmt: skip
        assert dict(zip(rows["k"].astype(str), rows["pass_at_k"], strict=True)) == pytest.approx(
            {k: 100 * v["mean"] for k, v in metrics["pass_at_k"].items()}
        )
    main = pd.read_csv(results / "tables" / "tiny.csv", index_col=0)
    assert list(main.index) == ["Base", "PPO", "GRPO", "PACS", "PACS (β=0.5)", "PACS (β=2)", "PACS w/o weight"]
    assert "Toy addition @8" in main.columns and "MATH-500 @1" in main.columns
    final = table[(table["step"] == table.groupby(["model", "method"])["step"].transform("max"))]
    pacs = final[(final["method"] == "pacs") & (final["benchmark"] == "toy_heldout") & (final["k"] == 8)]
    assert main.loc["PACS", "Toy addition @8"] == pytest.approx(pacs["pass_at_k"].iloc[0], abs=0.005)
    tex = (results / "tables" / "tiny.tex").read_text()
    assert "\\toprule" in tex and "\\textbf{" in tex and "\\underline{" in tex
    assert "**" in (results / "tables" / "tiny.md").read_text()
    comparison = pd.read_csv(results / "tables" / "comparison.csv")
    assert set(comparison["paper_benchmark"]) == {"MATH500"}  # the one real subset evaluated (real_overlay)
    assert (comparison["delta"] == comparison["pass_at_k"] - comparison["published"]).all()
    figures = ["passk_tiny_toy_heldout", "passk_tiny_math500", "train_tiny_pacs", "train_tiny_pacs_beta_0.5",
               "dynamics_tiny_toy_heldout", "entropy_tiny", "sweep_tiny_toy_heldout_pacs_beta"]  # fmt: skip
    for stem in figures:
        for suffix in (".png", ".pdf"):
            assert (results / "figures" / f"{stem}{suffix}").stat().st_size > 1000
    assert not (results / "figures" / "dynamics_tiny_math500.png").exists()  # evaluated at the last step only
    # the sweep: one run per β, each with its β; two updates per step, so the runs differ
    betas = {v: yaml.safe_load((results / f"configs/run_tiny_pacs_beta_{v}.yaml").read_text()) for v in ("0.5", "2")}
    assert [c["algorithm"]["options"]["beta"] for c in betas.values()] == [0.5, 2.0]
    assert table[table["method"] == "pacs_beta_0.5"]["step"].unique().tolist() == [5, 10]
    pacs_run = [json.loads(x) for x in (results / "runs/tiny/pacs/metrics.jsonl").read_text().splitlines()]
    assert all(r["rollout/logprob_gap_max"] < 1e-4 for r in pacs_run[1:])  # sampled by vLLM, from current weights
    assert "rollout/logprob_gap_max" not in json.loads(
        (results / "runs/tiny/grpo/metrics.jsonl").read_text().split("\n")[1]
    )
    pairs = pd.read_csv(results / "tables" / "significance.csv")  # paired differences between methods
    assert {("pacs", "base"), ("grpo", "base"), ("pacs", "ppo"), ("pacs", "grpo"), ("pacs_no_weight", "grpo")} <= set(
        zip(pairs["method"], pairs["against"], strict=True)
    )
    assert ((pairs["ci_low"] <= pairs["difference"]) & (pairs["difference"] <= pairs["ci_high"])).all()
    cell = final.set_index(["method", "benchmark", "k"])["pass_at_k"]
    for r in pairs[pairs["benchmark"] == "toy_heldout"].itertuples():  # the two scores' difference, as reported
        want = cell[(r.method, "toy_heldout", r.k)] - cell[(r.against, "toy_heldout", r.k)]
        assert r.difference == pytest.approx(want, abs=1e-6)
    assert pairs["published_difference"].notna().any()  # the paper's own difference where it printed both
    def final_step(method):
        return 0 if method == "base" else 10

    # v2's pages beyond pass@k. Figure 6 at tiny scale: every method out of domain, on the toy code task (run in
    # the sandbox) and the toy multiple-choice task, each status counted; the main tables leave them out
    assert not {"Toy code @1", "Toy multiple choice @1"} & set(main.columns)
    ood = pd.read_csv(results / "tables" / "out_of_domain_tiny.csv")
    assert set(ood["benchmark"]) == {"toy_code_heldout", "toy_choice_heldout"} and ood["method"].nunique() == 7
    for r in ood.itertuples():
        assert r.ours == pytest.approx(cell[(r.method, r.benchmark, 1)], abs=1e-4)
        where = results / f"eval/tiny/{r.method}/step_{final_step(r.method):06d}/{r.benchmark}"
        metrics = json.loads((where / "metrics.json").read_text())
        assert metrics["task"] == {"toy_code_heldout": "code", "toy_choice_heldout": "choice"}[r.benchmark]
        assert sum(metrics["statuses"].values()) == metrics["problems"] * metrics["samples_per_problem"] > 0
    # one evaluation job per model or checkpoint (pacs evaluate --suite): its benchmarks in one process, the
    # transformers engine built once for all of them (their settings build the same one)
    assert len(list((results / "logs" / "evaluate_model").rglob("*.log"))) == 14
    done = json.loads((results / "eval/tiny/pacs/step_000010/evaluations.json").read_text())["benchmarks"]
    assert list(done) == ["toy_heldout", "toy_code_heldout", "toy_choice_heldout", "math500"]
    starts = [json.loads((tiny_run / e["metrics"]).read_text())["throughput"]["engine_start_s"] for e in done.values()]
    assert starts[0] > 0 and starts[1:] == [0, 0, 0]
    # Table 1: the evaluate-only model (random weights, seed 1) beside the trained model's Base and PACS
    released = pd.read_csv(results / "tables" / "released.csv")
    assert list(dict.fromkeys(released["row"])) == ["Tiny Qwen2 (random), As released", "Tiny Qwen2, Base",
                                                    "Tiny Qwen2, PACS"]  # fmt: skip
    random_model = released[(released["method"] == "released") & (released["benchmark"] == "toy_heldout")]
    evaluated = table[(table["model"] == "tiny_random") & (table["k"] == 1)]
    assert random_model["ours"].iloc[0] == pytest.approx(evaluated["pass_at_k"].iloc[0], abs=1e-4)
    chat = yaml.safe_load((results / "configs/eval_toy_heldout_tiny_random.yaml").read_text())["chat_template"]
    assert chat == "results/tiny/models/tiny"  # v2's template: the trained model's
    # Figure 4 and Tables 9–13 at tiny scale: every PACS variant at every k of the tables
    variants = pd.read_csv(results / "tables" / "variants_tiny.csv")
    assert list(dict.fromkeys(variants["method"])) == ["pacs", "pacs_beta_0.5", "pacs_beta_2", "pacs_no_weight"]
    # Table 3: S_div from the stored responses, embedded by the tiny embedding model. A problem whose correct
    # answers are one string adds 0; one with several strings (a correct "\\boxed{20}" beside "\\boxed{20}0022}",
    # which math-verify also reads as 20) adds between 0 and 2: S_div is 0 exactly when no used problem has two
    # (the arithmetic: tests/test_diversity.py)
    diversity = json.loads((results / "diversity/tiny/toy_heldout.json").read_text())["methods"]
    assert set(diversity) == {"base", "ppo", "grpo", "pacs", "pacs_beta_0.5", "pacs_beta_2", "pacs_no_weight"}
    for method, d in diversity.items():
        responses = pd.read_parquet(results / f"eval/tiny/{method}/step_{final_step(method):06d}/toy_heldout/responses")
        correct = responses[responses["status"] == "correct"].groupby("problem")["response"]
        sizes, strings = correct.size(), correct.nunique()
        assert d["answers"] == sizes.sum() and d["problems_used"] == (sizes >= 2).sum()
        assert d["problems_used"] + d["problems_skipped"] == HELDOUT
        mixed = int((strings[sizes >= 2] > 1).sum())
        if mixed:
            assert 0 < d["s_div"] <= 2 * mixed / d["problems_used"], (method, mixed)
        else:
            assert d["s_div"] == pytest.approx(0, abs=1e-9), method
    shown = pd.read_csv(results / "tables" / "diversity_tiny.csv", index_col=0)
    assert len(shown) == 7
    for stem in ("ood_tiny", "diversity_tiny_toy_heldout"):
        assert (results / "figures" / f"{stem}.png").stat().st_size > 1000
    report = (results / "REPORT.md").read_text()
    for heading in ("Out of domain (v2's Figure 6)", "Released models (v2's Table 1)",
                    "PACS variants (v2's Figure 4 and Tables 9–13)", "Diversity of correct answers (v2's Table 3)"):
        assert f"## {heading}" in report, heading
    assert "figures/passk_tiny_toy_heldout.png" in report and "| PACS |" in report and "comparison.csv" in report
    assert "Differences between methods" in report and "| PACS − GRPO |" in report
    check_wandb_runs(tiny_run, table)
    assert snakemake(tiny_run, "-n", "--configfile", *configfiles(tiny_run)).stdout.count("Nothing to be done") == 1
    # one preflight per distinct training job shape (the two β share one; PACS samples with vLLM here, PACS w/o
    # weight with transformers), passed before its runs started, every response at the maximum length; the
    # plan then uses its measurements
    preflights = {p.parent.name: json.loads(p.read_text()) for p in (results / "preflight").glob("*/preflight.json")}
    assert set(preflights) == {"tiny_ppo", "tiny_grpo", "tiny_pacs", "tiny_pacs_beta_0.5", "tiny_pacs_no_weight"}
    assert preflights["tiny_pacs_beta_0.5"]["runs"] == ["train/tiny/pacs_beta_0.5", "train/tiny/pacs_beta_2"]
    pacs_preflight = preflights["tiny_pacs"]
    assert pacs_preflight["logprob_gap_first_step"]["rollout/logprob_gap_max"] < 1e-4  # vLLM, checked
    assert len(pacs_preflight["steps"]) == 2 and pacs_preflight["eval"]["samples"] > 0
    assert 0 < pacs_preflight["device_peak_bytes"][0] < pacs_preflight["limit_bytes"]
    # PACS w/o weight sizes its micro-batches by memory: on this host, a rank's whole mini-batch at the maximum
    # lengths (PROMPTS groups, each packed as its prompt once and 8 responses: 512 + 8 × 16 positions); the preflight
    # reports it beside the plan's, and its worst case packs that whole share into one micro-batch
    sized = preflights["tiny_pacs_no_weight"]
    whole = PROMPTS * (512 + 8 * 16)
    assert sized["sizes"]["max_tokens_per_micro_batch"] == whole and pacs_preflight["sizes"] is None
    assert sized["worst_case"]["largest_micro_batch"] == whole and pacs_preflight["worst_case"] is None
    assert f"trainer.max_tokens_per_micro_batch {whole}" in (results / "preflight/tiny_pacs_no_weight/preflight.md"
                                                          ).read_text()  # fmt: skip
    for shape, result in preflights.items():
        ran = [json.loads(x) for x in (tiny_run / result["run_dir"] / "metrics.jsonl").read_text().splitlines()][1:]
        assert all(r["response_length/mean"] == 16 for r in ran), shape  # rollout.max_response_length
        first = min(read_segments(results / f"runs/{n.removeprefix('train/')}")[0]["time"]
                    for n in result["runs"])  # fmt: skip
        assert first > (results / "preflight" / shape / "preflight.json").stat().st_mtime
    planned = subprocess.run([sys.executable, "-m", "pacs.cli", "plan", *configfiles(tiny_run)], cwd=tiny_run,
                             capture_output=True, text=True)  # fmt: skip
    assert "Measured by pacs preflight (hours, runtime, segments): train/tiny/ppo" in planned.stdout
    # snakemake --report: every table and figure, in a category per kind, labelled by model and benchmark
    done = snakemake(tiny_run, "--report", str(tiny_run / "report.zip"), "--configfile", *configfiles(tiny_run))
    assert done.returncode == 0 and "WARNING" not in done.stderr, done.stderr[-3000:]
    with zipfile.ZipFile(tiny_run / "report.zip") as packed:
        names = {Path(n).name for n in packed.namelist()}
        html = packed.read("report/report.html").decode()
    pngs = {p.name for p in (results / "figures").glob("*.png")}
    assert pngs <= names and {"significance.html", "comparison.html", "tiny.html", "tiny_full.html"} <= names
    assert {"out_of_domain_tiny.html", "released.html", "variants_tiny.html", "diversity_tiny.html"} <= names
    for text in ("Pass@1 against training step", "Pass@k against a swept option", "Policy entropy against step",
                 "Tables", "Toy addition", "MATH-500", "PACS (β=0.5)", "paired differences between methods",
                 "Pass@k out of domain", "Diversity of correct answers (embeddings, two principal components)",
                 "released models (v2 Table 1)",
                 "out of domain (v2 Figure 6)", "diversity of correct answers (v2 Table 3)"):  # fmt: skip
        assert text in html or json.dumps(text)[1:-1] in html, text  # the report's data is JSON (β as \\u03b2)


def check_wandb_runs(workdir: Path, table: pd.DataFrame) -> None:
    """wandb offline (config/tiny.yaml's default), read back with wandb's own reader: one run per evaluation, in
    its training run's group (a base model's under the model's name), its config naming what it evaluated, its
    summary the evaluation's metrics; one run of the results: pass@k against step with a line plot per k, every
    table and every figure."""
    results = workdir / "results" / "tiny"
    evaluations = json.loads((results / "report" / "manifest.json").read_text())["evaluations"]
    assert all(len(wandb_runs(workdir / Path(e["metrics"]).parent)) == 1 for e in evaluations)
    (trained,) = wandb_runs(results / "runs/tiny/pacs")
    training = read_wandb_run(trained)
    assert (training["job_type"], training["group"], training["name"]) == ("train", "tiny-tiny-pacs", "tiny-tiny-pacs")
    # the plan's figures in its config, beside the hours its jobs held, logged at each step
    assert training["config"]["logging"]["plan"]["steps"] == 10 and training["summary"]["progress/hours"] > 0
    assert training["summary"]["progress/gpu_hours"] == 0  # CPU jobs
    for method, step, group in (("pacs", 10, "tiny-tiny-pacs"), ("base", 0, "tiny-tiny")):
        where = results / f"eval/tiny/{method}/step_{step:06d}/toy_heldout"
        run, metrics = read_wandb_run(wandb_runs(where)[0]), json.loads((where / "metrics.json").read_text())
        assert (run["job_type"], run["group"], run["state"]) == ("eval", group, "finished")
        assert {k: run["config"][k] for k in ("experiment", "model", "method", "step", "benchmark")} == {
            "experiment": "tiny", "model": "tiny", "method": method, "step": step, "benchmark": "toy_heldout"}
        assert (run["config"]["eval"]["n"], run["config"]["eval"]["temperature"]) == (8, 0.6)
        summary = run["summary"]
        assert {k: summary[f"pass@{k}"] for k in metrics["pass_at_k"]} == {
            k: v["mean"] for k, v in metrics["pass_at_k"].items()}
        assert {k: (summary[f"pass@{k}/ci_low"], summary[f"pass@{k}/ci_high"]) for k in metrics["pass_at_k"]} == {
            k: (v["ci_low"], v["ci_high"]) for k, v in metrics["pass_at_k"].items()}
        assert summary["statuses/correct"] == metrics["statuses"]["correct"]
        assert summary["truncation_rate"] == metrics["truncation_rate"]  # sampled: 1 in 1,600 was cut once
        assert summary["mean_response_tokens"] == metrics["mean_response_tokens"]
    (logged,) = wandb_runs(results / "report")
    report = read_wandb_run(logged)
    assert (report["job_type"], report["name"]) == ("report", "tiny-results")
    # pass@k against step: every method's line from the base model's step 0 through steps 5 and 10
    rows = pd.DataFrame(wandb_table(report, "pass_at_k_by_step/tiny/toy_heldout")).rename(columns={"pass@k": "value"})
    assert set(rows["method"]) == {"ppo", "grpo", "pacs", "pacs_beta_0.5", "pacs_beta_2", "pacs_no_weight"}
    cells = table[table["benchmark"] == "toy_heldout"].set_index(["method", "step", "k"])["pass_at_k"]
    for r in rows.itertuples():
        assert r.step in (0, 5, 10) and r.value == cells[("base" if r.step == 0 else r.method, r.step, r.k)]
    assert len(rows) == 6 * 3 * 4  # 6 methods × 3 steps × k = 1, 2, 4, 8
    for k in (1, 2, 4, 8):
        key = f"pass@{k}_by_step/tiny/toy_heldout"
        assert report["plots"][key] == {"x": "step", "y": "pass@k", "stroke": "label"}
        assert len(wandb_table(report, f"{key}_table")) == 6 * 3
    for path in (results / "tables").glob("*.csv"):  # comparison (beside the published numbers) among them
        assert len(wandb_table(report, f"tables/{path.stem}")) == len(pd.read_csv(path)), path.name
    assert "tables/comparison" in report["summary"]
    figures = {p.stem for p in (results / "figures").glob("*.png")}
    assert {k.removeprefix("figures/") for k in report["summary"] if k.startswith("figures/")} == figures
    assert all(report["summary"][f"figures/{f}"]["_type"] == "image-file" for f in figures)


def tree(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` with its kind, size and modification time."""
    return {str(p.relative_to(root)): (p.is_dir(), p.lstat().st_size, p.lstat().st_mtime_ns) for p in root.rglob("*")}


@pytest.mark.slow
def test_pacs_status_of_the_finished_tiny_experiment_says_every_job_done_and_writes_nothing(tiny_run):
    """`pacs status` (JSON, and the terminal's table) after the local run: every run done at its last step, its
    pace and plan beside it, every preflight and evaluation done with every problem sampled, the report written,
    nothing failed; the GPU-hours its jobs' records hold (none: CPU jobs); and not one file under the working
    directory (results/ and .snakemake/) created, changed or touched."""
    configs = configfiles(tiny_run)
    before = tree(tiny_run)
    status = pacs_status(tiny_run, *configs)
    shown = subprocess.run(["pacs", "status", *configs], cwd=tiny_run, capture_output=True, text=True,
                           env=venv_env(COLUMNS="200"), timeout=300)  # fmt: skip
    assert tree(tiny_run) == before
    results = tiny_run / "results" / "tiny"
    assert len(status["runs"]) == 6 and status["schema"] == 1, status["runs"]
    for run in status["runs"]:
        records = read_segments(results / "runs" / run["model"] / run["method"])
        assert (run["state"], run["step"], run["total_steps"], run["checkpoint"]) == ("done", 10, 10, 10), run
        assert run["jobs"] == sum(1 for r in records if r["event"] == "start") and run["gpus"] == 0, run
        assert run["gpu_hours"] == job_gpu_hours(records) == 0 and run["hours"] > 0, run
        assert run["step_s"] > 0 and [s for s, _ in run["heldout"]] == [0, 5, 10], run
        assert f"{run['model']}/{run['method']}" in shown.stdout
        # each job said where its wandb run goes and how to upload it
        assert "wandb: offline (as configured); upload it later: wandb sync" in (tiny_run / run["log"]).read_text()
    assert {p["state"] for p in status["preflights"]} == {"done"}, status["preflights"]
    for evaluation in status["evaluations"]:
        assert evaluation["state"] == "done", evaluation
        assert all(b["sampled"] == b["problems"] > 0 for b in evaluation["benchmarks"]), evaluation
    assert status["failed"] == [] and status["blocked"] == {} and status["totals"]["report"], status["totals"]
    assert 0 < status["totals"]["disk_bytes"] and status["wandb"]["mode"] == "offline"
    assert shown.returncode == 0 and "experiment:" in shown.stdout and "REPORT.md written" in shown.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, expected",
    [
        # one run's hyperparameter: that training, its evaluation jobs (step 5: the toy task; the last
        # checkpoint: 2 benchmarks and 2 out of domain), its diversity, the reports; not its preflight, which the
        # learning rate does not change
        (
            {"methods": {"grpo": {"train": {"optim": {"lr": 5.0e-5}}}}},
            {"train_policy": 1, "evaluate_model": 2, "measure_diversity": 1},
        ),  # fmt: skip
        # one run's length: likewise, and not its preflight either, which trains its own steps (its key leaves out
        # total_steps; a longer run needs no new preflight)
        (
            {"methods": {"grpo": {"train": {"trainer": {"total_steps": 12}}}}},
            {"train_policy": 1, "evaluate_model": 2, "measure_diversity": 1},
        ),  # fmt: skip
        # the evaluation N of one benchmark: every evaluation job that runs it (base + 6 runs × 2 checkpoints + the
        # released model; pacs evaluate --suite samples that benchmark only), the diversity measured on it, the reports
        ({"data": {"benchmarks": {"toy_heldout": {"n": 4}}}}, {"evaluate_model": 14, "measure_diversity": 1}),
        # what a run computes (PACS's β): its training again (the old run moved aside by pacs train), its evaluations
        (
            {"methods": {"pacs": {"algorithm": {"options": {"beta": 1.5}}}}},
            {"train_policy": 1, "evaluate_model": 2, "measure_diversity": 1},
        ),  # fmt: skip
        # only how a finished run computed (GRPO's micro-batches, recompute): nothing (a stopped run would resume
        # under it, its preflight first: tests/test_train_loop.py)
        ({"methods": {"grpo": {"train": {"trainer": {"micro_batch_size": 4, "gradient_checkpointing": True}}}}}, {}),
    ],
)
def test_a_config_change_reruns_only_what_depends_on_it(tiny_run, tmp_path, change, expected):
    workdir = tmp_path / "copy"
    shutil.copytree(tiny_run, workdir, symlinks=True)  # copy2 keeps mtimes: the copy is up to date
    done = snakemake(workdir, "-n", "--configfile", *configfiles(workdir, change))
    assert job_counts(done.stdout + done.stderr) == ({**expected, **REPORT_JOBS} if expected else {}), done.stdout


@pytest.mark.slow
def test_tiny_experiment_through_slurm_stopped_requeued_and_preempted_ends_bitwise(slurm_cluster, experiments):
    """`snakemake --profile slurm all` as the README sets it up (``experiments``, beside the local run), on a
    slice of the tiny experiment (``slurm_config``). The training asks for 2 (fake) GPUs: SLURM schedules it, and
    it runs its launcher once, which starts 2 ranks (FSDP2 on CPU). It is one SLURM job that SLURM starts several
    times: in its first start `scontrol requeue` at a random moment of a step, KillWait too short for the step
    (it resumes from its last checkpoint, the step in flight lost); its jobs of LIMIT_MIN minutes, steps slowed
    by a setting, each stopping when the next step, its checkpoint and the teardown would pass its end time, and
    requeuing itself; after such a stop a job of partition `high` preempts it at a random moment of a step, with a
    minute's grace (the step in flight saved, the job requeued); and unattended, through all of it, the run ends
    bitwise where the same run does in one uninterrupted job (trained meanwhile, beside it, at full speed), with
    no resubmission by Snakemake. A stop weighed on given times: tests/test_segments.py."""
    workdir, local, run = experiments["slurm"]
    done = run.result()
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-5000:]
    driver, interrupted, *_ = experiments["interruptions"]
    driver.join(timeout=60)
    assert [i["what"] for i in interrupted] == ["requeue", "during", "preempt"], interrupted
    reference, trained = experiments["reference"]
    trained = trained.result()
    assert trained.returncode == 0, (trained.stdout + trained.stderr)[-3000:]
    results = workdir / "results" / "tiny"
    assert (results / "REPORT.md").is_file() and (results / "tables" / "tiny.tex").is_file()
    assert len(pd.read_csv(results / "tables" / "comparison.csv")) > 0

    run_dir = results / "runs" / "tiny" / "pacs"
    segments = read_segments(run_dir)
    starts = [s for s in segments if s["event"] == "start"]
    assert len({s["slurm_job"] for s in starts}) == 1, segments  # one job, started again by SLURM
    assert [s["restart"] for s in starts] == list(range(len(starts))) and all(s["end_time"] for s in starts)
    after = lambda t: [r for r in segments if r["time"] > t]  # noqa: E731
    requeued, _, preempted = interrupted
    # requeued with KillWait shorter than the step: the ranks heard SIGTERM and died in the step; the next start
    # resumes from the last checkpoint (every 2 steps), the step in flight lost
    signalled, *rest = after(requeued["time"])
    resumed = next(r for r in rest if r["event"] == "start")
    assert signalled["event"] == "signal" and rest[0] is resumed, after(requeued["time"])[:4]
    assert requeued["in_flight"] - 2 <= resumed["step"] < requeued["in_flight"], (requeued, resumed)
    # preempted with a grace: the step in flight saved, the job requeued by itself, resumed there
    signalled, stop, ended, start = after(preempted["time"])[:4]
    assert (signalled["event"], stop["event"], stop["reason"]) == ("signal", "stop", "signal SIGTERM"), stop
    assert stop["step"] == preempted["in_flight"] == start["step"] and start["event"] == "start", (stop, start)
    assert (ended["event"], ended["code"]) == ("exit", EXIT_STOPPED)
    # stops for the time limit, held to what this test sees rather than to the rule's own figures (need_s): the
    # job's end (SLURM's, LIMIT_MIN after the job started, before its launcher), its pace (wall-clock seconds a
    # step from its start to its stop, checkpoints and all), the stop's and the exit's times. Each job saved and
    # left before its end, and stopped no sooner than it had to: what was left then was less than 1.5 × (one more
    # step and its checkpoint, shorter than two steps, and an exit as long as any seen); the next start resumes there
    limits = [s for s in segments if s["event"] == "stop" and s["reason"] == "time limit"]
    assert limits and [s["reason"] for s in segments if s["event"] == "stop"][-1] == "done", segments
    paces, teardowns = [], []
    for stop in limits:
        start = [s for s in starts if s["time"] < stop["time"]][-1]
        end = start["end_time"]
        assert 0 <= start["launched"] - (end - LIMIT_MIN * 60) < LIMIT_MIN * 30, (start, LIMIT_MIN)
        ended = next(h for h in segments if h["event"] == "exit" and h["time"] > stop["time"])
        assert ended["code"] == EXIT_STOPPED and stop["time"] < ended["time"] < end, (stop, ended, end)
        paces.append((stop["time"] - start["time"]) / (stop["step"] - start["step"]))
        teardowns.append(ended["time"] - stop["time"])
        assert paces[-1] >= STEP_DELAY_S, (start, stop)  # the delay is in every step
        assert end - stop["time"] < 1.5 * (2 * max(paces) + max(teardowns)), (start, stop, ended, paces, teardowns)
        assert next(h for h in segments if h["event"] == "start" and h["time"] > stop["time"])["step"] == stop["step"]
    last = f"checkpoints/step_{SEGMENTED_STEPS:06d}/model.safetensors"
    ours, theirs = load_file(run_dir / last), load_file(reference / last)
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    log = (run_dir / "logs" / "jobs.log").read_text()
    assert log.count("stopped early (time limit)") == 2 * len(limits)  # each rank of each job that stopped
    assert log.count(f"requeued SLURM job {starts[0]['slurm_job']}") == len(limits) + 1  # and the preempted one

    # every job but `all` and the report's (their localrules, run here) went through sbatch once
    submitted = Counter(re.findall(r"submitted with SLURM jobid \S+ \(log: \S*/rule_(\w+)/", output, re.I))
    planned = job_counts(snakemake(workdir, "-n", "-F", "--configfile", local).stdout)
    here = set(REPORT_JOBS)  # `all` and the report's localrules
    assert here <= set(planned), planned
    assert submitted == {rule: count for rule, count in planned.items() if rule not in here}, (submitted, planned)
    launches = [json.loads(x) for x in (run_dir / "launches.jsonl").read_text().splitlines()]
    assert len(launches) == len(starts), launches  # one launcher per start (not one per GPU), inside the job
    for launch in launches:  # over both GPUs
        assert launch["visible_devices"] == "0,1" and launch["nproc_per_node"] == 2, launch
        assert "torch.distributed.run" in launch["command"], launch
    assert any((run_dir / "checkpoints").glob("step_*/rng_rank1.pt"))  # the second rank ran

    # `pacs status` once it is done: every job done, the run's GPU-hours its jobs' recorded times × their 2 GPUs
    status = pacs_status(workdir, local)
    (entry,) = status["runs"]
    assert (entry["state"], entry["step"], entry["jobs"], entry["gpus"]) == ("done", SEGMENTED_STEPS, len(starts), 2)
    assert all(s["gpus"] == 2 and s["launched"] < s["time"] for s in starts), starts
    assert entry["gpu_hours"] == pytest.approx(job_gpu_hours(segments)) and entry["gpu_hours"] > 0
    assert entry["slurm"]["job"] == starts[-1]["slurm_job"]
    assert {e["state"] for e in status["evaluations"] + status["preflights"]} == {"done"}, status
    assert status["failed"] == [] and status["totals"]["report"] and status["totals"]["eta"] == status["time"]



@pytest.mark.slow
def test_pacs_status_while_a_slurm_job_trains_says_its_step_state_and_pace(slurm_cluster, experiments):
    """`pacs status --json` (a process of its own, as on a login node) while the SLURM slice's second start trains,
    taken at a moment when none of the run's files changed while it read them (tests/slurm_events.py,
    ``while_running``): the run is running, at the step and checkpoint its files hold, in its second job, the SLURM
    job its records name listed as running, its pace the delayed steps', its end still to come; what waits on the
    run waits."""
    driver, interrupted, *_ = experiments["interruptions"]
    driver.join(timeout=2400)
    during = next(i for i in interrupted if i["what"] == "during")
    status, records = during["taken"], during["records"]
    starts = [r for r in records if r["event"] == "start"]
    (entry,) = status["runs"]
    assert (entry["state"], entry["step"], entry["jobs"]) == ("running", during["step"], len(starts)), entry
    saved = [int(c.removeprefix("step_")) for c in during["checkpoints"] if re.fullmatch(r"step_\d{6,}", c)]
    # none where the start resumed from step 0 and has not saved yet
    assert entry["checkpoint"] == max(saved, default=None), (entry, during["checkpoints"])
    assert entry["holder"]["pid"] and entry["slurm"]["job"] == starts[-1]["slurm_job"], entry
    assert entry["slurm"]["state"] == "RUNNING" and status["slurm"], entry
    assert entry["step_s"] > STEP_DELAY_S and entry["eta"] > status["time"] and entry["gpu_hours"] > 0, entry
    trained = [e for e in status["evaluations"] if e["method"] == "pacs"]
    assert trained and {e["state"] for e in trained} == {"waiting"}, trained
    assert {p["state"] for p in status["preflights"]} == {"done"} and status["failed"] == [], status


@pytest.mark.slow
def test_an_evaluation_longer_than_its_limit_finishes_in_several_starts_each_chunk_sampled_once(
    slurm_cluster, experiments, tiny_model, toy_data, tmp_path
):  # fmt: skip
    """`pacs evaluate --requeue` in one SLURM job of EVAL_LIMIT_MIN minutes, its chunks slowed by a setting
    (``submit_requeued_evaluation``, beside the local run): it stops between chunks before its limit, its chunks
    kept, requeues itself, and SLURM starts it again until done; every chunk is sampled once, and the responses
    are those of the same evaluation run in one go."""
    root, (job,) = experiments["evaluation"]
    deadline = time.monotonic() + 2400  # against a hang only: it shares the one node with the slice's jobs
    log = lambda: (root / "eval.log").read_text() if (root / "eval.log").exists() else ""  # noqa: E731
    while not (root / "eval" / "metrics.json").exists():
        ended = slurm_job_ended(job)
        assert ended is None and time.monotonic() < deadline, (ended, log()[-3000:])
        time.sleep(2)
    text = log()
    assert text.count("stopped before its next chunk (time limit)") >= 1, text[-3000:]
    assert text.count(f"requeued SLURM job {job}") == text.count("stopped before its next chunk (time limit)")
    chunks = [int(c) for c in re.findall(rf"^chunk (\d+)/{CHUNKS}:", text, re.MULTILINE)]
    assert sorted(chunks) == list(range(1, CHUNKS + 1)), chunks  # each once, across the starts
    whole = tmp_path / "whole"
    assert main(["evaluate", "--model", str(tiny_model), "--data", str(toy_data / "heldout.parquet"), "--out",
                 str(whole), *EVAL_FLAGS]) == 0  # fmt: skip
    pd.testing.assert_frame_equal(pd.read_parquet(root / "eval" / "responses"), pd.read_parquet(whole / "responses"))


@pytest.mark.slow
def test_a_job_keeps_time_for_its_teardown_so_that_its_last_step_is_kept(slurm_cluster, experiments):
    """Three SLURM jobs of one run, the first's teardown TEARDOWN_S long (``submit_slow_teardown_jobs``, beside
    the local run): the launcher records each job's teardown after its stop, and a later job stops when its next
    step, that step's checkpoint and the longest teardown measured would pass its end time. Here the second job
    (3 minutes) stops after one step rather than train the last step and be killed in a teardown as long (where
    Snakemake would delete the final checkpoint it had written and the next job train the last step again); the
    third trains the last step and ends within its limit."""
    root, jobs = experiments["teardown"]
    deadline = time.monotonic() + 1200
    logs = lambda: [p.read_text()[-2000:] for p in sorted(root.glob("job*.log"))]  # noqa: E731
    while subprocess.run(["squeue", "-h", "-j", jobs[-1], "-t", "PENDING,RUNNING,CONFIGURING,COMPLETING"],
                         capture_output=True, text=True).stdout.strip():  # fmt: skip
        assert time.monotonic() < deadline, logs()
        time.sleep(2)
    records = read_segments(root / "run")
    starts = [i for i, r in enumerate(records) if r["event"] == "start"]
    assert len(starts) == 3, (records, logs())
    first, second, third = (records[i:j] for i, j in zip(starts, [*starts[1:], len(records)], strict=True))
    # the first: stopped by the signal after step 1, saved, exited after its teardown
    assert [r["event"] for r in first] == ["start", "signal", "stop", "exit"], first
    assert (first[2]["step"], first[2]["reason"], first[3]["code"]) == (1, "signal SIGUSR1", EXIT_STOPPED)
    assert first[3]["teardown_s"] >= TEARDOWN_S
    # the second: one step, then a stop for the limit: the next step and its checkpoint would have ended in time,
    # the teardown after them not
    start, stop, ended = second
    assert (start["restart"], start["step"], stop["step"], stop["reason"]) == (0, 1, 2, "time limit"), second
    finished = stop["time"] + stop["step_s"] + stop["checkpoint_s"]
    assert finished < start["end_time"] < finished + first[3]["teardown_s"]
    assert ended["event"] == "exit"  # when SLURM's SIGTERM cut the teardown short, up to it
    # the third: the last step, saved, and the teardown within its limit
    assert [r["event"] for r in third] == ["start", "stop", "exit"], third
    assert (third[0]["step"], third[1]["reason"], third[2]["code"]) == (2, "done", 0)
    assert third[2]["time"] < third[0]["end_time"]
    assert ckpt.latest_checkpoint(root / "run" / "checkpoints")[0] == 3


@pytest.mark.slow
def test_a_stop_saves_the_step_in_flight_and_lasts_until_the_workflow_runs_again(slurm_cluster, experiments):
    """`pacs stop` (the documented stop) at a random moment of a training step longer than the cluster's KillWait,
    where `scancel` would lose the step: the job saves that step, exits as stopped without requeuing itself, and
    Snakemake submits it no more; the stop stands until the workflow's next run, which removes it and resumes the
    run from the step saved (both runs beside the others: ``stop_mid_step``)."""
    workdir, config, stopper, asked, run = experiments["stop"]
    stopper.join(timeout=2400)
    ((stopped,),) = (asked,)
    done, again = stopped["first"], stopped["again"]
    output = done.stdout + done.stderr
    assert stopped["returncode"] == 0 and "wrote" in stopped["output"], stopped
    assert "Snakemake (pid" in stopped["output"] and "submits nothing more" in stopped["output"], stopped["output"]
    assert done.returncode != 0, output[-3000:]  # the stopped job is the workflow's last, unfinished
    assert len(re.findall(r"submitted with SLURM jobid \S+ \(log: \S*/rule_train_policy/", output)) == 1, output
    assert "prepare_dataset" not in output  # the slice's data, placed
    run_dir = workdir / "results" / "stopped" / "runs" / "tiny" / "pacs"
    records = [r for r in read_segments(run_dir) if r["time"] > stopped["time"]]
    stop, ended, *_ = records
    assert (stop["event"], stop["reason"], stop["step"]) == ("stop", "stop asked", stopped["in_flight"]), records
    assert stop["step_s"] > 5 + 1  # longer than KillWait: scancel's SIGKILL would have come first
    assert (ended["event"], ended["code"]) == ("exit", EXIT_STOPPED), records
    assert [r["event"] for r in records[2:3]] == ["start"]  # nothing more until the next run of the workflow
    # `pacs status` between the two runs: the run stopped, saved at the step in flight, and why
    (entry,) = [r for r in stopped["status"]["runs"] if r["method"] == "pacs"]
    assert (entry["state"], entry["reason"], entry["step"]) == ("stopped", "stop asked", stopped["in_flight"]), entry
    assert entry["checkpoint"] == stopped["in_flight"] and entry["log_tail"], entry
    assert "requeued" not in (run_dir / "logs" / "jobs.log").read_text().split("stopped early (stop asked)")[1][:2000]
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    assert "is over: removed results/stopped/STOP" in again.stdout + again.stderr
    assert not (workdir / "results" / "stopped" / "STOP").exists()
    resumed = records[2]
    assert resumed["step"] == stopped["in_flight"] and json.loads((run_dir / "trained.json").read_text())[
        "step"] == STOPPED_STEPS  # fmt: skip
