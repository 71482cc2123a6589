"""`pacs <verb>`: the only place that reads argv."""

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from pacs.io import atomic_write_csv, atomic_write_json, atomic_write_parquet


def _verify_config(args: argparse.Namespace):
    from pacs.verify import VerifyConfig

    return VerifyConfig(timeout_s=args.timeout_s)


def cmd_check_code(args: argparse.Namespace) -> int:
    from pacs.verify.code import CodeConfig, CodeVerdict, extract_code, parse_tests, run_program
    from pacs.verify.sandbox import reaping

    tests = parse_tests(args.tests.read_text(), str(args.tests))
    source = args.program or args.response
    text = source.read_text()
    program = text if args.program else extract_code(text)
    config = CodeConfig(timeout_profile=args.timeout_profile, timeout_s=args.timeout, budget_s=args.budget,
                        memory_mb=args.memory_mb, isolation=args.isolation)  # fmt: skip
    if program is None:
        verdict = CodeVerdict("no_code", 0.0, "", 0, len(tests.tests), 0.0, "")
    else:
        with reaping():
            verdict = run_program(program, tests, config)
    fields = ("status", "passed", "total", "seconds", "isolation", "detail")
    print(json.dumps({**{k: getattr(verdict, k) for k in fields}, "timeout_s": config.test_timeout_s}))
    return 0 if verdict.status == "passed" else 1


def cmd_bench_verifier(args: argparse.Namespace) -> int:
    from pacs.bench.verifier import run_verifier_bench

    real = None
    if args.real_golds:
        from pacs.data.sources import load_gold_rows

        real = [r.gold for r in load_gold_rows(args.data_dir, args.real_golds)]
    report = run_verifier_bench(
        args.answers, args.groups, args.n, args.distinct_per_group, args.seed, _verify_config(args), real, args.rounds,
        tuple(args.workers_counts),
    )
    atomic_write_json(args.out, report)
    print(f"{'measurement':32s} {'answers':>8s} {'answers/s':>10s} {'x 1 worker':>10s} {'bound/s (share)':>16s}")
    for name, row in report["results"].items():
        speedup = f"{row['speedup_over_1_worker']:10.2f}" if row.get("speedup_over_1_worker") else f"{'':10s}"
        bound = ""
        if "bound_answers_per_s" in row:
            bound = f"{row['bound_answers_per_s']:9.1f} ({row['share_of_bound']:.0%})"
        print(f"{name:32s} {row['answers']:8d} {row['answers_per_s']:10.1f} {speedup} {bound:>16s}")
    print("bound: the answers' seconds in the workers over the workers, or the longest answer, whichever is longer")
    print(f"wrote {args.out}")
    return 0


def cmd_bench_code(args: argparse.Namespace) -> int:
    from pacs.bench.code import code_bench_markdown, run_code_bench
    from pacs.io import atomic_write_text
    from pacs.verify import CodeConfig

    config = CodeConfig(timeout_s=args.timeout_s)
    report = run_code_bench(args.programs, args.seed, config, tuple(args.isolation), tuple(args.workers_counts),
                            args.startup_runs)  # fmt: skip
    atomic_write_json(args.out, report)
    markdown = code_bench_markdown(report)
    atomic_write_text(args.out.with_suffix(".md"), markdown)
    print(markdown, end="")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


def cmd_bench_train(args: argparse.Namespace) -> int:
    from pacs.bench.train import run_train_bench

    options = {"max_response_length": args.max_response_length, "eager": not args.compile}
    if args.train_file is not None:
        options["train_file"] = args.train_file
    chunks = tuple(None if c == "none" else int(c) for c in args.logprob_chunk_sizes)
    report = run_train_bench(args.model, args.data, args.steps, args.seeds, args.variants, args.engines,
                             args.threads, tuple(args.strategies), chunks, _shape_overrides(args.trainer),
                             **options)  # fmt: skip
    atomic_write_json(args.out, report)
    phases = ("generate", "weight_push", "score", "old_logprobs", "update", "step")
    print(f"{'run':36s} {'before':>6s} {'after':>6s} " + " ".join(f"{p[:8]:>8s}" for p in phases)
          + " rollout tok/s  peak GB")  # fmt: skip
    for name, r in report["results"].items():
        before, after = r.get("heldout_accuracy_before", float("nan")), r.get("heldout_accuracy_after", float("nan"))
        accuracy = f"{before:6.3f} {after:6.3f}"
        seconds = " ".join(f"{r[f'seconds_{p}']:8.3f}" for p in phases)
        print(f"{name:36s} {accuracy} {seconds} {r['rollout_tokens_per_s']:13.0f} {r.get('peak_rss_gb', 0):8.2f}")
    print(f"wrote {args.out} (seconds per step, means over steps after the first)")
    return 0


def cmd_bench_memory(args: argparse.Namespace) -> int:
    from pacs.bench.memory import run_memory_bench

    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes]
    report = run_memory_bench(sizes, args.chunk_size, args.problems, args.tokenizer, args.n, args.micro_batch_size,
                              args.budget)  # fmt: skip
    atomic_write_json(args.out, report)
    print(f"{'rows x T x vocab x hidden':28s} {'mode':8s} {'peak MB above inputs':>20s} {'seconds':>8s}")
    for r in report["logprobs"]:
        size = f"{r['rows']}x{r['length']}x{r['vocab']}x{r['hidden']}"
        print(f"{size:28s} {r['mode']:8s} {r['peak_above_inputs_bytes'] / 1e6:20.0f} {r['seconds']:8.2f}")
    if report["padding"]:
        pad = report["padding"]
        fixed, budget, removed = pad["fixed_padding_frac"], pad["budget_padding_frac"], pad["padding_removed_frac"]
        print(f"padding: fixed {fixed:.1%} of computed tokens, token budget {budget:.1%}; {removed:.1%} removed")
    print(f"wrote {args.out}")
    return 0


def _shape_overrides(items: list[str]) -> dict:
    """``--set KEY=VALUE ...`` as a dict, each value read as YAML."""
    import yaml

    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item}: expected KEY=VALUE")
        overrides[key] = yaml.safe_load(value)
    return overrides


