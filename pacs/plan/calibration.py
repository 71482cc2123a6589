"""The throughput constants a plan turns FLOPs into hours with, and the GPU it checks memory against.

Without a calibration file, the defaults below, each with its source. ``pacs bench gpu`` measures them on
the user's GPU and writes a calibration file (JSON, the keys of ``Calibration``); the workflow config's
``plan.calibration`` names it.

- ``train_mfu``: model FLOPs (6·N per trained token, 2·N per scored token, attention added) per second
  over the GPU's peak, for the FSDP2 update. Default 0.238, measured: the paper config's update (FSDP2 on one
  rank, bf16 over fp32 masters, activation checkpointing of every layer, Liger's kernels, as a run on CUDA
  computes by default, packed rows of one group of 8 responses to a 512-token prompt, DeepScaleR's response
  lengths up to 4,096) of the Qwen2.5-1.5B shape on one H100 80GB HBM3 (torch 2.11, transformers 5.17,
  liger-kernel 0.8.5), November 2026: ``pacs bench update --shape qwen2.5-1.5b --strategies fsdp --nproc 1
  --compute-dtype bfloat16 --gradient-checkpointing --rows 8 --group-size 8 --prompt-length 512
  --response-length 4096 --lengths deepscaler --steps 3 --peak-flops 989e12 --variants packed-liger`` (0.56 s a
  step, 30,166 tokens/s; without Liger 0.200; issue 59). Only that shape was measured, in one micro-batch of
  8 rows: every other shape's hours are priced at it (larger models run larger matrix multiplies at a higher
  MFU, so their hours are likely overestimated), and the larger micro-batches ``auto`` sizes are not in it.
  ``pacs bench gpu`` on the user's GPU measures it per model width (``train_mfu_by_width``), which the plan
  prices each model at. Activation checkpointing's recomputation is inside this efficiency, not in the FLOPs.
- Decoding (``pacs.plan.decode``: its roofline, not a constant MFU): ``hbm_bytes_per_s``, the GPU's memory
  bandwidth from the vendor's data sheet (H100 SXM 3.35 TB/s, H200 4.8 TB/s, A100 80GB SXM 2.039 TB/s), or
  as ``pacs bench gpu`` measures it (a device-to-device copy); ``decode_efficiency`` 0.7, the share of the
  roofline (bandwidth and peak FLOP/s alike) a decoding iteration reaches, **assumed, not measured here**
  (the GPU machine has no vLLM): attention and sampling kernels beside the weight reads, the scheduler's
  gaps; ``max_num_seqs`` 1024, vLLM 0.32's default for its ``LLM`` class on GPUs of 70 GB or more other than
  the A100 (256 there: ``vllm.engine.arg_utils``).
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
# keys of calibration files from before decoding was priced by its roofline
RETIRED = {"generate_mfu": "decoding is priced by its roofline now (hbm_bytes_per_s, decode_efficiency)",
           "generate_engine": "decoding is priced by its roofline now"}  # fmt: skip


@dataclass(frozen=True)
class Calibration:
    gpu: str = GPUS["h100"]["name"]
    memory_bytes: int = GPUS["h100"]["memory_bytes"]  # per GPU
    peak_flops: float = GPUS["h100"]["peak_flops"]  # dense bf16, per GPU
    train_mfu: float = 0.238  # measured at 1.5B on an H100, with Liger (above)
    # measured per model width by pacs bench gpu ({hidden size: MFU}); a model is priced at the nearest width's,
    # and at train_mfu where there is none
    train_mfu_by_width: dict = dataclasses.field(default_factory=dict, hash=False)
    hbm_bytes_per_s: float = GPUS["h100"]["hbm_bytes_per_s"]  # per GPU (data sheet, or pacs bench gpu)
    decode_efficiency: float = 0.7  # share of the decoding roofline reached (assumed)
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

    def __post_init__(self):
        if not 0 <= self.memory_headroom < 1:
            raise ValueError(f"calibration: memory_headroom must be in [0, 1), got {self.memory_headroom}")

    def mfu_at(self, width: int) -> float:
        """The update's MFU for a model of hidden size ``width``: the measured width nearest to it, or
        ``train_mfu``."""
        if not self.train_mfu_by_width:
            return self.train_mfu
        nearest = min(self.train_mfu_by_width, key=lambda w: (abs(int(w) - width), int(w)))
        return self.train_mfu_by_width[nearest]


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
        return Calibration(**{k: v for k, v in data.items() if k in known})
    if gpu is None:
        return Calibration()
    if gpu not in GPUS:
        raise ValueError(f"plan.gpu: {gpu!r} is not one of {sorted(GPUS)}")
    spec = GPUS[gpu]
    return Calibration(gpu=spec["name"], memory_bytes=spec["memory_bytes"], peak_flops=spec["peak_flops"],
                       hbm_bytes_per_s=spec["hbm_bytes_per_s"], max_num_seqs=spec["max_num_seqs"])
