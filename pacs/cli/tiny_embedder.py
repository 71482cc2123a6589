"""`pacs tiny-embedder`: a tiny random embedding model in Qwen3-Embedding's form, offline."""

import argparse
from pathlib import Path


def add_parser(verbs) -> None:
    te = verbs.add_parser("tiny-embedder", help="a tiny random embedding model in Qwen3-Embedding's form, offline "
                          "(a sentence-transformers directory)")  # fmt: skip
    te.add_argument("--out", type=Path, required=True, help="directory to write")
    te.add_argument("--seed", type=int, default=0, help="the weights' seed")
    te.set_defaults(func=cmd_tiny_embedder)


def cmd_tiny_embedder(args: argparse.Namespace) -> int:
    from pacs.models.tiny_embedder import TinyEmbedderConfig, build_tiny_embedder

    config = TinyEmbedderConfig(seed=args.seed)
    build_tiny_embedder(args.out, config)
    print(f"wrote {args.out}: a sentence-transformers model, {config.hidden_size}-dimensional embeddings")
    return 0
