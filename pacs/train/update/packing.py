"""Micro-batches: which rows each forward/backward takes, by a fixed number of prompts or by a token budget.

A micro-batch is a set of whole groups (rows ``g * n .. g * n + n - 1``), or one part of a group: a plan lists
group indices, and a part's rows. A group whose cost is above the budget is split into parts (consecutive rows,
as many as fit, each at least one; each part's prompt once where the layout shares it) where the pass allows it
(``split``): every no-grad pass, and an update whose loss treats rows apart (GRPO's and PPO's; not PACS's, whose
scores are relative within a group: ``Algorithm.whole_groups``). The step's math is unchanged: each row's loss
and its weight in the mini-batch are the same in whichever micro-batch it runs.

A micro-batch's cost is the positions the decoder computes: padded (after ``trimmed``), rows × (longest
prompt + longest response) in it; packed into one sequence (``trainer.pack_sequences``), its rows' own
tokens, each group's prompt once where the layout shares it (``trainer.share_prompt``: ``layout`` is the packed
layout's group size, ``pacs.train.update.minibatch.pack_group``). A token budget is then a bound on the positions of a
micro-batch, what its activations grow with (``pacs.plan.memory``).

With ``trainer.max_tokens_per_micro_batch`` the groups of each global mini-batch are dealt to ranks
longest first, each to the rank with the fewest tokens so far, then packed first-fit-decreasing into
micro-batches up to the budget (a group above the budget alone gets its own, or its parts theirs). Every rank
must run the same number of forward/backward passes (FSDP all-gathers inside each), so a rank with fewer splits
its largest micro-batches, and at last repeats a group (a row where groups are split) with weight 0
(``Micro.scale``).
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from pacs.ranks.distributed import DistEnv, all_gather_rows, all_reduce
from pacs.tensors.batch import SEQUENCE_KEYS, Batch, pad_columns


@dataclass(frozen=True)
class Micro:
    groups: list[int]  # group indices into the batch the plan is for
    scale: float = 1.0  # 0: a filler pass that only keeps ranks in step
    part: tuple[int, int] | None = None  # rows [a, b) of its one group; None: its groups whole

    def rows(self, n: int) -> Tensor:
        if self.part is not None:
            return torch.tensor([self.groups[0] * n + j for j in range(*self.part)])
        return torch.tensor([g * n + j for g in self.groups for j in range(n)])

    def group_size(self, n: int) -> int:
        """Rows per prompt in it: n, or a part's rows (what a packed layout shares a prompt over)."""
        return n if self.part is None else self.part[1] - self.part[0]


def lengths(batch: Batch) -> tuple[Tensor, Tensor]:
    """Prompt and response tokens of each row (B,), (B,)."""
    response = batch["response_mask"].sum(-1)
    return batch["attention_mask"].sum(-1) - response, response


def cost(groups: list[int], prompt: Tensor, response: Tensor, n: int, layout: int | None = None) -> int:
    """Positions the micro-batch of these groups computes: padding included (``layout`` None), or packed without
    it, each prompt once per ``layout`` rows (n: a group's prompt once; 1: every row's)."""
    if layout:
        prompts = prompt.view(-1, n)[groups]
        return int((prompts[:, 0].sum() if layout > 1 else prompts.sum()) + response.view(-1, n)[groups].sum())
    return len(groups) * n * int(prompt.view(-1, n)[groups].max() + response.view(-1, n)[groups].max())


def part_cost(g: int, a: int, b: int, prompt: Tensor, response: Tensor, n: int, layout: int | None = None) -> int:
    """Positions of rows [a, b) of group ``g`` as one micro-batch (``cost``'s rules: its prompt once when shared)."""
    prompts, responses = prompt.view(-1, n)[g, a:b], response.view(-1, n)[g, a:b]
    if layout:
        return int((prompts[0] if layout > 1 else prompts.sum()) + responses.sum())
    return (b - a) * int(prompts.max() + responses.max())


def micro_cost(m: Micro, prompt: Tensor, response: Tensor, n: int, layout: int | None = None) -> int:
    """Positions of micro-batch ``m``: its groups' (``cost``), or its part's (``part_cost``)."""
    if m.part is not None:
        return part_cost(m.groups[0], *m.part, prompt, response, n, layout)
    return cost(m.groups, prompt, response, n, layout)


def parts(g: int, prompt: Tensor, response: Tensor, n: int, budget: int, layout: int | None = None) -> list[Micro]:
    """Group ``g`` in parts of consecutive rows, each as many as fit the budget (at least one)."""
    out, a = [], 0
    while a < n:
        b = a + 1
        while b < n and part_cost(g, a, b + 1, prompt, response, n, layout) <= budget:
            b += 1
        out.append(Micro([g], part=(a, b)))
        a = b
    return out


def fixed_plan(num_groups: int, groups_per_micro: int) -> list[Micro]:
    return [
        Micro(list(range(s, min(s + groups_per_micro, num_groups)))) for s in range(0, num_groups, groups_per_micro)
    ]


