"""Does the README's cluster install resolve? `python tests/resolve_cluster_install.py` (tests/test_install.py runs it).

`pip install torch==2.13.0 && pip install -e ".[gpu,slurm]"` (README, "Run the paper on a SLURM cluster"), as
pip's resolver only: the package's dependencies and those extras, read from pyproject.toml, go to `pip install --dry-run
--ignore-installed` with the pip of ``--python`` (default: this interpreter; tests/test_install.py gives a new venv
of the oldest Python pyproject.toml allows, with the pip that venv brings) on this Linux x86-64 machine. Nothing
is built or installed beyond the metadata of the few source-only dependencies; pip fetches wheels only to read
their metadata where the index offers no separate metadata file. It needs PyPI. It exits 1, with pip's last
lines, when pip finds no resolution or takes longer than the time limit (backtracking through old releases,
which the bounds in pyproject.toml prevent); otherwise it prints the seconds, the main versions chosen and any
package pip backtracked on.
"""

import argparse
import json
import platform
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
EXTRAS = ("gpu", "slurm")
SHOWN = ("torch", "vllm", "numpy", "mistral-common", "snakemake", "snakemake-executor-plugin-slurm", "matplotlib")
BACKTRACKED = re.compile(r"pip is looking at multiple versions of (\S+)")


def requirement_lines(pyproject: Path, extras: tuple[str, ...]) -> list[str]:
    """The project's dependencies and those of `extras`: what `pip install -e ".[extras]"` resolves."""
    project = tomllib.loads(pyproject.read_text())["project"]
    extra_lines = [line for extra in extras for line in project["optional-dependencies"][extra]]
    return list(project["dependencies"]) + extra_lines


def resolve(lines: list[str], timeout_s: float, python: str = sys.executable) -> tuple[dict[str, str] | None, float,
                                                                                      str]:  # fmt: skip
    """The resolution by ``python``'s pip of `lines` for that interpreter and this machine: ({name: version} or
    None, seconds, pip's output)."""
    with tempfile.TemporaryDirectory() as tmp:
        requirements, report = Path(tmp, "requirements.txt"), Path(tmp, "report.json")
        requirements.write_text("\n".join(lines) + "\n")
        cmd = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--progress-bar", "off",
               "--report", str(report), "-r", str(requirements)]  # fmt: skip
        start = time.monotonic()
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired as e:
            output = "".join(s.decode(errors="replace") if isinstance(s, bytes) else s or ""
                             for s in (e.stdout, e.stderr))  # fmt: skip
            return None, time.monotonic() - start, output + f"\n(stopped after {timeout_s:.0f} s)"
        seconds, output = time.monotonic() - start, done.stdout + done.stderr
        if done.returncode != 0:
            return None, seconds, output
        installs = json.loads(report.read_text())["install"]
        return {item["metadata"]["name"].lower().replace("_", "-"): item["metadata"]["version"] for item in installs}, \
            seconds, output  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", type=Path, default=PYPROJECT)
    parser.add_argument("--timeout-s", type=float, default=300, help="a resolution taking longer fails")
    parser.add_argument("--python", default=sys.executable, help="the interpreter whose pip resolves")
    args = parser.parse_args(argv)
    versions = subprocess.run([args.python, "-c", "import platform, pip; print(platform.python_version(), "
                               "pip.__version__)"], capture_output=True, text=True)  # fmt: skip
    if versions.returncode != 0:
        print(f"{args.python}: no pip to resolve with: {versions.stderr.strip()[-500:]}", file=sys.stderr)
        return 1
    python_version, pip_version = versions.stdout.split()
    where = (f'pip install -e ".[{",".join(EXTRAS)}]" (pip {pip_version}, CPython {python_version}, '
             f"{platform.system()} {platform.machine()})")  # fmt: skip
    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        print(f"{where}: this check resolves for the machine it runs on; run it on Linux x86-64", file=sys.stderr)
        return 1
    chosen, seconds, output = resolve(requirement_lines(args.pyproject, EXTRAS), args.timeout_s, args.python)
    backtracked = sorted(set(BACKTRACKED.findall(output)))
    if chosen is None:
        lines = [line for line in output.strip().splitlines() if not line.startswith("WARNING: Location")]
        print("\n".join(lines[-30:]) + f"\nFAILED: {where} does not resolve ({seconds:.0f} s; pip's last lines "
              f"above; it backtracked on {', '.join(backtracked) or 'nothing'}). Bound that dependency or the ones "
              "in conflict in pyproject.toml (docs/installing.md, 'Why pyproject.toml bounds some packages').",
              file=sys.stderr)  # fmt: skip
        return 1
    versions = ", ".join(f"{name} {chosen[name]}" for name in SHOWN if name in chosen)
    print(f"{where} resolves in {seconds:.0f} s: {len(chosen)} packages; {versions}; "
          + (f"pip backtracked on {', '.join(backtracked)}" if backtracked else "no backtracking"))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
