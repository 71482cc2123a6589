"""The `pacs` entry point: gathers every command's parser and runs the one asked for.

Each command is a module of pacs.cli with ``add_parser(verbs)`` (its arguments, beside the function they run);
adding a verb is a new module and one line of ``COMMANDS``."""

import argparse
import sys

from pacs import collector, imports_left_out
from pacs.cli import (
    bench,
    check_code,
    check_golds,
    diversity,
    evaluate,
    plan,
    preflight,
    prepare_data,
    report,
    status,
    stop,
    tiny_embedder,
    tiny_model,
    toy_data,
    train,
)

DESCRIPTION = "`pacs <verb>`: the only place that reads argv."
# the order of `pacs --help`
COMMANDS = (bench, check_golds, check_code, prepare_data, toy_data, tiny_model, tiny_embedder, evaluate, diversity,
            report, plan, preflight, train, status, stop)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pacs", description=DESCRIPTION)
    verbs = parser.add_subparsers(dest="verb", required=True)
    for command in COMMANDS:
        command.add_parser(verbs)
    return parser


def main(argv: list[str] | None = None) -> int:
    collector.starting()  # until a model is loaded (pacs.collector)
    imports_left_out.leave_out()  # scikit-learn and SciPy, which transformers imports at start-up
    from pacs.rollout.base import StaleRolloutError
    from pacs.verify.sandbox import SandboxUnavailable

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError, StaleRolloutError, SandboxUnavailable) as e:
        print(f"pacs {args.verb}: error: {e}", file=sys.stderr)
        return 2


def run() -> None:
    """The ``pacs`` command and ``python -m pacs.cli``: ``main`` on argv, then the process ends without the
    interpreter's teardown (``pacs.collector.leave``)."""
    collector.leave(main())
