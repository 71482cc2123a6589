"""Memory per phase (``pacs.ranks.memory``) on the CPU: each phase's resident peak from the kernel's high-water
mark, reset at every boundary, and peaks that survive the resets; the preflight's check and table of them
against the plan's figures for the same phases."""

import os
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
    check_worst_case,
    memory_table,
    pacs_command,
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
        phases = {p: {"rss": 1.0, "torch": 0.5 * v / 1e9, "allocated": 0.4 * v / 1e9, "device": v / 1e9}
                  for p, v in use.items()}  # fmt: skip
        return {"rss": 1.0, "gpu": 1.0, "device": max(use.values()) / 1e9, "phases": phases}

    used = check_memory(spec, [rank(fits), rank(fits)])
    assert used == [pytest.approx(fits), pytest.approx(fits)]
    table = memory_table({"peaks": [rank(fits)], "phase_bytes": used, "limit_bytes": limit, "spec": spec,
                          "plan_phase_bytes": {p: sum(spec["memory"][p].values()) for p in PHASES}})  # fmt: skip
    rows = [line for line in table if line.startswith(("| generate", "| no_grad", "| update"))]
    assert [r.split(" | ")[0] for r in rows] == ["| generate", "| no_grad", "| update"]  # the step's order
    # the device's use, torch's reserved and allocated peaks
    generate = f"{0.6 * limit / 1e9:.3g} GB | {0.3 * limit / 1e9:.3g} GB | {0.24 * limit / 1e9:.3g} GB"
    assert f"| {generate} | {sum(spec['memory']['generate'].values()) / 1e9:.3g} GB | vllm " in rows[0]  # and the plan
    over = {**fits, "update": 1.1 * limit}
    with pytest.raises(PreflightError) as failed:
        check_memory(spec, [rank(fits), rank(over)])
    message = str(failed.value)
    update = spec["memory"]["update"]
    biggest = max(update, key=update.get)
    assert f"rank 1 peaked at {1.1 * limit / 1e9:.3g} GB in use on its GPU in the update phase" in message
    assert f"{biggest} {update[biggest] / 1e9:.3g} GB" in message  # its largest parts, from the plan
    assert f"(the plan estimated {sum(update.values()) / 1e9:.3g} GB)" in message
    # under the card, over what the plan may use of it (the card less its headroom): the phase and by how much
    usable = spec["memory"]["usable"]
    assert usable < limit
    between = {**fits, "no_grad": (usable + limit) / 2}
    with pytest.raises(PreflightError) as failed:
        check_memory(spec, [rank(between), rank(fits)])
    assert (f"rank 0 used {between['no_grad'] / 1e9:.3g} GB of its GPU in the no_grad phase (torch's reserved "
            f"{0.5 * between['no_grad'] / 1e9:.3g} GB), {(between['no_grad'] - usable) / 1e9:.3g} GB over the "
            f"{usable / 1e9:.3g} GB the plan may use") in str(failed.value)  # fmt: skip
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
    forward without autograd; the update: all of it; vLLM asleep in the last two unless sleep_level is 0, its
    CUDA graphs on the GPU while it sleeps (vLLM 0.32 keeps them outside its pool) unless it captures none."""
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    plan = experiment.plan(config)
    job = plan.job("train/qwen2.5-7b/pacs")
    generate, no_grad, update = (job.memory[p] for p in PHASES)
    assert job.peak_bytes == max(sum(p.values()) for p in (generate, no_grad, update))
    assert generate["vllm"] > 0 and "vllm" not in no_grad and "gradients" not in no_grad
    assert no_grad["parameters"] == update["parameters"] and no_grad["optimizer"] == update["optimizer"]
    assert 0 < no_grad["forward"] < update["activations"] and no_grad["logits"] < update["backward"]
    graphs = plan.calibration.vllm_graph_bytes
    assert no_grad["vllm graphs"] == update["vllm graphs"] == graphs > 0 and "vllm graphs" not in generate
    awake = experiment.merged(config, {"train": {"rollout": {"vllm": {"sleep_level": 0}}}})
    memory = experiment.plan(awake).job("train/qwen2.5-7b/pacs").memory
    assert memory["no_grad"]["vllm (awake)"] == memory["update"]["vllm (awake)"] == generate["vllm"]
    assert "vllm graphs" not in memory["update"]  # in its share, awake
    eager = experiment.merged(config, {"train": {"rollout": {"vllm": {"enforce_eager": True}}}})
    assert "vllm graphs" not in experiment.plan(eager).job("train/qwen2.5-7b/pacs").memory["update"]  # none captured


def test_a_preflight_whose_largest_micro_batch_falls_short_of_the_budget_fails_saying_so():
    """The preflight's largest micro-batch against what the run can pack: the token budget, or a rank's whole
    share of a mini-batch at the maximum lengths where that is less; under 90 % of it is a failure naming both."""
    spec = preflight_spec()  # 2 groups a micro-batch, 8 responses of up to 16 tokens to prompts of up to 16
    spec["run"]["trainer"]["max_tokens_per_micro_batch"] = 300  # packed: a group is 16 + 8 × 16 = 144 positions
    train = {"sizes": None, "peaks": [{}], "worst_case": {"budget": 300, "largest_micro_batch": 288, "groups": []}}
    assert check_worst_case(spec, train)["reachable"] == 300
    short = {**train, "worst_case": {**train["worst_case"], "largest_micro_batch": 144}}
    with pytest.raises(PreflightError, match=r"train/m/pacs: the preflight's largest micro-batch held 144 positions, "
                                             r"under 90% of the 300 the run can pack"):  # fmt: skip
        check_worst_case(spec, short)
    spec["run"]["trainer"]["max_tokens_per_micro_batch"] = 10**6  # more than a rank's share: 16 groups of 144
    assert check_worst_case(spec, {**train, "worst_case": {"budget": 10**6, "largest_micro_batch": 16 * 144,
                                                           "groups": []}})["reachable"] == 16 * 144  # fmt: skip
    with pytest.raises(PreflightError, match="recorded no worst case"):
        check_worst_case(spec, {**train, "worst_case": None})
    spec["run"]["trainer"]["max_tokens_per_micro_batch"] = None  # micro_batch_size prompts: the steps' own
    assert check_worst_case(spec, {**train, "worst_case": None}) is None


def test_a_training_job_sets_torch_s_allocator_unless_the_user_did():
    """Expandable segments for the launcher and the ranks it starts (they inherit its environment), set before
    torch starts; a setting of the user's own is kept."""
    from pacs.ranks.allocator import configure_allocator

    environ = {}
    assert configure_allocator(environ) == "expandable_segments:True" == environ["PYTORCH_CUDA_ALLOC_CONF"]
    mine = {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:512"}
    assert configure_allocator(mine) == "max_split_size_mb:512" == mine["PYTORCH_CUDA_ALLOC_CONF"]


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


def test_a_preflight_trains_and_evaluates_by_the_pacs_command_it_was_started_as(monkeypatch, tmp_path):
    """Started as the workflow starts it (`pacs`, found on PATH, or a path to it), its training and evaluation are
    that command's; started as ``python -m pacs.cli``, this interpreter's module."""
    for where in ("on_path", "venv"):
        (tmp_path / where).mkdir()
        (tmp_path / where / "pacs").write_text("#!/bin/sh\n")
        (tmp_path / where / "pacs").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path / 'on_path'}{os.pathsep}{os.environ['PATH']}")
    venv = str(tmp_path / "venv" / "pacs")
    for argv0, command in (("pacs", [str(tmp_path / "on_path" / "pacs")]), (venv, [venv]),
                           ("/repo/pacs/cli/__main__.py", [sys.executable, "-m", "pacs.cli"])):  # fmt: skip
        monkeypatch.setattr(sys, "argv", [argv0, "preflight"])
        assert pacs_command() == command, argv0


