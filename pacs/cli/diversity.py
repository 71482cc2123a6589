"""`pacs diversity`: v2's S_div of each method's correct answers, from stored evaluations."""

import argparse
from pathlib import Path

from pacs.io import atomic_write_json


def _method_dir(value: str) -> tuple[str, Path]:
    method, sep, path = value.partition("=")
    if not sep or not method or not path:
        raise argparse.ArgumentTypeError(f"{value!r}: expected METHOD=DIR")
    return method, Path(path)


def add_parser(verbs) -> None:
    dv = verbs.add_parser("diversity", help="v2's S_div: how different a method's correct answers are, from stored "
                          "evaluations (Table 3, Figure 5b)")  # fmt: skip
    dv.add_argument("--eval", type=_method_dir, action="append", required=True, metavar="METHOD=DIR",
                    help="a method's `pacs evaluate` directory; repeat for each method")  # fmt: skip
    dv.add_argument("--out", type=Path, required=True, help="diversity.json to write")
    dv.add_argument("--embeddings", type=Path, help="also write the correct answers' embeddings (.npz, float16)")
    dv.add_argument("--model", default="Qwen/Qwen3-Embedding-0.6B", help="sentence-transformers model: hub id or "
                    "directory (pacs tiny-embedder)")  # fmt: skip
    dv.add_argument("--embed", choices=["response", "final"], default="response",
                    help="response: the whole sample, thinking included; final: after the last </think>")  # fmt: skip
    dv.add_argument("--max-answers", type=int, help="correct answers per problem at most, the first by sample")
    dv.add_argument("--batch-size", type=int, default=8, help="texts per forward pass")
    dv.add_argument("--max-length", type=int, help="tokens per text, longer truncated and counted (default: model's)")
    dv.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto")
    dv.add_argument("--device", default="auto", help="auto: cuda when available, else cpu")
    dv.set_defaults(func=cmd_diversity)


def cmd_diversity(args: argparse.Namespace) -> int:
    from pacs.eval.diversity import DiversityConfig, measure_diversity

    evals = dict(args.eval)
    if len(evals) != len(args.eval):
        raise ValueError(f"--eval: a method given twice ({', '.join(m for m, _ in args.eval)})")
    config = DiversityConfig(model=args.model, embed=args.embed, max_answers=args.max_answers,
                             batch_size=args.batch_size, max_length=args.max_length, dtype=args.dtype,
                             device=args.device)  # fmt: skip
    result = measure_diversity(evals, config, args.embeddings)
    atomic_write_json(args.out, result)
    print(f"wrote {args.out}" + (f" and {args.embeddings}" if args.embeddings else ""))
    return 0
