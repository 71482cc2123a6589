"""A micro-batch as one sequence without padding: rows laid end to end, attention kept within each row.

The padded layout (``pacs.train.batch``) computes every row to the micro-batch's longest prompt and
response; with ragged responses half of those positions can be padding, paid for in every linear layer,
forward, recompute and backward. ``pack_rows`` lays the real tokens of the rows out in one sequence (1, L)
as segments, each with its own positions (0, 1, … as generation saw them):

- without prompt sharing, one segment per row: its prompt and its response, causal;
- with it (rows in groups of n with one prompt), the group's prompt once, then each response as a segment
  that attends to that prompt and causally to itself, as its n samples read one KV cache in generation.

``varlen_attention`` is that attention, registered with transformers as the attention implementation
``pacs_varlen``: one SDPA call per segment (``is_causal``, or a bottom-right-aligned causal bias over the
prompt and the segment), so no mask of (L, L) is built and K/V are never expanded per head; on a GPU these
calls reach the flash or memory-efficient kernels. Called without a ``packed`` layout (generation, a
padded batch) it is transformers' SDPA attention, unchanged.
"""

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.bias import causal_lower_right
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

IMPLEMENTATION = "pacs_varlen"


class PackedRows:
    """Where each row's tokens sit in the packed sequence (a plain object: FSDP passes it through untouched).

    The segments cover the sequence in order: ``sizes`` their lengths, ``context`` for each the index of the
    segment (its group's prompt) it attends to before itself, or None. ``hidden_index`` (N,): for each
    response token, in ``response_mask`` order, the position whose hidden state predicts it.
    """

    def __init__(self, input_ids: Tensor, position_ids: Tensor, sizes: list[int], context: list[int | None],
                 hidden_index: Tensor):  # fmt: skip
        self.input_ids, self.position_ids = input_ids, position_ids  # (1, L)
        self.sizes, self.context, self.hidden_index = sizes, context, hidden_index

    def inputs(self) -> dict:
        """A model's keyword arguments for this sequence: no mask of its own, the layout for the attention."""
        return {"input_ids": self.input_ids, "position_ids": self.position_ids,
                "attention_mask": {"full_attention": None}, "packed": self, "use_cache": False}  # fmt: skip


def pack_rows(input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor, response_mask: Tensor,
              group_size: int = 1) -> PackedRows:  # fmt: skip
    """The real tokens of a padded micro-batch (left-padded prompts, right-padded responses; (B, P + T)) as one
    sequence; with ``group_size`` n > 1 each group's prompt once (rows in groups of n with one prompt)."""
    rows, width = input_ids.shape
    width_p = width - response_mask.shape[1]
    prompt = (attention_mask[:, :width_p].sum(-1)).tolist()
    response = response_mask.sum(-1).tolist()
    n = group_size
    if n > 1 and not (input_ids[:, :width_p].view(-1, n, width_p) == input_ids[::n, None, :width_p]).all():
        raise ValueError(f"prompt sharing needs rows in groups of {n} with one prompt each")
    source, sizes, context, hidden = [], [], [], []  # source: flat indices into the padded (B, P + T) tensors

    def take(row: int, begin: int, length: int, attends: int | None = None) -> int:
        """A segment of ``length`` tokens of ``row`` from column ``begin``; its start in the packed sequence."""
        source.append(torch.arange(row * width + begin, row * width + begin + length))
        sizes.append(length)
        context.append(attends)
        return sum(sizes) - length

    for i in range(rows):
        p, t = prompt[i], response[i]
        if n == 1:  # the row whole: the token at j predicts j + 1, from the prompt's last token on
            start = take(i, width_p - p, p + t)
            hidden.append(torch.arange(start + p - 1, start + p - 1 + t))
            continue
        if i % n == 0:
            prompt_segment, prompt_start = len(sizes), take(i, width_p - p, p)
        if not t:
            continue
        start = take(i, width_p, t, prompt_segment)
        hidden.append(torch.tensor([prompt_start + p - 1]))  # the prompt's last token predicts the first
        hidden.append(torch.arange(start, start + t - 1))
    index = torch.cat(source).to(input_ids.device)
    return PackedRows(input_ids.reshape(-1)[index][None], position_ids.reshape(-1)[index][None], sizes, context,
                      torch.cat(hidden).to(input_ids.device))  # fmt: skip


@torch.compiler.disable
def varlen_attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask,
                     scaling: float | None = None, dropout: float = 0.0, packed: PackedRows | None = None,
                     **kwargs) -> tuple[Tensor, None]:  # fmt: skip
    """Attention over ``packed``'s segments: query (1, heads, L, d), key and value (1, kv_heads, L, d) ->
    (1, L, heads, d). Without ``packed``: transformers' SDPA attention."""
    if packed is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)  # fmt: skip
    gqa = query.shape[1] != key.shape[1]
    # split, not sliced: a slice's backward writes a zero tensor of the whole sequence per segment
    queries, keys, values = (x.split(packed.sizes, 2) for x in (query, key, value))
    out = []
    for q, k, v, context in zip(queries, keys, values, packed.context, strict=True):
        if context is None:
            out.append(F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True, scale=scaling,
                                                      enable_gqa=gqa))  # fmt: skip
            continue
        k, v = torch.cat([keys[context], k], 2), torch.cat([values[context], v], 2)
        bias = causal_lower_right(q.shape[2], k.shape[2])  # every context key, then causal
        out.append(F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout, scale=scaling,
                                                  enable_gqa=gqa))  # fmt: skip
    return torch.cat(out, 2).transpose(1, 2).contiguous(), None


AttentionInterface.register(IMPLEMENTATION, varlen_attention)
AttentionMaskInterface.register(IMPLEMENTATION, sdpa_mask)  # generation and padded batches build SDPA's masks


def check_full_sdpa(model: torch.nn.Module, key: str) -> None:
    """Prompt sharing and packing lay out attention themselves: SDPA over full (not sliding-window) layers;
    else an error naming the trainer ``key`` that asks for it."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    if config._attn_implementation not in ("sdpa", IMPLEMENTATION) or set(layer_types) != {"full_attention"}:
        raise ValueError(
            f"trainer.{key} needs SDPA attention over full (not sliding-window) layers; this model has "
            f"{config._attn_implementation} attention over {sorted(set(layer_types))}: set trainer.{key} false"
        )


def use_varlen_attention(model: torch.nn.Module) -> None:
    """Switch ``model`` (SDPA attention over full, not sliding-window, layers) to ``varlen_attention``."""
    check_full_sdpa(model, "pack_sequences")
    model.set_attn_implementation(IMPLEMENTATION)


def packed_hidden(decoder: torch.nn.Module, packed: PackedRows) -> Tensor:
    """The final hidden states (N, H) that predict the response tokens, in ``response_mask`` order."""
    return decoder(**packed.inputs()).last_hidden_state[0, packed.hidden_index]
