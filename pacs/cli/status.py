"""`pacs status`: where every job of an experiment stands, read from its results and Snakemake's logs."""

import argparse
import os
import sys
import time
from pathlib import Path


def add_parser(verbs) -> None:
    st = verbs.add_parser("status", help="where every job of an experiment stands: state, steps, GPU-hours against "
                                         "the plan, estimated end; reads files only, writes nothing")  # fmt: skip
    st.add_argument("configs", type=Path, nargs="*", default=[Path("config/config.yaml")],
                    help="the workflow's config files, as given to snakemake --configfile (default "
                         "config/config.yaml)")  # fmt: skip
    st.add_argument("-d", "--directory", type=Path, default=Path("."),
                    help="the workflow's working directory (snakemake's --directory; default: here)")
    st.add_argument("--json", action="store_true", help="the status as JSON (schema: docs/commands.md)")
    st.add_argument("--watch", type=float, metavar="SECONDS", help="print it again every SECONDS until Ctrl-C")
    st.add_argument("--no-slurm", action="store_true", help="do not ask squeue or sacct")
    st.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    from pacs.experiment import workflow_config
    from pacs.status.experiment import experiment_status, to_json
    from pacs.status.terminal import render, use_colour

    configs = [p.resolve() for p in args.configs]
    os.chdir(args.directory)  # results/ and .snakemake/ are where the workflow runs
    config = workflow_config(configs)
    while True:
        status = experiment_status(config, slurm=not args.no_slurm)
        if args.json:
            print(to_json(status), flush=True)
        else:
            if args.watch and sys.stdout.isatty():
                print("\033[H\033[2J", end="")
            print(render(status, use_colour()), flush=True)
        if not args.watch:
            return 0
        try:
            time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0
