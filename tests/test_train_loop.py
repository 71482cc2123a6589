"""The training loop end to end on the tiny model: files, metrics, checkpoints, exact resume. The runs a resume is
compared with bitwise run at THREADS intra-op threads, as `pacs train` runs on a two-core machine by default
(torch's one thread per core): determinism is checked at the thread count users run."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
import torch
from conftest import write_run_config
from helpers import pacs_fresh, pacs_warm, read_wandb_run, run_until_killed, start_paused, wandb_runs
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

from pacs.cli import main
from pacs.ranks.distributed import DistEnv
from pacs.runs import checkpoint as ckpt
from pacs.runs import retention
from pacs.runs.directory import check_run_dir, superseded_dir
from pacs.runs.segments import EXIT_STOPPED, read_segments
from pacs.stop import STOP, request_stop
from pacs.train.loop import train
from pacs.train.settings.config import load_run_config
from pacs.writer_lock import HELD, sole_writer

STEP_KEYS = {
    "reward/mean", "accuracy", "groups/all_correct_frac", "groups/all_wrong_frac", "response_length/mean",
    "response_length/max", "response_length/truncated_frac", "verifier/correct", "verifier/timeout",
    "policy/entropy", "actor/loss", "actor/grad_norm", "actor/lr", "time/generate", "time/score",
    "time/old_logprobs", "time/update", "time/step", "throughput/tokens_per_s", "skipped_steps_total",
}  # fmt: skip


THREADS = 2


def run_cli(config, out, *args, kill_after_step: int | None = None) -> subprocess.CompletedProcess | None:
    """`pacs train` forked by the warm server (``helpers.pacs_warm``); or, to be SIGKILLed once metrics.jsonl
    shows ``kill_after_step``, `pacs train` in a subprocess of its own; at THREADS threads."""
    if kill_after_step is None:
        return pacs_warm(["train", "--config", str(config), "--out", str(out), *args], threads=THREADS)
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS)}
    cmd = [sys.executable, "-m", "pacs.cli", "train", "--config", str(config), "--out", str(out), *args]
    metrics = out / "metrics.jsonl"
    run_until_killed(
        cmd, env, lambda: metrics.exists() and any(r["step"] >= kill_after_step for r in read_metrics(metrics))
    )
    return None


def read_metrics(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.endswith("}")]


def final_weights(out, step=6) -> dict:
    return load_file(ckpt.checkpoint_dir(out / "checkpoints", step) / "model.safetensors")


def assert_bitwise_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), f"{name} differs"


def rewards(out) -> list:
    return [r.get("reward/mean") for r in read_metrics(out / "metrics.jsonl")]


@pytest.fixture(scope="module")
def config(tiny_model, toy_data, tmp_path_factory):
    """The small run, its verifier workers left to the node (pacs.verify.pool.node_workers)."""
    return write_run_config(tmp_path_factory.mktemp("cfg") / "run.yaml", tiny_model, toy_data,
                            verifier={"workers": None})  # fmt: skip


@pytest.fixture(scope="module")
def uninterrupted(config, tmp_path_factory):
    out = tmp_path_factory.mktemp("runs") / "whole"
    result = run_cli(config, out)
    assert result.returncode == 0, result.stderr
    return out


def test_a_run_writes_metrics_config_and_loadable_checkpoints(uninterrupted, config):
    records = read_metrics(uninterrupted / "metrics.jsonl")
    assert [r["step"] for r in records] == [0, 1, 2, 3, 4, 5, 6]
    from pacs.verify.pool import node_workers

    assert records.pop(0) == {"step": 0, "data/prompts": 4000, "data/prompts_dropped": 0,
                              "verifier/workers": node_workers(1)}  # fmt: skip
    for r in records:
        assert STEP_KEYS <= r.keys(), STEP_KEYS - r.keys()
        assert 0.0 <= r["reward/mean"] <= 1.0 and r["time/step"] > 0
        assert r["verifier/correct"] == round(r["reward/mean"] * 16 * 8)
        # each phase's resident peak (pacs.ranks.memory), within the process's peak so far
        phases = [r[f"memory/{phase}/rss_gb"] for phase in ("generate", "no_grad", "update")]
        assert 0.1 < min(phases) and max(phases) <= r["memory/peak_rss_gb"]
    assert "actor/classifier_accuracy" in records[0] and "actor/score_std" in records[0]  # PACS statistics
    assert load_run_config(uninterrupted / "config.yaml") == load_run_config(config)
    assert [s for s, _ in ckpt.complete_checkpoints(uninterrupted / "checkpoints")] == [2, 4, 6]
    *_, stop, ended = read_segments(uninterrupted)
    assert (stop["reason"], ended["event"], ended["code"]) == ("done", "exit", 0)  # the launcher's, after the ranks'
    (peaks,) = stop["peak_gb"]  # what pacs preflight checks, per rank and phase
    assert list(peaks["phases"]) == ["generate", "no_grad", "update"]
    assert peaks["phases"]["update"]["rss"] == pytest.approx(records[-1]["memory/update/rss_gb"])
    last = ckpt.checkpoint_dir(uninterrupted / "checkpoints", 6)
    for name in ("model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "trainer_state.pt",
                 "resume/.metadata"):  # fmt: skip
        assert (last / name).is_file(), name
    model = AutoModelForCausalLM.from_pretrained(last)
    assert AutoTokenizer.from_pretrained(last).chat_template
    start = AutoModelForCausalLM.from_pretrained(load_run_config(config).model.path)
    assert any(not torch.equal(p, start.state_dict()[k]) for k, p in model.state_dict().items())


def test_killed_run_resumes_bitwise(uninterrupted, config, tmp_path):
    """Killed, then resumed as a user resumes it (the `pacs` command in a fresh process, ``helpers.pacs_fresh``):
    the end of the warm uninterrupted run, bit for bit, at two threads."""
    out = tmp_path / "killed"
    run_cli(config, out, kill_after_step=3)
    assert ckpt.latest_checkpoint(out / "checkpoints")[0] in (2, 4)
    result = pacs_fresh(["train", "--config", str(config), "--out", str(out)], threads=THREADS)
    assert result.returncode == 0, result.stderr
    assert [s["threads"] for s in read_segments(out) if s["event"] == "start"] == [THREADS, THREADS]
    assert_bitwise_equal(final_weights(out), final_weights(uninterrupted))
    assert rewards(out) == rewards(uninterrupted)  # steps redone after the kill are logged once, identically


def test_crash_while_writing_a_checkpoint_resumes_bitwise(uninterrupted, config, tmp_path, monkeypatch):
    out = tmp_path / "crashed"
    write = ckpt.save_resume_state

    def crash_at_step_4(staging, optimizers, masters):
        write(staging, optimizers, masters)
        if staging.name == ".step_000004.tmp":
            raise KeyboardInterrupt("killed while writing the checkpoint")

    monkeypatch.setattr(ckpt, "save_resume_state", crash_at_step_4)
    threads = torch.get_num_threads()
    torch.set_num_threads(THREADS)  # in this process, as the uninterrupted run
    try:
        with pytest.raises(KeyboardInterrupt):
            train(load_run_config(config), out)
        assert (out / "checkpoints" / ".step_000004.tmp" / "resume").is_dir()  # written, never published
        assert ckpt.latest_checkpoint(out / "checkpoints")[0] == 2
        monkeypatch.setattr(ckpt, "save_resume_state", write)
        assert train(load_run_config(config), out)["start_step"] == 2
    finally:
        torch.set_num_threads(threads)
    assert not (out / "checkpoints" / ".step_000004.tmp").exists()
    assert_bitwise_equal(final_weights(out), final_weights(uninterrupted))


def test_answers_past_the_verifier_s_deadline_are_counted_and_named(raw_tiny_model, toy_data, tmp_path, capsys):
    """A verdict past ``verifier.options.timeout_s`` (here a microsecond: every answer) scores 0 as ``timeout``: the
    step's record counts it, and `pacs train` names the step as one whose rewards the machine's load decided."""
    config = write_run_config(tmp_path / "run.yaml", raw_tiny_model, toy_data, trainer={"total_steps": 1},
                              verifier={"workers": 1, "options": {"timeout_s": 1e-6}})  # fmt: skip
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "run")]) == 0
    (record,) = read_metrics(tmp_path / "run" / "metrics.jsonl")[1:]
    assert (record["verifier/timeout"], record["reward/mean"]) == (16 * 8, 0.0), record
    assert "steps [1] scored answers past the verifier's deadline" in capsys.readouterr().out


def test_a_finished_run_does_nothing(uninterrupted, config, capsys):
    before = {p: p.stat().st_mtime_ns for p in uninterrupted.rglob("*") if p.is_file()}
    assert main(["train", "--config", str(config), "--out", str(uninterrupted)]) == 0
    assert "already complete" in capsys.readouterr().out
    assert before == {p: p.stat().st_mtime_ns for p in uninterrupted.rglob("*") if p.is_file()}


def test_a_second_writer_into_a_live_run_is_refused_naming_it_and_the_live_run_ends_as_if_alone(
    uninterrupted, config, tmp_path
):
    """pacs train into the directory of a live run (paused after its first step, so that it is live whatever the
    machine's speed) exits at once, naming the holder and the directory; the live run then ends bitwise as if
    alone. The kernel lets the lock go with its holder: a killed run's directory takes the next run
    (test_killed_run_resumes_bitwise)."""
    out = tmp_path / "live"
    command = [sys.executable, "-m", "pacs.cli", "train", "--config", str(config), "--out", str(out)]
    metrics = out / "metrics.jsonl"
    live = start_paused(command, {**os.environ, "OMP_NUM_THREADS": "1"},
                        lambda: metrics.exists() and any(r["step"] >= 1 for r in read_metrics(metrics)))  # fmt: skip
    try:
        second = run_cli(config, out)
    finally:
        os.kill(live.pid, signal.SIGCONT)
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"{out}: pid {live.pid} on {socket.gethostname()} since " in second.stderr
    assert "pacs train refuses a second writer" in second.stderr
    assert live.wait(timeout=600) == 0
    assert_bitwise_equal(final_weights(out), final_weights(uninterrupted))
    assert rewards(out) == rewards(uninterrupted)
    assert not (out / ".lock.holder").exists()  # the holder's name goes with it; .lock stays, never written


def test_a_restart_on_change_keeps_the_lock_so_a_second_writer_is_still_refused(tmp_path):
    """--restart-on-change moves the run of another config aside while the launcher holds the directory's lock (as
    the workflow's rerun does): the lock's files stay, so a second pacs train into the live directory is still refused,
    naming the holder, rather than taking a fresh lock beside the live run."""
    old = load_run_config(write_run_config(tmp_path / "old.yaml", tmp_path / "model", tmp_path / "data"))
    new = write_run_config(tmp_path / "new.yaml", tmp_path / "model", tmp_path / "data", optim={"lr": 2e-4})
    out = tmp_path / "run"
    command = [sys.executable, "-m", "pacs.cli", "train", "--config", str(new), "--out", str(out),
               "--restart-on-change"]  # fmt: skip
    with sole_writer(out, "pacs train"):
        env = {k: v for k, v in os.environ.items() if k != HELD}  # a stranger's, not one of the holder's ranks
        check_run_dir(out, old)
        (out / "metrics.jsonl").write_text("{}\n")
        check_run_dir(out, load_run_config(new), restart_on_change=True)
        assert not (out / "metrics.jsonl").exists()  # the old run went aside
        assert [p.name for p in superseded_dir(out).glob("*/metrics.jsonl")] == ["metrics.jsonl"]
        second = subprocess.run(command, capture_output=True, text=True, env=env, timeout=120)
    assert second.returncode == 2, second.stderr[-2000:]
    assert f"{out}: pid {os.getpid()} on {socket.gethostname()} since " in second.stderr, second.stderr[-2000:]
    assert "pacs train refuses a second writer" in second.stderr


def test_a_run_dir_refuses_a_change_of_what_it_computes(uninterrupted, tiny_model, toy_data, tmp_path, capsys):
    changed = write_run_config(tmp_path / "changed.yaml", tiny_model, toy_data, optim={"lr": 2e-4})
    assert main(["train", "--config", str(changed), "--out", str(uninterrupted)]) == 2
    assert "keys that change what it computes: optim.lr" in capsys.readouterr().err


@pytest.fixture(scope="module")
def stopped(config, tmp_path_factory):
    """The small run stopped by the experiment's stop file (`pacs stop`), which appears once its third step is
    logged (each step made 2 s longer by PACS_STEP_DELAY_S, so that the stop lands before the last): the job saves after
    the step it is in and exits 75, as stopped. Its directory and the step it saved."""
    out = tmp_path_factory.mktemp("runs") / "stopped"
    cmd = [sys.executable, "-m", "pacs.cli", "train", "--config", str(config), "--out", str(out), "--stop-file",
           str(out.parent / STOP)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(THREADS), "PACS_STEP_DELAY_S": "2"}
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True)
    metrics = out / "metrics.jsonl"
    while not (metrics.exists() and any(r["step"] >= 3 for r in read_metrics(metrics))):
        assert process.poll() is None, "the run ended before its third step was logged"
        time.sleep(0.1)
    request_stop(out.parent)
    stdout, _ = process.communicate(timeout=600)
    assert process.returncode == EXIT_STOPPED, stdout
    assert "stopped early (stop asked), saved" in stdout
    ended = read_segments(out)[-2]
    assert (ended["event"], ended["reason"]) == ("stop", "stop asked") and 4 <= ended["step"] < 6, ended
    assert ckpt.latest_checkpoint(out / "checkpoints")[0] == ended["step"] and not (out / "trained.json").exists()
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)  # started while it stands
    assert again.returncode == EXIT_STOPPED and "not started: a stop asked by" in again.stdout, again.stdout
    assert read_segments(out)[-2] == ended
    return out, ended["step"]


# what changes only how a run computes (pacs.train.settings.changes), each as the run's config says it
HOW_CHANGES = {
    "micro-batch size": {"trainer": {"micro_batch_size": 2}},
    "token budget": {"trainer": {"max_tokens_per_micro_batch": 2048}},
    "recompute": {"trainer": {"gradient_checkpointing": True}},
    "vLLM's memory fraction": {"rollout": {"vllm": {"gpu_memory_utilization": 0.3}}},
    "checkpoint cadence": {"checkpoint": {"save_every": 3}},
}


@pytest.mark.parametrize("change", HOW_CHANGES, ids=list(HOW_CHANGES))
def test_a_change_of_how_a_run_computes_resumes_a_stopped_run_and_leaves_a_finished_one(
    change, stopped, uninterrupted, tiny_model, toy_data, tmp_path
):  # fmt: skip
    """Rerun under a change of how it computes (the workflow's --restart-on-change included), a stopped run resumes
    from its last checkpoint, records the change (each key's old and new value, the step) and ends done; the
    checkpoint cadence changes nothing of the result, so that run ends bitwise where the uninterrupted one does.
    A finished run is left as it is."""
    run, step = stopped
    config = write_run_config(tmp_path / "how.yaml", tiny_model, toy_data, verifier={"workers": None},
                              **HOW_CHANGES[change])  # fmt: skip
    out = tmp_path / "run"
    shutil.copytree(run, out)
    result = run_cli(config, out, "--restart-on-change")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resumes from step {step} under a change of how it computes" in result.stdout
    records = read_segments(out)
    changed = next(r for r in records if r["event"] == "changed")
    (key, (old, new)), = changed["keys"].items()
    assert changed["step"] == step and key == flat(HOW_CHANGES[change])
    assert old != new and records[records.index(changed) + 1]["step"] == step  # the next start resumes there
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == list(range(7))
    assert json.loads((out / "trained.json").read_text())["step"] == 6
    assert not superseded_dir(out).exists()
    if change == "checkpoint cadence":
        assert_bitwise_equal(final_weights(out), final_weights(uninterrupted))
    finished = tmp_path / "finished"
    shutil.copytree(uninterrupted, finished)
    before = {p: p.stat().st_mtime_ns for p in finished.rglob("*") if p.is_file()}
    result = run_cli(config, finished, "--restart-on-change")
    assert result.returncode == 0 and "finished at step 6; left as it is" in result.stdout, result.stdout
    after = {p: p.stat().st_mtime_ns for p in finished.rglob("*") if p.is_file()}
    assert after == before


def flat(change: dict, prefix: str = "") -> str:
    """The one dotted key of a nested change."""
    ((name, value),) = change.items()
    return flat(value, f"{prefix}{name}.") if isinstance(value, dict) else f"{prefix}{name}"


def test_a_change_of_what_a_run_computes_moves_the_old_run_aside_and_starts_again(stopped, tiny_model, toy_data,
                                                                               tmp_path):  # fmt: skip
    """β changed: refused without --restart-on-change, naming the key; with it (the workflow's), the run so far is
    moved whole to RUN.superseded/<time>/, recorded (its step, size and place), and the run starts from step 0."""
    run, step = stopped
    beta = write_run_config(tmp_path / "beta.yaml", tiny_model, toy_data, verifier={"workers": None},
                            algorithm={"name": "pacs", "options": {"beta": 2.0}})  # fmt: skip
    out = tmp_path / "run"
    shutil.copytree(run, out)
    refused = run_cli(beta, out)
    assert refused.returncode == 2 and "keys that change what it computes: algorithm.options.beta" in refused.stderr
    result = run_cli(beta, out, "--restart-on-change")
    assert result.returncode == 0, result.stderr[-3000:]
    (aside,) = superseded_dir(out).iterdir()
    assert f"the run so far (step {step}, " in result.stdout and str(aside) in result.stdout
    assert ckpt.latest_checkpoint(aside / "checkpoints")[0] == step  # nothing of the old run deleted
    assert [r["step"] for r in read_metrics(aside / "metrics.jsonl")][-1] == step
    moved = next(r for r in read_segments(out) if r["event"] == "superseded")
    assert (moved["step"], moved["keys"], moved["moved_to"]) == (step, ["algorithm.options.beta"], str(aside))
    assert moved["bytes"] > 0
    assert next(r for r in read_segments(out) if r["event"] == "start")["step"] == 0
    assert json.loads((out / "trained.json").read_text())["step"] == 6


def test_wandb_offline_and_retention(tiny_model, toy_data, tmp_path):
    """A checkpoint every step, the newest 2 whole, step 1's weights kept for evaluation: step 1 loses its
    resume state (its manifest then lists what is left), step 2 goes, steps 3 and 4 stay whole."""
    keep = tmp_path / "keep.json"
    keep.write_text("[1]")
    config = write_run_config(
        tmp_path / "run.yaml", tiny_model, toy_data,
        trainer={"total_steps": 4, "batch_size": 8, "mini_batch_size": 8, "micro_batch_size": 8},
        checkpoint={"save_every": 1, "keep_resumable": 2}, logging={"wandb": "offline", "progress_bar": False},
    )  # fmt: skip
    out = tmp_path / "run"
    result = run_cli(config, out, "--keep-weights", str(keep))
    assert result.returncode == 0, result.stderr
    root = out / "checkpoints"
    assert [s for s, _ in ckpt.complete_checkpoints(root)] == [1, 3, 4]
    first = ckpt.checkpoint_dir(root, 1)
    assert sorted(p.name for p in first.iterdir()) == [
        "chat_template.jinja", "config.json", "generation_config.json", "manifest.json", "model.safetensors",
        "tokenizer.json", "tokenizer_config.json",
    ]  # fmt: skip
    assert retention.problems(first, DistEnv()) == [] and not retention.resumable(first)
    assert all(retention.resumable(ckpt.checkpoint_dir(root, s)) for s in (3, 4))
    assert "step_000002: deleted" in result.stdout
    runs = wandb_runs(out)
    assert len(runs) == 1
    run = read_wandb_run(runs[0])  # grouped with the run's evaluations (tests/test_evaluate.py)
    assert (run["job_type"], run["group"], run["name"], run["state"]) == ("train", "run", "run", "finished")
    assert run["config"]["trainer"]["total_steps"] == 4 and run["step"] == 4


def test_a_broken_newest_checkpoint_is_named_set_aside_and_the_run_ends_bitwise(uninterrupted, config, tmp_path):
    """The newest checkpoint's weights truncated (as a full disk or a killed copy leaves them): the resume
    names the file and the checkpoint, falls back to the one before, and redoes the steps since."""
    out = tmp_path / "broken"
    shutil.copytree(uninterrupted, out)
    weights = ckpt.checkpoint_dir(out / "checkpoints", 6) / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    result = run_cli(config, out)
    assert result.returncode == 0, result.stderr
    assert "step_000006: not resumable" in result.stdout and "model.safetensors: 1000 bytes" in result.stdout
    assert "trained steps 5..6" in result.stdout
    assert not (out / "checkpoints" / ".step_000006.broken").exists()  # replaced when step 6 was saved again
    assert_bitwise_equal(final_weights(out), final_weights(uninterrupted))
    assert rewards(out) == rewards(uninterrupted)


def test_sigterm_stops_at_the_next_step_with_a_checkpoint_and_the_next_attempt_resumes_bitwise(
    uninterrupted, config, tmp_path
):  # fmt: skip
    """SIGTERM (a preemption, or SLURM's time limit) during step 2 or later: the job finishes its step, saves
    it (whether or not a save was due), exits with EXIT_STOPPED and records why; the workflow's next attempt
    continues and ends where an uninterrupted run does."""
    out, metrics = tmp_path / "stopped", tmp_path / "stopped" / "metrics.jsonl"
    cmd = [sys.executable, "-m", "pacs.cli", "train", "--config", str(config), "--out", str(out)]
    process = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": str(THREADS)}, stdout=subprocess.PIPE,
                               text=True)  # fmt: skip
    while not (metrics.exists() and any(r["step"] >= 1 for r in read_metrics(metrics))):
        assert process.poll() is None, "the run ended before its first step was logged"
        time.sleep(0.2)
    process.send_signal(signal.SIGTERM)
    stdout, _ = process.communicate(timeout=600)
    assert process.returncode == EXIT_STOPPED, stdout
    stopped = read_segments(out)
    assert [e["event"] for e in stopped] == ["start", "signal", "stop", "exit"]
    step = stopped[2]["step"]
    assert stopped[2]["reason"] == "signal SIGTERM" and 2 <= step < 6
    # the launcher's record of the teardown after the stop, which later jobs keep time for
    assert (stopped[3]["step"], stopped[3]["code"]) == (step, EXIT_STOPPED)
    assert stopped[3]["teardown_s"] == pytest.approx(stopped[3]["time"] - stopped[2]["time"])
    assert stopped[3]["teardown_s"] > 0
    assert ckpt.latest_checkpoint(out / "checkpoints")[0] == step  # saved at the step it stopped after
    assert [r["step"] for r in read_metrics(metrics)][-1] == step
    result = run_cli(config, out)
    assert result.returncode == 0, result.stderr
    assert [e["event"] for e in read_segments(out)][4:] == ["start", "stop", "exit"]
    assert_bitwise_equal(final_weights(out), final_weights(uninterrupted))
    assert rewards(out) == rewards(uninterrupted)


def test_bench_train_reports_each_variant_and_engine(vllm_installed, tiny_model, toy_data, tmp_path):
    out = tmp_path / "train.json"
    args = ["bench", "train", "--model", str(tiny_model), "--data", str(toy_data), "--steps", "2"]
    assert main([*args, "--variants", "pacs", "--engines", "hf", "vllm", "--out", str(out)]) == 0
    report = json.loads(out.read_text())["results"]
    assert list(report) == ["pacs/hf/seed0", "pacs/vllm/seed0"]
    for row in report.values():
        assert row["steps"] == 2 and row["seconds_step"] > 0 and row["rollout_tokens_per_s"] > 0
        assert row["peak_rss_gb"] > 0.1  # the largest rank's resident memory, logged every step
        assert row["seconds_generate"] + row["seconds_update"] <= row["seconds_step"]
        assert 0 <= row["heldout_accuracy_before"] <= 1 and 0 <= row["heldout_accuracy_after"] <= 1
    assert report["pacs/vllm/seed0"]["logprob_gap_max"] < 1e-4 and "logprob_gap_max" not in report["pacs/hf/seed0"]
    assert main([*args, "--variants", "dpo", "--out", str(out)]) == 2


def test_a_reference_reset_zeroes_the_proxy_restarts_adamw_and_resumes_bitwise(tiny_model, toy_data, tmp_path,
                                                                                 monkeypatch):  # fmt: skip
    """PACS v2's reward proxy against a reference reset every 2 steps (one optimizer step per step): the
    proxy is 0 on the steps that start at the reference (1, 3, 5) and not between; the reset step's update
    is AdamW's first (every weight moves by lr); a run crashed after the reset resumes bitwise."""
    config = write_run_config(tmp_path / "run.yaml", tiny_model, toy_data,
                              algorithm={"name": "pacs", "options": {"reward_proxy": "reference"}},
                              trainer={"mini_batch_size": 16, "reference_reset_every": 2},
                              checkpoint={"save_every": 1, "keep_resumable": 6}, optim={"lr": 1e-3})  # fmt: skip
    whole = tmp_path / "whole"
    train(load_run_config(config), whole)
    records = read_metrics(whole / "metrics.jsonl")[1:]
    assert [r["reference/reset"] for r in records] == [0, 0, 1, 0, 1, 0]
    assert [r["reference/step"] for r in records] == [0, 0, 2, 2, 4, 4]
    assert [r["actor/reward_proxy_abs_max"] == 0 for r in records] == [True, False] * 3
    assert (whole / "checkpoints/step_000003/reference/model.safetensors").is_file()
    assert not (whole / "checkpoints/step_000002/reference").exists()  # the starting model: nothing to save
    reference = load_file(whole / "checkpoints/step_000004/reference/model.safetensors")
    assert_bitwise_equal(reference, final_weights(whole, 2))  # the policy as the reset at step 3 found it

    def moved_by_lr(step):  # of the weights the gradient moved (not weight decay alone), the share moved by lr (1 %)
        before, after = final_weights(whole, step - 1), final_weights(whole, step)
        delta = torch.cat([(after[k] - before[k]).abs().flatten() for k in after])
        delta = delta[delta > 1e-4]
        return float(((delta - 1e-3).abs() < 1e-5).float().mean())

    moved = {step: moved_by_lr(step) for step in (3, 4, 5)}  # AdamW's first step is lr·g/|g|: lr for every weight
    assert moved[3] > 0.9 and moved[5] > 0.9 and moved[4] < 0.2, moved  # measured 0.93, 0.98 and 0.06

    crashed, write = tmp_path / "crashed", ckpt.save_resume_state

    def crash_at_step_6(staging, optimizers, masters):
        if staging.name == ".step_000006.tmp":
            raise KeyboardInterrupt("killed while writing the checkpoint")
        write(staging, optimizers, masters)

    monkeypatch.setattr(ckpt, "save_resume_state", crash_at_step_6)
    with pytest.raises(KeyboardInterrupt):
        train(load_run_config(config), crashed)
    monkeypatch.setattr(ckpt, "save_resume_state", write)
    assert train(load_run_config(config), crashed)["start_step"] == 5  # the reference of step 5's reset, saved
    assert_bitwise_equal(final_weights(crashed), final_weights(whole))


def resume_state(checkpoint) -> dict:
    """What a checkpoint's resume/ holds (torch.distributed.checkpoint), as one dict."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(checkpoint / "resume", checkpoint.parent / "resume_state.pt")
    return torch.load(checkpoint.parent / "resume_state.pt", weights_only=False)


def test_one_process_fsdp_computes_in_bf16_writes_bf16_and_resumes_bitwise_from_fp32_masters(tiny_model, toy_data,
                                                                                              tmp_path):  # fmt: skip
    """The paper config on one device: FSDP2 over a process group of its own, bf16 compute over fp32 master
    weights, transformers rollouts gathered from the shards. Checkpoints hold the policy in bf16 (what
    evaluation and the rollout engine read) and the fp32 masters beside the optimizer; killed after step 3
    and resumed, the run ends where the uninterrupted one does, masters and all."""
    from pacs.eval.run import checkpoint_dtype

    trainer = {"total_steps": 4, "batch_size": 8, "mini_batch_size": 4, "micro_batch_size": 2, "strategy": "fsdp",
               "compute_dtype": "bfloat16", "gradient_checkpointing": True}  # fmt: skip
    config = write_run_config(tmp_path / "run.yaml", tiny_model, toy_data, trainer=trainer, optim={"lr": 1e-3})
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    assert (result := run_cli(config, whole)).returncode == 0, result.stderr[-3000:]
    run_cli(config, killed, kill_after_step=3)
    assert ckpt.latest_checkpoint(killed / "checkpoints")[0] == 2
    assert (result := run_cli(config, killed)).returncode == 0, result.stderr[-3000:]
    assert rewards(killed) == rewards(whole)
    assert_bitwise_equal(final_weights(killed, 4), final_weights(whole, 4))
    last = [ckpt.checkpoint_dir(out / "checkpoints", 4) for out in (whole, killed)]
    masters = [{k.removeprefix("model."): v for k, v in resume_state(c)["policy"].items()} for c in last]
    assert_bitwise_equal(masters[0], masters[1])
    hf = final_weights(whole, 4)
    assert {v.dtype for v in hf.values()} == {torch.bfloat16}
    assert json.loads((last[0] / "config.json").read_text())["dtype"] == "bfloat16"
    assert checkpoint_dtype(str(last[0]), "auto") == "bfloat16"  # pacs evaluate's own choice for it
    for name, weight in hf.items():  # the HF weights are the masters, rounded
        assert masters[0][name].dtype == torch.float32 and torch.equal(masters[0][name].to(torch.bfloat16), weight)
    start = load_file(tiny_model / "model.safetensors")
    assert any(not torch.equal(masters[0][k], start[k]) for k in start)
    # what pacs plan says a checkpoint takes on disk: the bf16 policy, the fp32 masters and AdamW's moments
    from transformers import AutoConfig

    from pacs.config import to_dict
    from pacs.plan.disk import checkpoint_bytes

    planned = checkpoint_bytes(AutoConfig.from_pretrained(tiny_model), to_dict(load_run_config(config)), False)
    on_disk = {"policy": (last[0] / "model.safetensors").stat().st_size,
               "resume": sum(f.stat().st_size for f in (last[0] / "resume").iterdir())}  # fmt: skip
    for part, size in on_disk.items():  # and headers: 0.2 MB of DCP's for this model's 60 tensors
        assert planned[part] <= size < planned[part] * 1.02 + 300_000, (part, size, planned)


def test_a_run_with_wandb_disabled_needs_neither_wandb_nor_the_workflow_packages(raw_tiny_model, toy_data, tmp_path):
    """What a GPU node may lack (the lent GPU machine has no wandb, snakemake or datasets): `pacs train` with
    logging.wandb disabled imports none of them."""
    config = write_run_config(tmp_path / "run.yaml", raw_tiny_model, toy_data, trainer={"total_steps": 1},
                              checkpoint={"save_every": 1})  # fmt: skip
    blocker = ("import importlib.abc, sys\n"
               "class Missing(importlib.abc.MetaPathFinder):\n"
               "    def find_spec(self, name, path, target=None):\n"
               "        if name.split('.')[0] in ('wandb', 'snakemake', 'datasets'):\n"
               "            raise ModuleNotFoundError(f'No module named {name!r}')\n"
               "sys.meta_path.insert(0, Missing())\n"
               "from pacs.cli import main\n"
               f"sys.exit(main(['train', '--config', {str(config)!r}, '--out', {str(tmp_path / 'run')!r}]))"
               )  # fmt: skip
    done = subprocess.run([sys.executable, "-c", blocker], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert ckpt.latest_checkpoint(tmp_path / "run" / "checkpoints")[0] == 1
