"""`pacs plan`: memory per GPU, tokens, FLOPs, GPU-hours and SLURM runtime of every job."""

import argparse
import sys
from pathlib import Path


def add_parser(verbs) -> None:
    pl = verbs.add_parser("plan", help="memory per GPU, tokens, FLOPs, GPU-hours and SLURM runtime of every job")
    pl.add_argument("configs", type=Path, nargs="*", default=[Path("config/config.yaml")],
                    help="workflow config files, merged in order (default: config/config.yaml)")  # fmt: skip
    pl.add_argument("--out", type=Path, help="also write the plan (Markdown) here")
    pl.set_defaults(func=cmd_plan)


def cmd_plan(args: argparse.Namespace) -> int:
    from pacs import experiment
    from pacs.io import atomic_write_text
    from pacs.plan.markdown import format_plan

    plan = experiment.plan(experiment.workflow_config(args.configs))
    text = format_plan(plan)
    print(text, end="")
    if args.out:
        atomic_write_text(args.out, text)
    if plan.errors:
        print(f"pacs plan: {len(plan.errors)} job(s) cannot run as configured (above)", file=sys.stderr)
        return 1
    return 0
