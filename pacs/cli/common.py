"""What several commands share: `--set KEY=VALUE`, the evaluation flags, the verifier's deadline, the toy tasks."""

import argparse
from pathlib import Path


def verify_config(args: argparse.Namespace):
    from pacs.verify import VerifyConfig

    return VerifyConfig(timeout_s=args.timeout_s)


def shape_overrides(items: list[str]) -> dict:
    """``--set KEY=VALUE ...`` as a dict, each value read as YAML."""
    import yaml

    overrides = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set {item}: expected KEY=VALUE")
        overrides[key] = yaml.safe_load(value)
    return overrides


EVAL_FLAGS = ("n", "temperature", "top_p", "max_tokens", "seed", "limit", "chunk_problems", "engine", "dtype")


def eval_config_from(args: argparse.Namespace, path: Path | None = None):
    """EvalConfig from ``path`` or else --config (if given), then the flags given on the command line, then
    --greedy."""
    from pacs.config import from_dict, read_yaml
    from pacs.eval.config import GREEDY, EvalConfig

    path = path or args.config
    values = read_yaml(path) if path else {}
    if not isinstance(values, dict):
        raise ValueError(f"{path}: expected a mapping of evaluation keys")
    values = {**values, **{k: getattr(args, k) for k in EVAL_FLAGS if getattr(args, k) is not None}}
    if args.workers is not None:
        values["verifier_workers"] = args.workers
    if args.engine is not None and "engines" in args:
        raise ValueError("bench eval: choose engines with --engines, not --engine")
    if args.greedy:
        values.update(GREEDY)
    return from_dict(EvalConfig, values, str(path or "eval"))


def eval_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML of evaluation keys (docs/configuration.md); flags win")
    parser.add_argument("--n", type=int, help="samples per problem (default 32)")
    parser.add_argument("--temperature", type=float, help="default 0.6")
    parser.add_argument("--top-p", type=float, help="default 0.95")
    parser.add_argument("--max-tokens", type=int, help="new tokens per sample (default 4096)")
    parser.add_argument("--seed", type=int)
    parser.add_argument("--limit", type=int, help="only the first LIMIT problems")
    parser.add_argument("--chunk-problems", type=int, help="problems per written chunk (default 64)")
    parser.add_argument("--engine", choices=["auto", "vllm", "hf"], help="default auto: vllm when importable")
    parser.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"])
    parser.add_argument("--workers", type=int, help="verifier processes (default 2)")
    parser.add_argument("--greedy", action="store_true", help="quick mode: one greedy sample per problem")


TOY_SPLITS = {"toy_train": ("math", "train"), "toy_heldout": ("math", "heldout"),
              "toy_code_train": ("code", "train"), "toy_code_heldout": ("code", "heldout"),
              "toy_choice_train": ("choice", "train"), "toy_choice_heldout": ("choice", "heldout")}  # fmt: skip


def toy_task(task: str):
    """The toy task's generator: ``(seed, train_size, heldout_size, options, tokenizer) → {split: (frame, report)}``."""
    from pacs.data.toy import toy_addition
    from pacs.data.toy_choice import toy_choice
    from pacs.data.toy_code import toy_code

    return {"math": toy_addition, "code": toy_code, "choice": toy_choice}[task]


def toy_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--seed", type=int, default=0, help="toy task: the generator's seed; gpqa: the shuffle's "
                        "(the toolkit's 0)")  # fmt: skip
    from pacs.data import HELDOUT_SIZE, TRAIN_SIZE

    parser.add_argument("--train-size", type=int, default=TRAIN_SIZE, help="toy task: training problems")
    parser.add_argument("--heldout-size", type=int, default=HELDOUT_SIZE, help="toy task: held-out problems")


