"""The process groups of a job with generator ranks (``rollout.generator_ranks`` g, ``pacs.train.sampling.generators``),
from the rendezvous torchrun made, and each rank's place among them (``join``):

- **the trainers' group** (the default group of the trainer ranks, 0 … T − 1): FSDP2 or DDP, every collective of
  the loop. A generator is not a member: it cannot issue a collective on it.
- **the link** (trainer 0 and the generators; link rank 0 is trainer 0, 1 + j generator j): gloo, for the
  rollouts, the push headers and the fingerprints, in two channels whose messages each arrive in order; on GPUs
  a second, NCCL, link for the weights.
- a generator's vLLM makes a world of its own, of one process.
"""

import datetime
import os
import pickle
from dataclasses import dataclass, replace

import torch
import torch.distributed as dist

from pacs.ranks.distributed import DistEnv, init_distributed
from pacs.train.settings.config import RunConfig

LINK_TIMEOUT = datetime.timedelta(hours=6)  # a trainer waits on the link for a generator's whole batch
CONTROL, BATCHES = 0, 1  # the link's channels: starts, checks, pushes and replies; the generators' batches


@dataclass
class Link:
    """Trainer 0 and the generators (module docstring): link rank 0 is trainer 0, 1 + j generator j."""

    control: object  # ProcessGroupGloo
    weights: object  # ProcessGroupNCCL on GPUs, else ``control``
    device: str

    def send(self, obj, dst: int, channel: int = CONTROL, wait: bool = True) -> list:
        """Send a picklable object on ``channel`` (messages of a channel arrive in order). ``wait`` False: returns
        at once what to ``finish`` later (the sent tensors stay referenced there until then)."""
        data = torch.frombuffer(bytearray(pickle.dumps(obj)), dtype=torch.uint8).clone()
        size = torch.tensor([data.numel()], dtype=torch.int64)
        works = [(self.control.send([tensor], dst, 2 * channel + i), tensor) for i, tensor in enumerate((size, data))]
        if wait:
            finish(works)
            return []
        return works

    def recv(self, src: int, channel: int = CONTROL):
        size = torch.zeros(1, dtype=torch.int64)
        self.control.recv([size], src, 2 * channel).wait()
        data = torch.empty(int(size), dtype=torch.uint8)
        self.control.recv([data], src, 2 * channel + 1).wait()
        return pickle.loads(data.numpy().tobytes())

    def broadcast(self, tensor: torch.Tensor) -> None:
        """Link rank 0's ``tensor`` into every generator's."""
        options = dist.BroadcastOptions()
        options.rootRank = 0
        self.weights.broadcast([tensor], options).wait()


def finish(works: list) -> None:
    for work, _ in works:
        work.wait()


@dataclass(frozen=True)
class Role:
    generator: int | None  # this rank's generator index j, None on a trainer
    generators: int
    link: Link | None  # trainer 0's and every generator's


def join(config: RunConfig) -> DistEnv:
    """This rank's place (``DistEnv.role``): a trainer's over the trainers' group (the default one), or a
    generator's (index j of g, in no process group of the job's but the link)."""
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    g = config.rollout.generator_ranks
    local_rank, local_size = int(os.environ.get("LOCAL_RANK", 0)), int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    trainers = world - g
    if trainers < 1:
        raise ValueError(f"rollout.generator_ranks {g} needs at least {g + 1} ranks (one to train); this job has "
                         f"{world}: start it with more (--nproc-per-node, --nnodes)")  # fmt: skip
    store, _, _ = next(dist.rendezvous("env://"))
    if rank < trainers:
        env = init_distributed(rank, trainers, local_rank, fsdp=config.trainer.strategy == "fsdp",
                               local_size=local_size, store=dist.PrefixStore("trainers", store))  # fmt: skip
        device = env.device
    else:  # a generator sees its own GPU alone, before CUDA starts: vLLM's engine of one process takes cuda:0
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        os.environ["CUDA_VISIBLE_DEVICES"] = visible.split(",")[local_rank] if visible else str(local_rank)
        env, device = DistEnv(0, 1, "cpu", local_size), "cpu"
        if torch.cuda.is_available():
            device = "cuda:0"
            torch.cuda.set_device(device)
    link = None
    if rank == 0 or rank >= trainers:
        at = 0 if rank == 0 else rank - trainers + 1
        control = dist.ProcessGroupGloo(dist.PrefixStore("link", store), at, g + 1, LINK_TIMEOUT)
        weights = control
        if device != "cpu":
            options = dist.ProcessGroupNCCL.Options()
            options._timeout = LINK_TIMEOUT
            weights = dist.ProcessGroupNCCL(dist.PrefixStore("link-weights", store), at, g + 1, options)
        link = Link(control, weights, device)
    return replace(env, device=device, role=Role(rank - trainers if rank >= trainers else None, g, link))
