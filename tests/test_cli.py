import json
from pathlib import Path

import pandas as pd
import pytest

from pacs.cli import main
from pacs.verify import STATUSES


def test_bench_verifier_writes_a_report(tmp_path, capsys):
    out = tmp_path / "bench" / "verifier.json"
    args = ["bench", "verifier", "--answers", "30", "--groups", "5", "--workers-counts", "1", "2", "3"]
    assert main([*args, "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["results"]
    assert set(rows) == {"in_process", "pool_1_workers", "pool_2_workers", "pool_3_workers",
                         "pool_2_workers_groups_of_8"}  # fmt: skip
    for row in rows.values():
        assert row["answers_per_s"] > 0
        assert set(row["statuses"]) == set(STATUSES) and sum(row["statuses"].values()) == row["answers"]
    assert rows["pool_2_workers"]["agrees_with_in_process"] is rows["pool_3_workers"]["agrees_with_in_process"] is True
    grouped = rows["pool_2_workers_groups_of_8"]
    assert grouped["answers"] == 40 and grouped["unique_pairs"] <= 15
    # each pool beside one worker and beside what the work allows it (the in-process seconds over its workers)
    assert rows["pool_1_workers"]["speedup_over_1_worker"] == 1.0
    assert rows["pool_3_workers"]["speedup_over_1_worker"] > 0
    for w in (1, 2, 3):
        row = rows[f"pool_{w}_workers"]
        bound = max(row["worker_seconds"] / w, row["longest_answer_s"])
        assert row["bound_answers_per_s"] == pytest.approx(30 / bound, rel=0.01)
        assert row["answers_per_s"] <= row["bound_answers_per_s"] * 1.01  # the pool's own work at the most
    assert "x 1 worker" in capsys.readouterr().out
    assert not list(out.parent.glob(".*.tmp"))  # atomic write left no temp file


def test_bench_code_writes_a_report_and_its_table(tmp_path, capsys):
    """One program of each kind, one worker, plain limits (every machine has them)."""
    from pacs.verify import CODE_STATUSES

    out = tmp_path / "bench" / "code.json"
    args = ["bench", "code", "--programs", "5", "--workers-counts", "1", "--isolation", "limits", "--timeout-s", "0.5"]
    assert main([*args, "--startup-runs", "3", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["bench"] == "code" and report["test_timeout_s"] == 0.5 and report["code"]["timeout_s"] == 0.5
    assert report["mix"] == {"correct": 1, "wrong": 1, "runtime_error": 1, "slow": 1, "timeout": 1}
    level = report["results"]["limits"]
    assert level["run"] is True and level["resolved"] == "limits" and len(level["startup_runs_s"]) == 3
    assert 0 < level["startup_s"] < 5
    row = level["pools"]["1_workers"]
    assert row["programs"] == 5 and row["programs_per_s"] > 0 and row["seconds_per_verdict"] > 0
    assert set(row["statuses"]) == set(CODE_STATUSES) and sum(row["statuses"].values()) == 5
    assert row["as_expected"] == 5 and row["statuses"]["passed"] == 2  # correct and slow pass
    assert all(k.startswith("limits") for k in row["isolation"]) and sum(row["isolation"].values()) == 5
    assert row["by_kind"]["timeout"]["statuses"] == {"timeout": 1}
    assert row["by_kind"]["slow"]["in_tests_s"] >= 3 * 0.3 * 0.9  # three tests each sleeping 0.6 of 0.5 s
    # one worker's bound: every program's seconds in its sandbox, one after another
    assert row["speedup_over_1_worker"] == 1.0
    assert row["bound_wall_s"] == pytest.approx(5 * row["seconds_per_verdict"], rel=0.01)
    table = (tmp_path / "bench" / "code.md").read_text()
    assert "| limits |" in table and table in capsys.readouterr().out


def test_bench_code_reports_a_level_that_cannot_run(monkeypatch):
    from pacs.bench import code
    from pacs.verify import CodeConfig
    from pacs.verify.sandbox import SandboxUnavailable

    reason = "code verifier: isolation 'bubblewrap' is required, but bwrap is not installed"

    def missing(wanted: str) -> str:
        raise SandboxUnavailable(reason)

    monkeypatch.setattr(code, "resolve_isolation", missing)
    report = code.run_code_bench(4, 0, CodeConfig(timeout_s=0.5), ("bubblewrap",), (1,))
    assert report["results"] == {"bubblewrap": {"run": False, "reason": reason}}
    assert f"| bubblewrap | not run: {reason} |" in code.code_bench_markdown(report)


def test_check_golds_writes_a_row_per_gold_and_fails_on_a_bad_one(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    rows = [
        {"id": 0, "problem": "p1", "answer": 27.0},
        {"id": 1, "problem": "p2", "answer": "\\frac{1}{2}"},
        {"id": 2, "problem": "p3", "answer": "}{"},
    ]
    (data / "amc23.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "golds.csv"
    code = main(["check-golds", "--data-dir", str(data), "--benchmarks", "amc23", "--out", str(out), "--workers", "1"])
    assert code == 1
    table = pd.read_csv(out)
    assert table["gold"].tolist() == ["27", "\\frac{1}{2}", "}{"]
    assert table["ok"].tolist() == [True, True, False]
    assert table["right_status"].tolist()[2] == "gold_unparseable"
    assert "FAIL amc23 row 2" in capsys.readouterr().out


def test_missing_data_is_a_clear_error(tmp_path, capsys):
    code = main(["check-golds", "--data-dir", str(tmp_path), "--benchmarks", "gsm8k", "--out", str(tmp_path / "x.csv")])
    assert code == 2
    assert "gsm8k_test.jsonl: no such file" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_bench_update_measures_padded_and_packed_rows_on_ragged_lengths(tmp_path, capsys):
    """Rows in groups with DeepScaleR's response lengths: the padded layout computes padding, the packed one
    none, both the same row tokens; the FLOPs split into linear layers and attention; a profile by family; the
    mini-batch in micro-batches by a token budget."""
    out = tmp_path / "update.json"
    args = ["bench", "update", "--shape", "qwen2.5-0.5b", "--set", "num_hidden_layers=1", "hidden_size=64",
            "intermediate_size=128", "num_attention_heads=2", "num_key_value_heads=1", "vocab_size=512",
            "--strategies", "single", "--rows", "8", "--group-size", "4", "--prompt-length", "16",
            "--response-length", "64", "--lengths", "deepscaler", "--max-tokens", "100", "--steps", "2",
            "--variants", "padded", "packed", "--profile", "--peak-flops", "1e12", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    padded, packed = json.loads(out.read_text())["results"]
    assert (padded["variant"], packed["variant"]) == ("padded", "packed")
    assert padded["padding_share"] > 0.1 and packed["padding_share"] == 0
    work = [r["ranks"][0]["work"] for r in (padded, packed)]
    assert work[0]["row_tokens"] == work[1]["row_tokens"] == 8 * 16 + work[0]["response_tokens"]
    assert work[0]["needed_positions"] == work[1]["needed_positions"] == 2 * 16 + work[0]["response_tokens"]
    assert 0 < packed["mfu_attention"] < packed["mfu"]
    families = packed["profile"]["families"]
    assert families["matmul"]["seconds"] > 0 and abs(sum(f["share"] for f in families.values()) - 1) < 1e-6
    # attention calls per layer (no recompute here): padded, the prompts' and the responses' (shared prompts);
    # packed, one, however many segments (2 prompts, 8 responses) its kernel covers
    assert (padded["profile"]["attention_calls_per_layer"], packed["profile"]["attention_calls_per_layer"]) == (2, 1)
    # the mini-batch in micro-batches of whole groups by the token budget, as the trainer packs them: a group each
    # (each is above half the budget), one optimizer step
    assert padded["micro_batches"] == packed["micro_batches"] == 2
    assert 0 < packed["host_s_per_micro_batch"] <= packed["step_s"] / 2
    assert "matmul" in capsys.readouterr().out
    assert packed["hfu"] == packed["mfu"]  # no layer recomputes: the GPU's work is the model's
    # every layer recomputing: the GPU's work adds one forward of the decoder layers, more than none of the update's
    # FLOPs and less than a third of them (three forwards' worth, the LM head's among them)
    args[args.index("--variants") + 1: args.index("--profile") + 1] = ["packed"]  # unprofiled
    assert main([*args, "--gradient-checkpointing"]) == 0
    (recomputed,) = json.loads(out.read_text())["results"]
    assert recomputed["mfu"] < recomputed["hfu"] < recomputed["mfu"] * 4 / 3


def test_the_profile_sums_each_kernel_the_device_ran_once_by_family(tmp_path):
    """A trace as torch.profiler exports it on a GPU, with the kernel names an H100 ran (cuBLAS's nvjet GEMMs,
    FlexAttention's Triton templates and Inductor's kernels beside them, casts, FSDP2's copies, NCCL's collectives,
    AdamW's multi-tensor kernels): each kernel, copy and memset counted once in its family; the operators that
    launched them, annotation ranges and host-side events not at all. A kernel launched inside FSDP2's ranges is
    FSDP's, inside ``Optimizer.step`` the optimizer's, a collective communication wherever it was launched; ranges
    count on the thread that opened them only (FSDP's post-backward runs on autograd's)."""
    from pacs.bench.profile import device_timeline, families_of

    mta = "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
    direct_copy = ("at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}::operator()() const::"
                   "{lambda()#7}::operator()() const::{lambda(float)#1}")  # fmt: skip
    divide = (mta + "TensorListMetadata<1>, at::native::(anonymous namespace)::BinaryOpScalarFunctor<float, 1, 1, 0>, "
              "std::divides<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<1>, ...)")  # fmt: skip
    gather, reduce = "FSDP::all_gather (layers.0)", "FSDP::post_backward_reduce (layers.0)"
    step = "Optimizer.step#AdamW.step"
    device = [
        ("kernel", "nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNT", "matmul", ""),
        ("kernel", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_cublas", "matmul", ""),
        ("kernel", "cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_bf16_bf16", "matmul", ""),
        ("kernel", "triton_tem_fused_flex_attention_0", "attention", ""),
        ("kernel", "triton_tem_fused_flex_attention_backward_1", "attention", ""),
        ("kernel", "triton_red_fused_mul_sum_0", "element-wise", ""),
        ("kernel", "triton_poi_fused__to_copy_add_mul_pow_rsqrt_0", "element-wise", ""),
        ("kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::silu_kernel>", "element-wise", ""),
        # casts: bf16 to fp32 (the dtypes cast in the loads and stores), fp32 to bf16, a strided one
        ("kernel", f"void at::native::unrolled_elementwise_kernel<{direct_copy}, std::array<char*, 2ul>, 4, "
                   "TrivialOffsetCalculator<1, unsigned int>, TrivialOffsetCalculator<1, unsigned int>, "
                   "at::native::memory::LoadWithCast<1>, at::native::memory::StoreWithCast<1> >(int, ...)",
         "element-wise", ""),
        ("kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::bfloat16_copy_kernel_cuda("
                   "at::TensorIteratorBase&)::{lambda(float)#1}, std::array<char*, 2ul> >(int, ...)",
         "element-wise", ""),
        ("kernel", f"void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl<{direct_copy}>("
                   "at::TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)", "element-wise", ""),
        # same-dtype copies: a strided one (a transpose made contiguous), a contiguous one
        ("kernel", f"void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<{direct_copy}>("
                   "at::TensorIteratorBase&, ...)::{lambda(int)#1}>(int, ...)", "copy/index", ""),
        ("gpu_memcpy", "Memcpy DtoD (Device -> Device)", "copy/index", ""),
        # FSDP2: the all-gather's copy-in (a foreach cast to bf16, or a foreach copy) and copy-out, the
        # reduce-scatter's copy-in, the gradients' division (foreach, or one div_: a product with the reciprocal)
        ("kernel", mta + "TensorListMetadata<2>, at::native::(anonymous namespace)::CopyFunctor<c10::BFloat16, "
                   "float, 2, 1, 1>, at::native::Copy<c10::BFloat16, float> >(...)", "fsdp copies", gather),
        ("kernel", mta + "TensorListMetadata<2>, at::native::(anonymous namespace)::UnaryOpFunctor<"
                   "c10::BFloat16, 2, 1, 1>, at::native::Copy<float, float> >(...)", "fsdp copies", ""),
        ("kernel", "void at::native::(anonymous namespace)::split_with_sizes_copy_out_contiguous_no_cast_kernel("
                   "char**, char**, long*, long*, long*, long, long, long)", "fsdp copies", ""),
        ("kernel", "void at::native::(anonymous namespace)::chunk_cat_cuda_kernel<float, float>(float**, float*, "
                   "long*, long*, long*, long*, long*, long*, long, long)", "fsdp copies", reduce),
        ("kernel", divide, "fsdp copies", reduce),
        ("kernel", "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
                   "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, ...)",
         "fsdp copies", reduce),
        # the collectives, launched inside FSDP's ranges
        ("kernel", "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication", gather),
        ("kernel", "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "communication",
         reduce),
        # AdamW's kernels inside its step: fused, and foreach (a division among them); the gradient norm's
        ("kernel", mta + "FusedOptimizerTensorListMetadata<4>, at::native::(anonymous namespace)::FusedAdamMathFunctor"
                   "<float, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, double, double, double, "
                   "double, bool*, float*>(...)", "optimizer", step),
        ("kernel", divide, "optimizer", step),
        ("kernel", mta + "TensorListMetadata<1>, at::native::(anonymous namespace)::LpNormFunctor<float, "
                   "(at::native::NormType)1, float, float>, float*, int>(...)", "optimizer", ""),
        ("kernel", "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>", "softmax/logsumexp", ""),
        ("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", "copy/index", ""),
        ("gpu_memset", "Memset (Device)", "copy/index", ""),
    ]  # fmt: skip
    elsewhere = [("cpu_op", "aten::mm"), ("cpu_op", "aten::_flex_attention"), ("cuda_runtime", "cudaLaunchKernel"),
                 ("gpu_user_annotation", step), ("user_annotation", step),
                 ("overhead", "Command Buffer Full")]  # fmt: skip
    events, thread = [], {"": 1, gather: 1, step: 1, reduce: 2}  # the post-backward hook runs on autograd's thread
    for i, (c, n, _, within) in enumerate(device):
        events.append({"cat": c, "name": n, "pid": 0, "tid": 7, "ts": 10**5 + i, "dur": 1000 * (i + 1),
                       "args": {"stream": 7, "correlation": i}})  # fmt: skip
        events.append({"cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 9, "tid": thread[within], "ts": 10 * i,
                       "dur": 1, "args": {"correlation": i}})  # fmt: skip
        if within:
            events.append({"cat": "user_annotation", "name": within, "pid": 9, "tid": thread[within], "ts": 10 * i - 2,
                           "dur": 5})  # fmt: skip
    copy_in = [w for *_, w in device].index(gather)  # its range inside FSDP::pre_forward's, as FSDP2 opens them
    events.append({"cat": "user_annotation", "name": "FSDP::pre_forward (layers.0)", "pid": 9, "tid": 1,
                   "ts": 10 * copy_in - 4, "dur": 10})  # fmt: skip
    events.append({"cat": "user_annotation", "name": reduce, "pid": 9, "tid": 2, "ts": 0, "dur": 10**4})
    events += [{"cat": c, "name": n, "pid": 9, "tid": 1, "ts": 10**6, "dur": 10**6} for c, n in elsewhere]

    class Exported:
        def export_chrome_trace(self, path):
            Path(path).write_text(json.dumps({"traceEvents": events}))

    timed = device_timeline(Exported())
    assert [a.name for a in timed] == [name for _, name, _, _ in device]
    ranges = [w for *_, w in device]
    assert [a.within for a in timed] == ranges[:copy_in] + ["FSDP::pre_forward (layers.0)"] + ranges[copy_in + 1 :]
    profile = families_of(timed)
    expected, by_name = {}, {}
    for i, (_, name, family, _) in enumerate(device):
        expected[family] = expected.get(family, 0) + (i + 1) / 1000
        by_name[name] = by_name.get(name, 0) + (i + 1) / 1000
    assert {f: v["seconds"] for f, v in profile["families"].items() if v["seconds"]} == pytest.approx(expected)
    assert profile["seconds"] == pytest.approx(sum(range(1, len(device) + 1)) / 1000)
    costliest = max(by_name, key=by_name.get)
    assert profile["top"][0] == {"name": costliest, "seconds": pytest.approx(by_name[costliest])}
    # by name alone (no range known): the division is a multi-tensor kernel like the optimizer's
    assert families_of([(divide, 1.0)])["families"]["optimizer"]["seconds"] == 1.0


def test_the_profile_explains_a_sum_past_the_step_by_streams_busy_at_once():
    """A step whose all-gathers and reduce-scatters ran on NCCL's stream beside the compute, and whose FSDP copy-in
    ran on a stream of its own beside a GEMM: the families sum every stream's time, past the span from the first
    kernel's start to the last one's end; the busy times (unions of intervals) account for it."""
    from pacs.bench.profile import Activity, busy_times, families_of, format_families

    within = "FSDP::all_gather (layers.1)"
    step = [Activity("nvjet_sm90_tst_256x128_64x4_2x1_v_bz_coopA_NNT", 4.0, 0.0),  # compute stream: [0, 4)
            Activity("triton_poi_fused_add_mul_0", 2.0, 5.0),  # [5, 7)
            Activity("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<...CopyFunctor<c10::BFloat16, "
                     "float, 2, 1, 1>...>(...)", 1.0, 1.0, within),  # copy-in stream: [1, 2)
            Activity("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 4.0, 2.0, within),  # [2, 6)
            Activity("ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 1.0, 8.0),
            ]  # fmt: skip
    families, busy = families_of(step), busy_times(step)
    assert {f: v["seconds"] for f, v in families["families"].items() if v["seconds"]} == {
        "matmul": 4.0, "element-wise": 2.0, "fsdp copies": 1.0, "communication": 5.0}  # fmt: skip
    assert busy == {"span_s": 9.0, "busy_s": 8.0, "compute_busy_s": 6.0, "communication_busy_s": 5.0}
    assert families["seconds"] == 12.0 > busy["span_s"]
    # the sum: compute busy, communication busy, and the copy-in beside the GEMM (compute beside compute);
    # the span: compute and communication less the time they ran at once, and the device's wait from 7 to 8
    assert families["seconds"] == busy["compute_busy_s"] + busy["communication_busy_s"] + 1.0
    both = busy["compute_busy_s"] + busy["communication_busy_s"] - busy["busy_s"]
    assert both == 3.0 and busy["span_s"] == busy["busy_s"] + 1.0
    text = format_families({"measure": "CUDA kernels, copies and memsets", **families, **busy, "step_gpu_s": 9.1})
    printed = {line[:20].strip(): float(line[20:29]) for line in text.splitlines()[1:]}
    assert printed == {**{f: v["seconds"] for f, v in families["families"].items()}, "sum": 12.0,
                       "step on the GPU": 9.1, "first to last": 9.0, "compute busy": 6.0, "communication busy": 5.0,
                       "both at once": 3.0}  # fmt: skip


def test_the_response_length_table_is_deepscalers(shared_data):
    from pacs.plan.lengths import DEEPSCALER_QUANTILES, quantiles_of, response_lengths

    assert quantiles_of(shared_data / "deepscaler_subset803.json") == DEEPSCALER_QUANTILES
    lengths = response_lengths(4000, 4096, "deepscaler", 0)
    assert max(lengths) <= 4096 and min(lengths) >= 0.1 * 4096
    assert abs(sum(lengths) / len(lengths) / 4096 - 0.42) < 0.02  # the table's mean share


def test_every_verb_keeps_its_arguments_defaults_and_help():
    """The whole `pacs --help` tree (every verb and sub-verb) against tests/cli_tree.json, written from the CLI
    before it was split into one module per command: the same commands, arguments, defaults, choices and help.
    argparse's layout of the help texts is Python's own, compared where the reference's Python wrote it."""
    import sys

    from cli_tree import cli_tree

    from pacs.cli import build_parser

    reference = json.loads((Path(__file__).parent / "cli_tree.json").read_text())
    now = cli_tree(build_parser())
    assert [p["command"] for p in now] == [p["command"] for p in reference["parsers"]]
    for mine, theirs in zip(now, reference["parsers"], strict=True):
        for key in ("arguments", "groups", "defaults"):
            assert mine[key] == theirs[key], f"{mine['command']}: {key} changed"
    if f"{sys.version_info.major}.{sys.version_info.minor}" != reference["python"]:
        pytest.skip(f"help texts laid out by Python {reference['python']}'s argparse; this is {sys.version}")
    for mine, theirs in zip(now, reference["parsers"], strict=True):
        assert mine["help"] == theirs["help"], f"{mine['command']} --help changed"


def test_each_command_is_its_own_module_of_short_functions():
    """pacs.cli.main only gathers the commands; no function of the CLI is longer than 60 lines."""
    import ast
    import importlib

    entry = importlib.import_module("pacs.cli.main")  # the module (pacs.cli.main is also the function's name)

    folder = Path(entry.__file__).parent
    assert {c.__name__.rsplit(".", 1)[1] for c in entry.COMMANDS} == {
        p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__", "main", "common")
    }
    for path in folder.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                assert node.end_lineno - node.lineno < 60, (
                    f"{path.name}: {node.name} is {node.end_lineno - node.lineno + 1} lines"
                )


# a process that leaves: its output buffered, a non-daemon thread still working, an exit handler, a status
LEAVING = """
import atexit, sys, threading, time
from pacs import collector

worker = threading.Thread(target=lambda: (time.sleep(0.2), print("thread done", flush=True)))
worker.start()
atexit.register(lambda: print("atexit ran"))
sys.stdout.write("buffered ")
collector.leave({code})
"""


@pytest.mark.parametrize("code", [0, 3, None])
def test_a_pacs_process_ends_as_the_interpreter_ends_it_less_its_teardown(code):
    """pacs.collector.leave, as the `pacs` command and torchrun's ranks end: the threads joined, then the exit
    handlers, all output written, and the exit status main returned (None: 0)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", LEAVING.format(code=code)], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == (code or 0), done.stderr
    assert done.stdout == "buffered thread done\natexit ran\n", done.stdout


def test_a_profiled_pacs_process_exits_as_usual_so_that_its_profile_is_written(tmp_path):
    import subprocess
    import sys

    script, profile = tmp_path / "leaving.py", tmp_path / "leaving.prof"
    script.write_text(LEAVING.format(code=3))
    done = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(profile), str(script)], capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    # (cProfile takes the SystemExit as the end of the program, and exits 0 after it: the status is its own)
    assert done.stdout == "buffered thread done\natexit ran\n", done.stdout + done.stderr
    assert profile.stat().st_size > 0
