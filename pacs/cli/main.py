"""The `pacs` entry point: gathers every command's parser and runs the one asked for.

Each command is a module of pacs.cli with ``add_parser(verbs)`` (its arguments, beside the function they run);
adding a verb is a new module and one line of ``COMMANDS``."""

import argparse
import gc
import sys

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
    tiny_embedder,
    tiny_model,
    toy_data,
    train,
)

DESCRIPTION = "`pacs <verb>`: the only place that reads argv."
# the order of `pacs --help`
COMMANDS = (bench, check_golds, check_code, prepare_data, toy_data, tiny_model, tiny_embedder, evaluate, diversity,
            report, plan, preflight, train)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pacs", description=DESCRIPTION)
    verbs = parser.add_subparsers(dest="verb", required=True)
    for command in COMMANDS:
        command.add_parser(verbs)
    return parser


# CPython collects its youngest generation every 700 new objects, and the whole heap once enough of them outlive
# two collections: a pacs process, which imports torch, transformers and often vLLM (millions of objects that
# live as long as it does), spent 0.7 of the 4.9 CPU seconds of importing transformers' Qwen2 in 7 collections of
# the whole heap. Every 50,000 objects it runs none there; cyclic garbage waits longer to be freed, a few MB at most.
GC_THRESHOLD = (50_000, 20, 10)


def main(argv: list[str] | None = None) -> int:
    gc.set_threshold(*GC_THRESHOLD)
    from pacs.rollout.base import StaleRolloutError
    from pacs.verify.sandbox import SandboxUnavailable

    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (FileNotFoundError, ValueError, StaleRolloutError, SandboxUnavailable) as e:
        print(f"pacs {args.verb}: error: {e}", file=sys.stderr)
        return 2
