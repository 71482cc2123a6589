"""FSDP2 training end to end on two ranks (gloo), with vLLM rollouts, token-budget micro-batches,
activation checkpointing and chunked log-probs: two "nodes" on localhost, and a run stopped, killed at a step and
killed while writing a checkpoint that resumes from its sharded checkpoints to the same bits."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import write_run_config
from helpers import signal_alone, survivors
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

from pacs.runs import checkpoint as ckpt
from pacs.runs.segments import EXIT_STOPPED, read_segments
from pacs.train.launch import free_port, multinode_command, torchrun_command

STEPS = 4
TRAINER = {"total_steps": STEPS, "batch_size": 8, "mini_batch_size": 4, "micro_batch_size": 2, "strategy": "fsdp",
           "max_tokens_per_micro_batch": 700, "gradient_checkpointing": True, "logprob_chunk_size": 64}  # fmt: skip


def read_metrics(out) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines() if x.endswith("}")]


@pytest.fixture(scope="module")
def fsdp_config(vllm_installed, tiny_model, toy_data, tmp_path_factory):
    """PPO: a sharded policy, reference-free, and a sharded critic with its own optimizer."""
    rollout = {"engine": "vllm", "vllm": {"enforce_eager": True}}
    return write_run_config(tmp_path_factory.mktemp("fsdp") / "run.yaml", tiny_model, toy_data,
                            algorithm={"name": "ppo"}, rollout=rollout, trainer=TRAINER)  # fmt: skip


@pytest.fixture(scope="module")
def two_nodes(fsdp_config, tmp_path_factory):
    """Two torchrun launchers, one rank each, meeting at a c10d rendezvous on 127.0.0.1."""
    out = tmp_path_factory.mktemp("two_nodes") / "run"
    endpoint = f"127.0.0.1:{free_port()}"
    command = torchrun_command(2, 1, endpoint, "pacs-test", ["--config", str(fsdp_config), "--out", str(out)])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    nodes = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for _ in range(2)]  # fmt: skip
    logs = [node.communicate(timeout=900)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    return out


def final(out, name="model.safetensors") -> dict:
    return load_file(ckpt.checkpoint_dir(out / "checkpoints", STEPS) / name)


@pytest.mark.slow
def test_two_nodes_train_with_sharded_checkpoints(two_nodes, tiny_model):
    records = read_metrics(two_nodes)
    assert [r["step"] for r in records] == list(range(STEPS + 1))
    # both engines sample from the weights both ranks trained (a full-tensor push from the shards)
    assert all(r["rollout/logprob_gap_max"] < 1e-4 for r in records[1:]), records
    last = ckpt.checkpoint_dir(two_nodes / "checkpoints", STEPS)
    shards = sorted(p.name for p in (last / "resume").glob("*.distcp"))
    assert len(shards) == 2  # each rank wrote its own part of the optimizer states
    policy = AutoModelForCausalLM.from_pretrained(last)  # consolidated, as transformers saves it
    start = AutoModelForCausalLM.from_pretrained(tiny_model).state_dict()
    assert any(not torch.equal(p, start[k]) for k, p in policy.state_dict().items())
    assert (last / "critic" / "model.safetensors").is_file()


def assert_same_run(out: Path, reference: Path) -> None:
    for name in ("model.safetensors", "critic/model.safetensors"):
        a, b = final(out, name), final(reference, name)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), name
    assert [r.get("reward/mean") for r in read_metrics(out)] == [r.get("reward/mean") for r in read_metrics(reference)]


# slow: four interrupted jobs of two ranks and their resumes, against the two-node run
@pytest.mark.slow
def test_a_stopped_and_killed_fsdp_run_resumes_bitwise(two_nodes, fsdp_config, tmp_path):
    """`pacs train --nproc-per-node 2` (standalone torchrun) interrupted three ways, each resumed by the same
    command: its own process alone terminated (SIGTERM) after step 1, and the ranks stop after their step, saved,
    the job exits 75 and ends, with torchrun's shutdown window at 0 s (``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``, 30 s by
    default: every step here outlasts it, as a 7B step and its checkpoint outlast 30 s; torchrun must not be the
    one to end the ranks); resumed, its own process alone killed (SIGKILL) after step 3, and every process of
    the job ends within seconds (each dies with its parent); rerun, its ranks die while writing the step-4
    checkpoint; rerun again to the end: the same weights, critic and rewards as the uninterrupted two-node run,
    bit for bit."""
    out = tmp_path / "run"
    args = ["--config", str(fsdp_config), "--out", str(out)]
    command = [sys.executable, "-m", "pacs.cli", "train", *args, "--nproc-per-node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    metrics = out / "metrics.jsonl"
    after1 = lambda: metrics.exists() and any(r["step"] >= 1 for r in read_metrics(out))  # noqa: E731
    launcher, job = signal_alone(command, {**env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": "0"}, after1, signal.SIGTERM)
    assert launcher.wait(timeout=300) == EXIT_STOPPED
    assert not survivors(job, within_s=10), "processes of the job outlived its stop"
    stopped = ckpt.latest_checkpoint(out / "checkpoints")[0]
    *_, ended, teardown = read_segments(out)
    # the signal came during step 2 at the latest (step 1 was logged): the stop leaves step 3 to the next job
    assert 1 <= stopped <= 2 and (ended["event"], ended["reason"]) == ("stop", "signal SIGTERM")
    assert (teardown["event"], teardown["code"], teardown["step"]) == ("exit", EXIT_STOPPED, stopped)  # the launcher's

    after3 = lambda: metrics.exists() and any(r["step"] >= 3 for r in read_metrics(out))  # noqa: E731
    launcher, job = signal_alone(command, env, after3, signal.SIGKILL)
    assert launcher.wait(timeout=60) == -signal.SIGKILL and len(job) >= 3  # torchrun and two ranks at least
    assert not survivors(job, within_s=10), "processes of the job outlived its pacs train"
    assert ckpt.latest_checkpoint(out / "checkpoints")[0] == 2
    dying = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
             str(Path(__file__).parent / "train_dying_in_checkpoint.py"), str(STEPS), *args]  # fmt: skip
    done = subprocess.run(dying, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode != 0, done.stderr[-3000:]
    assert (out / "checkpoints" / ".step_000004.tmp" / "resume").is_dir()  # both shards written, unpublished
    assert ckpt.latest_checkpoint(out / "checkpoints")[0] == 2
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    assert_same_run(out, two_nodes)
    resumed = read_metrics(out)
    # the resumed engines loaded the consolidated checkpoint and sample what the re-sharded policy computes
    assert all(r["rollout/logprob_gap_max"] < 1e-4 for r in resumed[3:]), resumed
    assert not (out / "checkpoints" / ".step_000004.tmp").exists()
    launches = [json.loads(x) for x in (out / "launches.jsonl").read_text().splitlines()]
    assert len(launches) == 3 and all(x["nproc_per_node"] == 2 for x in launches)


def test_multinode_launch_is_one_srun_task_per_node(tmp_path):
    command = multinode_command(2, 8, ["gpu-a01", "gpu-a02"], 29411, "1234", tmp_path, ["--config", "r.yaml"])
    assert command[:6] == ["srun", "--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1",
                           f"--output={tmp_path / 'logs' / 'node%n.log'}"]  # fmt: skip
    rest = command[6:]
    # torchrun leaves SIGTERM and SIGINT to pacs's handler, which passes them to the ranks (pacs.runs.lifetime)
    assert rest[rest.index("--signals-to-handle") + 1] == "SIGHUP,SIGQUIT"
    for flag, value in (("--nnodes", "2"), ("--nproc_per_node", "8"), ("--rdzv_backend", "c10d"),
                        ("--rdzv_endpoint", "gpu-a01:29411"), ("--rdzv_id", "1234")):  # fmt: skip
        assert rest[rest.index(flag) + 1] == value, flag
    assert rest[-5:-2] == ["-m", "pacs.cli", "train"] and rest[-2:] == ["--config", "r.yaml"]
    with pytest.raises(RuntimeError, match="1 node"):
        multinode_command(2, 8, ["gpu-a01"], 29411, "1234", tmp_path, [])
