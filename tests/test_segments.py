"""A run as consecutive jobs: when a resubmitted job may continue, and where a job's end time comes from."""

import time

import pytest

from pacs.train.distributed import DistEnv
from pacs.train.segments import JobOptions, Segment, check_continuation, slurm_end_time


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
    with Segment(tmp_path, DistEnv(), 1.5, JobOptions(), {}) as unlimited:
        unlimited.begin(1)
        unlimited.took(2, step_s=1e9)
        assert unlimited.must_stop() == ""
        unlimited._on_signal(10, None)  # SIGUSR1, as sbatch --signal=USR1@600 sends it
        assert unlimited.must_stop() == "signal SIGUSR1"
