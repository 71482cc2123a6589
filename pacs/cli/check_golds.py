"""`pacs check-golds`: every gold of local benchmark files must verify as correct, a wrong number as wrong."""

import argparse
from pathlib import Path

from pacs.cli.common import verify_config
from pacs.io import atomic_write_csv


def add_parser(verbs) -> None:
    from pacs.data.sources import BENCHMARKS

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


def cmd_check_golds(args: argparse.Namespace) -> int:
    import pandas as pd

    from pacs.data.sources import load_gold_rows
    from pacs.verify import VerifierPool
    from pacs.verify.gold_check import check_golds

    rows = [r for b in args.benchmarks for r in load_gold_rows(args.data_dir, b)]
    with VerifierPool(verify_config(args), workers=args.workers) as pool:
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
