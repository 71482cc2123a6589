"""`python -m pacs.cli <verb>`, as `pacs <verb>`."""

from pacs.cli.main import run

run()
