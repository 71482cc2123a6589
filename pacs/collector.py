"""CPython's garbage collector in a pacs process: rare while the process starts, on its usual schedule once it
works.

A pacs process imports torch, transformers and often vLLM, and loads a model: millions of objects that live as long
as the process. On CPython's schedule (the youngest generation collected every 700 new objects, the whole heap once
enough of them outlive two collections), importing transformers' Qwen2 ran 7 collections of the whole heap, 0.7 of
its 4.9 CPU seconds. ``starting`` (the CLI's first step) collects every 50,000 new objects instead; ``working``
(once a model is loaded: the trainer's models, an evaluation's engine) freezes what exists by then, which no
collection scans again, and puts CPython's schedule back, so that what the work leaves behind (a cycle holding a
tensor) is freed as soon as it would be without this module. vLLM collects the whole heap 5 times while it builds
an engine (1.3 of 4.0 CPU seconds for the tiny model's): ``freeze`` before it. A freeze collects first (one
collection of the whole heap, about 0.5 s), so that it keeps no garbage alive, and what is frozen is collected at
exit as everything else is.

``leave`` ends a pacs process (the ``pacs`` command, torchrun's ranks) as the interpreter would, less its teardown:
threads joined, exit handlers run, output flushed, then ``os._exit``. The teardown it skips (modules cleared, a
last collection of the whole heap) is about a CPU second a process once torch and transformers are imported, and
holds nothing a pacs process still needs: files are written atomically and closed, engines and pools closed
where they are used, and what a library must do at exit (wandb, logging, multiprocessing) it registers with
atexit.
"""

import atexit
import gc
import os
import sys
import threading
from typing import NoReturn

USUAL = (700, 10, 10)  # CPython's defaults
STARTING = (50_000, 10, 10)
atexit.register(gc.unfreeze)  # what a freeze kept out is collected at exit (nothing frozen: nothing to do)


def starting() -> None:
    gc.set_threshold(*STARTING)


def freeze() -> None:
    """What this process holds now is left out of every collection until it exits; at exit it is collected as
    usual (without that, triton's extension reports its objects as leaked). Garbage is collected first, so that
    none is kept alive by the freeze (a cycle holding a loaded checkpoint's tensors)."""
    gc.collect()
    gc.freeze()


def working() -> None:
    freeze()
    gc.set_threshold(*USUAL)


def leave(code: int | None) -> NoReturn:
    """End this process with exit status ``code`` (None: 0) as the interpreter ends it (its non-daemon threads
    joined, with what they registered to run before: ``threading._shutdown``, as the interpreter calls it; then
    the atexit handlers), without its teardown. Under a profiler or a tracer (cProfile, coverage, a debugger),
    which writes its results after the program returns, the usual exit instead."""
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: the interpreter's exit status then
            code = 120
    os._exit(code or 0)
