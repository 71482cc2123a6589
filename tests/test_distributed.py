"""World size 2 (gloo, two processes) makes the same update as world size 1 on the same global batch."""

import socket

import pytest
import torch
import torch.multiprocessing as mp
from helpers import ddp_worker, fixed_batch, one_update

from pacs.train.distributed import DistEnv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    "algorithm, options",
    [("pacs", {}), ("grpo", {"loss_agg_mode": "seq-mean-token-sum-norm", "max_response_length": 12}), ("ppo", {})],
)
def test_two_ranks_update_like_one(raw_tiny_model, toy_data, tmp_path, algorithm, options):
    """DDP, FSDP2 and FSDP2 with token-budget micro-batches on two ranks against one process, unsharded."""
    out, batch_file = tmp_path / "rank0.pt", tmp_path / "batch.pt"
    batch = fixed_batch(raw_tiny_model, toy_data)
    torch.save(batch, batch_file)
    args = (2, free_port(), raw_tiny_model, batch_file, algorithm, options, out)
    mp.spawn(ddp_worker, args=args, nprocs=2, join=True)
    two = torch.load(out, weights_only=False)
    policy, critic, metrics = one_update(raw_tiny_model, batch, algorithm, options, DistEnv(), 1, 4)
    for strategy, result in two.items():
        for name, p in policy.items():
            torch.testing.assert_close(
                result["policy"][name], p, atol=2e-6, rtol=1e-5, msg=lambda m, s=strategy, n=name: f"{s} {n}: {m}"
            )
        if critic is not None:
            for name, p in critic.items():
                torch.testing.assert_close(result["critic"][name], p, atol=2e-6, rtol=1e-5, msg=f"{strategy} critic")
        assert result["metrics"]["loss"] == pytest.approx(metrics["loss"], rel=1e-4, abs=1e-6), strategy
        assert result["metrics"]["grad_norm"] == pytest.approx(metrics["grad_norm"], rel=1e-4), strategy
