"""`pacs tiny-model`: a tiny Qwen2 with an offline tokenizer, warm-started on a toy task."""

import argparse
from pathlib import Path

from pacs.io import atomic_write_json


def add_parser(verbs) -> None:
    tm = verbs.add_parser("tiny-model", help="a tiny Qwen2 with an offline tokenizer, warm-started on a toy task "
                          "(the data's: addition or code)")  # fmt: skip
    tm.add_argument("--data", type=Path, help="directory written by `pacs toy-data` (train.parquet, heldout.parquet)")
    tm.add_argument("--train", type=Path, help="prepared toy training file, instead of --data")
    tm.add_argument("--heldout", type=Path, help="prepared toy held-out file, instead of --data")
    tm.add_argument("--out", type=Path, required=True, help="HF model directory to write")
    tm.add_argument("--seed", type=int, default=0)
    tm.add_argument("--target-accuracy", type=float, default=0.3, help="warm start stops at this held-out accuracy")
    tm.add_argument("--threads", type=int, default=2, help="torch's threads")
    tm.add_argument("--verifier-workers", type=int, default=2,
                    help="verifier processes for the held-out checks (code: sandboxed programs, which mostly wait)")
    tm.set_defaults(func=cmd_tiny_model)


def cmd_tiny_model(args: argparse.Namespace) -> int:
    import shutil
    import tempfile

    import torch

    from pacs.data.schema import read_prepared
    from pacs.models.tiny import TinyModelConfig, build_tiny_model
    from pacs.verify import VerifierPool, VerifyConfig

    config = TinyModelConfig(seed=args.seed, target_accuracy=args.target_accuracy)
    if args.data is None and (args.train is None or args.heldout is None):
        raise ValueError("tiny-model: give --data DIR, or both --train and --heldout")
    train = read_prepared(args.train or args.data / "train.parquet")
    heldout = read_prepared(args.heldout or args.data / "heldout.parquet")
    threads = torch.get_num_threads()  # the build's threads only: a caller in this process (a test) keeps its own
    torch.set_num_threads(args.threads)
    try:
        with VerifierPool(VerifyConfig(), workers=args.verifier_workers) as pool:  # checks run while training waits
            model, tokenizer, history, config = build_tiny_model(train, heldout, pool.score, config)
    finally:
        torch.set_num_threads(threads)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=args.out.parent, prefix=f".{args.out.name}."))
    model.save_pretrained(staging)
    tokenizer.save_pretrained(staging)
    record = {"task": heldout["task"].iloc[0], "config": vars(config), "heldout_accuracy": history}
    atomic_write_json(staging / "warm_start.json", record)
    if args.out.exists():
        shutil.rmtree(args.out)
    staging.rename(args.out)
    step, accuracy = history[-1]
    how = f"sampled at temperature {config.check_temperature}" if config.check_temperature else "greedy"
    params = sum(p.numel() for p in model.parameters())
    print(
        f"wrote {args.out}: {params} parameters, held-out accuracy {accuracy:.3f} ({how}) after {step} warm-start steps"
    )
    return 0
