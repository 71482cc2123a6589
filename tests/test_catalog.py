"""The Snakemake workflow catalog's standardized usage (.snakemake-workflow-catalog.yml): the files the catalog
requires, and its usage run as a user copies it: snakedeploy deploys the workflow as a module into a folder of its
own, and Snakemake plans the paper there with the catalog's mandatory flags, and runs a job there with the
workflow's start (a stop asked before the run cleared, the runner recorded for `pacs stop`)."""

import json
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import yaml
from workflow_runs import NO_CLUSTER, PAPER_JOBS, REPO, job_counts, venv_env

from pacs.stop import RUNNER, STOP, request_stop

CATALOG = yaml.safe_load((REPO / ".snakemake-workflow-catalog.yml").read_text())


def test_the_catalogs_files_are_there():
    """What the catalog requires of a standardized workflow, and what its page shows from them."""
    assert (REPO / "workflow" / "Snakefile").is_file() and (REPO / "config" / "README.md").is_file()
    readme = (REPO / "README.md").read_text().lower()
    assert "snakemake" in readme and "workflow" in readme
    usage = CATALOG["usage"]
    assert set(usage) == {"mandatory-flags", "software-stack-deployment", "report"} and usage["report"] is True
    assert usage["mandatory-flags"]["flags"].split() == ["--profile", "slurm", "all"]
    # no deployment method is claimed that is not run here (there is no conda channel or container runtime)
    assert not any(usage["software-stack-deployment"].values())
    # the report's captions, where the rules name them, exist
    for rules in (REPO / "workflow" / "rules").glob("*.smk"):
        for caption in re.findall(r'caption="([^"]+)"', rules.read_text()):
            assert (rules.parent / caption).resolve().is_file(), (rules, caption)
    assert (REPO / "workflow" / "report" / "workflow.rst").is_file()


def deploy(tmp_path: Path) -> Path:
    """`snakedeploy deploy-workflow` from a copy of the repository's files (as a release holds them) into a folder
    of its own, its module pointed at that copy, as a deployment from GitHub points at the release."""
    source, deployed = tmp_path / "source", tmp_path / "deployed"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (REPO / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, source / name)
    snakedeploy = Path(sys.executable).parent / "snakedeploy"
    done = subprocess.run([snakedeploy, "deploy-workflow", source, deployed, "--branch", "main"], capture_output=True,
                          text=True)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert {p.name for p in (deployed / "config").iterdir()} == {p.name for p in (REPO / "config").iterdir()}
    snakefile = deployed / "workflow" / "Snakefile"
    text = snakefile.read_text()
    # for a local source snakedeploy names the module's Snakefile relative to the source (github(...) for GitHub)
    assert 'configfile: "config/config.yaml"' in text and "use rule * from" in text, text
    assert '"workflow/Snakefile"' in text, text
    snakefile.write_text(text.replace('"workflow/Snakefile"', json.dumps(str(source / "workflow" / "Snakefile"))))
    return deployed


def test_the_catalogs_usage_deploys_plans_and_runs(tmp_path):
    deployed = deploy(tmp_path)
    # the profile linked as docs/cluster.md, "2. Install" links it (~/.config/snakemake/slurm)
    xdg = tmp_path / "xdg"
    (xdg / "snakemake").mkdir(parents=True)
    (xdg / "snakemake" / "slurm").symlink_to(REPO / "workflow" / "profiles" / "slurm")
    env = venv_env(**NO_CLUSTER, XDG_CONFIG_HOME=str(xdg))
    flags = CATALOG["usage"]["mandatory-flags"]["flags"].split()
    planned = subprocess.run([sys.executable, "-m", "snakemake", "-n", *flags], cwd=deployed, capture_output=True,
                             text=True, env=env, timeout=600)  # fmt: skip
    output = planned.stdout + planned.stderr
    assert planned.returncode == 0, output[-3000:]
    # the paper's v1 experiment, as from a clone (tests/test_workflow_dag.py), through SLURM's executor
    assert job_counts(output) == PAPER_JOBS, output[-3000:]
    assert "Using profile slurm for setting default command line arguments" in output, output[:2000]
    assert "slurm_extra=--open-mode=append" in output  # the SLURM resources, the workflow's own
    assert (deployed / "results" / "paper" / "plan.md").is_file()
    # a job run there: the workflow's start, as the main Snakefile's own (Snakemake runs no module's onstart), ends
    # a stop asked before this run and records this Snakemake for `pacs stop`
    results = deployed / "results" / "tiny"
    request_stop(results)
    target = "results/tiny/data/toy_train.parquet"
    ran = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "1", target, "--configfile",
                          "config/tiny.yaml"], cwd=deployed, capture_output=True, text=True,
                         env=venv_env(**NO_CLUSTER), timeout=600)  # fmt: skip
    assert ran.returncode == 0, (ran.stdout + ran.stderr)[-3000:]
    assert (deployed / target).is_file() and not (results / STOP).exists(), ran.stderr[-2000:]
    runner = json.loads((results / RUNNER).read_text())
    assert runner["workdir"] == str(deployed) and runner["host"] == socket.gethostname(), runner
