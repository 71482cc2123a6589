"""A micro-batch as one sequence without padding: rows laid end to end, attention kept within each row.

The padded layout (``pacs.tensors.batch``) computes every row to the micro-batch's longest prompt and
response; with ragged responses half of those positions can be padding, paid for in every linear layer,
forward, recompute and backward. ``PackedRows`` lays the real tokens of the rows out in one sequence (1, L)
as segments, each with its own positions (0, 1, … as generation saw them):

- without prompt sharing, one segment per row: its prompt and its response, causal;
- with it (rows in groups of n with one prompt), the group's prompt once, then each response as a segment
  that attends to that prompt and causally to itself, as its n samples read one KV cache in generation.

The layout is built on the host from the rows' lengths, which the host has (the rollouts'), so a micro-batch
on a GPU never waits for the device to learn its own shape; its index tensors reach the device by
non-blocking copies from pinned memory.

``varlen_attention`` is that attention, registered with transformers as the attention implementation
``pacs_varlen``. On CUDA it is one FlexAttention call per layer over a block mask built once per micro-batch
from the segments (``flex``): one kernel for every segment, shared prompts included, blocks no query reads
skipped, GQA without K/V expanded per head, and fp32 as well as bf16 (no fallback that materialises an
(L, L) mask). FlexAttention has no backward on CPU, so there it is one SDPA call per segment (``segments``:
``is_causal``, or a bottom-right-aligned causal bias over the prompt and the segment). Called without a
``packed`` layout (generation, a padded batch) it is transformers' SDPA attention, unchanged.
"""

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor
from torch.nn.attention.bias import causal_lower_right
from torch.nn.attention.flex_attention import BlockMask, flex_attention
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

IMPLEMENTATION = "pacs_varlen"
AUTOTUNED = "pacs_varlen_autotuned"  # the same, FlexAttention compiled with autotuning (trainer.attention_autotune)
ATTENTION_CALL = "pacs::varlen_attention"  # the profiler's range around each call on packed rows
BLOCK = 128  # FlexAttention's block: the block mask says which (query block, key block) pairs are computed
# torch.compile(flex_attention) by autotuning or not, made on first use: one compile per dynamic shape family
_compiled_flex: dict[bool, object] = {}


def to_device(x: Tensor, device) -> Tensor:
    """A host tensor onto ``device`` without waiting for it: a pageable host-to-device copy first synchronizes the
    stream, a pinned one is queued."""
    device = torch.device(device)
    if device.type != "cuda" or not torch.cuda.is_available():  # (a fake CUDA device: pacs.bench.traced)
        return x.to(device)
    return x.pin_memory().to(device, non_blocking=True)


# the attention mask a packed forward passes: empty, 4D (never read: ``varlen_attention`` uses the layout)
LAYOUT_MASK = torch.zeros(1, 1, 0, 0, dtype=torch.bool)

