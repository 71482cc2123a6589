"""The cluster commands of the documentation run as written, in dry run: every `snakemake` and `pacs plan` command
of docs/cluster.md and README.md that names the guide's settings file, with that file as the guide writes it, the
`slurm` profile found the way the guide links it (in an empty HOME), and `-n` added where the command has none.
Also README's picture of the pipeline: its edges are Snakemake's own rule graph of the config it names."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

import doc_metrics
import pytest
from workflow_runs import NO_CLUSTER, REPO, job_counts, venv_env

GUIDE = REPO / "docs" / "cluster.md"
README = REPO / "README.md"
SETTINGS = "my_cluster.yaml"


def fenced(text: str, info: str) -> list[tuple[str, str]]:
    """(the line before the block, the block's text) of every fenced block whose info string is ``info``."""
    lines = text.splitlines()
    return [(lines[start - 1] if start else "", "\n".join(lines[start + 1 : end - 1]))
            for start, end, kind in doc_metrics.fenced_blocks(lines) if kind == info]  # fmt: skip


def commands(text: str) -> list[str]:
    """The shell commands of a page's sh blocks: continuation lines joined, comments dropped, `&&` chains split."""
    lines = []
    for _, block in fenced(text, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            lines += [part.strip() for part in line.split("&&") if part.strip()]
    return lines


def settings_file(text: str) -> str:
    blocks = [block for before, block in fenced(text, "yaml") if f"<!-- guide: {SETTINGS} -->" in before]
    assert len(blocks) == 1, f"docs/cluster.md: one yaml block after <!-- guide: {SETTINGS} --> expected"
    return blocks[0] + "\n"


def dry_runnable(command: str) -> list[str] | None:
    """The command as argv, with ``-n`` for a snakemake that would run jobs; None for one that is not the
    workflow's or does not use the settings file. A command submitted with ``sbatch --wrap`` is its wrapped one."""
    argv = shlex.split(command)
    if argv[0] == "sbatch":
        wrapped = next(a.split("=", 1)[1] if a.startswith("--wrap=") else argv[i + 1]
                       for i, a in enumerate(argv) if a.startswith("--wrap"))  # fmt: skip
        argv = shlex.split(wrapped)
    if SETTINGS not in argv or argv[0] not in ("snakemake", "pacs"):
        return None
    if argv[0] == "pacs":
        return argv if argv[1] == "plan" else None
    return argv if {"-n", "--dry-run", "--unlock"} & set(argv) else [*argv, "-n"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A working directory as a user's clone looks to the commands (the workflow, its configs, the settings file)
    and an empty HOME in which the guide's own line links the profile."""
    root = tmp_path_factory.mktemp("clone")
    for name in ("Snakefile", "workflow", "config"):
        (root / name).symlink_to(REPO / name)
    (root / SETTINGS).write_text(settings_file(GUIDE.read_text()))
    home = root / "home"
    home.mkdir()
    env = venv_env(**NO_CLUSTER, HOME=str(home))
    env.pop("XDG_CONFIG_HOME", None)
    link = next(c for c in commands(GUIDE.read_text()) if c.startswith("ln -s") and "profiles/slurm" in c)
    for step in ("mkdir -p ~/.config/snakemake", link):
        subprocess.run(["bash", "-c", step], cwd=root, env=env, check=True)
    return root, env


def test_the_guide_and_readme_cluster_commands_dry_run_with_the_guide_s_settings(site):
    root, env = site
    runs = [argv for page in (GUIDE, README) for c in commands(page.read_text()) if (argv := dry_runnable(c))]
    assert len({tuple(a) for a in runs}) >= 6, runs  # plan, data, preflight, all, dry run, unlock, a target
    seen = {}
    for argv in dict.fromkeys(tuple(a) for a in runs):
        done = subprocess.run([sys.executable, "-m", *argv] if argv[0] == "snakemake" else list(argv), cwd=root,
                              env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
        shown = " ".join(argv)
        assert done.returncode == 0, f"{shown}:\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        seen[shown] = job_counts(done.stdout + done.stderr) if "-n" in argv else done.stdout
    plan = next(out for cmd, out in seen.items() if cmd.startswith("pacs plan"))
    assert "| train/qwen2.5-7b/ppo | 8 |" in plan and "plan.disk_quota" in plan  # the settings file was read
    data = next(jobs for cmd, jobs in seen.items() if "--until prepare_dataset" in cmd)
    assert data == {"prepare_dataset": 5}, data
    everything = next(jobs for cmd, jobs in seen.items() if cmd.endswith("all " + " ".join(
        ["--configfile", "config/config.yaml", SETTINGS, "-n"])))  # fmt: skip
    assert everything["train_policy"] == 10 and everything["preflight_job"] == 6, everything
    target = next(jobs for cmd, jobs in seen.items() if "evaluations.json" in cmd)
    assert target["evaluate_model"] == 1 and target["train_policy"] == 1, target


def asked_runtimes(output: str, rule: str) -> dict[str, int]:
    """{wildcards: runtime in minutes} of each ``rule`` job in a dry run's listing."""
    blocks = re.split(r"\n(?=(?:local)?rule \w+:)", output)
    return {re.search(r"wildcards: (.*)", b).group(1): int(re.search(r"[ ,]runtime=(\d+)", b).group(1))
            for b in blocks if b.startswith(f"rule {rule}:")}  # fmt: skip


@pytest.mark.parametrize("paper, gpu", [("config/config.yaml", "h100"), ("config/paper_v2.yaml", "h200")])
def test_every_preflight_asks_slurm_for_the_time_the_plan_says_it_needs(site, paper, gpu):
    """`snakemake -n --profile slurm preflight` with the guide's settings file (v2 on its h200): each preflight asks
    SLURM for at least its start-up and preflight.steps steps at the plan's longest, and for what the plan says it
    needs in all (the worst case, a checkpoint, the evaluation chunk) × plan.runtime_margin, within max_runtime; a
    limit too short for that is refused before anything runs, naming the keys."""
    from pacs import experiment
    from pacs.plan.jobs import startup_seconds
    from pacs.plan.whole import longest_step_seconds

    root, env = site
    (root / "gpu.yaml").write_text(f"plan: {{gpu: {gpu}}}\n")
    files = [paper, SETTINGS, "gpu.yaml"]
    done = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--profile", "slurm", "preflight", "--configfile",
                           *files], cwd=root, env=env, capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    asked = asked_runtimes(done.stdout, "preflight_job")
    plan = experiment.plan(experiment.workflow_config([root / f for f in files]))
    assert len(asked) == len(plan.preflights) == 6, asked
    for shape, name in plan.preflights.items():
        job, cal = plan.job(name), plan.calibration
        least = startup_seconds(job, cal) + plan.preflight_steps * longest_step_seconds(job, cal)
        assert asked[f"shape={shape}"] * 60 >= least * plan.settings.runtime_margin, (shape, asked, least)
        assert asked[f"shape={shape}"] == min(job.max_runtime, 10 * -(-job.preflight_s * 1.5 // 600)), shape
    (root / "short.yaml").write_text("resources: {train: {max_runtime: 60}}\n")
    refused = subprocess.run([sys.executable, "-m", "snakemake", "-n", "--profile", "slurm", "preflight",
                              "--configfile", *files, "short.yaml"], cwd=root, env=env, capture_output=True,
                             text=True, timeout=600)  # fmt: skip
    assert refused.returncode != 0 and "its preflight needs" in refused.stderr
    assert "change preflight.steps" in refused.stderr and "resources.train.max_runtime 60 min" in refused.stderr


def rule_edges(mermaid: str) -> set[tuple[str, str]]:
    """The edges of a mermaid flowchart, by rule name: Snakemake's ``idN[name]`` nodes or plain names, chains
    ``a --> b --> c`` as their links."""
    names = dict(re.findall(r"^\s*(id\d+)\[(\w+)\]", mermaid, re.MULTILINE))
    edges = set()
    for line in mermaid.splitlines():
        nodes = [names.get(n.strip(), n.strip()) for n in line.split("-->")]
        edges |= {(a, b) for a, b in zip(nodes, nodes[1:], strict=False)} if len(nodes) > 1 else set()
    return edges


def test_the_readme_s_pipeline_picture_is_snakemake_s_rule_graph(site):
    root, env = site
    text = README.read_text()
    marked = [(before, block) for before, block in fenced(text, "mermaid") if "<!-- rulegraph:" in before]
    assert len(marked) == 1, "README.md: one mermaid block after <!-- rulegraph: CONFIG --> expected"
    config = re.search(r"<!-- rulegraph: (\S+) -->", marked[0][0]).group(1)
    done = subprocess.run([sys.executable, "-m", "snakemake", "--rulegraph", "mermaid-js", "--configfile", config],
                          cwd=root, env=env, capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    drawn, actual = rule_edges(marked[0][1]), rule_edges(done.stdout)
    assert actual and drawn == actual, f"README's picture: missing {actual - drawn}, extra {drawn - actual}"
    assert Path(REPO / config).is_file()
