"""`pacs preflight`: a few steps of a training job at its maximum lengths, on its resources."""

import argparse
import json
import sys
from pathlib import Path


def add_parser(verbs) -> None:
    pf = verbs.add_parser("preflight", help="a few steps of a training job at its maximum lengths, on its resources")
    pf.add_argument("--spec", type=Path, required=True, help="JSON the workflow writes (pacs.runs.preflight)")
    pf.add_argument("--out", type=Path, required=True, help="directory: preflight.json, preflight.md, run/, eval/")
    pf.add_argument("--nproc-per-node", type=int, default=1, help="as pacs train: ranks per node (GPUs)")
    pf.add_argument("--nnodes", type=int, default=1, help="as pacs train: nodes of the SLURM allocation")
    pf.add_argument("--calibration", type=Path, help="as pacs train: the calibration file auto sizes are resolved with")
    pf.set_defaults(func=cmd_preflight)


def cmd_preflight(args: argparse.Namespace) -> int:
    from pacs.runs.preflight import PreflightError, pacs_command, preflight

    spec = json.loads(args.spec.read_text())
    train_flags = ["--nproc-per-node", str(args.nproc_per_node), "--nnodes", str(args.nnodes), "--restart-on-change",
                   *(["--calibration", str(args.calibration)] if args.calibration else [])]  # fmt: skip
    try:
        result = preflight(spec, args.out, pacs_command(), train_flags)
    except PreflightError as e:
        print(f"pacs preflight: FAILED: {e}", file=sys.stderr)
        return 1
    print((args.out / "preflight.md").read_text(), end="")
    print(f"pacs preflight: {result['name']} passed; wrote {args.out / 'preflight.json'}")
    return 0
