"""Memory per phase of a training step: each phase's peak, as this process and its device saw it.

A step's phases have different owners of the device (``pacs.plan.memory`` counts the same ones):

- ``generate``: the rollout engine samples (``pacs.train.sampling.rollouts.rollout``): vLLM awake, its weights and KV
  cache beside the trainer's state; transformers' cache instead with ``rollout.engine: hf``;
- ``no_grad``: old log-probs, reference log-probs and values (``score_batch``);
- ``update``: the critic's and the actor's updates (``update_models``), vLLM asleep where
  ``rollout.vllm.sleep_level`` > 0.

``with phase(name, engine):`` brackets one. For each phase this process (rank) keeps the largest, over the
steps so far, of:

- ``rss``: resident memory, the kernel's high-water mark (``VmHWM``) after resetting it at the phase's start
  (writing 5 to ``/proc/self/clear_refs``). On a CPU all the memory the phase needs.
- ``torch`` (CUDA): the peak of what torch's caching allocator reserved in the phase, less the bytes of the
  engine's own memory pool (``RolloutEngine.pooled_bytes``). vLLM's sleep mode allocates its weights, KV
  cache and CUDA graphs through torch's allocator into a ``MemPool`` of its own (``vllm/device_allocator/
  cumem.py``) and, asleep, unmaps them behind torch's back, so torch's counters hold all of them, asleep or
  awake (about 40 GB at ``gpu_memory_utilization`` 0.5 on an H100). The pool holds the same bytes for the
  whole phase, so subtracting it at the end removes it from the peak too. Reserved, not allocated: what the
  device runs out of.
- ``allocated`` (CUDA): the peak of what torch's tensors held in the phase (``max_memory_allocated``), the engine's
  pool left out as from ``torch``: what ``torch`` reserves beyond it is the allocator's cache and fragmentation.
- ``device`` (CUDA): the device's peak use in the phase, whoever holds it (the CUDA context, NCCL's buffers,
  vLLM awake): its use at the phase's end (``torch.cuda.mem_get_info``: total - free) plus how far torch's
  reserved peak in the phase rose above what torch reserves at the end. Exact when nothing torch does not
  count shrinks within the phase: the engine sleeps and wakes only between phases (``rollout`` brackets the
  sampling alone, ``release_memory`` comes after it) and NCCL only grows its buffers. The weight push is
  between phases for that reason: it frees the trainer's cached blocks for the engine that it wakes, which
  would count both. It holds what sampling holds and one gathered tensor more.

The process as a whole (``peaks``): the largest ``rss`` and ``torch`` over the phases and the spans between
them, and the largest ``device`` over the phases.

The peaks survive resets. Measuring a phase resets torch's peak statistics and the kernel's high-water mark
(which ``getrusage``'s ``ru_maxrss`` reads too); vLLM resets torch's while it profiles at start-up
(``vllm/utils/mem_utils.py``). So at every boundary, before anything can reset them, the peaks since the
previous boundary are folded into the tracker's own maxima, and every figure here comes from those maxima.
A reset inside a phase loses what that phase held before it: the trainer resets nothing inside one.

One tracker per process (``TRACKER``), as torch's statistics and the kernel's counters are per process.
"""

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from pacs.plan.memory import PHASES
from pacs.ranks.distributed import DistEnv, all_reduce, gather_objects


def status_bytes(field: str) -> int:
    """``VmRSS`` (resident now) or ``VmHWM`` (its high-water mark) of this process, bytes (Linux reports KiB)."""
    found = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"/proc/self/status has no {field}: per-phase resident memory needs Linux")
    return int(found.group(1)) * 1024


def resident_peak() -> int:
    """This process's resident-memory high-water mark, bytes."""
    return status_bytes("VmHWM")


