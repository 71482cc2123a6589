"""Memory per phase (``pacs.ranks.memory``) on the CPU: each phase's resident peak from the kernel's high-water
mark, reset at every boundary, and peaks that survive the resets; the preflight's check and table of them
against the plan's figures for the same phases."""

import resource
import sys

import numpy as np
import pytest
import yaml
from test_plan import REPO, tiny_config

from pacs import experiment
from pacs.plan.memory import PHASES
from pacs.ranks.memory import PhaseMemory, reset_resident_peak, resident_peak
from pacs.runs.preflight import (
    PreflightError,
    check_generator_memory,
    check_memory,
    memory_table,
    preflight_run_config,
    run_training,
)
from pacs.runs.segments import EXIT_STOPPED

MB = 10**6
BUFFER = 300 * MB


def hold(nbytes: int) -> None:
    """Make ``nbytes`` resident, then free them (numpy maps a buffer this large and unmaps it when freed)."""
    buffer = np.ones(nbytes, dtype=np.uint8)  # written: resident, not only reserved
    assert buffer.sum() == nbytes
    del buffer


@pytest.fixture
def tracker():
    if not reset_resident_peak():
        pytest.skip("this kernel refuses to reset the resident high-water mark (/proc/self/clear_refs)")
    return PhaseMemory()


def test_each_phase_holds_its_own_resident_peak(tracker):
    with tracker.phase("no_grad"):
        pass
    with tracker.phase("update"):
        hold(BUFFER)
    with tracker.phase("generate"):
        pass
    rss = {name: tracker.phases[name]["rss"] for name in PHASES}
    assert abs(rss["update"] - rss["no_grad"] - BUFFER) < 0.1 * BUFFER  # the buffer, in its phase only
    assert abs(rss["generate"] - rss["no_grad"]) < 0.1 * BUFFER  # freed before the next phase began
    assert all("torch" not in p and "device" not in p for p in tracker.phases.values())  # CUDA never touched


def test_the_peaks_survive_the_resets_and_count_the_spans_between_phases(tracker):
    with tracker.phase("update"):
        hold(BUFFER)
    hold(2 * BUFFER)  # between phases (a weight push, a checkpoint): the run's peak, no phase's
    with tracker.phase("generate"):
        pass
    peaks = tracker.peaks()
    # the boundaries reset the kernel's high-water mark, which getrusage reads too: only the tracker kept them
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < resident_peak() + 0.1 * BUFFER
    assert peaks["rss"] * 1e9 > resident_peak() + 1.8 * BUFFER
    assert peaks["phases"]["update"]["rss"] * 1e9 > resident_peak() + 0.9 * BUFFER
    assert peaks["rss"] > peaks["phases"]["update"]["rss"] + 0.8 * BUFFER / 1e9
    assert list(peaks["phases"]) == ["generate", "update"]
    with pytest.raises(ValueError, match="'old_logprobs' is not one of"):
        with tracker.phase("old_logprobs"):
            pass


def preflight_spec() -> dict:
    """The spec of the tiny experiment's PACS preflight on one GPU."""
    config = tiny_config(resources={"train": {"gpu": 1}})
    runs = experiment.run_configs(config)
    specs = experiment.preflight_specs(config, runs, experiment.plan(config, runs))
    return next(s for s in specs.values() if s["name"] == "train/m/pacs")


