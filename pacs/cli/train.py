"""`pacs train`: one run (PACS, GRPO or PPO); rerun to resume; starts torchrun itself."""

import argparse
from pathlib import Path


def add_parser(verbs) -> None:
    tr = verbs.add_parser("train", help="train one run (PACS, GRPO or PPO); rerun to resume; starts torchrun itself")
    tr.add_argument("--config", type=Path, required=True, help="run config YAML (docs/configuration.md)")
    tr.add_argument("--out", type=Path, required=True, help="run directory: config, metrics, checkpoints")
    tr.add_argument("--restart-on-change", action="store_true",
                    help="DIR under a config that changes what it computes: move it aside and start again, not refuse "
                         "(a change of how it computes resumes it either way)")  # fmt: skip
    tr.add_argument("--nproc-per-node", type=int, default=1, help="ranks per node (GPUs); above 1 starts torchrun")
    tr.add_argument(
        "--nnodes", type=int, default=1, help="nodes of the SLURM allocation: one torchrun per node via srun"
    )
    tr.add_argument("--requeue", action="store_true",
                    help="in a SLURM job: after a stop for the time limit, requeue the job (scontrol requeue), which "
                         "resumes the run when SLURM starts it again")  # fmt: skip
    tr.add_argument("--stop-file", type=Path,
                    help="the experiment's stop file (pacs stop): while it exists the run saves and stops after its "
                         "step, and a job does not start")  # fmt: skip
    tr.add_argument("--keep-weights", type=Path,
                    help="JSON list of steps whose HF weights outlive retention, read at every save (instead of "
                         "checkpoint.keep_weights; the workflow writes the steps its evaluations read)")  # fmt: skip
    tr.add_argument("--calibration", type=Path,
                    help="calibration file (pacs bench gpu) that trainer sizes of auto are resolved with, as pacs plan "
                         "resolves them (the workflow passes plan.calibration); default: the documented constants")
    tr.add_argument("--worst-case", action="store_true",
                    help="after the last step, one more no-grad pass and update of the largest micro-batches the "
                         "token budget packs, their memory measured (pacs preflight's)")  # fmt: skip
    tr.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    from pacs.runs.segments import JobOptions
    from pacs.train.launch import launch

    job = JobOptions(args.restart_on_change, args.keep_weights, args.calibration, args.worst_case, args.stop_file,
                     args.requeue)
    return launch(args.config, args.out, job, args.nproc_per_node, args.nnodes)
