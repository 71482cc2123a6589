"""Rollouts as padded tensors, split into whole groups, and the forward passes that score them.

Layout (verl's): row i = prompt i // n, sample i % n. ``input_ids`` (B, P + T) holds the prompt
left-padded to P and the response right-padded to T; every per-token tensor is (B, T) over the
response. Rows of one group are contiguous and slices are always whole groups, so nothing can
reorder a group across micro-batches or ranks.
"""

from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import Tensor

from pacs.rollout import Completion

Batch = dict[str, Tensor]
SEQUENCE_KEYS = ("input_ids", "attention_mask", "position_ids")  # (B, P + T); the rest are (B, ·)
PACKED = "packed"  # a micro-batch's PackedRows on the device, beside its tensors (pacs.train.update.minibatch)


def rollout_batch(prompts: list[list[int]], completions: list[list[Completion]], pad_token_id: int) -> Batch:
    rows = [(p, c.token_ids) for p, group in zip(prompts, completions, strict=True) for c in group]
    width_p = max(len(p) for p, _ in rows)
    width_t = max(max((len(r) for _, r in rows), default=1), 1)
    input_ids = torch.full((len(rows), width_p + width_t), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for i, (p, r) in enumerate(rows):
        input_ids[i, width_p - len(p) : width_p + len(r)] = torch.tensor(list(p) + list(r))
        attention_mask[i, width_p - len(p) : width_p + len(r)] = 1
    # positions count real tokens only, as generate did with the left-padded prompt
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "response_mask": attention_mask[:, width_p:].bool(),  # (B, T)
    }


def add_value_states(batch: Batch, max_response_length: int) -> Batch:
    """PPO's critic states as verl's (``dp_critic.py``: the mask ``attention_mask[:, -T-1:-1]`` over
    responses padded to ``max_response_length``): the state before each response token and, where the
    response stopped before ``max_response_length``, the state after its last token, whose return is 0.
    Adds ``value_mask`` (B, T), one column wider (padding) when the longest such response fills the width."""
    mask = batch["response_mask"]
    length = mask.sum(-1)
    states = length + (length < max_response_length).long()
    extra = max(int(states.max()), mask.shape[1]) - mask.shape[1]
    if extra:
        for k, v in batch.items():
            if k in SEQUENCE_KEYS or v.dim() == 2:
                batch[k] = F.pad(v, (0, extra))
    batch["value_mask"] = torch.arange(batch["response_mask"].shape[1]) < states[:, None]
    return batch


def group_slices(batch: Batch, rows: int, n: int) -> Iterator[Batch]:
    """Consecutive slices of ``rows`` rows; ``rows`` must be a whole number of groups of n."""
    total = batch["response_mask"].shape[0]
    if rows % n or total % rows:
        raise ValueError(f"cannot split {total} rows into slices of {rows}: groups of {n} must stay whole")
    for start in range(0, total, rows):
        yield {k: v[start : start + rows] for k, v in batch.items()}


def trimmed(batch: Batch) -> Batch:
    """Drop the columns that are padding in every row: less compute, the same values."""
    width_p = batch["input_ids"].shape[1] - batch["response_mask"].shape[1]
    first = int(batch["attention_mask"][:, :width_p].argmax(-1).min()) if width_p else 0
    last = max(int(batch.get("value_mask", batch["response_mask"]).sum(-1).max()), 1)  # the critic's states too
    out = {}
    for k, v in batch.items():
        if k in SEQUENCE_KEYS:
            out[k] = v[:, first : width_p + last]
        elif v.dim() == 2:
            out[k] = v[:, :last]
        else:
            out[k] = v
    return out


def token_logprobs(
    scorer, batch: Batch, temperature: float, entropy: str | None = None, group_size: int = 1
) -> tuple[Tensor, Tensor | None]:
    """log π(o_t | q, o_<t) (B, T) of the response tokens, and the policy's entropy (B, T) if asked
    ("no_grad" or "grad"); 0 at padding. ``scorer`` is a ``pacs.tensors.logprobs.PolicyScorer``, wrapped or not;
    ``group_size``: the rows come in groups of this many with one prompt (the scorer may share it).

    Logits are divided by the sampling temperature, as verl does, so that π is the sampled distribution.
    """
    return scorer(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                  position_ids=batch["position_ids"], response_mask=batch["response_mask"],
                  temperature=temperature, entropy=entropy, group_size=group_size,
                  packed=batch.get(PACKED))  # fmt: skip


def token_values(critic, batch: Batch, pack: bool = False, group_size: int = 1) -> Tensor:
    """V(q, o_<t) (B, T): the critic's value of the state before each response token, and after the last one
    where ``value_mask`` has that state (``add_value_states``). ``pack``: the rows as one sequence without
    padding (``pacs.tensors.varlen``; each group's prompt once with ``group_size`` > 1), 0 at padding."""
    mask = batch["response_mask"]
    if pack:
        packed = batch.get(PACKED)
        if packed is None:  # read from the masks (waits for the device)
            from pacs.tensors.varlen import PackedRows  # transformers: here, for the preflight's checkpoint check

            value_mask = batch["value_mask"].cpu() if "value_mask" in batch else None
            packed = PackedRows.of(*(batch[k].cpu() for k in ("input_ids", "attention_mask", "response_mask")),
                                   group_size, value_mask=value_mask).to(mask.device)  # fmt: skip
        hidden = critic(**packed.inputs(batch["input_ids"], batch["position_ids"])).logits[0, :, 0]
        values = hidden[packed.state_hidden_index]
        return values.new_zeros(mask.numel()).index_copy_(0, packed.state_index, values).view(mask.shape).float()
    values = critic(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], position_ids=batch["position_ids"]
    ).logits
    # the output at position j sees tokens up to j: the response's states start at the prompt's last token
    return values[:, -mask.shape[1] - 1 : -1].squeeze(-1).float()


def pad_columns(x: Tensor, width: int, value: float = 0.0) -> Tensor:
    return F.pad(x, (0, width - x.shape[1]), value=value) if x.dim() == 2 and x.shape[1] < width else x