def reset_resident_peak() -> bool:
    """Set the high-water mark to what is resident now (Linux >= 4.0); False where the kernel refuses, and then
    each phase's ``rss`` is the process's peak so far."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def no_pool() -> int:
    return 0


class PhaseMemory:
    """This process's peaks per phase (``phases``: name -> {rss, torch, device}) and over the run so far
    (``total``), bytes; the module docstring says what each means."""

    def __init__(self):
        self.phases: dict[str, dict[str, int]] = {}
        self.total: dict[str, int] = {}
        self.pooled: Callable[[], int] = no_pool  # the rollout engine's own pool, counted by torch, not the trainer's

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in PHASES:
            raise ValueError(f"memory phase {name!r} is not one of {PHASES}")
        self.boundary()
        try:
            yield
        finally:
            self.boundary(name)

    def boundary(self, ended: str | None = None) -> None:
        """Fold the peaks since the last boundary into the maxima (phase ``ended``'s too, when one ends here),
        then reset the counters for the next span."""
        seen = self._measure()
        for key in ("rss", "torch", "allocated"):
            if key in seen:
                self.total[key] = max(self.total.get(key, 0), seen[key])
        if ended is not None:
            mine = self.phases.setdefault(ended, {})
            for key, value in seen.items():
                mine[key] = max(mine.get(key, 0), value)
            if "device" in seen:
                self.total["device"] = max(self.total.get("device", 0), seen["device"])
        reset_resident_peak()
        if torch.cuda.is_initialized():
            torch.cuda.reset_peak_memory_stats()

    def _measure(self) -> dict[str, int]:
        seen = {"rss": resident_peak()}
        if torch.cuda.is_initialized():  # a process that never touched CUDA has nothing there to count
            peak, now = torch.cuda.max_memory_reserved(), torch.cuda.memory_reserved()
            free, total = torch.cuda.mem_get_info()
            seen["torch"] = peak - self.pooled()
            seen["allocated"] = max(torch.cuda.max_memory_allocated() - self.pooled(), 0)
            seen["device"] = total - free + peak - now
        return seen

    def peaks(self) -> dict:
        """What the run so far peaked at, GB: ``rss``, and on CUDA ``gpu`` (torch, the engine's pool apart) and
        ``device``; ``phases``: each phase's ``rss`` (and ``torch``, ``device``)."""
        self.boundary()  # what happened since the last phase ended
        total = {{"torch": "gpu"}.get(k, k): v / 1e9 for k, v in self.total.items()}
        return {**total, "phases": {p: {k: v / 1e9 for k, v in self.phases[p].items()}
                                    for p in PHASES if p in self.phases}}  # fmt: skip


TRACKER = PhaseMemory()


def phase(name: str, engine=None):
    """``with phase("update", engine):`` counts what the block holds as phase ``name`` of this process;
    ``engine``: the rollout engine, whose own memory pool (``pooled_bytes``) is left out from now on."""
    if engine is not None:
        TRACKER.pooled = engine.pooled_bytes
    return TRACKER.phase(name)


def peak_memory(env: DistEnv) -> dict:
    """The largest of any rank so far, GB: the process's peak resident memory and, on a GPU, torch's peak
    reserved memory without the engine's pool; and per phase (``memory/<phase>/``) its resident memory and,
    on a GPU, torch's peak and the device's use."""
    mine = TRACKER.peaks()
    keys = ["peak_rss", *(["peak_gpu"] if "gpu" in mine else [])]
    values = [mine[k.removeprefix("peak_")] for k in keys]
    for name in PHASES:  # every rank runs every phase of every step
        figures = mine["phases"].get(name, {})
        for kind in ("rss", "torch", "device") if "gpu" in mine else ("rss",):
            keys.append(f"{name}/{kind}")
            values.append(figures.get(kind, 0.0))
    peak = all_reduce(torch.tensor(values, dtype=torch.float64), env, "max").tolist()
    return {f"memory/{k}_gb": v for k, v in zip(keys, peak, strict=True)}


def rank_peaks(env: DistEnv) -> list[dict]:
    """Every rank's ``TRACKER.peaks()``, in rank order (a collective)."""
    return gather_objects(TRACKER.peaks(), env)
