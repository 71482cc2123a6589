"""Benchmark sources and their normalisation to one schema."""

TRAIN_SIZE, HELDOUT_SIZE = 4000, 200  # the toy task's default splits (pacs.data.toy), known without pandas
