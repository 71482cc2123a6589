"""The largest micro-batches a run builds, for what measures its memory: the preflight (its last update,
``pacs.train.loop.worst_case``) and the plan traced on fake tensors (``pacs.bench.traced``).

A token budget bounds the positions of a micro-batch (``pacs.train.update.packing.cost``). The preflight samples
every response to ``rollout.max_response_length``, so each of its groups costs the budget's floor (one group at
the maximum lengths, ``pacs.plan.fit``), and a budget between one and two floors packs one group per micro-batch:
up to half the budget below what a run's mixed lengths pack, and that much activation memory never measured.
Here one rank's share of a mini-batch holds as many groups at the maximum lengths as the budget takes, and, packed,
one more group whose responses fill the rest (padded rows: one more group, every group's responses as long as the
budget allows); every prompt at ``max_prompt_length``. Its first micro-batch is then the largest the run can build,
the budget itself within a group's rounding, unless a rank's whole share of a mini-batch at the maximum lengths is
smaller (the budget's cap). Where a run splits groups above the budget (``pacs.train.update.packing``), a budget
below one group gets one group whose first part fills it.
"""

import torch

from pacs.rollout import Completion
from pacs.tensors.batch import Batch, rollout_batch
from pacs.train.update.packing import lengths, micro_cost, pack


def worst_lengths(budget: int, prompt: int, response: int, n: int, layout: int | None, groups: int,
                  split: bool = False) -> list[int]:  # fmt: skip
    """Each group's response length (n responses each, to prompts of ``prompt`` tokens) in a rank's share of a
    mini-batch of at most ``groups`` groups whose micro-batches by ``budget`` include the largest the run builds
    (module docstring); ``layout``: the packed layout's group size (``pacs.train.update.minibatch.pack_group``;
    None: padded rows); ``split``: the run's passes split a group above the budget into parts of consecutive rows,
    so one group whose first rows fill the budget (each as long as that allows)."""
    base = prompt if layout and layout > 1 else n * prompt
    full = base + n * response
    if budget <= full and split:
        shared = prompt if layout and layout > 1 else 0  # a part's prompt once, or each row its own
        rows = min(n, -(-(budget - shared) // (response + prompt - shared)))
        return [max(1, min(response, (budget - shared) // rows - (prompt - shared)))]
    if budget <= full:  # a group above the budget runs alone: one at the maximum lengths
        return [response]
    whole = min(groups, budget // full)
    if whole == groups:
        return [response] * whole
    if layout:  # one more group, its responses filling the rest of the budget
        rest = (budget - whole * full - base) // n
        return [response] * whole + ([min(rest, response)] if rest >= 1 else [])
    even = budget // ((whole + 1) * n) - prompt  # padded: every row as long as the longest, so all alike
    return [min(even, response)] * (whole + 1) if even >= 1 else [response] * whole


def worst_batch(response_lengths: list[int], prompt: int, n: int, vocab: int, seed: int) -> Batch:
    """A rank's rollout batch of random tokens (``pacs.tensors.batch.rollout_batch``): one prompt of ``prompt``
    tokens per group, n responses of its length each, stopped by length."""
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, vocab, (prompt,), generator=g).tolist() for _ in response_lengths]
    groups = [[Completion(torch.randint(1, vocab, (length,), generator=g).tolist(), "", "length") for _ in range(n)]
              for length in response_lengths]  # fmt: skip
    return rollout_batch(prompts, groups, 0)


def largest_micro_batch(batch: Batch, n: int, budget: int, layout: int | None, split: bool = False) -> int:
    """The positions of the largest micro-batch ``budget`` packs ``batch``'s groups into (first-fit, as the
    trainer packs them; with ``split``, a group above the budget in parts)."""
    prompt, response = lengths(batch)
    plan = pack(list(range(len(prompt) // n)), prompt, response, n, budget, layout, split)
    return max(micro_cost(m, prompt, response, n, layout) for m in plan)
