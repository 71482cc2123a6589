"""What a step's sampling shows, over all ranks: reward, verdict, group and length statistics of its rollouts,
and the greedy accuracy on held-out prompts."""

import torch

from pacs.eval.greedy import greedy_accuracy
from pacs.ranks.distributed import DistEnv, all_reduce
from pacs.tensors.batch import Batch
from pacs.verify import PASSING, status_counts
from pacs.verify.sandbox import LEVELS


def verifier_counts(verdicts, task: str, env: DistEnv) -> dict[str, int]:
    """Over all ranks, the verdicts of each status of the task's verifier (every status, zeros included) and,
    for code, the programs run at each isolation level (``isolation/<level>``; none for those never run)."""
    counts = status_counts(verdicts, task)
    if task == "code":
        ran = [v.isolation for v in verdicts]
        counts.update({f"isolation/{level}": ran.count(level) for level in LEVELS})
    summed = all_reduce(torch.tensor([float(c) for c in counts.values()]), env).tolist()
    return {k: int(c) for k, c in zip(counts, summed, strict=True)}


def rollout_stats(batch: Batch, completions, verdicts, task: str, n: int, env: DistEnv) -> dict:
    """Reward, verdict, group and length statistics over all ranks."""
    rewards = batch["rewards"].view(-1, n)
    lengths = batch["response_mask"].sum(-1).float()
    truncated = sum(c.finish_reason == "length" for group in completions for c in group)
    sums = all_reduce(
        torch.tensor(
            [
                float(rewards.sum()),
                float(rewards.numel()),
                float((rewards.min(-1).values > 0.5).sum()),
                float((rewards.max(-1).values < 0.5).sum()),
                float(rewards.shape[0]),
                float(lengths.sum()),
                float(truncated),
                float(batch["attention_mask"].sum()),
            ]
        ),
        env,
    ).tolist()
    counts = verifier_counts(verdicts, task, env)
    return {
        "reward/mean": sums[0] / sums[1],
        "accuracy": counts[PASSING[task]] / sums[1],  # equal to the reward while rewards are 0/1
        "groups/all_correct_frac": sums[2] / sums[4],
        "groups/all_wrong_frac": sums[3] / sums[4],
        "response_length/mean": sums[5] / sums[1],
        "response_length/max": float(all_reduce(lengths.max(), env, "max")),
        "response_length/truncated_frac": sums[6] / sums[1],
        **{f"verifier/{k}": c for k, c in counts.items()},
        "rollout/response_tokens": int(sums[5]),  # over every rank
        "tokens": sums[7],
    }


def heldout_accuracy(engine, token_ids: list, golds: list, score, max_new_tokens: int, env: DistEnv,
                     task: str = "math") -> dict:  # fmt: skip
    """Greedy accuracy on held-out prompts, every rank taking every world_size-th one, scored as ``task``."""
    mine = range(env.rank, len(token_ids), env.world_size)
    result = greedy_accuracy(engine, [token_ids[i] for i in mine], [golds[i] for i in mine], score, max_new_tokens,
                             task)  # fmt: skip
    correct, total = all_reduce(torch.tensor([float(result["correct"]), float(result["total"])]), env).tolist()
    return {"eval/accuracy": correct / total, "eval/problems": int(total)}