class PackedRows:
    """Where each row's tokens sit in the packed sequence (a plain object: FSDP passes it through untouched).

    Built on the host from each row's prompt and response lengths (``prompt``, ``response``) in a padded
    micro-batch of ``width_p`` prompt columns (left-padded) and ``width_t`` response columns (right-padded);
    ``group_size`` n > 1: each group's prompt once. The segments cover the sequence in order: ``sizes`` their
    lengths, ``context`` for each the index of the segment (its group's prompt) it attends to before itself,
    or None. Index tensors (flat positions): ``source`` (L,) into the padded (B, P + T) tensors;
    ``hidden_index`` (N,) for each response token, in ``response_mask`` order, the position of the packed
    sequence whose hidden state predicts it; ``target_index`` (N,) the token itself in (B, P + T);
    ``response_index`` (N,) its place in (B, T). ``kernel``: "flex" or "segments"; None: flex on CUDA.
    ``states`` (per row: 1 where the critic has a state after the row's last token, PPO's ``value_mask``): the
    state indices ``state_hidden_index`` and ``state_index``, the response's and then those (the hidden state of
    the row's last token, its place in (B, T) after the response).
    """

    def __init__(self, prompt: list[int], response: list[int], width_p: int, width_t: int, group_size: int = 1,
                 kernel: str | None = None, states: list[int] | None = None):  # fmt: skip
        n, width = group_size, width_p + width_t
        source, sizes, context, hidden, target, place, last = [], [], [], [], [], [], []

        def take(row: int, begin: int, length: int, attends: int | None = None) -> int:
            """A segment of ``length`` tokens of ``row`` from column ``begin``; its start in the packed sequence."""
            source.append(np.arange(row * width + begin, row * width + begin + length))
            sizes.append(length)
            context.append(attends)
            return sum(sizes) - length

        for i, (p, t) in enumerate(zip(prompt, response, strict=True)):
            target.append(np.arange(i * width + width_p, i * width + width_p + t))
            place.append(np.arange(i * width_t, i * width_t + t))
            if n == 1:  # the row whole: the token at j predicts j + 1, from the prompt's last token on
                start = take(i, width_p - p, p + t)
                hidden.append(np.arange(start + p - 1, start + p - 1 + t))
                last.append(start + p + t - 1)
                continue
            if i % n == 0:
                prompt_segment, prompt_start = len(sizes), take(i, width_p - p, p)
            if not t:
                last.append(prompt_start + p - 1)
                continue
            start = take(i, width_p, t, prompt_segment)
            hidden.append(np.array([prompt_start + p - 1]))  # the prompt's last token predicts the first
            hidden.append(np.arange(start, start + t - 1))
            last.append(start + t - 1)
        index = {"source": source, "hidden_index": hidden, "target_index": target, "response_index": place}
        for name, parts in index.items():
            setattr(self, name, torch.from_numpy(np.concatenate(parts).astype(np.int64)))
        extra = [i for i, s in enumerate(states or []) if s]  # rows with a state after their last token
        after = torch.tensor([last[i] for i in extra], dtype=torch.long)
        self.state_hidden_index = torch.cat([self.hidden_index, after])
        self.state_index = torch.cat([self.response_index, torch.tensor([i * width_t + response[i] for i in extra],
                                                                        dtype=torch.long)])  # fmt: skip
        self.sizes, self.context, self.kernel, self.length = sizes, context, kernel, sum(sizes)
        self.device, self._block_mask = torch.device("cpu"), None

    @classmethod
    def of(cls, input_ids: Tensor, attention_mask: Tensor, response_mask: Tensor, group_size: int = 1,
           kernel: str | None = None, value_mask: Tensor | None = None) -> "PackedRows":  # fmt: skip
        """The layout of a padded micro-batch (B, P + T) read from its tensors, which must be on the host: a
        device's would have to be waited for. ``value_mask`` (B, T): the critic's states (PPO), the response's
        and, where it holds one more, the state after the last token."""
        if input_ids.device.type != "cpu":
            raise ValueError("PackedRows.of reads the rows on the host: build the layout before the batch moves")
        width_t = response_mask.shape[1]
        width_p = input_ids.shape[1] - width_t
        n = group_size
        if n > 1 and not (input_ids[:, :width_p].view(-1, n, width_p) == input_ids[::n, None, :width_p]).all():
            raise ValueError(f"prompt sharing needs rows in groups of {n} with one prompt each")
        response = response_mask.sum(-1)
        prompt = attention_mask.sum(-1) - response
        states = None if value_mask is None else (value_mask.sum(-1) - response).tolist()
        return cls(prompt.tolist(), response.tolist(), width_p, width_t, n, kernel, states)

    def to(self, device) -> "PackedRows":
        """The index tensors on ``device`` (queued copies); the block mask is made there on first use."""
        for name in ("source", "hidden_index", "target_index", "response_index", "state_hidden_index", "state_index"):
            setattr(self, name, to_device(getattr(self, name), device))
        self.device, self._block_mask = torch.device(device), None
        return self

    def inputs(self, input_ids: Tensor, position_ids: Tensor) -> dict:
        """A model's keyword arguments for the padded rows' ``input_ids``/``position_ids`` (B, P + T) as this
        sequence: no mask of its own, the layout for the attention."""
        ids, positions = (x.reshape(-1)[self.source][None] for x in (input_ids, position_ids))  # (1, L)
        # a 4D mask is taken as built by every family's mask code (Qwen2's and Qwen3's per-layer-type mapping,
        # Llama's create_causal_mask alike) and handed to the attention, which reads the layout instead
        return {"input_ids": ids, "position_ids": positions, "attention_mask": LAYOUT_MASK, "packed": self,
                "use_cache": False}  # fmt: skip

    def uses_flex(self, device: torch.device) -> bool:
        return self.kernel == "flex" or (self.kernel is None and device.type == "cuda")

    def block_mask(self) -> BlockMask:
        """FlexAttention's block mask of this layout, made once (every layer, pass and recompute reads it)."""
        if self._block_mask is None:
            self._block_mask = segment_block_mask(self.sizes, self.context, self.device)
        return self._block_mask


