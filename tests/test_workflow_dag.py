"""The Snakemake workflow's DAG and parse, without the tiny experiment: lint, the paper's dry runs (v1, v2 and
its overlays), a config that cannot fit its GPUs or names a bad key, a failing job, and a preflight that stops
the workflow before training. A module apart from tests/test_workflow.py so that pytest-xdist runs it on the
other worker, beside the tiny experiment."""

import dataclasses
import json
import math
import os
import re
import subprocess
import sys

import pytest
import yaml
from workflow_runs import (
    NO_CLUSTER,
    PAPER_JOBS,
    REPO,
    REPORT_JOBS,
    TINY,
    job_counts,
    overlay,
    pacs_status,
    place_built,
    snakemake,
)

from pacs.train.settings.config import load_run_config


def test_lint_is_clean():
    done = subprocess.run([sys.executable, "-m", "snakemake", "--lint"], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, **NO_CLUSTER})  # fmt: skip
    assert done.returncode == 0 and "Lints for" not in done.stdout + done.stderr, done.stdout + done.stderr


def test_workflow_snakefile_is_the_workflow_the_top_level_snakefile_runs(tmp_path):
    """workflow/Snakefile (where Snakemake's workflow catalog looks for a workflow) given to Snakemake from a
    directory of its own plans the jobs the repository's top-level Snakefile does, `all` the default target of
    both."""
    top = snakemake(tmp_path / "top", "-n", "--configfile", *TINY)
    deep = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "workflow" / "Snakefile"), "-n",
                           "--configfile", *TINY], cwd=tmp_path, capture_output=True, text=True, env={
                           **os.environ, **NO_CLUSTER}, timeout=600)  # fmt: skip
    assert top.returncode == deep.returncode == 0, (top.stderr + deep.stderr)[-3000:]
    counts = job_counts(top.stdout + top.stderr)
    assert counts == job_counts(deep.stdout + deep.stderr) and counts["all"] == 1 and counts["train_policy"] == 6


def test_the_paper_dry_run(tmp_path):
    done = snakemake(tmp_path, "-n")
    assert done.returncode == 0, done.stderr[-3000:]
    assert job_counts(done.stdout + done.stderr) == PAPER_JOBS
    run = yaml.safe_load((tmp_path / "results/paper/configs/run_qwen2.5-7b_pacs_beta2.yaml").read_text())
    assert run["algorithm"] == {"name": "pacs", "options": {**run["algorithm"]["options"], "beta": 2.0}}
    assert (
        run["trainer"]["batch_size"] == 1024
        and run["optim"]["lr"] == 1e-6
        and run["model"]["path"] == "Qwen/Qwen2.5-7B"
    )
    assert yaml.safe_load((tmp_path / "results/paper/configs/eval_aime2024.yaml").read_text())["n"] == 256
    # the plan: printed, written, and the GPU rules' runtimes (the config sets none for them) taken from it
    plan = (tmp_path / "results/paper/plan.md").read_text()
    assert plan in done.stderr and "| train/qwen2.5-7b/pacs | 8 |" in plan
    runtime = int(re.search(r"\| train/qwen2.5-7b/pacs \|(?:[^|]*\|){8} (\d+) \|", plan).group(1))
    job = done.stdout.split("wildcards: model=qwen2.5-7b, method=pacs\n")[1].split("\n")[0]
    assert f"runtime={runtime}," in job and "gpu=8" in job
    preflight = done.stdout.split("wildcards: shape=qwen2.5-7b_pacs")[1].split("\n")[1]
    asked = int(re.search(r"\| preflight_job \| qwen2.5-7b_pacs \| \d+ \| (\d+) \|", plan).group(1))
    assert f"runtime={asked}," in preflight and "gpu=8" in preflight  # the training job's GPUs, the plan's time
    # an evaluation job does its benchmarks one after the other: its runtime is the plan's for them together
    hours = sum(float(re.search(rf"\| evaluate/qwen2.5-7b/base/step_000000/{b} \|(?:[^|]*\|){{5}} ([\d.]+) \|",
                                plan).group(1)) for b in ("math500", "amc23", "aime2024", "aime2025"))  # fmt: skip
    job = done.stdout.split("wildcards: model=qwen2.5-7b, method=base, step=000000")[1].split("\n")[1]
    assert f"runtime={math.ceil(hours * 1.5 * 60 / 10) * 10}," in job and "gpu=1" in job  # plan.runtime_margin 1.5


