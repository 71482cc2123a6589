"""Data parallelism over ranks started by torchrun: whole groups per rank, gradients averaged.

With one process nothing here touches torch.distributed, so ``pacs train`` runs without torchrun.
"""

from contextlib import nullcontext
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import Tensor

from pacs.train.batch import pad_columns


@dataclass(frozen=True)
class DistEnv:
    rank: int = 0
    world_size: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def active(self) -> bool:
        return self.world_size > 1


def init_distributed(rank: int, world_size: int) -> DistEnv:
    """Join the process group torchrun set up (gloo on CPU, nccl on GPU)."""
    if world_size > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", rank=rank, world_size=world_size)
    return DistEnv(rank, world_size)


def wrap(model: torch.nn.Module, env: DistEnv) -> torch.nn.Module:
    """DDP when there are several ranks: it broadcasts rank 0's weights and averages gradients."""
    if not env.active:
        return model
    return torch.nn.parallel.DistributedDataParallel(model)


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if isinstance(model, torch.nn.parallel.DistributedDataParallel) else model


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


def barrier(env: DistEnv) -> None:
    if env.active:
        dist.barrier()
