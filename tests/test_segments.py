"""A run as consecutive jobs: where a job's end time comes from, what stops it, when it requeues itself, and the
teardown after a stop that later jobs keep time for."""

import json
import os
import signal
import time

import pytest

from pacs.ranks.distributed import DistEnv
from pacs.runs.segments import EXIT_STOPPED, JobOptions, Segment, read_segments, teardown_recorded
from pacs.slurm import after_stop, slurm_end_time
from pacs.stop import STOP, request_stop


def test_the_end_time_comes_from_slurm_and_decides_the_stop(tmp_path):
    assert slurm_end_time({}) is None  # outside SLURM: no limit
    assert slurm_end_time({"SLURM_JOB_END_TIME": "1764000000"}) == 1764000000.0
    soon = {"SLURM_JOB_END_TIME": str(time.time() + 100)}
    segment = Segment(tmp_path, DistEnv(), 1.5, JobOptions(), soon)
    segment.begin(0)
    segment.took(1, step_s=10.0)
    assert segment.must_stop() == ""  # 1.5 × (10 s + 10 s for a checkpoint not yet measured) < 100 s
    segment.took(1, checkpoint_s=60.0)
    assert segment.must_stop() == "time limit"  # 1.5 × (10 + 60) s > 100 s
    assert segment.need_s == pytest.approx(1.5 * (10 + 60 + 60))  # the teardown not yet measured: as a checkpoint
    with Segment(tmp_path, DistEnv(), 1.5, JobOptions(), {}) as unlimited:
        unlimited.begin(1)
        unlimited.took(2, step_s=1e9)
        assert unlimited.must_stop() == ""
        unlimited._on_signal(15, None)  # SIGTERM, as SLURM announces a preemption
        assert unlimited.must_stop() == "signal SIGTERM"
    # PACS_STEP_DELAY_S: each step that much longer, slept and measured (how a test slows a step by a setting)
    slow = Segment(tmp_path, DistEnv(), 1.5, JobOptions(), {**soon, "PACS_STEP_DELAY_S": "0.2"})
    slow.begin(0)
    began = time.monotonic()
    slow.took(1, step_s=30.0)
    assert time.monotonic() - began >= 0.2 and slow.step_s == pytest.approx(30.2)
    assert slow.must_stop() == "time limit"  # 1.5 × (30.2 + 30.2) s > 100 s
    slow.took(1, checkpoint_s=5.0)  # a checkpoint's time is not made longer
    assert slow.checkpoint_s == 5.0
    for bad in ("-1", "soon", "nan"):
        with pytest.raises(ValueError, match=f"PACS_STEP_DELAY_S='{bad}'"):
            Segment(tmp_path, DistEnv(), 1.5, JobOptions(), {"PACS_STEP_DELAY_S": bad})


def test_a_stop_asked_of_the_experiment_stops_after_the_step_and_a_requeue_is_counted(tmp_path, capsys):
    """The experiment's stop file (`pacs stop`) stops the job after its step, as "stop asked"; a job that SLURM
    started again (requeued, preempted) records how many times it started before; a step slowed by
    PACS_STEP_DELAY_S is said at the job's start, recorded with its delay and counts without it in a later job that
    runs without one."""
    stop_file = tmp_path / STOP
    segment = Segment(tmp_path, DistEnv(), 1.5, JobOptions(stop_file=stop_file), {})
    segment.took(1, step_s=1.0)
    assert segment.must_stop() == ""
    request_stop(tmp_path)
    assert segment.must_stop() == "stop asked"
    job = {"SLURM_JOB_ID": "41", "SLURM_JOB_END_TIME": str(time.time() + 1e6)}
    for restart in range(3):
        with Segment(tmp_path, DistEnv(), 1.5, JobOptions(), {**job, "PACS_STEP_DELAY_S": "0.1"}) as slow:
            slow.begin(restart)
            slow.took(restart + 1, step_s=5.0)
            slow.stop(restart + 1, "time limit")
    starts = [h for h in read_segments(tmp_path) if h["event"] == "start"]
    assert [(s["slurm_job"], s["restart"], s["step_delay_s"]) for s in starts] == [("41", i, 0.1) for i in range(3)]
    assert capsys.readouterr().out.count("PACS_STEP_DELAY_S=0.1: each step of this job is made 0.1 s longer") == 3
    stops = [h for h in read_segments(tmp_path) if h["event"] == "stop"]
    assert stops[-1]["step_s"] == pytest.approx(5.1) and stops[-1]["step_delay_s"] == 0.1
    fresh = Segment(tmp_path, DistEnv(), 1.5, JobOptions(), {"SLURM_JOB_ID": "42"})  # without the delay
    assert fresh.step_s == pytest.approx(5.0)
    fresh.begin(3)
    assert read_segments(tmp_path)[-1]["restart"] == 0  # another job: not a restart of job 41


