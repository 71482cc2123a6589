"""`pacs <verb>`: the only place that reads argv. One module per command (pacs.cli.main gathers them)."""

from pacs.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