def test_the_paper_v2_dry_run(tmp_path):
    """config/paper_v2.yaml plans v2's experiment: 6 datasets (BeyondAIME too), 2 models × 4 methods trained
    for 120 and 320 steps, every 20th checkpoint and the base models evaluated on 5 benchmarks; its prompts
    carry v2's system message and Qwen3's thinking switch; PACS resets its reference every 20 steps."""
    done = snakemake(tmp_path, "-n", "-p", "--configfile", str(REPO / "config/paper_v2.yaml"))
    assert done.returncode == 0, done.stderr[-3000:]
    # one job per model or checkpoint, on each of its benchmarks: the bases and the runs' checkpoints on 5 (Figure 6
    # adds 2 to Qwen3-8B's base and last checkpoints), and Table 1's 7 released models on 5
    evaluations = 2 + 4 * (120 // 20) + 4 * (320 // 20) + 7
    assert job_counts(done.stdout + done.stderr) == {
        "prepare_dataset": 8,  # with LiveCodeBench and GPQA
        "preflight_job": 6,  # PACS w/o weight shares PACS's
        "train_policy": 8,
        "evaluate_model": evaluations,
        "measure_diversity": 4,  # Table 3: 2 models × AIME 2024 and 2025
        **REPORT_JOBS,
    }
    configs = tmp_path / "results/paper_v2/configs"
    runs = {p.stem[4:]: yaml.safe_load(p.read_text()) for p in configs.glob("run_*.yaml")
            if not p.name.endswith(".what.yaml")}  # fmt: skip
    assert {k: r["trainer"]["total_steps"] for k, r in runs.items()} == {
        f"qwen3-{size}_{method}": steps
        for size, steps in (("4b", 120), ("8b", 320))
        for method in ("ppo", "grpo", "pacs", "pacs_no_weight")
    }
    pacs = runs["qwen3-8b_pacs"]
    assert (
        pacs["algorithm"]["options"]["reward_proxy"] == "reference" and pacs["trainer"]["reference_reset_every"] == 20
    )
    assert runs["qwen3-8b_grpo"]["trainer"]["reference_reset_every"] is None
    # the plan's figures for each run, in its wandb run's config
    plan = pacs["logging"]["plan"]
    assert (plan["steps"], plan["gpus"], plan["gpu"]) == (320, 8, "NVIDIA H200 141GB"), plan
    assert plan["gpu_hours"] > plan["hours"] > 0, plan
    assert (pacs["model"]["path"], pacs["rollout"]["max_response_length"], pacs["data"]["max_prompt_length"]) == (
        "Qwen/Qwen3-8B", 8192, 1024)  # fmt: skip
    assert pacs["data"]["chat_template_kwargs"] == {"enable_thinking": True} and pacs["optim"]["critic_lr"] == 1e-5
    settings = yaml.safe_load((configs / "eval_beyondaime.yaml").read_text())
    assert (settings["n"], settings["max_tokens"], settings["chat_template_kwargs"]) == (
        128,
        8192,
        {"enable_thinking": True},
    )
    assert "--dataset beyondaime --source hub --system-prompt 'You are a helpful assistant.'" in done.stdout
    manifest = json.loads((tmp_path / "results/paper_v2/report/manifest.json").read_text())
    assert manifest["paper"] == "v2" and "H200" in (tmp_path / "results/paper_v2/plan.md").read_text()
    assert "--start-date 2024-07-01 --end-date 2025-01-01 --prompt-style glm_cot" in done.stdout.split(
        "--dataset livecodebench --source hub --system-prompt 'You are a helpful assistant.'")[1].split("\n")[0]
    code = yaml.safe_load((configs / "eval_livecodebench.yaml").read_text())
    assert (code["n"], code["code"]["grading"]) == (2, "glm45")
    assert manifest["benchmarks"]["livecodebench"]["label"] == "LiveCodeBench (GLM-4.5's grader)"
    assert manifest["benchmarks"]["gpqa"]["label"] == "GPQA Diamond"
    assert manifest["benchmarks"]["gpqa"]["out_of_domain"]
    released = {"qwen3-14b", "deepthought-8b", "eurus-2-7b-prime", "limo", "marco-o1", "openthinker3-7b", "sky-t1-7b"}
    assert {m for m, s in manifest["models"].items() if s["released"]} == released
    assert (configs / "eval_beyondaime_limo.yaml").is_file() and "--model GAIR/LIMO" in done.stdout
    assert "--model Qwen/Qwen3-Embedding-0.6B --embed response" in done.stdout
    assert [(d["model"], d["benchmark"]) for d in manifest["diversity"]][:2] == [("qwen3-4b", "aime2024"),
                                                                                  ("qwen3-8b", "aime2024")]  # fmt: skip


def test_the_v2_ablation_overlay_plans_every_job(tmp_path):
    """config/paper_v2_ablations.yaml adds Figure 4's β sweep and Tables 9–13's two score functions on Qwen3-4B:
    6 runs more (β = 1 is the experiment's PACS), each evaluated at its last checkpoint on the 5 benchmarks, and
    their preflight shared with PACS's; the plan counts their GPU-hours."""
    files = [str(REPO / "config/paper_v2.yaml"), str(REPO / "config/paper_v2_ablations.yaml")]
    done = snakemake(tmp_path, "-n", "--configfile", *files)
    assert done.returncode == 0, done.stderr[-3000:]
    evaluations = 2 + 4 * (120 // 20) + 4 * (320 // 20) + 7  # the experiment's own (above)
    assert job_counts(done.stdout + done.stderr) == {
        "prepare_dataset": 8, "preflight_job": 6, "train_policy": 8 + 6, "evaluate_model": evaluations + 6,
        "measure_diversity": 4, **REPORT_JOBS}  # fmt: skip
    plan = (tmp_path / "results/paper_v2/plan.md").read_text()
    for method in ("pacs_beta_0.1", "pacs_beta_10", "pacs_grpo_score", "pacs_drgrpo_score"):
        assert f"| train/qwen3-4b/{method} | 8 |" in plan and f"train/qwen3-8b/{method}" not in plan
    manifest = json.loads((tmp_path / "results/paper_v2/report/manifest.json").read_text())
    assert manifest["methods"]["pacs"]["sweep"]["value"] == 1.0  # drawn on the β axis


def test_the_one_step_off_overlay_adds_v2_pacs_trained_one_step_off(tmp_path):
    """config/one_step_off.yaml: one run more on Qwen3-4B, v2's PACS with rollout.staleness 1 and the truncated
    ratio the staleness requires, evaluated at the checkpoints PACS is (Figure 3's, every 20 steps)."""
    files = [str(REPO / "config/paper_v2.yaml"), str(REPO / "config/one_step_off.yaml")]
    done = snakemake(tmp_path, "-n", "--configfile", *files)
    assert done.returncode == 0, done.stderr[-3000:]
    counts = job_counts(done.stdout + done.stderr)
    v2 = 2 + 4 * (120 // 20) + 4 * (320 // 20) + 7  # the experiment's own evaluation jobs (above)
    assert counts["train_policy"] == 8 + 1 and counts["evaluate_model"] == v2 + 120 // 20
    run = load_run_config(tmp_path / "results/paper_v2/configs/run_qwen3-4b_pacs_one_step_off.yaml")
    pacs = load_run_config(tmp_path / "results/paper_v2/configs/run_qwen3-4b_pacs.yaml")
    assert run.rollout.staleness == 1 and run.algorithm.options["tis_cap"] == 2.0
    same = dict(rollout=pacs.rollout, algorithm=pacs.algorithm, logging=pacs.logging)  # the run's name aside
    assert dataclasses.replace(run, **same) == pacs  # nothing else differs
    assert "| train/qwen3-4b/pacs_one_step_off | 8 |" in (tmp_path / "results/paper_v2/plan.md").read_text()


def test_a_config_that_cannot_fit_its_gpus_stops_the_parse(tmp_path):
    ddp = overlay(tmp_path / "ddp.yaml", {"train": {"trainer": {"strategy": "ddp", "compute_dtype": None}}})
    done = snakemake(tmp_path, "-n", "--configfile", str(REPO / "config/config.yaml"), ddp)
    assert done.returncode != 0
    assert "train/qwen2.5-7b/pacs: the update phase needs" in done.stderr
    assert "train (or methods.pacs.train).trainer.strategy fsdp" in done.stderr


@pytest.mark.parametrize(
    "bad, named",
    [
        ({"data": {"sourc": "hub"}}, "sourc"),  # the schema
        ({"train": {"optim": {"lrr": 1.0}}}, "optim.lrr"),  # pacs's run-config loader, at parse time
        ({"eval": {"settings": {"top_p": "high"}}}, "top_p"),
    ],
)
def test_a_bad_config_key_is_an_error_naming_it(tmp_path, bad, named):
    done = snakemake(tmp_path, "-n", "--configfile", *TINY, overlay(tmp_path / "bad.yaml", bad))
    assert done.returncode != 0 and named in done.stdout + done.stderr


def test_a_failed_job_fails_the_workflow_and_names_its_log(tmp_path):
    bad = overlay(tmp_path / "bad.yaml", {"data": {"source": "local", "local_dir": str(tmp_path / "nowhere")}})
    target = "results/tiny/data/gsm8k.parquet"  # before --configfile, which takes every argument after it
    done = snakemake(tmp_path, "--cores", "1", target, "--configfile", *TINY, bad)
    assert done.returncode != 0
    log = "results/tiny/logs/prepare_dataset/gsm8k.log"
    assert log in done.stdout + done.stderr
    assert "gsm8k_test.jsonl: no such file" in (tmp_path / log).read_text()


@pytest.mark.slow
def test_a_preflight_over_its_device_memory_stops_the_workflow_before_training(tiny_model, toy_data, tmp_path):
    """The tiny config planned for a device of 0.3 GB (a calibration file): the plan's estimate fits, but the
    preflight measures more, fails naming the run, the measurement and the keys to change, and the run's
    training never starts."""
    place_built(tmp_path, toy_data, tiny_model)
    calibration = tmp_path / "small.json"
    calibration.write_text(json.dumps({"gpu": "0.3 GB device", "memory_bytes": 300_000_000, "overhead_bytes": 0,
                                       "vllm_overhead_bytes": 0}))  # fmt: skip
    small = overlay(tmp_path / "small.yaml", {"plan": {"calibration": str(calibration)}})
    target = "results/tiny/runs/tiny/pacs/trained.json"
    done = snakemake(tmp_path, "--cores", "2", target, "--configfile", str(REPO / "config" / "tiny.yaml"), small)
    assert done.returncode != 0 and "preflight_job" in done.stdout + done.stderr
    log = (tmp_path / "results/tiny/logs/preflight/tiny_pacs.log").read_text()
    assert re.search(r"FAILED: train/tiny/pacs: rank 0 peaked at [\d.]+ GB resident \(the process\) in the "
                     r"(generate|no_grad|update) phase \(the plan's largest parts of it: [^)]*\) .* more than the "
                     r"0.3 GB of a 0.3 GB device \(the plan estimated [\d.]+ GB\); change "
                     r"train \(or methods.pacs.train\)\.\w+\.", log), log[-3000:]  # fmt: skip
    assert "build_tiny_model" not in done.stdout + done.stderr  # placed, not built again
    assert not (tmp_path / "results/tiny/runs").exists()
    assert not (tmp_path / "results/tiny/preflight/tiny_pacs/preflight.json").exists()
    # `pacs status`: the failed preflight, its log and its last lines, and everything that waits on it
    status = pacs_status(tmp_path, str(REPO / "config" / "tiny.yaml"), small)
    (failed,) = status["failed"]
    assert (failed["name"], failed["rule"]) == ("preflight/tiny_pacs", "preflight_job"), failed
    assert failed["log"] == "results/tiny/logs/preflight/tiny_pacs.log", failed
    (preflight,) = [p for p in status["preflights"] if p["name"] == "preflight/tiny_pacs"]
    assert preflight["state"] == "failed" and any("FAILED: train/tiny/pacs" in x for x in preflight["log_tail"])
    waiting = set(status["blocked"]["preflight/tiny_pacs"])
    assert {"train/tiny/pacs", "evaluate/tiny/pacs/step_000040", "report"} <= waiting, waiting
    assert not any(name.startswith(("train/tiny/grpo", "evaluate/tiny/base")) for name in waiting), waiting
    (run,) = [r for r in status["runs"] if r["method"] == "pacs"]
    assert (run["state"], run["blocked_by"], run["eta"]) == ("waiting", ["preflight/tiny_pacs"], None), run
    assert status["totals"]["eta"] is None


def test_a_site_s_qos_and_constraint_reach_each_kind_of_job(tmp_path):
    """resources.<kind>.qos and constraint are the SLURM executor's own resources (its --qos and -C), per kind of
    job; a training or evaluation job's log appends across its starts (--open-mode=append)."""
    site = overlay(tmp_path / "site.yaml", {"resources": {"train": {"qos": "long", "constraint": "h100"},
                                                          "evaluate": {"qos": "short"}}})  # fmt: skip
    done = snakemake(tmp_path, "-n", "--configfile", *TINY, site)
    assert done.returncode == 0, done.stderr[-3000:]
    train, evaluate = (re.search(r"resources: .*", done.stdout.split(f"rule {rule}:")[1]).group(0)
                       for rule in ("train_policy", "evaluate_model"))  # fmt: skip
    assert "qos=long" in train and "constraint=h100" in train and "slurm_extra=--open-mode=append" in train, train
    assert "qos=short" in evaluate and "constraint" not in evaluate, evaluate
