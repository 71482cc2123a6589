"""`pacs prepare-data`: one dataset (hub, local file or toy task) → one prepared parquet."""

import argparse
import json
from pathlib import Path

from pacs.cli.common import TOY_SPLITS, toy_arguments, toy_task
from pacs.io import atomic_write_parquet

# prepare-data's options for one dataset only
DATASET_OPTIONS = {
    "livecodebench": ("release_version", "start_date", "end_date", "prompt_style"),
    "gpqa": ("shuffles",),
}


def _lcb_release(value: str) -> str:
    from pacs.data.livecodebench import release_files

    try:
        release_files(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return value


def _iso_date(value: str):
    import datetime

    try:
        return datetime.date.fromisoformat(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{value!r} is not a date YYYY-MM-DD") from e


def add_parser(verbs) -> None:
    from pacs.data.sources import HUB_SOURCES

    pd_ = verbs.add_parser("prepare-data", help="one dataset (hub, local file or toy task) → one prepared parquet")
    pd_.add_argument(
        "--dataset",
        required=True,
        help=f"built in: {', '.join([*HUB_SOURCES, 'livecodebench', 'gpqa', *TOY_SPLITS])}",
    )
    pd_.add_argument("--out", type=Path, required=True, help="parquet file to write")
    pd_.add_argument("--source", choices=["hub", "local"], default="hub", help="built-in source to start from")
    pd_.add_argument("--data-dir", type=Path, help="local: directory the source file is in (../shared/data); "
                     "livecodebench: a mirror directory (test.jsonl, ...) or a .jsonl/.parquet file; "
                     "gpqa: a directory with gpqa_diamond.csv, or a .csv/.parquet file")  # fmt: skip
    pd_.add_argument("--spec", type=Path, help="YAML mapping of source fields to override (docs/configuration.md)")
    pd_.add_argument("--bad-rows", choices=["error", "drop"], default="error", help="drop: skip and count them")
    pd_.add_argument("--duplicates", choices=["keep", "drop"], default="keep", help="reported either way")
    pd_.add_argument("--tokenizer", help="model or tokenizer whose chat template measures --max-prompt-length")
    pd_.add_argument("--max-prompt-length", type=int, help="drop prompts longer than this many tokens")
    pd_.add_argument("--repeat", type=int, default=1, help="write every row this many times")
    pd_.add_argument("--system-prompt", help="a system message before every problem (PACS v2's: 'You are a helpful "
                     "assistant.'); none by default")  # fmt: skip
    pd_.add_argument("--chat-template-kwargs", help="JSON: the chat template's variables when measuring "
                     '--max-prompt-length, e.g. \'{"enable_thinking": true}\'')  # fmt: skip
    pd_.add_argument("--release-version", type=_lcb_release, help="livecodebench: release_v1 ... release_v6, "
                     "release_latest (default), vN or vN_vM")  # fmt: skip
    pd_.add_argument("--start-date", type=_iso_date, help="livecodebench: first contest date kept, YYYY-MM-DD")
    pd_.add_argument("--end-date", type=_iso_date, help="livecodebench: contest dates before this one, YYYY-MM-DD "
                     "(excluded: 2024-07-01 to 2025-01-01 is PACS v2's second half of 2024)")  # fmt: skip
    pd_.add_argument("--prompt-style", choices=["livecodebench", "glm_cot"], help="livecodebench: "
                     "LiveCodeBench's own prompt (default), or glm_cot, GLM-4.5's toolkit's")  # fmt: skip
    pd_.add_argument("--shuffles", type=int, help="gpqa: each question this many times, each copy with its own "
                     "permutation of the choices (the toolkit's n_repeats, 8: evaluate at n 1); default 1")  # fmt: skip
    toy_arguments(pd_)
    pd_.set_defaults(func=cmd_prepare_data)


def cmd_prepare_data(args: argparse.Namespace) -> int:
    from pacs.config import read_yaml
    from pacs.data.prepare import PrepareOptions, prepare_source, summary
    from pacs.data.sources import HUB_SOURCES, default_source, with_overrides

    options = PrepareOptions(args.bad_rows, args.duplicates, args.max_prompt_length, args.repeat,
                             args.system_prompt, json.loads(args.chat_template_kwargs or "{}"))  # fmt: skip
    for dataset, keys in DATASET_OPTIONS.items():
        given = [f"--{k.replace('_', '-')}" for k in keys if getattr(args, k) is not None]
        if given and args.dataset != dataset:
            raise ValueError(f"{', '.join(given)}: for --dataset {dataset} only, not {args.dataset!r}")
    tokenizer = None
    if args.tokenizer:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    if args.dataset in TOY_SPLITS:
        task, split = TOY_SPLITS[args.dataset]
        frame, report = toy_task(task)(args.seed, args.train_size, args.heldout_size, options, tokenizer)[split]
    elif args.dataset == "livecodebench":
        from pacs.data.livecodebench import DateWindow, prepare_livecodebench

        if args.spec:
            raise ValueError("--spec: livecodebench's fields are fixed; choose with --release-version and dates")
        window = DateWindow(args.start_date, args.end_date)
        frame, report = prepare_livecodebench(args.source, args.release_version, window, options, args.data_dir,
                                              tokenizer, prompt_style=args.prompt_style or "livecodebench")  # fmt: skip
    elif args.dataset == "gpqa":
        from pacs.data.gpqa import prepare_gpqa

        if args.spec:
            raise ValueError("--spec: gpqa's fields are fixed (the dataset's own column names)")
        shuffles = 1 if args.shuffles is None else args.shuffles
        frame, report = prepare_gpqa(args.source, options, args.data_dir, tokenizer, args.seed, shuffles)
    else:
        overrides = read_yaml(args.spec) if args.spec else {}
        if args.dataset not in HUB_SOURCES and not overrides:
            raise ValueError(
                f"dataset {args.dataset!r} is not built in ({sorted(HUB_SOURCES)}); describe it with --spec"
            )
        base = default_source(args.dataset, args.source) if args.dataset in HUB_SOURCES else None
        source = with_overrides(base, overrides)
        frame, report = prepare_source(args.dataset, source, args.data_dir, options, tokenizer)
    atomic_write_parquet(args.out, frame, report)
    print(f"{args.dataset}: {summary(report)}; wrote {args.out}")
    return 0