UPDATE_VARIANTS = {  # pacs bench update --variants: trainer options over the command's own
    "padded": {"pack_sequences": False},
    "packed": {"pack_sequences": True},
    "padded-unshared": {"pack_sequences": False, "share_prompt": False},
    "packed-unshared": {"pack_sequences": True, "share_prompt": False},
    "packed-compiled": {"pack_sequences": True, "compile": True},
    # CUDA only (pacs.train.kernels); AdamW is fused on CUDA unless a variant says otherwise
    "packed-liger": {"pack_sequences": True, "liger_kernels": True},
    "packed-autotune": {"pack_sequences": True, "attention_autotune": True},
    "packed-liger-autotune": {"pack_sequences": True, "liger_kernels": True, "attention_autotune": True},
    "packed-unfused-adamw": {"pack_sequences": True, "optim": {"fused": False}},
}


def cmd_bench_update(args: argparse.Namespace) -> int:
    from pacs.bench.profile import format_families
    from pacs.bench.update import run_update_bench

    overrides = _shape_overrides(args.set)
    trainer = {
        "compute_dtype": args.compute_dtype,
        "gradient_checkpointing": args.gradient_checkpointing,
        "checkpoint_layers": args.checkpoint_layers,
        "logprob_chunk_size": None if args.logprob_chunk_size == "none" else int(args.logprob_chunk_size),
    }
    variants = {v: UPDATE_VARIANTS[v] for v in args.variants} if args.variants else None
    report = run_update_bench(args.shape, overrides, args.strategies, args.nproc, trainer, args.rows,
                              args.prompt_length, args.response_length, args.steps, args.peak_flops, variants,
                              group_size=args.group_size, lengths=args.lengths, profile=args.profile)  # fmt: skip
    atomic_write_json(args.out, report)
    first = report["results"][0]
    print(
        f"{first['shape']} {first['overrides']}: {first['parameters'] / 1e6:.1f} M parameters; per rank "
        f"{first['rows_per_rank']} rows in groups of {first['group_size']}, prompt {first['prompt_length']}, "
        f"responses {first['lengths']} up to {first['response_length']} tokens"
    )
    header = f"{'variant':21s} {'strategy':8s} {'ranks':>5s} {'AdamW':>7s} {'state GB/rank':>13s}"
    header += f" {'peak GB (max rank)':>18s}"
    print(f"{header} {'s/step':>7s} {'tok/s':>8s} {'padding':>7s}" + (" MFU (attn)" if args.peak_flops else ""))
    for r in report["results"]:
        peak = max(x["peak_bytes"] for x in r["ranks"])
        mfu = f" {r['mfu']:.3f} ({r['mfu_attention']:.3f})" if "mfu" in r else ""
        print(f"{r['variant']:21s} {r['strategy']:8s} {r['world_size']:5d} {r['optimizer']:>7s} "
              f"{r['state_bytes_per_rank'] / 1e9:13.2f} {peak / 1e9:18.2f} {r['step_s']:7.2f} {r['tokens_per_s']:8.0f} "
              f"{r['padding_share']:7.1%}{mfu}")  # fmt: skip
        if "profile" in r:
            print(format_families(r["profile"]))
            print(f"attention calls per layer (forward and recompute): "
                  f"{r['profile']['attention_calls_per_layer']:.0f}")
        print(f"host s per micro-batch (its forward and backward, issued): {r['host_s_per_micro_batch']:.3f}")
    print(f"wrote {args.out} (peak while updating; on CPU resident memory above the process before the model)")
    return 0


def cmd_bench_generate(args: argparse.Namespace) -> int:
    from pacs.bench.generate import run_generate_bench

    trainer = {"strategy": args.strategy, "compute_dtype": args.compute_dtype}
    report = run_generate_bench(args.shape, _shape_overrides(args.set), args.nproc, trainer, args.prompts, args.n,
                                args.prompt_length, args.new_tokens, args.variants)  # fmt: skip
    atomic_write_json(args.out, report)
    print(f"{report['shape']} {report['overrides']}, {report['world_size']} rank(s), {args.strategy}: per rank "
          f"{args.prompts} prompts x {args.n} samples x {args.new_tokens} tokens")  # fmt: skip
    print(f"{'variant':10s} {'rank':>4s} {'s/call':>7s} {'tokens/s':>9s} {'collectives':>11s}")
    for rank, variants in enumerate(report["ranks"]):
        for name, r in variants.items():
            print(f"{name:10s} {rank:4d} {r['seconds']:7.3f} {r['tokens_per_s']:9.0f} {r['collectives']:11d}")
    print(f"wrote {args.out}")
    return 0


def cmd_bench_gpu(args: argparse.Namespace) -> int:
    from pacs.bench.gpu import run_gpu_bench

    def say(line: str) -> None:
        print(line, flush=True)

    run_gpu_bench(args.shapes, _shape_overrides(args.set), args.rows, args.prompt_length, args.response_length,
                  args.steps, args.generate_batch, args.new_tokens, args.peak_flops, args.allow_cpu,
                  lambda calibration: atomic_write_json(args.out, calibration), say)  # fmt: skip
    print(f"wrote {args.out} (after each measurement): set plan.calibration to it")
    return 0


def cmd_bench_eval(args: argparse.Namespace) -> int:
    from pacs.bench.eval import run_eval_bench

    report = run_eval_bench(args.model, args.data, args.engines, eval_config_from(args))
    atomic_write_json(args.out, report)
    print(f"{'engine':8s} {'samples':>8s} {'samples/s':>10s} {'tokens/s':>9s} {'start s':>8s} {'tokens/sample':>14s}")
    for name, r in report["results"].items():
        print(
            f"{name:8s} {r['samples']:8d} {r['samples_per_s']:10.1f} {r['tokens_per_s']:9.0f} "
            f"{r['engine_start_s']:8.1f} {r['mean_response_tokens']:14.1f}"
        )
    print(f"wrote {args.out}")
    return 0


def cmd_check_golds(args: argparse.Namespace) -> int:
    from pacs.data.sources import load_gold_rows
    from pacs.verify import VerifierPool
    from pacs.verify.gold_check import check_golds

    rows = [r for b in args.benchmarks for r in load_gold_rows(args.data_dir, b)]
    with VerifierPool(_verify_config(args), workers=args.workers) as pool:
        checks = check_golds(rows, pool)
    table = pd.DataFrame(
        [
            {
                "benchmark": c.row.benchmark,
                "row": c.row.row,
                "gold": c.row.gold,
                "right_status": c.right_status,
                "wrong_answer": c.wrong_answer,
                "wrong_status": c.wrong_status,
                "ok": c.ok,
            }
            for c in checks
        ]
    )
    atomic_write_csv(args.out, table)
    summary = table.groupby("benchmark", sort=False)["ok"].agg(["size", "sum"])
    for bench, (size, ok) in summary.iterrows():
        print(f"{bench:10s} {ok:5d} / {size:5d} golds accepted")
    failed = table[~table["ok"]]
    for _, r in failed.iterrows():
        print(
            f"FAIL {r.benchmark} row {r.row}: gold {r.gold!r}: right answer {r.right_status}, "
            f"wrong answer {r.wrong_status}"
        )
    print(f"{int(table['ok'].sum())} / {len(table)} accepted; wrote {args.out}")
    return 1 if len(failed) else 0


