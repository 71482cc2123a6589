"""`pacs evaluate`: N samples per problem from a model on one prepared benchmark; pass@k."""

import argparse
from pathlib import Path

from pacs.cli.common import eval_arguments, eval_config_from


def add_parser(verbs) -> None:
    ev = verbs.add_parser("evaluate", help="N samples per problem from a model on one prepared benchmark; pass@k")
    ev.add_argument("--model", required=True, help="hub id, HF model directory or training checkpoint")
    ev.add_argument("--data", type=Path, required=True, help="prepared parquet (pacs prepare-data)")
    ev.add_argument(
        "--out", type=Path, required=True, help="directory: config, responses/, metrics.json; rerun resumes"
    )
    eval_arguments(ev)
    ev.add_argument("--restart-on-change", action="store_true", help="OUT under another config: empty it, not refuse")
    ev.set_defaults(func=cmd_evaluate)


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