def test_the_preflight_checks_each_phase_against_the_device_and_names_the_one_over_it():
    spec = preflight_spec()
    assert set(PHASES) <= set(spec["memory"]) and spec["memory"]["plan"] == max(
        sum(spec["memory"][p].values()) for p in PHASES
    )  # the plan's peak is its largest phase
    limit = spec["memory"]["limit"]
    fits = {"generate": 0.6 * limit, "no_grad": 0.2 * limit, "update": 0.3 * limit}

    def rank(use: dict) -> dict:  # as TRACKER.peaks() gives it, GB
        phases = {p: {"rss": 1.0, "torch": 0.5 * v / 1e9, "device": v / 1e9} for p, v in use.items()}
        return {"rss": 1.0, "gpu": 1.0, "device": max(use.values()) / 1e9, "phases": phases}

    used = check_memory(spec, [rank(fits), rank(fits)])
    assert used == [pytest.approx(fits), pytest.approx(fits)]
    table = memory_table({"peaks": [rank(fits)], "phase_bytes": used, "limit_bytes": limit, "spec": spec,
                          "plan_phase_bytes": {p: sum(spec["memory"][p].values()) for p in PHASES}})  # fmt: skip
    rows = [line for line in table if line.startswith(("| generate", "| no_grad", "| update"))]
    assert [r.split(" | ")[0] for r in rows] == ["| generate", "| no_grad", "| update"]  # the step's order
    assert f"| {0.6 * limit / 1e9:.3g} GB | {sum(spec['memory']['generate'].values()) / 1e9:.3g} GB | vllm " in rows[0]
    over = {**fits, "update": 1.1 * limit}
    with pytest.raises(PreflightError) as failed:
        check_memory(spec, [rank(fits), rank(over)])
    message = str(failed.value)
    update = spec["memory"]["update"]
    biggest = max(update, key=update.get)
    assert f"rank 1 peaked at {1.1 * limit / 1e9:.3g} GB in use on its GPU in the update phase" in message
    assert f"{biggest} {update[biggest] / 1e9:.3g} GB" in message  # its largest parts, from the plan
    assert f"(the plan estimated {sum(update.values()) / 1e9:.3g} GB)" in message
    assert "train (or methods.pacs.train).trainer." in message
    # beside generator ranks, the largest generator's peak (its batches carry it) against the device too
    assert check_generator_memory(spec, {}) is None
    assert check_generator_memory(spec, {"rss": 1.0, "device": 0.5 * limit / 1e9}) == pytest.approx(0.5 * limit)
    with pytest.raises(PreflightError, match=rf"a generator rank peaked at {1.2 * limit / 1e9:.3g} GB in use on its "
                                             r"GPU .* lower train \(or methods.pacs.train\).rollout.vllm."
                                             "generator_memory_utilization"):  # fmt: skip
        check_generator_memory(spec, {"rss": 1.0, "device": 1.2 * limit / 1e9})


def test_the_plan_counts_the_phases_the_trainer_measures():
    """Generation: the trainer's state beside vLLM's share; the no-grad passes: that state, no gradients, a
    forward without autograd; the update: all of it; vLLM asleep in the last two unless sleep_level is 0."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    plan = experiment.plan(config)
    job = plan.job("train/qwen2.5-7b/pacs")
    generate, no_grad, update = (job.memory[p] for p in PHASES)
    assert job.peak_bytes == max(sum(p.values()) for p in (generate, no_grad, update))
    assert generate["vllm"] > 0 and "vllm" not in no_grad and "gradients" not in no_grad
    assert no_grad["parameters"] == update["parameters"] and no_grad["optimizer"] == update["optimizer"]
    assert 0 < no_grad["forward"] < update["activations"] and no_grad["logits"] < update["logits"]
    awake = experiment.merged(config, {"train": {"rollout": {"vllm": {"sleep_level": 0}}}})
    memory = experiment.plan(awake).job("train/qwen2.5-7b/pacs").memory
    assert memory["no_grad"]["vllm (awake)"] == memory["update"]["vllm (awake)"] == generate["vllm"]


def test_a_preflight_trains_to_its_last_step_unless_its_time_limit_stops_it_and_then_says_so(tmp_path):
    """The preflight's run stops for the job's time limit only when its next step could not finish in it (stop
    margin 1, whatever the run's); a training stopped that way is a preflight that failed, naming the key."""
    spec = {**preflight_spec(), "steps": 2}
    spec["run"]["checkpoint"]["stop_margin"] = 1e6  # the run's own, as a test of segments sets it
    assert preflight_run_config(spec["run"], 2)["checkpoint"]["stop_margin"] == 1.0
    stopped = [sys.executable, "-c", f"import sys; sys.exit({EXIT_STOPPED})"]  # a launcher whose job stopped
    with pytest.raises(PreflightError, match=r"train/m/pacs: the preflight's training stopped for its job's time "
                                             r"limit before its 2 steps ended; raise preflight.runtime"):  # fmt: skip
        run_training(spec, tmp_path, stopped)