TOY_SPLITS = {"toy_train": ("math", "train"), "toy_heldout": ("math", "heldout"),
              "toy_code_train": ("code", "train"), "toy_code_heldout": ("code", "heldout"),
              "toy_choice_train": ("choice", "train"), "toy_choice_heldout": ("choice", "heldout")}  # fmt: skip
# prepare-data's options for one dataset only
DATASET_OPTIONS = {
    "livecodebench": ("release_version", "start_date", "end_date", "prompt_style"),
    "gpqa": ("shuffles",),
}


def toy_task(task: str):
    """The toy task's generator: ``(seed, train_size, heldout_size, options, tokenizer) → {split: (frame, report)}``."""
    from pacs.data.toy import toy_addition
    from pacs.data.toy_choice import toy_choice
    from pacs.data.toy_code import toy_code

    return {"math": toy_addition, "code": toy_code, "choice": toy_choice}[task]


def cmd_prepare_data(args: argparse.Namespace) -> int:
    from pacs.config import read_yaml
    from pacs.data.prepare import PrepareOptions, prepare_source, summary
    from pacs.data.sources import HUB_SOURCES, default_source, with_overrides

    options = PrepareOptions(args.bad_rows, args.duplicates, args.max_prompt_length, args.repeat,
                             args.system_prompt, json.loads(args.chat_template_kwargs or "{}"))  # fmt: skip
    for dataset, keys in DATASET_OPTIONS.items():
        given = [f"--{k.replace('_', '-')}" for k in keys if getattr(args, k) is not None]
        if given and args.dataset != dataset:
            raise ValueError(f"{', '.join(given)}: for --dataset {dataset} only, not {args.dataset!r}")
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    if args.dataset in TOY_SPLITS:
        task, split = TOY_SPLITS[args.dataset]
        frame, report = toy_task(task)(args.seed, args.train_size, args.heldout_size, options, tokenizer)[split]
    elif args.dataset == "livecodebench":
        from pacs.data.livecodebench import DateWindow, prepare_livecodebench

        if args.spec:
            raise ValueError("--spec: livecodebench's fields are fixed; choose with --release-version and dates")
        window = DateWindow(args.start_date, args.end_date)
        frame, report = prepare_livecodebench(args.source, args.release_version, window, options, args.data_dir,
                                              tokenizer, prompt_style=args.prompt_style or "livecodebench")  # fmt: skip
    elif args.dataset == "gpqa":
        from pacs.data.gpqa import prepare_gpqa

        if args.spec:
            raise ValueError("--spec: gpqa's fields are fixed (the dataset's own column names)")
        shuffles = 1 if args.shuffles is None else args.shuffles
        frame, report = prepare_gpqa(args.source, options, args.data_dir, tokenizer, args.seed, shuffles)
    else:
        overrides = read_yaml(args.spec) if args.spec else {}
        if args.dataset not in HUB_SOURCES and not overrides:
            raise ValueError(
                f"dataset {args.dataset!r} is not built in ({sorted(HUB_SOURCES)}); describe it with --spec"
            )
        base = default_source(args.dataset, args.source) if args.dataset in HUB_SOURCES else None
        source = with_overrides(base, overrides)
        frame, report = prepare_source(args.dataset, source, args.data_dir, options, tokenizer)
    atomic_write_parquet(args.out, frame, report)
    print(f"{args.dataset}: {summary(report)}; wrote {args.out}")
    return 0


def cmd_toy_data(args: argparse.Namespace) -> int:
    from pacs.data.prepare import PrepareOptions

    splits = toy_task(args.task)(args.seed, args.train_size, args.heldout_size, PrepareOptions())
    for split, (frame, report) in splits.items():
        atomic_write_parquet(args.out / f"{split}.parquet", frame, report)
        print(f"wrote {args.out / f'{split}.parquet'} ({len(frame)} rows)")
    return 0


def cmd_tiny_model(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    import torch

    from pacs.data.schema import read_prepared
    from pacs.models.tiny import TinyModelConfig, build_tiny_model
    from pacs.verify import VerifierPool, VerifyConfig

    torch.set_num_threads(args.threads)
    config = TinyModelConfig(seed=args.seed, target_accuracy=args.target_accuracy)
    if args.data is None and (args.train is None or args.heldout is None):
        raise ValueError("tiny-model: give --data DIR, or both --train and --heldout")
    train = read_prepared(args.train or args.data / "train.parquet")
    heldout = read_prepared(args.heldout or args.data / "heldout.parquet")
    with VerifierPool(VerifyConfig(), workers=args.threads) as pool:  # checks run while training waits
        model, tokenizer, history, config = build_tiny_model(train, heldout, pool.score, config)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=args.out.parent, prefix=f".{args.out.name}."))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    record = {"task": heldout["task"].iloc[0], "config": vars(config), "heldout_accuracy": history}
    atomic_write_json(staging / "warm_start.json", record)
    if args.out.exists():
        shutil.rmtree(args.out)
    staging.rename(args.out)
    step, accuracy = history[-1]
    how = f"sampled at temperature {config.check_temperature}" if config.check_temperature else "greedy"
    params = sum(p.numel() for p in model.parameters())
    print(
        f"wrote {args.out}: {params} parameters, held-out accuracy {accuracy:.3f} ({how}) after {step} warm-start steps"
    )
    return 0


EVAL_FLAGS = ("n", "temperature", "top_p", "max_tokens", "seed", "limit", "chunk_problems", "engine", "dtype")


def eval_config_from(args: argparse.Namespace):
    """EvalConfig from --config (if given), then the flags given on the command line, then --greedy."""
    from pacs.config import from_dict, read_yaml
    from pacs.eval.config import GREEDY, EvalConfig

    values = read_yaml(args.config) if args.config else {}
    if not isinstance(values, dict):
        raise ValueError(f"{args.config}: expected a mapping of evaluation keys")
    values = {**values, **{k: getattr(args, k) for k in EVAL_FLAGS if getattr(args, k) is not None}}
    if args.workers is not None:
        values["verifier_workers"] = args.workers
    if args.engine is not None and "engines" in args:
        raise ValueError("bench eval: choose engines with --engines, not --engine")
    if args.greedy:
        values.update(GREEDY)
    return from_dict(EvalConfig, values, str(args.config or "eval"))


