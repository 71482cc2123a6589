"""`pacs evaluate`: N samples per problem from a model on one prepared benchmark, or on each of a suite's
(pacs.eval.suite: one process, the engine kept between them); pass@k."""

import argparse
from pathlib import Path

import yaml

from pacs.cli.common import eval_arguments, eval_config_from
from pacs.wandb_runs import MODES, check_environment
from pacs.writer_lock import sole_writer


def add_parser(verbs) -> None:
    ev = verbs.add_parser("evaluate", help="N samples per problem from a model on one prepared benchmark (or a suite "
                          "of them); pass@k")  # fmt: skip
    ev.add_argument("--model", required=True, help="hub id, HF model directory or training checkpoint")
    which = ev.add_mutually_exclusive_group(required=True)
    which.add_argument("--data", type=Path, help="prepared parquet (pacs prepare-data)")
    which.add_argument("--suite", type=Path, help="YAML: benchmark name → {data, config, wandb: {name, config}}; "
                       "each in OUT/<name>, then OUT/evaluations.json (pacs.eval.suite)")  # fmt: skip
    ev.add_argument(
        "--out", type=Path, required=True, help="directory: config, responses/, metrics.json; rerun resumes"
    )
    eval_arguments(ev)
    ev.add_argument("--restart-on-change", action="store_true", help="OUT under another config: empty it, not refuse")
    wandb = ev.add_argument_group("wandb", "the evaluation as a wandb run under OUT/wandb (pacs.eval.wandb_run)")
    wandb.add_argument("--wandb", choices=MODES, default="offline", help="as logging.wandb (default offline)")
    wandb.add_argument("--wandb-project", default="pacs")
    wandb.add_argument("--wandb-group", help="default: the training run of a checkpoint, else the model's name")
    wandb.add_argument("--wandb-name", help="default: GROUP-stepSTEP-BENCHMARK")
    wandb.add_argument("--wandb-config", action="append", default=[], metavar="KEY=VALUE",
                       help="a config entry (YAML value), e.g. method=pacs; repeatable")  # fmt: skip
    ev.set_defaults(func=cmd_evaluate)


def config_entries(pairs: list[str]) -> dict:
    entries = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--wandb-config {pair!r}: expected KEY=VALUE")
        entries[key] = yaml.safe_load(value)
    return entries


def cmd_evaluate(args: argparse.Namespace) -> int:
    from pacs.eval.run import evaluate
    from pacs.eval.wandb_run import log_evaluation

    extra = config_entries(args.wandb_config)  # before the evaluation: a bad entry fails at once
    check_environment(args.wandb)  # and an environment wandb refuses
    if args.suite:
        return cmd_evaluate_suite(args)
    with sole_writer(args.out, "pacs evaluate"):  # the evaluation and its wandb run: one writer (pacs.writer_lock)
        metrics = evaluate(args.model, args.data, args.out, eval_config_from(args), restart=args.restart_on_change)
        logged = log_evaluation(metrics, args.out, args.wandb, args.wandb_project, args.wandb_group, args.wandb_name,
                                extra)  # fmt: skip
    passk = ", ".join(f"pass@{k} {v['mean']:.3f}" for k, v in metrics["pass_at_k"].items())
    speed = metrics["throughput"]
    rate = (
        ""
        if speed["samples_per_s"] is None
        else f"; {speed['samples_per_s']:.1f} samples/s, {speed['tokens_per_s']:.0f} tokens/s"
    )
    print(f"{metrics['data_source']}: {metrics['problems']} problems × {metrics['samples_per_problem']}: {passk}")
    print(f"statuses {metrics['statuses']}; engine {metrics['engine']}{rate}; wrote {args.out / 'metrics.json'}")
    if logged:
        print(f"wandb run ({args.wandb}): {logged}")
    return 0


def cmd_evaluate_suite(args: argparse.Namespace) -> int:
    from pacs.eval.suite import evaluate_suite, read_suite

    for flag in ("config", "wandb_name", "wandb_config"):
        if getattr(args, flag):
            raise ValueError(f"--{flag.replace('_', '-')} with --suite: the suite names each benchmark's")
    suite = read_suite(args.suite)
    # every settings file before the first sample; the command's flags override each
    configs = {name: eval_config_from(args, entry.config) for name, entry in suite.items()}
    wandb = {"mode": args.wandb, "project": args.wandb_project, "group": args.wandb_group}
    summary = evaluate_suite(args.model, suite, configs, args.out, wandb, restart=args.restart_on_change)
    print(f"{len(summary['benchmarks'])} benchmarks; wrote {args.out / 'evaluations.json'}")
    return 0
