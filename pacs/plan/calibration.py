"""The throughput constants a plan turns FLOPs into hours with, and the GPU it checks memory against.

Without a calibration file, the defaults below, each with its source. ``pacs bench gpu`` measures them on
the user's GPU and writes a calibration file (JSON, the keys of ``Calibration``); the workflow config's
``plan.calibration`` names it.

Each figure is **measured** (by ``pacs bench gpu``, or by pacs on a GPU once, as said), **published** (a
measurement by others, cited) or **assumed**; ``SOURCES`` says which for the defaults, and ``pacs plan``'s header
prints it. ``docs/plan-vs-published.md`` holds the plan against published RL steps.

- ``train_hfu``: the update's hardware FLOPs utilisation, forward and backward: model FLOPs (6·N per trained
  token, attention added) **plus the forward of every layer that recomputes** (activation checkpointing,
  ``trainer.checkpoint_layers``) per second over the GPU's peak. Recompute is counted as work, so one figure
  prices a run whatever its checkpointing. Published and measured alike near 0.30 at every width measured:
  ``train_hfu_by_width`` holds them (hidden size: HFU), a model priced by linear interpolation in width between
  them (flat beyond): **1536: 0.305, measured** (pacs's update of the Qwen2.5-1.5B shape on one H100 80GB HBM3,
  FSDP2, bf16 over fp32 masters, every layer recomputing, Liger's kernels, packed rows of a group of 8
  responses: MFU 0.238, ``pacs bench update --shape qwen2.5-1.5b --strategies fsdp --nproc 1 --compute-dtype
  bfloat16 --gradient-checkpointing --rows 8 --group-size 8 --prompt-length 512 --response-length 4096
  --lengths deepscaler --steps 3 --peak-flops 989e12 --variants packed-liger``, November 2026, issue 59; its
  recomputed forwards add 28 % to its FLOPs); **4096: 0.300, published** (torchtitan's FSDP2 benchmark of
  Llama-3.1-8B on 8 H100, ``benchmarks/llama3_h100_202412_torchtitan.md``: 5,762 tokens/s per GPU at 8,192-token
  sequences, selective activation checkpointing, no compile, bf16; priced here with this module's FLOPs of a
  token at 4,096 tokens of mean context; its H100s were capped at 500 W, so this is if anything low).
  NeMo-RL's DTensor (FSDP2) step of the same 8B (the v0.3 release blog, July 2025) implies 0.296 for its
  training phase, without checkpointing.
- ``score_hfu``: the same for a forward alone (old and reference log-probs, values; and a prompt's prefill):
  **0.38, published**: NeMo-RL v0.3's DTensor step of Llama-3.1-8B-Instruct on 8 H100 scores its 2,048 rows
  (policy and reference log-probs) in 19 s, 0.38 of the peak with this module's FLOPs at a mean prompt of 128
  tokens. A forward keeps no activations for a backward and runs larger matrix multiplies per launch. Fitted
  to one of the rows ``docs/plan-vs-published.md`` checks; the others hold it.
- Decoding (``pacs.plan.decode``: its roofline, not a constant MFU): ``hbm_bytes_per_s``, the GPU's memory
  bandwidth from the vendor's data sheet (H100 SXM 3.35 TB/s, H200 4.8 TB/s, A100 80GB SXM 2.039 TB/s), or
  as ``pacs bench gpu`` measures it (a device-to-device copy); ``decode_efficiency``, the share of the
  roofline (bandwidth and peak FLOP/s alike) a decoding iteration reaches: **0.45, published**: vLLM's
  generation in NeMo-RL v0.3's step of Llama-3.1-8B-Instruct (8 H100, 256 responses per GPU of mean 777 tokens
  capped at 4,096 with the prompt: 57 s), as this module prices it with its tail of responses at the cap
  (``pacs.plan.decode.spread``); fitted to that row (the GPU machine here has no vLLM to measure it), the
  others hold it. It covers what a roofline of weights and KV cache misses: sampling, the scheduler, and the
  log-probs an RL engine returns. ``max_num_seqs`` 1024, vLLM 0.32's default for its ``LLM`` class on GPUs of 70
  GB or more other than the A100 (256 there: ``vllm.engine.arg_utils``).
- ``refit_bytes_per_s``: the colocated step's weight push from the trainer's shards into the GPU's own vLLM
  engine (a gather, then ``load_weights``): **3.2 GB/s, published**: NeMo-RL v0.3's refit of the 8B's 16 GB
  in 4 s (the blog) and 6 s (issue 959's rerun), the mean.
- ``push_bytes_per_s``: the weight push from trainers to generator GPUs (one step off, ``pacs plan``'s table
  of generator counts). Default 40 GB/s, **assumed**: one 400 Gb/s NDR InfiniBand link (50 GB/s) at 80 %, as
  between nodes; within a node NVLink is several times faster.
- ``checkpoint_bytes_per_s``: how fast a checkpoint is written and checksummed. Default 500 MB/s, a guess for
  a shared parallel file system under load; a preflight measures it.
"""

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GIB = 2**30