def cmd_evaluate(args: argparse.Namespace) -> int:
    from pacs.eval.run import evaluate

    metrics = evaluate(args.model, args.data, args.out, eval_config_from(args), restart=args.restart_on_change)
    passk = ", ".join(f"pass@{k} {v['mean']:.3f}" for k, v in metrics["pass_at_k"].items())
    speed = metrics["throughput"]
    rate = (
        ""
        if speed["samples_per_s"] is None
        else f"; {speed['samples_per_s']:.1f} samples/s, {speed['tokens_per_s']:.0f} tokens/s"
    )
    print(f"{metrics['data_source']}: {metrics['problems']} problems × {metrics['samples_per_problem']}: {passk}")
    print(f"statuses {metrics['statuses']}; engine {metrics['engine']}{rate}; wrote {args.out / 'metrics.json'}")
    return 0


def _method_dir(value: str) -> tuple[str, Path]:
    method, sep, path = value.partition("=")
    if not sep or not method or not path:
        raise argparse.ArgumentTypeError(f"{value!r}: expected METHOD=DIR")
    return method, Path(path)


def cmd_diversity(args: argparse.Namespace) -> int:
    from pacs.eval.diversity import DiversityConfig, measure_diversity

    evals = dict(args.eval)
    if len(evals) != len(args.eval):
        raise ValueError(f"--eval: a method given twice ({', '.join(m for m, _ in args.eval)})")
    config = DiversityConfig(model=args.model, embed=args.embed, max_answers=args.max_answers,
                             batch_size=args.batch_size, max_length=args.max_length, dtype=args.dtype,
                             device=args.device)  # fmt: skip
    result = measure_diversity(evals, config, args.embeddings)
    atomic_write_json(args.out, result)
    print(f"wrote {args.out}" + (f" and {args.embeddings}" if args.embeddings else ""))
    return 0


def cmd_tiny_embedder(args: argparse.Namespace) -> int:
    from pacs.models.tiny_embedder import TinyEmbedderConfig, build_tiny_embedder

    config = TinyEmbedderConfig(seed=args.seed)
    build_tiny_embedder(args.out, config)
    print(f"wrote {args.out}: a sentence-transformers model, {config.hidden_size}-dimensional embeddings")
    return 0


def cmd_report_collect(args: argparse.Namespace) -> int:
    from pacs.report.collect import collect_pass_at_k, read_manifest
    from pacs.report.significance import read_per_problem

    manifest = read_manifest(args.manifest)
    table, per_problem = collect_pass_at_k(manifest), read_per_problem(manifest)
    per_problem_path = args.per_problem or args.out.with_name("per_problem.csv")
    atomic_write_csv(args.out, table)
    atomic_write_csv(per_problem_path, per_problem)
    print(f"wrote {args.out}: {len(table)} rows, and {per_problem_path}: {len(per_problem)} problem rows")
    return 0


def cmd_report_tables(args: argparse.Namespace) -> int:
    from pacs.io import atomic_write_text
    from pacs.report import significance
    from pacs.report.collect import comparison, published_for, read_manifest, read_published
    from pacs.report.diversity import diversity_tables
    from pacs.report.sections import all_sections
    from pacs.report.summary import comparison_markdown
    from pacs.report.tables import to_html, write_tables

    manifest, table = read_manifest(args.manifest), pd.read_csv(args.pass_at_k)
    published = read_published(args.published) if args.published else published_for(manifest.get("paper", "v1"))
    written = write_tables(table, manifest, args.out) + all_sections(table, manifest, published, args.out)
    if manifest.get("diversity"):
        written += diversity_tables(manifest, args.out)
    comp = comparison(table, manifest, published)
    atomic_write_csv(args.out / "comparison.csv", comp)
    atomic_write_text(args.out / "comparison.md", comparison_markdown(comp))
    comp_title = "Reproduced against published pass@k (%)"
    atomic_write_text(args.out / "comparison.html", to_html(comp, comp_title, index=False))
    per_problem = pd.read_csv(args.per_problem, dtype={"id": str})
    pairs = significance.significance_table(manifest, per_problem, published)
    atomic_write_csv(args.out / "significance.csv", pairs)
    atomic_write_text(args.out / "significance.md", significance.to_markdown(pairs, manifest))
    title = "Paired differences between methods (percentage points, 95 % bootstrap intervals over problems)"
    shown = significance.readable(pairs, manifest)
    atomic_write_text(args.out / "significance.html", to_html(shown, title, index=False))
    print(f"wrote {len(written)} tables, comparison.csv ({len(comp)} cells with a published value) and "
          f"significance.csv ({len(pairs)} paired differences) to {args.out}")  # fmt: skip
    return 0


def cmd_report_figures(args: argparse.Namespace) -> int:
    from pacs.report.collect import published_for, read_manifest
    from pacs.report.figures import all_figures

    manifest, table = read_manifest(args.manifest), pd.read_csv(args.pass_at_k)
    written = all_figures(table, manifest, args.out, published_for(manifest.get("paper", "v1")))
    print(f"wrote {len(written)} figure files to {args.out}")
    return 0


def cmd_report_summary(args: argparse.Namespace) -> int:
    from pacs.io import atomic_write_text
    from pacs.report.collect import read_manifest
    from pacs.report.summary import write_report

    manifest, table = read_manifest(args.manifest), pd.read_csv(args.pass_at_k)
    comp = pd.read_csv(args.tables / "comparison.csv")
    atomic_write_text(args.out, write_report(manifest, table, comp, args.tables, args.figures, args.out))
    print(f"wrote {args.out}")
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    from snakemake.utils import validate

    from pacs import experiment
    from pacs.config import read_yaml
    from pacs.io import atomic_write_text
    from pacs.plan.jobs import format_plan

    config = {}
    for path in args.configs:  # later files override earlier ones key by key, as snakemake --configfile does
        config = experiment.merged(config, read_yaml(path))
    validate(config, str(Path(__file__).resolve().parents[1] / "workflow/schemas/config.schema.yaml"))
    plan = experiment.plan(config)
    text = format_plan(plan)
    print(text, end="")
    if args.out:
        atomic_write_text(args.out, text)
    if plan.errors:
        print(f"pacs plan: {len(plan.errors)} job(s) do not fit their GPU (above)", file=sys.stderr)
        return 1
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from pacs.train.launch import launch
    from pacs.train.segments import JobOptions

    job = JobOptions(args.restart_on_change, args.attempt, args.keep_weights)
    return launch(args.config, args.out, job, args.nproc_per_node, args.nnodes)


