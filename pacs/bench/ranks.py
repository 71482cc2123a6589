"""A benchmark's ranks: ``python -m <module> SPEC`` launched in a fresh process (a ``torchrun --standalone`` of
several) under a time limit, from the benchmark's side (``run_ranks``) and the rank's (``rank_main``).

A fresh process per measurement keeps one measurement's memory, compiled kernels and process group from the next;
the time limit lets a caller (``pacs bench gpu``) record a part that hangs or compiles too long and go on.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

from pacs.ranks.allocator import CUDA_ALLOCATOR

# the line a worker's rank 0 prints once its model is built (pacs.bench.update), from which run_ranks's time
# limit counts when it is given one for the build (pacs bench gpu's parts)
BUILT = "pacs.bench.update: model built in "


def run_ranks(module: str, nproc: int, spec: dict, timeout_s: float = 3600,
              build_timeout_s: float | None = None) -> dict:  # fmt: skip
    """``python -m module SPEC`` on ``nproc`` ranks of a fresh ``torchrun --standalone`` (one plain process for 1);
    rank 0's last JSON line. A run past its time limit is killed, with every process it started, and raises
    ``subprocess.TimeoutExpired`` holding what it printed. The limit is ``timeout_s`` from the start; with
    ``build_timeout_s``, ``timeout_s`` from the line rank 0 prints once its model is built (``BUILT``), and the
    start until then (the interpreter's imports and the build) has ``build_timeout_s``."""
    launcher = [sys.executable]
    if nproc > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(nproc)]
    # glibc keeps freed heap memory resident, so RSS would include every transient buffer FSDP has freed;
    # allocations of 64 KiB and above from mmap go back to the OS when freed, as a GPU allocator's would
    # and torch's CUDA allocator as a training job sets it (pacs.ranks.allocator)
    env = {"OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536", CUDA_ALLOCATOR[0]: CUDA_ALLOCATOR[1],
           **os.environ}  # fmt: skip
    command = [*launcher, "-m", module, json.dumps(spec)]
    # a session of its own: a timeout kills torchrun's ranks and compile workers too, not only the launcher
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True)  # fmt: skip
    out, err, built = [], [], threading.Event()

    def read_out() -> None:
        for line in proc.stdout:
            out.append(line)
            if line.startswith(BUILT):
                built.set()

    readers = [threading.Thread(target=read_out, daemon=True),
               threading.Thread(target=lambda: err.append(proc.stderr.read()), daemon=True)]  # fmt: skip
    for reader in readers:
        reader.start()
    try:
        waited(proc, built, timeout_s, build_timeout_s)
    except BaseException as e:  # a timeout, or the caller interrupted: nothing of the run outlives it
        ended(proc, readers)
        if isinstance(e, subprocess.TimeoutExpired):
            raise subprocess.TimeoutExpired(command, e.timeout, "".join(out), "".join(err)) from None
        raise
    ended(proc, readers)  # what a rank left behind (os._exit skips shutting compile workers down)
    if proc.returncode != 0:
        raise RuntimeError(f"{module} ({nproc} ranks, {spec.get('trainer')}) failed: {''.join(err)[-3000:]}")
    return json.loads([x for x in out if x.startswith("{")][-1])


def waited(proc: subprocess.Popen, built: threading.Event, timeout_s: float, build_timeout_s: float | None) -> None:
    """Until ``proc`` ends: ``build_timeout_s`` (if given) for ``built`` to be set, then ``timeout_s``; past
    either, ``subprocess.TimeoutExpired``."""
    if build_timeout_s is not None:
        deadline = time.monotonic() + build_timeout_s
        while not built.wait(0.2) and proc.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(proc.args, build_timeout_s)
    proc.wait(timeout_s)


def ended(proc: subprocess.Popen, readers: list[threading.Thread]) -> None:
    """``proc``'s session killed (whatever of it is left) and its output read to the end."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:  # nothing left
        pass
    proc.wait()
    for reader in readers:
        reader.join(10)


def rank_main(worker, argv: list[str] | None) -> int:
    """One rank of a benchmark launched by ``run_ranks``: ``worker(**spec)``; rank 0 prints its JSON."""
    p = argparse.ArgumentParser(description="one rank of a benchmark (under torchrun); rank 0 prints JSON")
    p.add_argument("spec", help="JSON: the worker's keyword arguments")
    result = worker(**json.loads(p.parse_args(argv).spec))
    if result is not None:
        print(json.dumps(result), flush=True)
    import torch.distributed as dist

    if dist.is_initialized():
        # no destroy_process_group: it can deadlock with gloo's worker thread, which needs the GIL to free the
        # all_gather_object tensors while destroy holds it and waits for that thread (seen once in CI); exit
        # without finalizing instead, as nothing is left to write
        sys.stdout.flush()
        os._exit(0)
    return 0