# memory as torch reports it (total_memory) and dense bf16 peak FLOP/s from the vendors' data sheets
GPUS = {
    "h100": {"name": "NVIDIA H100 80GB (SXM)", "memory_bytes": int(79.2 * GIB), "peak_flops": 989e12,
             "hbm_bytes_per_s": 3.35e12, "max_num_seqs": 1024},
    "h200": {"name": "NVIDIA H200 141GB", "memory_bytes": int(139.8 * GIB), "peak_flops": 989e12,
             "hbm_bytes_per_s": 4.8e12, "max_num_seqs": 1024},
    "a100": {"name": "NVIDIA A100 80GB", "memory_bytes": int(79.2 * GIB), "peak_flops": 312e12,
             "hbm_bytes_per_s": 2.039e12, "max_num_seqs": 256},
}
# keys of calibration files from before decoding was priced by its roofline, and the update by hardware FLOPs
RETIRED = {"generate_mfu": "decoding is priced by its roofline now (hbm_bytes_per_s, decode_efficiency)",
           "generate_engine": "decoding is priced by its roofline now",
           "train_mfu": "the update is priced by hardware FLOPs now, its recompute counted (train_hfu)",
           "train_mfu_by_width": "the update is priced by hardware FLOPs now, its recompute counted "
                                 "(train_hfu_by_width)"}  # fmt: skip
# the default update HFU by width (module docstring): measured at 1.5B by pacs, published at 8B by torchtitan
TRAIN_HFU_BY_WIDTH = {"1536": 0.305, "4096": 0.300}
# what each default pricing figure is (module docstring); pacs plan's header prints them
SOURCES = {"train_hfu_by_width": "measured at width 1536 (pacs, H100), published at 4096 (torchtitan, H100)",
           "score_hfu": "published (NeMo-RL v0.3, 8B, H100)",
           "decode_efficiency": "published (vLLM in NeMo-RL v0.3, 8B, H100)",
           "refit_bytes_per_s": "published (NeMo-RL v0.3, 8B)",
           "hbm_bytes_per_s": "published (the data sheet)", "peak_flops": "published (the data sheet)",
           "push_bytes_per_s": "assumed", "startup_s": "assumed", "checkpoint_bytes_per_s": "assumed",
           "overhead_bytes": "assumed", "memory_headroom": "assumed", "vllm_graph_bytes": "assumed"}  # fmt: skip


