"""Where a training run starts, for ``pacs train`` (``python -m pacs.cli train``) and the workflow alike.

``launch`` decides from the request and the environment:
- already inside torchrun (``LOCAL_RANK`` set), or one process on one node: train in this process (``run``);
- several processes on one node: ``torchrun --standalone --nproc_per_node G -m pacs.cli train ...``;
- several nodes (inside a SLURM allocation): one ``srun`` step with one task per node, each task a
  ``torchrun --nnodes N --nproc_per_node G`` that meets the others at a c10d rendezvous on the
  allocation's first node (a free port found there; the hosts come from ``SLURM_JOB_NODELIST``), each
  node's output in ``OUT/logs/node{i}.log``.
Every torchrun or srun launch appends one line to ``OUT/launches.jsonl`` (what it started, where, which
job), so a job that started its launcher more than once shows it. After the job, a stop for its time limit
requeues it where asked (``--requeue``: ``continue_later``); a job started while the experiment's stop file exists
(``--stop-file``, pacs.stop) exits at once, as stopped.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from pacs.config import to_dict
from pacs.ranks.allocator import configure_allocator
from pacs.runs.lifetime import PARENT, SIGNALS_TORCHRUN_HANDLES, rank_dies_with_torchrun, wait_forwarding_stops
from pacs.runs.segments import (
    EXIT_STOPPED,
    LAUNCHED,
    JobOptions,
    how_ended,
    job_gpus,
    launched_at,
    process_started,
    read_segments,
    split_jobs,
    teardown_recorded,
)
from pacs.slurm import after_stop
from pacs.stop import describe, stop_requested
from pacs.train.settings.config import load_run_config
from pacs.wandb_runs import check_environment, start_run
from pacs.writer_lock import sole_writer


def _wandb_logger(config, out: Path, env):
    """The run's wandb run (``pacs.wandb_runs``), resumed by every job of the run, grouped with its evaluations;
    its config holds the plan's figures for the run (``logging.plan``), and each step logs the hours and GPU-hours
    the run's jobs have held so far (``progress/``: its earlier jobs' records, and this job from its launcher's
    start). Its service is a process of the job: SLURM's SIGTERM (a preemption's warning) ends it while the ranks
    finish their step, so a failed log is said once and ends the job's logging to wandb, not the job (metrics.jsonl
    keeps every step, and the next job's wandb run resumes)."""
    name = config.logging.run_name or out.resolve().name
    run = start_run(out, config.logging.wandb, config.logging.project, name, name, "train", to_dict(config))
    if run is None:
        return None, None
    failed, now = [], time.time()
    earlier = split_jobs(read_segments(out))
    hours, gpu_hours = (sum(j.seconds(False, now) for j in earlier) / 3600,
                        sum(j.gpu_hours(False, now) for j in earlier))  # fmt: skip
    gpus, launched = job_gpus(env), launched_at() or now

    def log(record: dict) -> None:
        if failed:
            return
        held = (time.time() - launched) / 3600
        progress = {"progress/hours": hours + held, "progress/gpu_hours": gpu_hours + gpus * held}
        try:
            run.log({**{k: v for k, v in record.items() if k != "step"}, **progress}, step=record["step"])
        except Exception as e:  # noqa: BLE001 (whatever the service's end raises)
            failed.append(e)
            print(f"{out}: wandb stopped taking this job's steps at step {record['step']} ({type(e).__name__}: {e}); "
                  "metrics.jsonl has every step", flush=True)  # fmt: skip

    return run, log


