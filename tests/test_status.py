"""`pacs status` reads where a job writes, and never stands in its way: whether a run directory has a live writer is
asked of its lock without taking it (pacs.writer_lock.live_holder). What it says of a workflow's jobs, run locally
and through SLURM (running, stopped, failed, done, and that it writes nothing): tests/test_workflow.py and
tests/test_workflow_dag.py."""

import subprocess
import sys
import threading

from pacs.wandb_runs import resolve_mode
from pacs.writer_lock import live_holder

WRITER = """
import sys
from pacs.writer_lock import DirectoryBusy, sole_writer

refused = 0
for _ in range(int(sys.argv[2])):
    try:
        with sole_writer(sys.argv[1], "a writer"):
            pass
    except DirectoryBusy:
        refused += 1
print(refused)
"""


def test_asking_whether_a_run_has_a_writer_never_refuses_one(tmp_path):
    """A process taking and letting go of the directory's lock 300 times while this one asks, without pause,
    whether someone holds it: the writer is never refused (a probe that took the lock, even for an instant, would
    refuse some), and the asker sees the holder (host, pid) or no one; once the writer has gone, no one."""
    asked, seen = threading.Event(), []

    def ask() -> None:
        while not asked.is_set():
            seen.append(live_holder(tmp_path))

    (tmp_path / ".lock").touch()
    thread = threading.Thread(target=ask)
    thread.start()
    try:
        done = subprocess.run([sys.executable, "-c", WRITER, str(tmp_path), "300"], capture_output=True, text=True,
                              timeout=300)  # fmt: skip
    finally:
        asked.set()
        thread.join()
    assert done.returncode == 0 and done.stdout.strip() == "0", done.stdout + done.stderr
    assert len(seen) > 100 and all(s is None or s == {} or set(s) >= {"host", "pid"} for s in seen)
    assert live_holder(tmp_path) is None


def test_wandb_auto_is_online_where_the_machine_is_logged_in_and_offline_otherwise(tmp_path):
    """logging.wandb auto (the paper configs'): online with WANDB_API_KEY, or with `wandb login`'s netrc entry
    for the host wandb writes to; offline without either, or with an entry for another host; a mode set
    explicitly is kept whatever the machine has."""
    netrc = tmp_path / "netrc"
    env = {"NETRC": str(netrc)}
    assert resolve_mode("auto", env) == ("offline", "auto: not logged in (wandb login, or WANDB_API_KEY)")
    netrc.write_text("machine api.wandb.ai\n  login user\n  password secret\n")
    netrc.chmod(0o600)
    assert resolve_mode("auto", env) == ("online", f"auto: logged in to api.wandb.ai ({netrc})")
    assert resolve_mode("auto", {**env, "WANDB_BASE_URL": "https://wandb.example.org"})[0] == "offline"
    assert resolve_mode("auto", {"NETRC": str(tmp_path / "none"), "WANDB_API_KEY": "k"}) == (
        "online", "auto: WANDB_API_KEY is set")  # fmt: skip
    assert resolve_mode("offline", {**env, "WANDB_API_KEY": "k"}) == ("offline", "as configured")
