"""Data parallelism over ranks started by torchrun: whole groups per rank, gradients averaged.

``trainer.strategy`` picks how a model is spread over ranks: ``ddp`` replicates it (weights, gradients
and optimizer state on every rank); ``fsdp`` shards all three with FSDP2 (``fully_shard`` per decoder
layer, then the root), optionally computing in bfloat16 over fp32 master weights. One process with ``ddp``
touches nothing of torch.distributed, so ``pacs train`` runs without torchrun; one process with ``fsdp``
joins a process group of its own, so that it computes in ``trainer.compute_dtype`` as many ranks would.
"""

from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

from pacs.tensors.batch import pad_columns


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    world_size: int = 1
    device: str = "cpu"  # where models and micro-batches go: cuda:LOCAL_RANK on a GPU node
    local_size: int = 1  # ranks on this node (torchrun's LOCAL_WORLD_SIZE)
    # beside generator ranks (rollout.generator_ranks), this rank's place among them
    # (pacs.train.sampling.link.Role)
    role: object = field(default=None, compare=False, repr=False)

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def init_distributed(rank: int, world_size: int, local_rank: int = 0, fsdp: bool = False, local_size: int = 1,
                     store=None) -> DistEnv:  # fmt: skip
    """Join the process group torchrun set up (with ``fsdp`` and one process, make one of its own): gloo on
    CPU; on GPU nccl for CUDA tensors and gloo for the CPU tensors the loop reduces (counts, metrics).
    ``store``: the group's own (the trainers' beside generator ranks), not the whole job's."""
    device = "cpu"
    if torch.cuda.is_available():
        device = f"cuda:{local_rank}"
        torch.cuda.set_device(device)
    if (world_size > 1 or fsdp) and not dist.is_initialized():
        backend = "cpu:gloo,cuda:nccl" if device != "cpu" else "gloo"
        alone = {"store": store if store is not None else dist.HashStore()} if world_size == 1 or store else {}
        dist.init_process_group(backend, rank=rank, world_size=world_size, **alone)
    return DistEnv(rank, world_size, device, local_size)


def wrap(model: torch.nn.Module, env: DistEnv, strategy: str = "ddp", compute_dtype: torch.dtype | None = None):
    """The model on this rank's device, spread by ``strategy`` when there are several ranks: DDP (rank 0's
    weights broadcast, gradients all-reduced) or FSDP2 (each rank keeps 1/world of every parameter, its
    gradient and its optimizer state; layers are all-gathered for their forward and backward, gradients
    reduce-scattered in fp32). ``compute_dtype`` (fsdp only) casts the gathered parameters for compute.
    One process is left unwrapped unless it has joined a process group (of one: ``pacs bench gpu``)."""
    if strategy == "ddp" or not dist.is_initialized():  # fsdp on one rank only inside a 1-rank group
        model = model.to(env.device)
        if not env.active:
            return model
        return torch.nn.parallel.DistributedDataParallel(
            model, device_ids=[env.device] if "cuda" in env.device else None
        )
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(env.device.split(":")[0], (env.world_size,))
    policy = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    layers = set(getattr(model, "_no_split_modules", None) or ())
    if not layers:
        raise ValueError(f"{type(model).__name__} names no decoder layer class (_no_split_modules) to shard")
    for module in model.modules():
        if type(module).__name__ in layers:
            fully_shard(module, mesh=mesh, mp_policy=policy)
    # the root too is resharded after each forward: left gathered (FSDP2's default for the root), its
    # module.parameters() would be the gathered copies, which no gradient or optimizer step reaches
    return fully_shard(model, mesh=mesh, mp_policy=policy, reshard_after_forward=True)


@contextmanager
def gathered(module: torch.nn.Module) -> Iterator[None]:
    """Every FSDP2 unit of ``module`` all-gathered (and cast to its compute dtype) once, kept whole through every
    forward inside, resharded at the end. transformers' ``generate`` through a sharded policy then issues one
    all-gather per unit per call instead of one per unit per decoded token, and no collective while it decodes:
    ranks may decode different numbers of tokens in different numbers of calls. A collective itself (every rank
    enters it, in the same order); the whole model in the compute dtype is alive inside. Units go back to
    resharding after each forward, as ``wrap`` made them. A module without FSDP2 units passes through."""
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in module.modules() if isinstance(m, FSDPModule)]
    for unit in units:
        unit.set_reshard_after_forward(False, recurse=False)
    for handle in [unit.unshard(async_op=True) for unit in units]:
        handle.wait()
    try:
        yield
    finally:
        for unit in units:
            unit.reshard()
            unit.set_reshard_after_forward(True, recurse=False)


def full_tensors(model: torch.nn.Module):
    """``(name, full tensor)`` of the model's state dict, one tensor at a time: an FSDP shard is all-gathered
    (a collective: every rank must iterate), a plain tensor is itself. Tied weights appear under both names."""
    from torch.distributed.tensor import DTensor

    for name, value in model.state_dict().items():
        yield name, value.full_tensor() if isinstance(value, DTensor) else value


def total_norm(norm: Tensor) -> Tensor:
    """``clip_grad_norm_``'s result as a plain tensor (under FSDP it is a DTensor)."""
    return norm.full_tensor() if hasattr(norm, "full_tensor") else norm


def no_sync(model: torch.nn.Module, sync: bool):
    """Skip DDP's gradient all-reduce on every micro-batch but a mini-batch's last."""
    if sync or not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        return nullcontext()
    return model.no_sync()


def all_reduce(x: Tensor, env: DistEnv, op: str = "sum") -> Tensor:
    if env.active:
        x = x.clone()
        dist.all_reduce(x, op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op])
    return x


def all_gather_rows(x: Tensor, env: DistEnv) -> Tensor:
    """Concatenate every rank's rows in rank order; (B, T) tensors are right-padded to the widest T."""
    if not env.active:
        return x
    if x.dtype == torch.bool:  # gloo gathers no bools
        return all_gather_rows(x.to(torch.uint8), env).bool()
    if x.dim() == 2:
        width = int(all_reduce(torch.tensor(x.shape[1]), env, "max"))
        x = pad_columns(x, width)
    parts = [torch.empty_like(x) for _ in range(env.world_size)]
    dist.all_gather(parts, x.contiguous())
    return torch.cat(parts)


def gather_objects(obj, env: DistEnv) -> list:
    """Every rank's ``obj`` (picklable), in rank order."""
    if not env.active:
        return [obj]
    out = [None] * env.world_size
    dist.all_gather_object(out, obj)
    return out


def barrier(env: DistEnv) -> None:
    if env.active:
        dist.barrier()
