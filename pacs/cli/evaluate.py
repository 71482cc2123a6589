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
    ev.add_argument("--stop-file", type=Path,
                    help="the experiment's stop file (pacs stop): while it exists no chunk starts (exit 75)")
    ev.add_argument("--requeue", action="store_true",
                    help="in a SLURM job: before a chunk that would pass the job's time limit, stop and requeue the "
                         "job (scontrol requeue), which samples the missing chunks when SLURM starts it again")
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


def stopped(args: argparse.Namespace, stop) -> int:
    """An evaluation stopped between chunks (pacs.eval.deadline.Stopped), its chunks so far kept: requeued where
    asked (``--requeue``) and SLURM would not (pacs.slurm.after_stop); exit 75 (EX_TEMPFAIL)."""
    from pacs.slurm import after_stop

    print(f"{args.out}: {stop}; its chunks so far are kept, and the same command samples the rest", flush=True)
    return after_stop(str(args.out), stop.reason, stop.chunks > 0, args.requeue)


def cmd_evaluate(args: argparse.Namespace) -> int:
    from pacs.eval.deadline import Deadline, Stopped

    extra = config_entries(args.wandb_config)  # before the evaluation: a bad entry fails at once
    check_environment(args.wandb)  # and an environment wandb refuses
    deadline = Deadline(args.stop_file)
    try:
        with deadline:
            deadline.check()  # a job that starts after a stop was asked samples nothing
            if args.suite:
                return cmd_evaluate_suite(args, deadline)
            return evaluate_one(args, extra, deadline)
    except Stopped as stop:
        return stopped(args, stop)
    except Exception as e:
        if not deadline.signalled:
            raise
        # SLURM's SIGTERM reaches every process of the job: one pacs does not own (vLLM's engine core on a GPU) may
        # end with it and fail the chunk in flight, which the next start samples again
        print(f"{args.out}: the chunk in flight failed after {deadline.signalled} ({type(e).__name__}: {e})")
        return stopped(args, Stopped(f"signal {deadline.signalled}", deadline.chunks))


def evaluate_one(args: argparse.Namespace, extra: dict, deadline) -> int:
    from pacs.eval.run import evaluate
    from pacs.eval.wandb_run import log_evaluation

    with sole_writer(args.out, "pacs evaluate"):  # the evaluation and its wandb run: one writer (pacs.writer_lock)
        metrics = evaluate(args.model, args.data, args.out, eval_config_from(args), restart=args.restart_on_change,
                           deadline=deadline)  # fmt: skip
        deadline.interrupted()  # its wandb run after a signal: the next start, finding it done, writes it
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


def cmd_evaluate_suite(args: argparse.Namespace, deadline) -> int:
    from pacs.eval.suite import evaluate_suite, read_suite

    for flag in ("config", "wandb_name", "wandb_config"):
        if getattr(args, flag):
            raise ValueError(f"--{flag.replace('_', '-')} with --suite: the suite names each benchmark's")
    suite = read_suite(args.suite)
    # every settings file before the first sample; the command's flags override each
    configs = {name: eval_config_from(args, entry.config) for name, entry in suite.items()}
    wandb = {"mode": args.wandb, "project": args.wandb_project, "group": args.wandb_group}
    summary = evaluate_suite(args.model, suite, configs, args.out, wandb, restart=args.restart_on_change,
                             deadline=deadline)  # fmt: skip
    print(f"{len(summary['benchmarks'])} benchmarks; wrote {args.out / 'evaluations.json'}")
    return 0