def segment_blocks(sizes: list[int], context: list[int | None], block: int = BLOCK) -> tuple[np.ndarray, np.ndarray]:
    """Which (query block, key block) pairs of the packed sequence a query reads some key of (``partial``)
    and which it reads whole (``full``), each (blocks, blocks) bool, from the segments' intervals alone.

    A query q of a segment [s, e) with context [c0, c1) reads the keys [c0, c1) and [s, q]. The queries of a
    block split into parts, one per segment they fall in, [lo, hi]: over a part the keys read by some query
    are [c0, c1) and [s, hi], the keys read by all of them [c0, c1) and [s, lo] (merged into one interval when
    the context ends where the segment starts). A block past the sequence's end is never full."""
    starts = np.cumsum([0, *sizes[:-1]])
    ends, length = starts + np.array(sizes), int(sum(sizes))
    ctx = np.array([-1 if c is None else c for c in context])
    c0, c1 = np.where(ctx >= 0, starts[ctx], 0), np.where(ctx >= 0, ends[ctx], 0)  # empty without a context
    blocks = -(-length // block)
    lo = np.union1d(starts, np.arange(blocks) * block)  # each part's first query (segments are never empty)
    hi = np.append(lo[1:], length) - 1
    seg = np.searchsorted(starts, lo, "right") - 1
    s, c0, c1 = starts[seg][:, None], c0[seg][:, None], c1[seg][:, None]
    k0 = np.arange(blocks) * block
    k1 = k0 + block
    some = (np.maximum(k0, s) < np.minimum(k1, hi[:, None] + 1)) | (np.maximum(k0, c0) < np.minimum(k1, c1))
    own = np.where((c1 == s) & (c1 > c0), c0, s)  # [own, lo] read by every query of the part
    every = ((c0 <= k0) & (k1 <= c1)) | ((own <= k0) & (k1 <= lo[:, None] + 1))
    first = np.searchsorted(lo // block, np.arange(blocks))  # each query block's first part
    some, every = np.logical_or.reduceat(some, first, 0), np.logical_and.reduceat(every, first, 0)
    every[length // block :] = False  # as torch's create_block_mask: a query block past the end is never full
    return some & ~every, every


def segment_mask_mod(segment: Tensor, context: Tensor):
    """FlexAttention's mask: a query reads the keys of its own segment up to itself, and its context's."""

    def mask_mod(b, h, q, kv):
        return ((segment[q] == segment[kv]) & (kv <= q)) | (context[segment[q]] == segment[kv])

    return mask_mod


def segment_block_mask(sizes: list[int], context: list[int | None], device) -> BlockMask:
    """The layout's ``BlockMask`` on ``device``, made from host arrays (``segment_blocks``) with queued copies."""
    partial, full = segment_blocks(sizes, context)
    length, blocks = sum(sizes), partial.shape[0]

    def sparse(pairs: np.ndarray) -> tuple[Tensor, Tensor]:  # counts (1, 1, Q) and key-block indices (1, 1, Q, K)
        order = np.argsort(~pairs, axis=1, kind="stable")  # the blocks read first, in order
        return tuple(to_device(torch.from_numpy(x.astype(np.int32))[None, None], device)
                     for x in (pairs.sum(1), order))  # fmt: skip

    # a segment id per position, padded to whole blocks with one more id that nothing reads (FlexAttention
    # evaluates the mask on whole blocks)
    segment = np.repeat(np.arange(len(sizes)), sizes)
    segment = np.append(segment, np.full(blocks * BLOCK - length, len(sizes)))
    ctx = np.array([-1 if c is None else c for c in context] + [-1])
    mask_mod = segment_mask_mod(*(to_device(torch.from_numpy(x.astype(np.int32)), device) for x in (segment, ctx)))
    return BlockMask.from_kv_blocks(*sparse(partial), *sparse(full), BLOCK_SIZE=BLOCK, mask_mod=mask_mod,
                                    seq_lengths=(length, length))  # fmt: skip


def _flex(device: torch.device, autotune: bool = False):
    """FlexAttention compiled on a GPU (its fused kernels; with ``autotune``, each kernel's tile sizes tuned on this
    GPU, its backward's included: max-autotune without CUDA graphs, as torchtitan compiles it); eager elsewhere
    (a reference that reads the whole mask)."""
    if device.type != "cuda":
        return flex_attention
    if autotune not in _compiled_flex:
        mode = "max-autotune-no-cudagraphs" if autotune else None
        _compiled_flex[autotune] = torch.compile(flex_attention, dynamic=True, mode=mode)
    return _compiled_flex[autotune]


@torch.compiler.disable
def varlen_attention(module: torch.nn.Module, query: Tensor, key: Tensor, value: Tensor, attention_mask,
                     scaling: float | None = None, dropout: float = 0.0, packed: PackedRows | None = None,
                     autotune: bool = False, **kwargs) -> tuple[Tensor, None]:  # fmt: skip
    """Attention over ``packed``'s segments: query (1, heads, L, d), key and value (1, kv_heads, L, d) ->
    (1, L, heads, d). Without ``packed``: transformers' SDPA attention."""
    if packed is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)  # fmt: skip
    with torch.profiler.record_function(ATTENTION_CALL):  # a call, as pacs bench update --profile counts them
        return _packed_attention(query, key, value, packed, scaling, dropout, autotune)


@torch.compiler.disable
def autotuned_varlen_attention(*args, **kwargs) -> tuple[Tensor, None]:
    """``varlen_attention`` on FlexAttention compiled with autotuning."""
    return varlen_attention(*args, autotune=True, **kwargs)


def _packed_attention(query: Tensor, key: Tensor, value: Tensor, packed: PackedRows, scaling: float | None,
                      dropout: float, autotune: bool) -> tuple[Tensor, None]:  # fmt: skip
    gqa = query.shape[1] != key.shape[1]
    if packed.uses_flex(query.device):
        if dropout:
            raise ValueError("packed attention on FlexAttention has no dropout: set the model's attention_dropout 0")
        flex = _flex(query.device, autotune)
        out = flex(query, key, value, block_mask=packed.block_mask(), scale=scaling, enable_gqa=gqa)
        return out.transpose(1, 2).contiguous(), None
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


for name, attention in ((IMPLEMENTATION, varlen_attention), (AUTOTUNED, autotuned_varlen_attention)):
    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, sdpa_mask)  # generation and padded batches build SDPA's masks


def check_full_sdpa(model: torch.nn.Module, key: str) -> None:
    """Prompt sharing and packing lay out attention themselves: SDPA over full (not sliding-window) layers;
    else an error naming the trainer ``key`` that asks for it."""
    config = model.config
    layer_types = getattr(config, "layer_types", None) or ["full_attention"]
    if config._attn_implementation not in ("sdpa", IMPLEMENTATION, AUTOTUNED) or set(layer_types) != {"full_attention"}:
        raise ValueError(
            f"trainer.{key} needs SDPA attention over full (not sliding-window) layers; this model has "
            f"{config._attn_implementation} attention over {sorted(set(layer_types))}: set trainer.{key} false"
        )


def use_varlen_attention(model: torch.nn.Module, autotune: bool = False) -> None:
    """Switch ``model`` (SDPA attention over full, not sliding-window, layers) to ``varlen_attention``, on
    FlexAttention compiled with autotuning where ``autotune`` asks (CUDA; ``trainer.attention_autotune``)."""
    check_full_sdpa(model, "pack_sequences")
    model.set_attn_implementation(AUTOTUNED if autotune else IMPLEMENTATION)


def packed_hidden(decoder: torch.nn.Module, packed: PackedRows, input_ids: Tensor, position_ids: Tensor) -> Tensor:
    """The final hidden states (N, H) that predict the response tokens, in ``response_mask`` order."""
    return decoder(**packed.inputs(input_ids, position_ids)).last_hidden_state[0, packed.hidden_index]