def run(config_path: Path, out: Path, job: JobOptions) -> int:
    """Train in this process: one rank of torchrun's RANK/WORLD_SIZE (or the only one); rank 0 alone logs
    to wandb and writes metrics. Returns 0, or ``EXIT_STOPPED`` when the job stopped early, saved."""
    import torch
    import torch.distributed as dist

    from pacs.ranks.distributed import init_distributed
    from pacs.train.loop import train

    config = load_run_config(config_path)
    if config.rollout.generator_ranks:  # the job's last ranks generate for the others (pacs.train.sampling.generators)
        from pacs.train.sampling.generators import serve
        from pacs.train.sampling.link import join

        env = join(config)
        if env.role.generator is not None:
            return serve(config, env)
    else:
        env = init_distributed(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                               int(os.environ.get("LOCAL_RANK", 0)), fsdp=config.trainer.strategy == "fsdp",
                               local_size=int(os.environ.get("LOCAL_WORLD_SIZE", 1)))  # fmt: skip
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    wandb_run, log = _wandb_logger(config, out, env) if env.main else (None, None)
    try:
        summary = train(config, out, env, log, job)
    finally:
        if wandb_run is not None:
            try:
                wandb_run.finish()
            except Exception as e:  # noqa: BLE001 (its service ended by a signal: _wandb_logger)
                print(f"{out}: wandb's run did not finish ({type(e).__name__}: {e})", flush=True)
        if dist.is_initialized():  # a vLLM engine's shutdown may have destroyed it already
            dist.destroy_process_group()
    if summary["status"] == "complete":
        print(f"{out}: already complete at step {summary['final_step']}; nothing to do")
        return 0
    print(f"{out}: trained steps {summary['start_step'] + 1}..{summary['final_step']}")
    if summary["timed_out_steps"]:
        print(f"{out}: steps {summary['timed_out_steps']} scored answers past the verifier's deadline "
              "(verifier.options.timeout_s; each step's verifier/timeout counts them): rewards the machine's load "
              "decided, so a resumed or repeated run may not match these steps bit for bit")  # fmt: skip
    if summary["status"] == "stopped":
        print(f"{out}: stopped early ({summary['reason']}), saved; the same command continues the run")
        return EXIT_STOPPED
    return 0


# torchrun as pacs.runs.lifetime runs it: deaf to SIGUSR1 (whose default action would kill it, and with it the
# job: SLURM's warning signal, sbatch --signal=USR1@SECONDS, reaches every process of the step, the ranks included,
# which stop in time), a SIGTERM or SIGINT passed to the ranks, dying with the process that started it
TORCHRUN_MAIN = "from pacs.runs.lifetime import torchrun_main; torchrun_main('torch.distributed.run')"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def torchrun_command(
    nnodes: int, nproc_per_node: int, endpoint: str | None, rdzv_id: str, args: list[str]
) -> list[str]:
    """torchrun for one node of the run; ``endpoint`` None: a standalone single-node rendezvous. torchrun leaves
    SIGTERM and SIGINT to ``torchrun_main``'s handler, which passes them to the ranks (pacs.runs.lifetime)."""
    torchrun = [sys.executable, "-c", TORCHRUN_MAIN, "--signals-to-handle", SIGNALS_TORCHRUN_HANDLES]
    if endpoint is None:
        where = ["--standalone"]
    else:
        where = ["--nnodes", str(nnodes), "--rdzv_backend", "c10d", "--rdzv_endpoint", endpoint, "--rdzv_id", rdzv_id]
    return [*torchrun, *where, "--nproc_per_node", str(nproc_per_node), "-m", "pacs.cli", "train", *args]


def slurm_hosts(environ: dict) -> list[str]:
    if "SLURM_JOB_NODELIST" not in environ:
        raise RuntimeError("--nnodes > 1 needs a SLURM allocation (SLURM_JOB_NODELIST is not set)")
    listed = subprocess.run(["scontrol", "show", "hostnames", environ["SLURM_JOB_NODELIST"]], capture_output=True,
                            text=True, check=True)  # fmt: skip
    return listed.stdout.split()


def multinode_command(nnodes: int, nproc_per_node: int, hosts: list[str], port: int, job: str, out: Path,
                      args: list[str]) -> list[str]:  # fmt: skip
    """One srun step, one task per node, each a torchrun meeting the others on the first host."""
    if len(hosts) < nnodes:
        raise RuntimeError(f"--nnodes {nnodes} but the allocation has {len(hosts)} node(s): {' '.join(hosts)}")
    srun = ["srun", f"--nodes={nnodes}", f"--ntasks={nnodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
            f"--output={out / 'logs' / 'node%n.log'}"]  # fmt: skip
    return [*srun, *torchrun_command(nnodes, nproc_per_node, f"{hosts[0]}:{port}", job, args)]


