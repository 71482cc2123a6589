"""`pacs toy-data`: a synthetic task's train.parquet and heldout.parquet."""

import argparse
from pathlib import Path

from pacs.cli.common import toy_arguments, toy_task
from pacs.io import atomic_write_parquet


def add_parser(verbs) -> None:
    td = verbs.add_parser("toy-data", help="a synthetic task's train.parquet and heldout.parquet")
    td.add_argument("--out", type=Path, required=True, help="directory to write the two splits to")
    td.add_argument("--task", choices=["math", "code", "choice"], default="math",
                    help="math: 'What is a + b?' (toy_addition); code: a program for n * a + b (toy_code); "
                         "choice: 'What is a + b?' with four sums to choose from, as GPQA (toy_choice)")  # fmt: skip
    toy_arguments(td)
    td.set_defaults(func=cmd_toy_data)


def cmd_toy_data(args: argparse.Namespace) -> int:
    from pacs.data.prepare import PrepareOptions

    splits = toy_task(args.task)(args.seed, args.train_size, args.heldout_size, PrepareOptions())
    for split, (frame, report) in splits.items():
        atomic_write_parquet(args.out / f"{split}.parquet", frame, report)
        print(f"wrote {args.out / f'{split}.parquet'} ({len(frame)} rows)")
    return 0