def test_a_stopped_job_requeues_itself_only_where_slurm_would_not(tmp_path, monkeypatch, capsys):
    """After a stop, saved: outside SLURM or without --requeue, exit 75; with it, the time limit's stop requeues the
    job (or fails, 1, when it made no progress), a signal requeues it while SLURM still lists the job as running
    (a preemption's grace time: a job that ends by itself then would end as failed), not while it is completing
    (scancel, or SLURM's own requeue), and a stop asked never. Here `scontrol` and `squeue` are scripts that record
    what they were asked and answer as SLURM would; tests/test_workflow.py runs the real ones."""
    asked = tmp_path / "asked"
    state = tmp_path / "state"
    for name, answer in (("scontrol", ""), ("squeue", f"cat {state}")):
        script = tmp_path / name
        script.write_text(f"#!/bin/sh\necho {name} \"$@\" >> {asked}\n{answer}\n")
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    job = {"SLURM_JOB_ID": "7"}
    assert after_stop("run", "time limit", True, True, {}) == EXIT_STOPPED  # outside SLURM
    assert after_stop("run", "time limit", True, False, job) == EXIT_STOPPED  # not asked to
    assert not asked.exists()
    assert after_stop("run", "time limit", True, True, job) == EXIT_STOPPED
    assert asked.read_text().splitlines() == ["scontrol requeue 7"]
    assert after_stop("run", "time limit", False, True, job) == 1  # no step in its time: never requeued
    assert "before it made progress" in capsys.readouterr().out
    state.write_text("COMPLETING\n")  # scancel's SIGTERM
    assert after_stop("run", "signal SIGTERM", True, True, job) == EXIT_STOPPED
    state.write_text("RUNNING\n")  # a preemption's grace time
    assert after_stop("run", "signal SIGTERM", True, True, job) == EXIT_STOPPED
    assert after_stop("run", "stop asked", True, True, job) == EXIT_STOPPED
    assert asked.read_text().splitlines() == ["scontrol requeue 7", "squeue -h -j 7 -o %T", "squeue -h -j 7 -o %T",
                                              "scontrol requeue 7"]  # fmt: skip


def test_the_teardown_after_a_stop_is_recorded_and_kept_free_before_a_next_step(tmp_path):
    """The launcher records the seconds from the job's stop to its end (``exit``), or to the signal that cuts
    them short; a job that trained nothing records nothing; a later job stops when its next step, that step's
    checkpoint and the longest teardown would pass its end time."""

    def job(code, stop=True, then=lambda: None):
        def run():
            if stop:
                with open(tmp_path / "segments.jsonl", "a") as f:
                    f.write(json.dumps({"event": "stop", "time": time.time(), "step": 3, "reason": "time limit",
                                        "step_s": 10.0, "checkpoint_s": 10.0}) + "\n")  # fmt: skip
            time.sleep(0.2)  # the teardown
            then()
            return code

        return run

    assert teardown_recorded(tmp_path, job(0, stop=False)) == 0
    assert read_segments(tmp_path) == []  # nothing stopped: a run found finished writes nothing
    assert teardown_recorded(tmp_path, job(75)) == 75
    (stop, ended) = read_segments(tmp_path)
    assert (ended["event"], ended["step"], ended["code"]) == ("exit", 3, 75) and "signal" not in ended
    assert ended["teardown_s"] == pytest.approx(ended["time"] - stop["time"]) and ended["teardown_s"] >= 0.2

    class Killed(Exception):
        pass

    def killed(signum, frame):
        raise Killed

    before = signal.signal(signal.SIGTERM, killed)  # what the limit's SIGTERM does after the record: its usual course
    try:
        with pytest.raises(Killed):
            teardown_recorded(tmp_path, job(75, then=lambda: os.kill(os.getpid(), signal.SIGTERM)))
        assert signal.getsignal(signal.SIGTERM) is killed
    finally:
        signal.signal(signal.SIGTERM, before)
    *_, stop, cut = read_segments(tmp_path)
    assert (cut["event"], cut["code"], cut["signal"]) == ("exit", None, "SIGTERM") and cut["teardown_s"] >= 0.2

    soon = {"SLURM_JOB_END_TIME": str(time.time() + 100)}
    segment = Segment(tmp_path / "fresh", DistEnv(), 1.5, JobOptions(), soon)
    segment.took(1, step_s=10.0)
    assert segment.must_stop() == ""  # 1.5 × (10 s + 10 s + 10 s: a write and a teardown not yet measured) < 100 s
    segment = Segment(tmp_path, DistEnv(), 1.5, JobOptions(), soon)
    segment.took(4, step_s=10.0)
    assert segment.teardown_s >= 0.2
    with open(tmp_path / "segments.jsonl", "a") as f:
        f.write(json.dumps({"event": "exit", "time": time.time(), "step": 3, "code": 0, "teardown_s": 60.0}) + "\n")
    segment = Segment(tmp_path, DistEnv(), 1.5, JobOptions(), soon)
    segment.took(4, step_s=10.0)
    assert segment.must_stop() == "time limit"  # 1.5 × (10 + 10 + 60) s > 100 s


def test_a_job_that_fails_after_a_signal_resumes_as_a_killed_one_would(tmp_path, capsys):
    """SLURM's SIGTERM reaches every process of a job: one pacs does not own (vLLM's engine core on a GPU, wandb's
    service) may end with it and fail the step in flight. Such a failure, after a signal, is a stop (75: the run
    resumes from its last checkpoint, and the job is requeued where SLURM would not); a failure without a signal
    stays a failure."""
    from pacs.train.launch import continue_later

    def history(*events):
        (tmp_path / "segments.jsonl").write_text("".join(json.dumps({"time": 0.0, "step": 3, **e}) + "\n"
                                                         for e in events))  # fmt: skip

    history({"event": "start"}, {"event": "signal", "signal": "SIGTERM"}, {"event": "failed", "error": "EngineDead"})
    assert continue_later(tmp_path, 1, JobOptions(requeue=True)) == EXIT_STOPPED
    assert "failed after SIGTERM reached it" in capsys.readouterr().out
    history({"event": "start"}, {"event": "failed", "error": "OutOfMemoryError"})
    assert continue_later(tmp_path, 1, JobOptions(requeue=True)) == 1
    history({"event": "start"}, {"event": "signal", "signal": "SIGTERM"}, {"event": "stop", "reason": "signal SIGTERM"})
    assert continue_later(tmp_path, EXIT_STOPPED, JobOptions()) == EXIT_STOPPED
