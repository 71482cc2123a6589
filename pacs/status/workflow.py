"""What Snakemake wrote of the workflow's jobs, read from its working directory and never written: the jobs that
failed in its latest run (``.snakemake/log/*.snakemake.log``: "Error in rule ...", each with its outputs, log and
message) and the SLURM job ids the executor submitted (its "submitted with SLURM jobid" lines, and its own logs
``.snakemake/slurm_logs/rule_<rule>/<wildcards>/<job id>.log``)."""

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

SUBMITTED = re.compile(r"submitted with SLURM jobid (\d+) \(log: (\S+)\)")
SLURM_LOG = re.compile(r"rule_(\w+?)/([^/]*)/(\d+)\.log$")


@dataclass
class Failure:
    rule: str
    outputs: list[str]
    log: str | None
    message: str | None
    when: str = ""  # as Snakemake logged it, local time

    @property
    def time(self) -> float | None:
        try:
            return time.mktime(time.strptime(" ".join(self.when.split()), "%a %b %d %H:%M:%S %Y"))
        except ValueError:
            return None


@dataclass
class WorkflowLog:
    """The latest run of the workflow as its log tells it: ``failed`` {output path: Failure}; ``submitted``
    {(rule, wildcards joined by "_"): [SLURM job ids, oldest first]}."""

    path: Path | None = None
    failed: dict[str, Failure] = field(default_factory=dict)
    submitted: dict[tuple[str, str], list[str]] = field(default_factory=dict)


def latest_log(workdir: Path) -> Path | None:
    """The log of the workflow's latest run from ``workdir``: the newest Snakemake log that is not a job's own
    (the SLURM executor runs Snakemake inside each job, whose log names ``--target-jobs``)."""
    logs = sorted((Path(workdir) / ".snakemake" / "log").glob("*.snakemake.log"), reverse=True)
    for log in logs:
        try:
            head = log.read_text(errors="replace")[:4000]
        except OSError:
            continue
        if "--target-jobs" not in head and "--mode remote" not in head:
            return log
    return None


def read_workflow_log(workdir: Path) -> WorkflowLog:
    found = WorkflowLog(latest_log(workdir))
    for path in sorted((Path(workdir) / ".snakemake" / "slurm_logs").glob("rule_*/*/*.log")):
        match = SLURM_LOG.search(str(path))
        if match:
            found.submitted.setdefault(match.group(1, 2), []).append(match.group(3))
    if found.path is None:
        return found
    lines = found.path.read_text(errors="replace").splitlines()
    when = ""
    for i, line in enumerate(lines):
        if re.fullmatch(r"\[\w{3} \w{3} +\d+ [\d:]+ \d{4}\]", line.strip()):
            when = line.strip("[] ")
        submitted = SUBMITTED.search(line)
        if submitted:
            match = SLURM_LOG.search(submitted.group(2))
            if match:
                ids = found.submitted.setdefault(match.group(1, 2), [])
                if submitted.group(1) not in ids:
                    ids.append(submitted.group(1))
        failed = re.match(r"Error in rule (\w+):", line)
        if not failed:
            continue
        fields: dict[str, str] = {}
        for entry in lines[i + 1 :]:
            if not entry.startswith("    ") or entry.startswith("        "):
                if not entry.startswith("        "):
                    break
                continue
            key, _, value = entry.strip().partition(": ")
            fields.setdefault(key, value)
        log = fields.get("log")
        failure = Failure(failed.group(1), fields.get("output", "").split(", ") if fields.get("output") else [],
                          log.split(" (check")[0] if log else None,
                          None if fields.get("message") in (None, "None") else fields["message"], when)  # fmt: skip
        for output in failure.outputs:
            found.failed[output] = failure
    for ids in found.submitted.values():
        ids.sort(key=int)
    return found
