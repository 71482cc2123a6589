"""``python -m pacs.train --config RUN.yaml --out DIR`` (the same as ``pacs train``): the entry point torchrun
starts on every rank; launching itself is ``pacs.train.launch``."""

import sys

if __name__ == "__main__":
    from pacs import collector
    from pacs.cli import main

    collector.leave(main(["train", *sys.argv[1:]]))
