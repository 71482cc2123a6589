"""Every parser of `pacs` as data: the command, its help text and each argument as argparse holds it.

`python tests/cli_tree.py > tests/cli_tree.json` writes the reference that tests/test_cli.py compares with
(written once from the CLI before it was split into modules; rewrite it only when a verb changes on purpose)."""

import argparse
import json
import os
import sys
from unittest import mock

WIDTH = "100"  # argparse wraps help at $COLUMNS: one width for the reference and the test


def _argument(action: argparse.Action) -> dict:
    def plain(value):
        if value is None or isinstance(value, bool | int | float | str):
            return value
        if isinstance(value, list | tuple):
            return [plain(v) for v in value]
        return getattr(value, "__name__", None) or str(value)

    return {
        "options": list(action.option_strings) or [action.dest],
        "dest": action.dest,
        "action": type(action).__name__,
        "nargs": plain(action.nargs),
        "const": plain(action.const),
        "default": plain(action.default),
        "type": plain(action.type),
        "choices": None if action.choices is None or isinstance(action, argparse._SubParsersAction)
        else plain(list(action.choices)),  # fmt: skip
        "required": action.required,
        "help": action.help,
        "metavar": plain(action.metavar),
    }


def cli_tree(parser: argparse.ArgumentParser, command: str = "pacs") -> list[dict]:
    """``[{"command", "help", "arguments", "groups", "defaults"}, ...]``: ``parser`` and every sub-parser below it,
    depth first in the order `--help` lists them; ``help`` is `--help`'s text at ``$COLUMNS`` = 100, ``defaults``
    what ``set_defaults`` gave besides the function a verb runs."""
    with mock.patch.dict(os.environ, {"COLUMNS": WIDTH}):
        text = parser.format_help()
    node = {
        "command": command,
        "help": text,
        "arguments": [_argument(a) for a in parser._actions],
        "groups": [[a.dest for a in g._group_actions] for g in parser._mutually_exclusive_groups],
        "defaults": {k: str(v) for k, v in parser._defaults.items() if k != "func"},
    }
    tree = [node]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                tree += cli_tree(sub, f"{command} {name}")
    return tree


if __name__ == "__main__":
    from pacs.cli import build_parser

    python = f"{sys.version_info.major}.{sys.version_info.minor}"  # whose argparse wrote the help texts
    json.dump({"python": python, "parsers": cli_tree(build_parser())}, sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
