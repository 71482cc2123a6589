"""pacs's wandb runs: one writer each, its id from the output directory it describes, offline by default (``auto``:
online where the machine is logged in to wandb, offline otherwise; each job says which).

Training (``pacs train``) writes one run per run directory, resumed by every job of the run; an evaluation
(``pacs evaluate``) one per evaluation directory; the report rule (``pacs report wandb``) one per experiment.
Each lies under its directory's ``wandb/``; ``wandb sync DIR/wandb/offline-run-*`` uploads it. A training run is grouped
with its evaluations: its group is its name (``group_of_checkpoint`` finds it from a checkpoint's path).

``replace``: a rerun's run replaces the one an earlier run of the same job wrote, rather than adding a
second: locally its run directory is removed first; online the run of that id is updated (same id).
"""

import hashlib
import os
import re
import shutil
from pathlib import Path
from typing import Literal

import yaml

Mode = Literal["offline", "online", "disabled", "auto"]
MODES = ("offline", "online", "disabled", "auto")


def logged_in(environ=os.environ) -> str | None:
    """How this machine may write to wandb online without asking (``WANDB_API_KEY``, or the netrc entry `wandb
    login` writes for its host), None when it may not. Nothing is sent."""
    import netrc
    from urllib.parse import urlparse

    if environ.get("WANDB_API_KEY"):
        return "WANDB_API_KEY is set"
    host = urlparse(environ.get("WANDB_BASE_URL") or "https://api.wandb.ai").hostname
    path = environ.get("NETRC") or os.path.join(os.path.expanduser("~"), ".netrc")
    try:
        if netrc.netrc(path).authenticators(host):
            return f"logged in to {host} ({path})"
    except (OSError, netrc.NetrcParseError):
        pass
    return None


def resolve_mode(mode: Mode, environ=os.environ) -> tuple[str, str]:
    """The mode a job runs wandb in, and why: ``auto`` is online where this machine is logged in (``logged_in``),
    offline otherwise."""
    if mode != "auto":
        return mode, "as configured"
    why = logged_in(environ)
    return ("online", f"auto: {why}") if why else ("offline", "auto: not logged in (wandb login, or WANDB_API_KEY)")


def run_id(out: Path) -> str:
    """The wandb id of the run describing ``out``: its name and a hash of its absolute path."""
    out = Path(out).resolve()
    return f"{out.name}-{hashlib.sha1(str(out).encode()).hexdigest()[:8]}"


def check_environment(mode: Mode) -> str:
    """Before the work: the mode chosen (``--wandb``, ``logging.wandb``; ``auto`` resolved, ``resolve_mode``) wins
    over ``WANDB_MODE`` (set to it here, for this process and those it starts), and any other ``WANDB_*`` variable
    whose value wandb refuses is named with that value, rather than found by ``wandb.init`` once the work is done.
    Disabled: nothing is checked. Returns the mode resolved."""
    if mode not in MODES:
        raise ValueError(f"wandb mode {mode!r}: expected one of {', '.join(MODES)}")
    mode = resolve_mode(mode)[0]
    if mode == "disabled":
        return mode
    os.environ["WANDB_MODE"] = mode
    import wandb
    from pydantic import ValidationError

    refused = []
    for key, value in sorted(os.environ.items()):
        if key.startswith("WANDB_"):
            try:
                wandb.Settings().update_from_env_vars({key: value})
            except ValidationError:
                refused.append(f"{key}={value!r}")
    if refused:
        raise ValueError(f"wandb refuses the environment's {', '.join(refused)}: correct or unset it (or run with "
                         "wandb disabled)")  # fmt: skip
    return mode


def start_run(out: Path, mode: Mode, project: str, name: str, group: str | None, job_type: str, config: dict,
              replace: bool = False):  # fmt: skip
    """``wandb.init`` for the run describing ``out`` (files under ``out/wandb``); None when ``mode`` is
    disabled, and then wandb is not imported. Says which mode, and why, and how to upload an offline run."""
    why = resolve_mode(mode)[1]
    mode = check_environment(mode)
    if mode == "disabled":
        return None
    import wandb

    out = Path(out)
    later = f"; upload it later: wandb sync {out.resolve()}/wandb/offline-run-*" if mode == "offline" else ""
    print(f"wandb: {mode} ({why}){later}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    identity = run_id(out)
    if replace:
        for earlier in (out / "wandb").glob(f"*run-*-{identity}"):
            shutil.rmtree(earlier)
    # an absolute dir: a process started from one that ran wandb inherits its service (WANDB_SERVICE), which
    # would place a relative dir's transaction log under its own working directory
    return wandb.init(project=project, name=name, group=group, job_type=job_type, dir=out.resolve(), mode=mode,
                      config=config, id=identity, resume="allow")  # fmt: skip


def checkpoint_step(model: str) -> int:
    """The training step of a checkpoint directory (``.../step_NNNNNN``); 0 for any other model (a base or
    released model, as the workflow numbers them)."""
    found = re.fullmatch(r"step_(\d+)", Path(model).name)
    return int(found.group(1)) if found else 0


def group_of_checkpoint(model: str) -> str:
    """The wandb group an evaluation of ``model`` joins: for a training checkpoint (``RUN/checkpoints/step_N``),
    the training run's (its ``logging.run_name``, else RUN's name, as ``pacs train`` names it); else the model's
    own name (a hub id, or a directory's name)."""
    path = Path(model)
    if path.parent.name == "checkpoints" and (path.parent.parent / "config.yaml").is_file():
        run = path.parent.parent
        logging = (yaml.safe_load((run / "config.yaml").read_text()) or {}).get("logging") or {}
        return logging.get("run_name") or run.resolve().name
    return path.resolve().name if path.exists() else str(model)
