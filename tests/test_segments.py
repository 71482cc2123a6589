"""A run as consecutive jobs: when a resubmitted job may continue, where a job's end time comes from, and the
teardown after a stop that later jobs keep time for."""

import json
import os
import signal
import time

import pytest

from pacs.ranks.distributed import DistEnv
from pacs.runs.segments import (
    JobOptions,
    Segment,
    check_continuation,
    read_segments,
    slurm_end_time,
    teardown_recorded,
)


def test_a_job_continues_only_after_a_planned_stop_that_made_progress(tmp_path):
    start = {"event": "start", "step": 20}
    check_continuation(tmp_path, [start, {"event": "stop", "step": 25, "reason": "time limit"}], 2)
    check_continuation(tmp_path, [start, {"event": "signal", "step": 21, "signal": "SIGTERM"}], 2)
    with pytest.raises(RuntimeError, match="ended without a planned stop .*: failed"):
        check_continuation(tmp_path, [start, {"event": "failed", "error": "OutOfMemoryError"}], 2)
    with pytest.raises(RuntimeError, match="ended without a planned stop .*: start"):  # killed: OOM killer, a crash
        check_continuation(tmp_path, [start], 3)
    with pytest.raises(RuntimeError, match="ended without a planned stop .*: nothing"):
        check_continuation(tmp_path, [], 2)
    with pytest.raises(RuntimeError, match="finished no step .* raise resources.train.max_runtime"):
        check_continuation(tmp_path, [start, {"event": "signal", "step": 20, "signal": "SIGTERM"}], 2)
    # the launcher's record of the teardown after a stop is not how the job ended
    exit = {"event": "exit", "step": 25, "code": None, "signal": "SIGTERM", "teardown_s": 40.0}
    check_continuation(tmp_path, [start, {"event": "stop", "step": 25, "reason": "done"}, exit], 2)
    with pytest.raises(RuntimeError, match="ended without a planned stop .*: failed"):
        check_continuation(tmp_path, [start, {"event": "failed", "error": "OutOfMemoryError"}, exit], 2)


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
        unlimited._on_signal(10, None)  # SIGUSR1, as sbatch --signal=USR1@600 sends it
        assert unlimited.must_stop() == "signal SIGUSR1"
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
