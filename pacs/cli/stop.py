"""`pacs stop`: stop a running experiment so that nothing is lost (pacs.stop): every training job saves after
its step and every evaluation after its chunk, both exit as stopped and are not requeued; jobs still waiting in
SLURM's queue are cancelled (they had not started); the workflow's Snakemake submits nothing more."""

import argparse
from pathlib import Path


def add_parser(verbs) -> None:
    st = verbs.add_parser("stop", help="stop a running experiment: each job saves after its step, none is lost; "
                          "the workflow's next run goes on")  # fmt: skip
    st.add_argument("configs", type=Path, nargs="*", default=[Path("config/config.yaml")],
                    help="the workflow config files it runs with, as snakemake --configfile takes them")  # fmt: skip
    st.add_argument("--keep-waiting", action="store_true",
                    help="leave the jobs that wait in SLURM's queue there (they exit at once when they start)")
    st.set_defaults(func=cmd_stop)


def cmd_stop(args: argparse.Namespace) -> int:
    import json
    import subprocess

    from pacs import experiment
    from pacs.slurm import waiting_jobs
    from pacs.stop import RUNNER, STOP, describe, request_stop, signal_runner

    results = Path(experiment.results_dir(experiment.workflow_config(args.configs)))
    request = request_stop(results)
    print(f"{describe(request)}: wrote {results / STOP}. Each training job saves after the step it is in and each "
          "evaluation after its chunk; both exit as stopped (75) and stay stopped.")  # fmt: skip
    runner = results / RUNNER
    workdir = json.loads(runner.read_text())["workdir"] if runner.exists() else str(Path.cwd())
    waiting = [] if args.keep_waiting else waiting_jobs(workdir)
    if waiting:
        done = subprocess.run(["scancel", *waiting], capture_output=True, text=True)
        print(f"cancelled {len(waiting)} job(s) waiting in SLURM's queue, none started: {' '.join(waiting)}"
              + (f" ({done.stderr.strip()})" if done.returncode else ""))  # fmt: skip
    print(f"Snakemake: {signal_runner(results)}.")
    print("To go on: run the workflow again (snakemake ... all); it removes the stop and resumes every run from what "
          "it saved.")  # fmt: skip
    return 0
