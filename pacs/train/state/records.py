"""What a run records: per-step statistics over all ranks, held-out accuracy, and its directory's config."""

import json
import shutil
from pathlib import Path

import torch

from pacs.config import config_changes, pin_config, to_dict
from pacs.eval.greedy import greedy_accuracy
from pacs.io import atomic_write_text
from pacs.ranks.distributed import DistEnv, all_reduce
from pacs.tensors.batch import Batch
from pacs.train.settings.config import RunConfig
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


# keys that change which files a run keeps or when a job stops, never what it computes
NO_RESULT_KEYS = ("checkpoint.keep_resumable", "checkpoint.keep_weights", "checkpoint.stop_margin")


def check_run_dir(out: Path, config: RunConfig, restart_on_change: bool = False) -> None:
    """A run directory belongs to one config: resuming under a changed one (``NO_RESULT_KEYS`` aside) is an
    error naming the keys, or with ``restart_on_change`` (what a workflow rerun wants) the old run is deleted
    first."""
    if restart_on_change and config_changes(out / "config.yaml", to_dict(config), NO_RESULT_KEYS):
        for child in out.iterdir():
            if child.name not in ("launches.jsonl", "logs"):  # what the launcher of this attempt wrote
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    pin_config(out / "config.yaml", to_dict(config), "a run", NO_RESULT_KEYS)


def truncate_metrics(path: Path, last_step: int) -> None:
    """Forget what a killed run logged after its last checkpoint: those steps are redone."""
    if path.exists():
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
        atomic_write_text(path, "".join(ln + "\n" for ln in lines if json.loads(ln)["step"] <= last_step))