def cmd_preflight(args: argparse.Namespace) -> int:
    from pacs.train.preflight import PreflightError, preflight

    spec = json.loads(args.spec.read_text())
    launcher = [sys.executable, "-m", "pacs.cli", "train", "--nproc-per-node", str(args.nproc_per_node),
                "--nnodes", str(args.nnodes), "--restart-on-change"]  # fmt: skip
    try:
        result = preflight(spec, args.out, launcher)
    except PreflightError as e:
        print(f"pacs preflight: FAILED: {e}", file=sys.stderr)
        return 1
    print((args.out / "preflight.md").read_text(), end="")
    print(f"pacs preflight: {result['name']} passed; wrote {args.out / 'preflight.json'}")
    return 0


def _lcb_release(value: str) -> str:
    from pacs.data.livecodebench import release_files

    try:
        release_files(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return value


def _iso_date(value: str):
    import datetime

    try:
        return datetime.date.fromisoformat(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date YYYY-MM-DD") from e


def _toy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="toy task: the generator's seed; gpqa: the shuffle's "
                        "(the toolkit's 0)")  # fmt: skip
    from pacs.data.toy import HELDOUT_SIZE, TRAIN_SIZE

    parser.add_argument("--train-size", type=int, default=TRAIN_SIZE, help="toy task: training problems")
    parser.add_argument("--heldout-size", type=int, default=HELDOUT_SIZE, help="toy task: held-out problems")


def _eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML of evaluation keys (config/README.md); flags override it")
    parser.add_argument("--n", type=int, help="samples per problem (default 32)")
    parser.add_argument("--temperature", type=float, help="default 0.6")
    parser.add_argument("--top-p", type=float, help="default 0.95")
    parser.add_argument("--max-tokens", type=int, help="new tokens per sample (default 4096)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--limit", type=int, help="only the first LIMIT problems")
    parser.add_argument("--chunk-problems", type=int, help="problems per written chunk (default 64)")
    parser.add_argument("--engine", choices=["auto", "vllm", "hf"], help="default auto: vllm when importable")
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--workers", type=int, help="verifier processes (default 2)")
    parser.add_argument("--greedy", action="store_true", help="quick mode: one greedy sample per problem")


def build_parser() -> argparse.ArgumentParser:
    from pacs.data.sources import BENCHMARKS, HUB_SOURCES

    parser = argparse.ArgumentParser(prog="pacs", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)

    bench = verbs.add_parser("bench", help="speed measurements, written under results/bench/")
    what = bench.add_subparsers(dest="what", required=True)
    bv = what.add_parser("verifier", help="verifier answers/s: in process, pools of workers, groups of n")
    bv.add_argument("--workers-counts", type=int, nargs="+", default=[1, 2],
                    help="pool sizes measured (a GPU node's cores: 1 2 4 8 16)")
    bv.add_argument("--answers", type=int, default=2000, help="distinct answers to score")
    bv.add_argument("--groups", type=int, default=250, help="prompts in the grouped measurement")
    bv.add_argument("--n", type=int, default=8, help="answers per prompt in the grouped measurement")
    bv.add_argument("--distinct-per-group", type=int, default=3, help="distinct answer texts per group")
    bv.add_argument("--seed", type=int, default=0)
    bv.add_argument("--timeout-s", type=float, default=5.0, help="per-answer verifier deadline")
    bv.add_argument("--real-golds", metavar="BENCHMARK", help="also its golds answered in groups of --n (math500)")
    bv.add_argument("--data-dir", type=Path, default=Path("../shared/data"), help="where --real-golds are read")
    bv.add_argument("--rounds", type=int, default=3, help="--real-golds: rounds of new answers (medians reported)")
    bv.add_argument("--out", type=Path, default=Path("results/bench/verifier.json"))
    bv.set_defaults(func=cmd_bench_verifier)
    bc = what.add_parser("code", help="code verifier programs/s and seconds per verdict, by isolation level")
    bc.add_argument("--workers-counts", type=int, nargs="+", default=[1, 2], help="pool sizes measured")
    levels = ["auto", "bubblewrap", "limits"]
    bc.add_argument("--isolation", nargs="+", default=levels, choices=levels,
                    help="levels measured; one that cannot run here is reported, with the reason")  # fmt: skip
    bc.add_argument("--programs", type=int, default=32, help="programs per measurement (pacs.bench.code.MIX's order)")
    bc.add_argument("--timeout-s", type=float, default=1.0, help="seconds per test (slow programs sleep 0.6 of it)")
    bc.add_argument("--startup-runs", type=int, default=10, help="trivial programs timed for the start-up's median")
    bc.add_argument("--seed", type=int, default=0)
    bc.add_argument("--out", type=Path, default=Path("results/bench/code.json"), help="and a .md beside it")
    bc.set_defaults(func=cmd_bench_code)
    bt = what.add_parser("train", help="seconds per step and accuracy gain of each algorithm on the tiny model")
    bt.add_argument("--model", type=Path, default=Path("results/tiny/model"), help="from `pacs tiny-model`")
    bt.add_argument("--data", type=Path, default=Path("results/tiny/data"), help="from `pacs toy-data`")
    bt.add_argument("--steps", type=int, default=40)
    bt.add_argument("--seeds", type=int, nargs="+", default=[0])
    bt.add_argument("--variants", nargs="+", default=["pacs", "pacs-no-weights", "grpo", "ppo"])
    bt.add_argument("--engines", nargs="+", default=["hf"], choices=["hf", "vllm"], help="rollout engines")
    bt.add_argument("--strategies", nargs="+", default=["single"], choices=["single", "ddp", "fsdp"],
                    help="one process, or two ranks (fsdp needs --engines vllm)")  # fmt: skip
    bt.add_argument("--logprob-chunk-sizes", nargs="+", default=["1024"], help="positions per chunk; none: full logits")
    bt.add_argument("--trainer", nargs="*", default=[], metavar="KEY=VALUE",
                    help="trainer keys for every run: pack_sequences=false")
    bt.add_argument("--train-file", type=Path, help="prepared prompts instead of the toy task (no held-out accuracy)")
    bt.add_argument("--max-response-length", type=int, default=16, help="new tokens per sample")
    bt.add_argument("--compile", action="store_true", help="vllm: compile (CUDA graphs / torch.compile), not eager")
    bt.add_argument("--threads", type=int, default=2)
    bt.add_argument("--out", type=Path, default=Path("results/bench/train.json"))
    bt.set_defaults(func=cmd_bench_train)

    bm = what.add_parser("memory", help="log-prob peak memory, full logits vs chunks; padding of token budgets")
    bm.add_argument("--sizes", nargs="+", default=["2x1024x32768x256", "8x2048x32768x256"], help="ROWSxTxVOCABxHIDDEN")
    bm.add_argument("--chunk-size", type=int, default=1024)
    bm.add_argument("--problems", type=Path, help="JSON list of {problem, solution}: padding on their token lengths")
    bm.add_argument("--tokenizer", type=Path, default=Path("results/tiny/model"))
    bm.add_argument("--n", type=int, default=8)
    bm.add_argument("--micro-batch-size", type=int, default=4, help="prompts per fixed micro-batch")
    bm.add_argument("--budget", type=int, help="tokens per micro-batch (default: micro-batch-size groups of the mean)")
    bm.add_argument("--out", type=Path, default=Path("results/bench/memory.json"))
    bm.set_defaults(func=cmd_bench_memory)
    bu = what.add_parser("update", help="memory and speed of the training update per rank: one process, ddp, fsdp")
    bu.add_argument("--shape", default="qwen2.5-0.5b", help="a model of pacs.models.shapes, random weights")
    bu.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override the shape: num_hidden_layers=4")
    bu.add_argument("--strategies", nargs="+", default=["ddp", "fsdp"], choices=["single", "ddp", "fsdp"])
    bu.add_argument("--nproc", type=int, default=2, help="ranks for ddp and fsdp (torchrun --standalone)")
    bu.add_argument("--rows", type=int, default=1, help="sequences per rank per update")
    bu.add_argument("--prompt-length", type=int, default=64)
    bu.add_argument("--response-length", type=int, default=256)
    bu.add_argument("--steps", type=int, default=3)
    bu.add_argument("--compute-dtype", choices=["float32", "bfloat16"], help="fsdp only (trainer.compute_dtype)")
    bu.add_argument("--gradient-checkpointing", action="store_true")
    bu.add_argument("--checkpoint-layers", type=int, help="with checkpointing, only the first K layers recompute")
    bu.add_argument("--logprob-chunk-size", default="1024", help="positions per chunk; none: full logits")
    bu.add_argument("--peak-flops", type=float, help="per device, for MFU (H100 bf16 dense: 989e12)")
    bu.add_argument("--group-size", type=int, default=1, help="rows per prompt (rollout.n); --rows a multiple")
    bu.add_argument("--lengths", default="fixed", choices=["fixed", "deepscaler"],
                    help="response lengths: all the maximum, or DeepScaleR's (pacs.bench.lengths)")
    bu.add_argument("--variants", nargs="*", choices=sorted(UPDATE_VARIANTS), help="trainer options compared")
    bu.add_argument("--profile", action="store_true", help="one more step under torch.profiler, by kernel family")
    bu.add_argument("--out", type=Path, default=Path("results/bench/update.json"))
    bu.set_defaults(func=cmd_bench_update)
    bn = what.add_parser("generate", help="transformers generation from a policy spread as the trainer spreads it")
    bn.add_argument("--shape", default="qwen2.5-0.5b", help="a model of pacs.models.shapes, random weights")
    bn.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override the shape: num_hidden_layers=4")
    bn.add_argument("--strategy", default="fsdp", choices=["ddp", "fsdp"], help="trainer.strategy")
    bn.add_argument("--compute-dtype", choices=["float32", "bfloat16"], help="fsdp only (trainer.compute_dtype)")
    bn.add_argument("--nproc", type=int, default=1, help="ranks (torchrun --standalone)")
    bn.add_argument("--prompts", type=int, default=8, help="prompts per rank, in one generate call")
    bn.add_argument("--n", type=int, default=4, help="samples per prompt")
    bn.add_argument("--prompt-length", type=int, default=64)
    bn.add_argument("--new-tokens", type=int, default=256, help="tokens sampled per sequence (stop tokens ignored)")
    bn.add_argument("--variants", nargs="+", default=["per-token", "once"], choices=["per-token", "once"],
                    help="fsdp: gather the policy for each decoded token, or once per call (the trainer's)")
    bn.add_argument("--out", type=Path, default=Path("results/bench/generate.json"))
    bn.set_defaults(func=cmd_bench_generate)
    bg = what.add_parser("gpu", help="this GPU's training and generation throughput: a calibration file for the plan")
    bg.add_argument("--shapes", nargs="+", default=["qwen2.5-0.5b", "qwen2.5-1.5b"], help="of pacs.models.shapes")
    bg.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override the shapes")
    bg.add_argument("--rows", type=int, default=8, help="sequences per update (config/config.yaml's 36,864 tokens)")
    bg.add_argument("--prompt-length", type=int, default=512)
    bg.add_argument("--response-length", type=int, default=4096)
    bg.add_argument("--steps", type=int, default=4, help="updates; the first (optimizer state created) is not timed")
    bg.add_argument("--generate-batch", type=int, default=64, help="sequences generated together")
    bg.add_argument("--new-tokens", type=int, default=512, help="tokens sampled per sequence")
    bg.add_argument("--peak-flops", type=float, help="dense bf16 FLOP/s of the GPU; default: by its name")
    bg.add_argument("--allow-cpu", action="store_true", help="run on the CPU (a test of the code, not of a GPU)")
    bg.add_argument("--out", type=Path, default=Path("results/bench/gpu.json"))
    bg.set_defaults(func=cmd_bench_gpu)
    be = what.add_parser("eval", help="evaluation samples/s and tokens/s of each engine")
    be.add_argument("--model", default="results/tiny/model")
    be.add_argument("--data", type=Path, default=Path("results/tiny/data/heldout.parquet"))
    be.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    _eval_arguments(be)
    be.set_defaults(config=Path("config/eval_tiny.yaml"))
    be.add_argument("--out", type=Path, default=Path("results/bench/eval.json"))
    be.set_defaults(func=cmd_bench_eval)

    cg = verbs.add_parser(
        "check-golds",
        help="every gold of local benchmark files, written as a model "
        "answer, must verify as correct, and a wrong number as wrong",
    )
    cg.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    cg.add_argument("--benchmarks", nargs="+", default=list(BENCHMARKS), choices=list(BENCHMARKS))
    cg.add_argument("--workers", type=int, default=2)
    cg.add_argument("--timeout-s", type=float, default=5.0, help="per-answer verifier deadline")
    cg.add_argument("--out", type=Path, default=Path("results/golds/gold_check.csv"))
    cg.set_defaults(func=cmd_check_golds)

    cc = verbs.add_parser(
        "check-code", help="run one program on its tests in the code verifier's sandbox; the verdict as one JSON line"
    )
    source = cc.add_mutually_exclusive_group(required=True)
    source.add_argument("--program", type=Path, help="a Python program")
    source.add_argument("--response", type=Path, help="a model's whole answer, its code extracted as evaluation does")
    cc.add_argument("--tests", type=Path, required=True,
                    help='{"tests": [{"input", "output", "testtype": "stdin"|"functional"}], "fn_name"}')  # fmt: skip
    cc.add_argument("--timeout-profile", default="livecodebench", choices=["livecodebench", "glm45"],
                    help="seconds per test: 6 (LiveCodeBench) or 30 (GLM-4.5's toolkit)")  # fmt: skip
    cc.add_argument("--timeout", type=float, help="seconds per test, instead of the profile's")
    cc.add_argument("--budget", type=float, help="seconds for all the tests together")
    cc.add_argument("--memory-mb", type=int, default=2048, help="address space of each run")
    cc.add_argument("--isolation", default="auto", choices=["auto", "bubblewrap", "limits"],
                    help="auto: bubblewrap where it works; bubblewrap: required")  # fmt: skip
    cc.set_defaults(func=cmd_check_code)

    pd_ = verbs.add_parser("prepare-data", help="one dataset (hub, local file or toy task) → one prepared parquet")
    pd_.add_argument(
        "--dataset",
        required=True,
        help=f"built in: {', '.join([*HUB_SOURCES, 'livecodebench', 'gpqa', *TOY_SPLITS])}",
    )
    pd_.add_argument("--out", type=Path, required=True, help="parquet file to write")
    pd_.add_argument("--source", choices=["hub", "local"], default="hub", help="built-in source to start from")
    pd_.add_argument("--data-dir", type=Path, help="local: directory the source file is in (../shared/data); "
                     "livecodebench: a mirror directory (test.jsonl, ...) or a .jsonl/.parquet file; "
                     "gpqa: a directory with gpqa_diamond.csv, or a .csv/.parquet file")  # fmt: skip
    pd_.add_argument("--spec", type=Path, help="YAML mapping of source fields to override (config/README.md)")
    pd_.add_argument("--bad-rows", choices=["error", "drop"], default="error", help="drop: skip and count them")
    pd_.add_argument("--duplicates", choices=["keep", "drop"], default="keep", help="reported either way")
    pd_.add_argument("--tokenizer", help="model or tokenizer whose chat template measures --max-prompt-length")
    pd_.add_argument("--max-prompt-length", type=int, help="drop prompts longer than this many tokens")
    pd_.add_argument("--repeat", type=int, default=1, help="write every row this many times")
    pd_.add_argument("--system-prompt", help="a system message before every problem (PACS v2's: 'You are a helpful "
                     "assistant.'); none by default")  # fmt: skip
    pd_.add_argument("--chat-template-kwargs", help="JSON: the chat template's variables when measuring "
                     '--max-prompt-length, e.g. \'{"enable_thinking": true}\'')  # fmt: skip
    pd_.add_argument("--release-version", type=_lcb_release, help="livecodebench: release_v1 ... release_v6, "
                     "release_latest (default), vN or vN_vM")  # fmt: skip
    pd_.add_argument("--start-date", type=_iso_date, help="livecodebench: first contest date kept, YYYY-MM-DD")
    pd_.add_argument("--end-date", type=_iso_date, help="livecodebench: contest dates before this one, YYYY-MM-DD "
                     "(excluded: 2024-07-01 to 2025-01-01 is PACS v2's second half of 2024)")  # fmt: skip
    pd_.add_argument("--prompt-style", choices=["livecodebench", "glm_cot"], help="livecodebench: "
                     "LiveCodeBench's own prompt (default), or glm_cot, GLM-4.5's toolkit's")  # fmt: skip
    pd_.add_argument("--shuffles", type=int, help="gpqa: each question this many times, each copy with its own "
                     "permutation of the choices (the toolkit's n_repeats, 8: evaluate at n 1); default 1")  # fmt: skip
    _toy_arguments(pd_)
    pd_.set_defaults(func=cmd_prepare_data)

    td = verbs.add_parser("toy-data", help="a synthetic task's train.parquet and heldout.parquet")
    td.add_argument("--out", type=Path, required=True, help="directory to write the two splits to")
    td.add_argument("--task", choices=["math", "code", "choice"], default="math",
                    help="math: 'What is a + b?' (toy_addition); code: a program for n * a + b (toy_code); "
                         "choice: 'What is a + b?' with four sums to choose from, as GPQA (toy_choice)")  # fmt: skip
    _toy_arguments(td)
    td.set_defaults(func=cmd_toy_data)

    tm = verbs.add_parser("tiny-model", help="a tiny Qwen2 with an offline tokenizer, warm-started on a toy task "
                          "(the data's: addition or code)")  # fmt: skip
    tm.add_argument("--data", type=Path, help="directory written by `pacs toy-data` (train.parquet, heldout.parquet)")
    tm.add_argument("--train", type=Path, help="prepared toy training file, instead of --data")
    tm.add_argument("--heldout", type=Path, help="prepared toy held-out file, instead of --data")
    tm.add_argument("--out", type=Path, required=True, help="HF model directory to write")
    tm.add_argument("--seed", type=int, default=0)
    tm.add_argument("--target-accuracy", type=float, default=0.3, help="warm start stops at this held-out accuracy")
    tm.add_argument("--threads", type=int, default=2, help="torch's threads, and verifier processes for the checks")
    tm.set_defaults(func=cmd_tiny_model)

    te = verbs.add_parser("tiny-embedder", help="a tiny random embedding model in Qwen3-Embedding's form, offline "
                          "(a sentence-transformers directory)")  # fmt: skip
    te.add_argument("--out", type=Path, required=True, help="directory to write")
    te.add_argument("--seed", type=int, default=0, help="the weights' seed")
    te.set_defaults(func=cmd_tiny_embedder)

    ev = verbs.add_parser("evaluate", help="N samples per problem from a model on one prepared benchmark; pass@k")
    ev.add_argument("--model", required=True, help="hub id, HF model directory or training checkpoint")
    ev.add_argument("--data", type=Path, required=True, help="prepared parquet (pacs prepare-data)")
    ev.add_argument(
        "--out", type=Path, required=True, help="directory: config, responses/, metrics.json; rerun resumes"
    )
    _eval_arguments(ev)
    ev.add_argument("--restart-on-change", action="store_true", help="OUT under another config: empty it, not refuse")
    ev.set_defaults(func=cmd_evaluate)

    dv = verbs.add_parser("diversity", help="v2's S_div: how different a method's correct answers are, from stored "
                          "evaluations (Table 3, Figure 5b)")  # fmt: skip
    dv.add_argument("--eval", type=_method_dir, action="append", required=True, metavar="METHOD=DIR",
                    help="a method's `pacs evaluate` directory; repeat for each method")  # fmt: skip
    dv.add_argument("--out", type=Path, required=True, help="diversity.json to write")
    dv.add_argument("--embeddings", type=Path, help="also write the correct answers' embeddings (.npz, float16)")
    dv.add_argument("--model", default="Qwen/Qwen3-Embedding-0.6B", help="sentence-transformers model: hub id or "
                    "directory (pacs tiny-embedder)")  # fmt: skip
    dv.add_argument("--embed", choices=["response", "final"], default="response",
                    help="response: the whole sample, thinking included; final: after the last </think>")  # fmt: skip
    dv.add_argument("--max-answers", type=int, help="correct answers per problem at most, the first by sample")
    dv.add_argument("--batch-size", type=int, default=8, help="texts per forward pass")
    dv.add_argument("--max-length", type=int, help="tokens per text, longer truncated and counted (default: model's)")
    dv.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto")
    dv.add_argument("--device", default="auto", help="auto: cuda when available, else cpu")
    dv.set_defaults(func=cmd_diversity)

    rp = verbs.add_parser("report", help="tables, figures and REPORT.md from the workflow's result files")
    parts = rp.add_subparsers(dest="what", required=True)
    rc = parts.add_parser("collect", help="every listed metrics.json → one pass@k CSV (percent)")
    rc.add_argument("--manifest", type=Path, required=True, help="report manifest written by the workflow")
    rc.add_argument("--out", type=Path, required=True)
    rc.add_argument("--per-problem", type=Path, help="each problem's counts (default: per_problem.csv beside --out)")
    rc.set_defaults(func=cmd_report_collect)
    figures_help = "pass@k, training dynamics, entropy, sweep and training curves"
    for name, func, helptext in (("tables", cmd_report_tables, "the paper's tables and the published comparison"),
                                 ("figures", cmd_report_figures, figures_help)):  # fmt: skip
        sub = parts.add_parser(name, help=helptext)
        sub.add_argument("--manifest", type=Path, required=True)
        sub.add_argument("--pass-at-k", type=Path, required=True, help="from `pacs report collect`")
        sub.add_argument("--out", type=Path, required=True, help="directory")
        sub.set_defaults(func=func)
        if name == "tables":
            sub.add_argument("--published", type=Path, help="published pass@k CSV (percent); default: the manifest's "
                             "paper version's (pacs.report.collect.PAPER_VERSIONS)")  # fmt: skip
            sub.add_argument("--per-problem", type=Path, required=True, help="from `pacs report collect`")
    rs = parts.add_parser("summary", help="REPORT.md linking tables, comparison and figures")
    rs.add_argument("--manifest", type=Path, required=True)
    rs.add_argument("--pass-at-k", type=Path, required=True)
    rs.add_argument("--tables", type=Path, required=True)
    rs.add_argument("--figures", type=Path, required=True)
    rs.add_argument("--out", type=Path, required=True)
    rs.set_defaults(func=cmd_report_summary)

    pl = verbs.add_parser("plan", help="memory per GPU, tokens, FLOPs, GPU-hours and SLURM runtime of every job")
    pl.add_argument("configs", type=Path, nargs="*", default=[Path("config/config.yaml")],
                    help="workflow config files, merged in order (default: config/config.yaml)")  # fmt: skip
    pl.add_argument("--out", type=Path, help="also write the plan (Markdown) here")
    pl.set_defaults(func=cmd_plan)

    pf = verbs.add_parser("preflight", help="a few steps of a training job at its maximum lengths, on its resources")
    pf.add_argument("--spec", type=Path, required=True, help="JSON the workflow writes (pacs.train.preflight)")
    pf.add_argument("--out", type=Path, required=True, help="directory: preflight.json, preflight.md, run/, eval/")
    pf.add_argument("--nproc-per-node", type=int, default=1, help="as pacs train: ranks per node (GPUs)")
    pf.add_argument("--nnodes", type=int, default=1, help="as pacs train: nodes of the SLURM allocation")
    pf.set_defaults(func=cmd_preflight)

    tr = verbs.add_parser("train", help="train one run (PACS, GRPO or PPO); rerun to resume; starts torchrun itself")
    tr.add_argument("--config", type=Path, required=True, help="run config YAML (config/README.md)")
    tr.add_argument("--out", type=Path, required=True, help="run directory: config, metrics, checkpoints")
    tr.add_argument("--restart-on-change", action="store_true", help="DIR under another config: delete it, not refuse")
    tr.add_argument("--nproc-per-node", type=int, default=1, help="ranks per node (GPUs); above 1 starts torchrun")
    tr.add_argument(
        "--nnodes", type=int, default=1, help="nodes of the SLURM allocation: one torchrun per node via srun"
    )
    tr.add_argument("--attempt", type=int, default=1,
                    help="the workflow's attempt at this job: after the first, the run continues only if the job "
                         "before stopped as planned (time limit, signal), never after a failure")  # fmt: skip
    tr.add_argument("--keep-weights", type=Path,
                    help="JSON list of steps whose HF weights outlive retention, read at every save (instead of "
                         "checkpoint.keep_weights; the workflow writes the steps its evaluations read)")  # fmt: skip
    tr.set_defaults(func=cmd_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    from pacs.rollout.base import StaleRolloutError
    from pacs.verify.sandbox import SandboxUnavailable

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError, StaleRolloutError, SandboxUnavailable) as e:
        print(f"pacs {args.verb}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