def record_launch(out: Path, entry: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "launches.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(entry) + "\n")


def launch(config_path: Path, out: Path, job: JobOptions | None = None, nproc_per_node: int = 1,
           nnodes: int = 1) -> int:  # fmt: skip
    """Start the run as the request and the environment say (module docstring); returns the exit status:
    ``EXIT_STOPPED`` when the job stopped early, saved (``pacs.runs.segments``)."""
    environ, job = os.environ, job or JobOptions()
    configure_allocator(environ)  # before CUDA starts here or in the ranks, which inherit it (pacs.ranks.allocator)
    if "LOCAL_RANK" in environ:  # a rank torchrun started
        rank_dies_with_torchrun()  # pacs.runs.lifetime
        if int(environ.get("RANK", 0)):
            return run(config_path, out, job)
        # rank 0 holds the directory's lock for the job, where the pacs train that started torchrun does not
        with sole_writer(out, "pacs train"):  # (pacs.writer_lock: then a no-op)
            return run(config_path, out, job)
    environ[LAUNCHED] = str(process_started())  # this job's start, for its ranks' records (pacs.runs.segments)
    check_environment(load_run_config(config_path).logging.wandb)  # a bad config or environment fails here,
    # before anything starts
    asked = stop_requested(job.stop_file)
    if asked is not None:
        print(f"{out}: not started: {describe(asked)}; the workflow's next run removes {job.stop_file}", flush=True)
        return EXIT_STOPPED
    with sole_writer(out, "pacs train"):  # one writer per run directory, for as long as the job lives
        # the teardown after the ranks' stop measured (pacs.runs.segments): later jobs keep time for it
        code = teardown_recorded(out, lambda: _launch(config_path, out, job, nproc_per_node, nnodes))
        return continue_later(out, code, job)


def continue_later(out: Path, code: int, job: JobOptions) -> int:
    """After the job's processes ended: a job stopped, saved, requeues itself where asked (``--requeue``) and
    SLURM would not (pacs.slurm.after_stop). So does a job that failed after a signal reached it: SLURM's SIGTERM
    reaches every process of a job, and one that pacs does not own (vLLM's engine core on a GPU, wandb's service)
    may end at it and take the step in flight with it; the run then resumes from its last checkpoint, as after a
    kill."""
    history = read_segments(out)
    ended = how_ended(history)
    began = max((i for i, h in enumerate(history) if h["event"] == "start"), default=-1)
    start = history[began] if began >= 0 else {"step": -1}
    signalled = next((h for h in history[began + 1 :] if h["event"] == "signal"), None)
    if code not in (0, EXIT_STOPPED) and signalled and ended["event"] != "stop":
        print(f"{out}: this job failed after {signalled['signal']} reached it (a process of the job ended with the "
              "signal); the run resumes from its last checkpoint", flush=True)  # fmt: skip
        return after_stop(str(out), f"signal {signalled['signal']}", True, job.requeue)
    if code != EXIT_STOPPED or ended["event"] != "stop":
        return code
    return after_stop(str(out), ended["reason"], ended["step"] > start["step"], job.requeue)


def _launch(config_path: Path, out: Path, job: JobOptions, nproc_per_node: int, nnodes: int) -> int:
    environ = os.environ
    args = ["--config", str(config_path), "--out", str(out),
            *(["--restart-on-change"] if job.restart_on_change else []),
            *(["--stop-file", str(job.stop_file)] if job.stop_file else []),
            *(["--keep-weights", str(job.keep_weights)] if job.keep_weights else []),
            *(["--calibration", str(job.calibration)] if job.calibration else []),
            *(["--worst-case"] if job.worst_case else [])]  # fmt: skip
    entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S"), "host": socket.gethostname(), "nnodes": nnodes,
             "nproc_per_node": nproc_per_node, "slurm_job": environ.get("SLURM_JOB_ID"),
             "visible_devices": environ.get("CUDA_VISIBLE_DEVICES")}  # fmt: skip
    if nnodes == 1 and nproc_per_node <= 1:  # nothing to record: a rerun of a finished run leaves DIR untouched
        return run(config_path, out, job)
    if nnodes == 1:
        command = torchrun_command(1, nproc_per_node, None, "", args)
    else:
        hosts = slurm_hosts(environ)
        port = free_port() if socket.gethostname().split(".")[0] == hosts[0].split(".")[0] else 29500
        (out / "logs").mkdir(parents=True, exist_ok=True)
        command = multinode_command(nnodes, nproc_per_node, hosts, port, environ["SLURM_JOB_ID"], out, args)
    record_launch(out, {**entry, "command": " ".join(command)})
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # this process waits; the ranks hear the signal themselves
    # one node: torchrun dies with this process (its parent, checked); SIGTERM and SIGINT go on to the ranks
    code = wait_forwarding_stops(command, {**environ, PARENT: str(os.getpid())} if nnodes == 1 else dict(environ))
    ended = how_ended(read_segments(out))
    return EXIT_STOPPED if code and ended["event"] == "stop" and ended["reason"] != "done" else code
