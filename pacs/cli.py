"""`pacs <verb>`: the only place that reads argv."""

import argparse
import sys
from pathlib import Path

import pandas as pd

from pacs.io import atomic_write_csv, atomic_write_json


def _verify_config(args: argparse.Namespace):
    from pacs.verify import VerifyConfig

    return VerifyConfig(timeout_s=args.timeout_s)


def cmd_bench_verifier(args: argparse.Namespace) -> int:
    from pacs.bench.verifier import run_verifier_bench

    report = run_verifier_bench(
        args.answers, args.groups, args.n, args.distinct_per_group, args.seed, _verify_config(args)
    )
    atomic_write_json(args.out, report)
    print(f"{'measurement':32s} {'answers':>8s} {'answers/s':>10s}")
    for name, row in report["results"].items():
        print(f"{name:32s} {row['answers']:8d} {row['answers_per_s']:10.1f}")
    print(f"wrote {args.out}")
    return 0


def cmd_bench_train(args: argparse.Namespace) -> int:
    import torch

    from pacs.bench.train import run_train_bench

    torch.set_num_threads(args.threads)
    report = run_train_bench(args.model, args.data, args.steps, args.seeds, args.variants)
    atomic_write_json(args.out, report)
    print(f"{'run':24s} {'before':>7s} {'after':>7s} {'s/step':>7s} {'generate':>9s} {'update':>7s} {'tokens/s':>9s}")
    for name, r in report["results"].items():
        print(
            f"{name:24s} {r['heldout_accuracy_before']:7.3f} {r['heldout_accuracy_after']:7.3f} "
            f"{r['seconds_step']:7.2f} {r['seconds_generate']:9.2f} {r['seconds_update']:7.2f} {r['tokens_per_s']:9.0f}"
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


def cmd_toy_data(args: argparse.Namespace) -> int:
    from pacs.data.toy import toy_addition
    from pacs.io import atomic_write_parquet

    for split, frame in toy_addition(args.seed, args.train_size, args.heldout_size).items():
        atomic_write_parquet(args.out / f"{split}.parquet", frame)
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
    train, heldout = read_prepared(args.data / "train.parquet"), read_prepared(args.data / "heldout.parquet")
    with VerifierPool(VerifyConfig(), workers=1) as pool:
        model, tokenizer, history = build_tiny_model(train, heldout, pool.score, config)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=args.out.parent, prefix=f".{args.out.name}."))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    atomic_write_json(staging / "warm_start.json", {"config": vars(config), "heldout_greedy_accuracy": history})
    if args.out.exists():
        shutil.rmtree(args.out)
    staging.rename(args.out)
    step, accuracy = history[-1]
    params = sum(p.numel() for p in model.parameters())
    print(
        f"wrote {args.out}: {params} parameters, held-out greedy accuracy {accuracy:.3f} after {step} warm-start steps"
    )
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    from pacs.train.__main__ import run

    return run(args.config, args.out)


def build_parser() -> argparse.ArgumentParser:
    from pacs.data.sources import LOCAL_BENCHMARKS

    parser = argparse.ArgumentParser(prog="pacs", description=__doc__)
    verbs = parser.add_subparsers(dest="verb", required=True)

    bench = verbs.add_parser("bench", help="speed measurements, written under results/bench/")
    what = bench.add_subparsers(dest="what", required=True)
    bv = what.add_parser("verifier", help="verifier answers/s: in process, 1 and 2 workers, groups of n")
    bv.add_argument("--answers", type=int, default=2000, help="distinct answers to score")
    bv.add_argument("--groups", type=int, default=250, help="prompts in the grouped measurement")
    bv.add_argument("--n", type=int, default=8, help="answers per prompt in the grouped measurement")
    bv.add_argument("--distinct-per-group", type=int, default=3, help="distinct answer texts per group")
    bv.add_argument("--seed", type=int, default=0)
    bv.add_argument("--timeout-s", type=float, default=5.0, help="per-answer verifier deadline")
    bv.add_argument("--out", type=Path, default=Path("results/bench/verifier.json"))
    bv.set_defaults(func=cmd_bench_verifier)
    bt = what.add_parser("train", help="seconds per step and accuracy gain of each algorithm on the tiny model")
    bt.add_argument("--model", type=Path, default=Path("results/tiny/model"), help="from `pacs tiny-model`")
    bt.add_argument("--data", type=Path, default=Path("results/tiny/data"), help="from `pacs toy-data`")
    bt.add_argument("--steps", type=int, default=40)
    bt.add_argument("--seeds", type=int, nargs="+", default=[0])
    bt.add_argument("--variants", nargs="+", default=["pacs", "pacs-no-weights", "grpo", "ppo"])
    bt.add_argument("--threads", type=int, default=2)
    bt.add_argument("--out", type=Path, default=Path("results/bench/train.json"))
    bt.set_defaults(func=cmd_bench_train)

    cg = verbs.add_parser(
        "check-golds",
        help="every gold of local benchmark files, written as a model "
        "answer, must verify as correct, and a wrong number as wrong",
    )
    cg.add_argument("--data-dir", type=Path, default=Path("../shared/data"))
    cg.add_argument("--benchmarks", nargs="+", default=list(LOCAL_BENCHMARKS), choices=list(LOCAL_BENCHMARKS))
    cg.add_argument("--workers", type=int, default=2)
    cg.add_argument("--timeout-s", type=float, default=5.0, help="per-answer verifier deadline")
    cg.add_argument("--out", type=Path, default=Path("results/golds/gold_check.csv"))
    cg.set_defaults(func=cmd_check_golds)

    td = verbs.add_parser("toy-data", help="the synthetic addition task: train.parquet and heldout.parquet")
    td.add_argument("--out", type=Path, required=True, help="directory to write the two splits to")
    td.add_argument("--seed", type=int, default=0)
    td.add_argument("--train-size", type=int, default=4000)
    td.add_argument("--heldout-size", type=int, default=200)
    td.set_defaults(func=cmd_toy_data)

    tm = verbs.add_parser("tiny-model", help="a tiny Qwen2 with an offline tokenizer, warm-started on the toy task")
    tm.add_argument("--data", type=Path, required=True, help="directory written by `pacs toy-data`")
    tm.add_argument("--out", type=Path, required=True, help="HF model directory to write")
    tm.add_argument("--seed", type=int, default=0)
    tm.add_argument("--target-accuracy", type=float, default=0.3, help="warm start stops at this held-out accuracy")
    tm.add_argument("--threads", type=int, default=2)
    tm.set_defaults(func=cmd_tiny_model)

    tr = verbs.add_parser("train", help="train one run (PACS, GRPO or PPO); rerun to resume; under torchrun for DDP")
    tr.add_argument("--config", type=Path, required=True, help="run config YAML (config/README.md)")
    tr.add_argument("--out", type=Path, required=True, help="run directory: config, metrics, checkpoints")
    tr.set_defaults(func=cmd_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError) as e:
        print(f"pacs {args.verb}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