def pack(groups: list[int], prompt: Tensor, response: Tensor, n: int, budget: int,
         layout: int | None = None, split: bool = False) -> list[Micro]:  # fmt: skip
    """First-fit decreasing of whole groups into micro-batches of at most ``budget`` tokens (``cost``); with
    ``split``, a group above the budget in parts of its own (``parts``)."""
    order = sorted(groups, key=lambda g: (-cost([g], prompt, response, n, layout), g))
    bins: list[list[int]] = []
    split_parts: list[Micro] = []
    for g in order:
        if split and cost([g], prompt, response, n, layout) > budget:
            split_parts += parts(g, prompt, response, n, budget, layout)
            continue
        for b in bins:
            if cost(b + [g], prompt, response, n, layout) <= budget:
                b.append(g)
                break
        else:
            bins.append([g])
    return split_parts + [Micro(sorted(b)) for b in bins]


def deal(num_groups: int, prompt: Tensor, response: Tensor, n: int, world_size: int,
         layout: int | None = None) -> list[list[int]]:
    """Groups per rank, balancing tokens: longest first, each to the rank with the fewest so far."""
    load, out = [0] * world_size, [[] for _ in range(world_size)]
    for g in sorted(range(num_groups), key=lambda g: (-cost([g], prompt, response, n, layout), g)):
        r = min(range(world_size), key=lambda r: (load[r], r))
        out[r].append(g)
        load[r] += cost([g], prompt, response, n, layout)
    return [sorted(x) for x in out]


def equalize(plan: list[Micro], count: int, prompt: Tensor, response: Tensor, n: int,
             layout: int | None = None, split: bool = False) -> list[Micro]:  # fmt: skip
    """``count`` micro-batches: split the costliest ones that hold several groups, then add weight-0 fillers (a
    group's first row alone where groups are split: a whole group may be over the budget)."""
    plan = list(plan)
    while len(plan) < count:
        splittable = [m for m in plan if len(m.groups) > 1]
        if not splittable:
            break
        m = max(splittable, key=lambda m: cost(m.groups, prompt, response, n, layout))
        plan.remove(m)
        half = len(m.groups) // 2
        plan += [Micro(m.groups[:half]), Micro(m.groups[half:])]
    smallest = min(range(len(prompt) // n), key=lambda g: cost([g], prompt, response, n, layout))
    return plan + [Micro([smallest], 0.0, (0, 1) if split else None)] * (count - len(plan))


def budget_plan(batch: Batch, n: int, budget: int, env: DistEnv, layout: int | None = None,
                split: bool = False) -> list[Micro]:  # fmt: skip
    """This rank's micro-batches of its own groups, as many as every other rank's."""
    prompt, response = lengths(batch)
    plan = pack(list(range(len(prompt) // n)), prompt, response, n, budget, layout, split)
    count = int(all_reduce(torch.tensor(len(plan)), env, "max"))
    return equalize(plan, count, prompt, response, n, layout, split)


def gather_batch(batch: Batch, env: DistEnv) -> Batch:
    """Every rank's rows in rank order, aligned: sequences left-padded to the longest prompt width, (B, T)
    tensors right-padded to the longest response width."""
    if not env.active:
        return batch
    width_t = batch["response_mask"].shape[1]
    width_p = batch["input_ids"].shape[1] - width_t
    max_p = int(all_reduce(torch.tensor(width_p), env, "max"))
    max_t = int(all_reduce(torch.tensor(width_t), env, "max"))
    out = {}
    for k, v in batch.items():
        if k in SEQUENCE_KEYS:  # prompt | response: pad left by the prompt gap, right by the response gap
            v = torch.nn.functional.pad(v, (max_p - width_p, max_t - width_t), value=0)
        elif v.dim() == 2:
            v = pad_columns(v, max_t)
        out[k] = all_gather_rows(v, env)
    return out


def balanced_plan(batch: Batch, n: int, budget: int, env: DistEnv, layout: int | None = None,
                  split: bool = False) -> tuple[Batch, list[Micro]]:  # fmt: skip
    """The global mini-batch (gathered) and this rank's micro-batches of it: groups dealt to ranks by
    tokens, packed by ``budget``, as many micro-batches on every rank."""
    whole = gather_batch(batch, env)
    prompt, response = lengths(whole)
    mine = deal(len(prompt) // n, prompt, response, n, env.world_size, layout)[env.rank]
    plan = pack(mine, prompt, response, n, budget, layout, split) if mine else []
    count = int(all_reduce(torch.tensor(len(plan)), env, "max"))
    return whole, equalize(plan, count, prompt, response, n, layout, split)


def padded_tokens(plan: list[Micro], prompt: Tensor, response: Tensor, n: int) -> int:
    return sum(cost(m.groups, prompt, response, n) for m in plan)
