"""``python -m pacs.train --config RUN.yaml --out DIR`` (the same as ``pacs train``); torchrun-aware."""

import hashlib
import os
import sys
from pathlib import Path

from pacs.config import to_dict
from pacs.train.config import load_run_config


def _wandb_logger(config, out: Path):
    if config.logging.wandb == "disabled":
        return None, None
    import wandb

    run = wandb.init(
        project=config.logging.project,
        name=config.logging.run_name or out.name,
        dir=out,
        mode=config.logging.wandb,
        config=to_dict(config),
        id=f"{out.resolve().name}-{hashlib.sha1(str(out.resolve()).encode()).hexdigest()[:8]}",  # resumes
        resume="allow",
    )
    return run, lambda record: run.log({k: v for k, v in record.items() if k != "step"}, step=record["step"])


def run(config_path: Path, out: Path, restart_on_change: bool = False) -> int:
    """Reads torchrun's RANK/WORLD_SIZE; rank 0 alone logs to wandb and writes metrics."""
    import torch

    from pacs.train.distributed import init_distributed
    from pacs.train.loop import train

    config = load_run_config(config_path)
    env = init_distributed(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)))
    if "OMP_NUM_THREADS" in os.environ:
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    wandb_run, log = _wandb_logger(config, out) if env.main else (None, None)
    try:
        summary = train(config, out, env, log, restart_on_change)
    finally:
        if wandb_run is not None:
            wandb_run.finish()
        import torch.distributed as dist

        if env.active and dist.is_initialized():  # a vLLM engine's shutdown may have destroyed it already
            dist.destroy_process_group()
    if summary["status"] == "complete":
        print(f"{out}: already complete at step {summary['final_step']}; nothing to do")
    else:
        print(f"{out}: trained steps {summary['start_step'] + 1}..{summary['final_step']}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from pacs.cli import main as cli_main

    return cli_main(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