# slow: a preflight (two steps and its worst case) and a one-step run of the tiny model, the only test where pacs plan,
# pacs preflight and pacs train resolve one config with a calibration file through their own commands
@pytest.mark.slow
def test_the_plan_the_preflight_and_the_run_resolve_one_config_alike(tiny_model, toy_data, tmp_path):
    """A run with both trainer sizes auto and a calibration file whose headroom leaves this host's memory (as one
    rank sees it) room for about half a mini-batch: pacs plan's resolution (``plan_training``), the preflight's
    (its pacs train, ``pacs preflight --calibration``) and the run's (``pacs train --calibration``) are one budget
    and recompute, below the mini-batch's share: the memory decides. The preflight's last update packs micro-batches
    to that budget (its largest within a group's rounding of it), and the run names the calibration it used."""
    import json
    import subprocess

    from conftest import write_run_config

    from pacs.algorithms.options import get_algorithm
    from pacs.config import from_dict, to_dict
    from pacs.models.shapes import model_shape
    from pacs.plan.calibration import load_calibration
    from pacs.plan.jobs import PlanSettings, plan_training
    from pacs.plan.memory import group_tokens, training_memory
    from pacs.ranks.distributed import DistEnv
    from pacs.runs.segments import read_segments
    from pacs.train.settings.config import load_run_config
    from pacs.train.update.sizes import device_memory

    trainer = {"total_steps": 1, "batch_size": 16, "mini_batch_size": 16, "gradient_checkpointing": True,
               "max_tokens_per_micro_batch": "auto", "checkpoint_layers": "auto"}  # fmt: skip
    path = write_run_config(tmp_path / "run.yaml", tiny_model, toy_data, algorithm={"name": "grpo"},
                            trainer=trainer, checkpoint={"save_every": 1})  # fmt: skip
    run = to_dict(load_run_config(path))
    shape, host = model_shape({"path": str(tiny_model)}, "test"), device_memory(DistEnv())
    floor = group_tokens(run)[0]
    cap = 16 * floor
    half = {**run, "trainer": {**run["trainer"], "max_tokens_per_micro_batch": cap // 2, "checkpoint_layers": 0}}
    room = max(sum(p.values()) for p in list(training_memory(shape, half, 0, False, False, host,
                                                              load_calibration(None, None)).values())[1:3])
    calibration = tmp_path / "calibration.json"
    calibration.write_text(json.dumps({"gpu": "this host", "memory_bytes": host, "memory_headroom": 1 - room / host,
                                       "source": "this host, half a mini-batch"}))  # fmt: skip
    cal = load_calibration(calibration, None)
    planned = plan_training("train/tiny/grpo", shape, run, 0, PlanSettings(), cal)
    assert floor < planned.fit.tokens < cap and planned.fit.layers == 0, planned.fit  # the memory decides

    algorithm = get_algorithm("grpo")
    assert not algorithm.needs(from_dict(algorithm.options, {}, "algorithm.options")) & {"ref_logprobs"}
    spec = {"name": "train/tiny/grpo", "runs": ["train/tiny/grpo"], "run": run, "steps": 2, "keys": "train",
            "memory": {"limit": host, "usable": planned.limit, "device": cal.gpu, "plan": planned.peak_bytes,
                       **{p: planned.memory[p] for p in PHASES},
                       "sizes": {"max_tokens_per_micro_batch": planned.fit.tokens,
                                 "checkpoint_layers": planned.fit.layers}}, "eval": None}  # fmt: skip
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    command = [sys.executable, "-m", "pacs.cli"]
    done = subprocess.run([*command, "preflight", "--spec", str(tmp_path / "spec.json"), "--out",
                           str(tmp_path / "preflight"), "--calibration", str(calibration)], capture_output=True,
                          text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    preflight = json.loads((tmp_path / "preflight" / "preflight.json").read_text())
    done = subprocess.run([*command, "train", "--config", str(path), "--out", str(tmp_path / "run"),
                           "--calibration", str(calibration)], capture_output=True, text=True, timeout=900)  # fmt: skip
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    ran = read_segments(tmp_path / "run")[0]["sizes"]
    for sizes in (preflight["sizes"], ran):
        assert (sizes["max_tokens_per_micro_batch"], sizes["checkpoint_layers"]) == (planned.fit.tokens, 0)
        assert sizes["memory_bytes"] == planned.limit and sizes["calibration"] == "this host, half a mini-batch"
    worst = preflight["worst_case"]
    assert worst["budget"] == planned.fit.tokens and worst["reachable"] == planned.fit.tokens
    assert 0.9 * worst["budget"] <= worst["largest_micro_batch"] <= worst["budget"]
    assert len(worst["groups"]) >= 2 and worst["groups"][0] == run["rollout"]["max_response_length"]
    assert "the largest micro-batch measured" in (tmp_path / "preflight" / "preflight.md").read_text()
    for out in (tmp_path / "run", tmp_path / "preflight" / "run"):  # torch's allocator as the launcher set it
        assert read_segments(out)[0]["cuda_allocator"] == os.environ.get("PYTORCH_CUDA_ALLOC_CONF",
                                                                         "expandable_segments:True")  # fmt: skip