@dataclass(frozen=True)
class Calibration:
    gpu: str = GPUS["h100"]["name"]
    memory_bytes: int = GPUS["h100"]["memory_bytes"]  # per GPU
    peak_flops: float = GPUS["h100"]["peak_flops"]  # dense bf16, per GPU
    train_hfu: float = 0.30  # a forward and backward, recompute counted: where no width is known (above)
    # by model width ({hidden size: HFU}), linearly interpolated (above: measured at 1536, published at 4096)
    train_hfu_by_width: dict = dataclasses.field(default_factory=lambda: dict(TRAIN_HFU_BY_WIDTH), hash=False)
    score_hfu: float = 0.38  # a forward alone: log-probs, values, a prefill (published, above)
    hbm_bytes_per_s: float = GPUS["h100"]["hbm_bytes_per_s"]  # per GPU (data sheet, or pacs bench gpu)
    decode_efficiency: float = 0.47  # share of the decoding roofline reached (published, above)
    refit_bytes_per_s: float = 3.2e9  # the colocated weight push into vLLM (published, above)
    max_num_seqs: int = GPUS["h100"]["max_num_seqs"]  # vLLM's sequences at once
    push_bytes_per_s: float = 4e10  # trainers to generators (assumed: one NDR InfiniBand link)
    # per GPU, beside the tensors the plan counts: the CUDA context, cuBLAS's workspaces, NCCL's buffers
    overhead_bytes: int = 2 * GIB
    # the share of a GPU's memory the fit leaves free (pacs.plan.fit.usable_bytes): the caching allocator's blocks
    # that no tensor fills (fragmentation, less with expandable segments) and what the plan's arithmetic misses
    memory_headroom: float = 0.05
    # vLLM's own memory beside weights and KV cache (activations while profiling, CUDA graphs)
    vllm_overhead_bytes: int = 2 * GIB
    # vLLM's CUDA graphs, which stay on the GPU while it sleeps: its pool holds its weights and KV cache only
    # (vLLM 0.32: sleep_mode_offload_cudagraph, off by default); assumed, from vLLM's capture logs of 7-8B models
    vllm_graph_bytes: int = int(1.5 * GIB)
    startup_s: float = 600.0  # per job: loading the model, starting vLLM, capturing CUDA graphs
    # writing a checkpoint (HF weights, sharded resume state, manifest checksums) to a cluster file system
    checkpoint_bytes_per_s: float = 5e8
    source: str = "defaults (pacs.plan.calibration)"
    from_file: tuple[str, ...] = ()  # the keys a calibration file set (its figures: measured)

    def __post_init__(self):
        if not 0 <= self.memory_headroom < 1:
            raise ValueError(f"calibration: memory_headroom must be in [0, 1), got {self.memory_headroom}")

    def hfu_at(self, width: int) -> float:
        """The update's HFU for a model of hidden size ``width``: interpolated linearly between the widths of
        ``train_hfu_by_width`` (the nearest end's beyond them), or ``train_hfu`` where it is empty."""
        if not self.train_hfu_by_width:
            return self.train_hfu
        points = sorted((int(w), float(v)) for w, v in self.train_hfu_by_width.items())
        return float(np.interp(width, [w for w, _ in points], [v for _, v in points]))

    def sources(self) -> dict[str, str]:
        """What each pricing figure is: measured, published or assumed (``SOURCES``; a calibration file's own
        figures are measured)."""
        return {k: f"measured ({self.source})" if k in self.from_file else v for k, v in SOURCES.items()}


def load_calibration(path: Path | None, gpu: str | None) -> Calibration:
    """The constants of calibration file ``path`` (written by ``pacs bench gpu``), or the defaults for
    ``gpu`` (a key of ``GPUS``), or the H100's."""
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"calibration file {path} does not exist; write it with pacs bench gpu")
        data = json.loads(path.read_text())
        known = {f.name for f in dataclasses.fields(Calibration)}
        retired = sorted(set(data) & set(RETIRED))
        if retired:
            raise ValueError(f"{path}: {', '.join(retired)}: {RETIRED[retired[0]]}; write the file again with "
                             "pacs bench gpu, or delete the key")  # fmt: skip
        unknown = sorted(set(data) - known - {"measured"})
        if unknown:
            raise ValueError(f"{path}: unknown keys {unknown}; known: {sorted(known)}")
        kept = {k: v for k, v in data.items() if k in known}
        return Calibration(**{"source": f"calibration file {path}", **kept,
                              "from_file": tuple(sorted(set(kept) & set(SOURCES)))})  # fmt: skip
    if gpu is None:
        return Calibration()
    if gpu not in GPUS:
        raise ValueError(f"plan.gpu: {gpu!r} is not one of {sorted(GPUS)}")
    spec = GPUS[gpu]
    return Calibration(gpu=spec["name"], memory_bytes=spec["memory_bytes"], peak_flops=spec["peak_flops"],
                       hbm_bytes_per_s=spec["hbm_bytes_per_s"], max_num_seqs=spec["max_num_seqs"])
