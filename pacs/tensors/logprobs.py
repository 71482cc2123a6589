"""Response-token log-probs from the final hidden states and the LM head, a chunk of positions at a time.

The full path (``log_softmax(model(...).logits)``) holds fp32 logits (rows, T, vocab) for a whole
micro-batch and again for their gradient: one group of 8 responses of 4,608 tokens with Qwen2.5's
151,936-token vocabulary is 22 GB. Here only the response positions are computed, ``chunk_size`` of
them at a time; the backward recomputes each chunk's softmax from the saved hidden states, the head's
weight and the log-sum-exp, so the largest logit tensor alive is (chunk_size, vocab).

``PolicyScorer`` wraps a causal LM so that the whole computation, head included, runs inside one
module's forward: FSDP2 all-gathers the root's parameters (embedding, final norm, head) around it and
reduce-scatters their gradients after it, as it does for the decoder layers.

With ``group_size`` n > 1 (rows in groups of n that share one prompt, as rollouts are laid out), each
prompt goes through the decoder once: its keys and values are then read by its n responses, as a KV
cache is in generation. The linear layers' work on the prompt is paid once per group instead of n
times; gradients flowing back through the shared keys and values sum over the n responses, as they
would over n copies. The same values as n separate rows, to float rounding. With ``pack``
(``pacs.tensors.varlen``) the rows go through the decoder as one sequence without padding, prompts shared the
same way; the padded paths here stay, for ``trainer.pack_sequences: false`` and to check against.
"""

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from pacs.tensors.varlen import PackedRows, check_full_sdpa, packed_hidden, use_varlen_attention


def _chunk_logits(hidden: Tensor, weight: Tensor, temperature: float) -> Tensor:
    logits = (hidden @ weight.T).float()  # (N, V) in fp32, as the full path's .logits.float()
    return logits.div_(temperature) if temperature != 1.0 else logits


def accumulate_head_grad(grad_weight: Tensor, dlogits: Tensor, hidden: Tensor) -> None:
    """grad_weight (V, H) fp32 += dlogits^T (V, N) @ hidden (N, H). On a GPU in bf16, one GEMM reading the bf16
    operands and accumulating into the fp32 gradient (cuBLAS computes in fp32): the same products and sums as
    upcasting both first, without an fp32 matmul (TF32 is off) or an fp32 copy of either operand."""
    if grad_weight.is_cuda and dlogits.dtype != torch.float32:
        torch.addmm(grad_weight, dlogits.T, hidden, out_dtype=torch.float32, out=grad_weight)
    else:
        grad_weight.addmm_(dlogits.T.float(), hidden.float())


class ChunkedLogprobs(torch.autograd.Function):
    """log softmax(h W^T / temperature)[target] for rows of ``hidden`` (N, H), without (N, V) at once."""

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, targets: Tensor, temperature: float, chunk_size: int):
        logprobs = torch.empty(hidden.shape[0], dtype=torch.float32, device=hidden.device)
        lse = torch.empty_like(logprobs)
        for s in range(0, hidden.shape[0], chunk_size):
            logits = _chunk_logits(hidden[s : s + chunk_size], weight, temperature)
            lse[s : s + chunk_size] = torch.logsumexp(logits, -1)
            chosen = logits.gather(-1, targets[s : s + chunk_size, None]).squeeze(-1)
            logprobs[s : s + chunk_size] = chosen - lse[s : s + chunk_size]
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        return logprobs

    @staticmethod
    def backward(ctx, grad: Tensor):
        hidden, weight, targets, lse = ctx.saved_tensors
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device)
        for s in range(0, hidden.shape[0], ctx.chunk_size):
            h, g = hidden[s : s + ctx.chunk_size], grad[s : s + ctx.chunk_size] / ctx.temperature
            # d logprob / d logits = (onehot(target) - softmax) / temperature, times the incoming gradient: in
            # place over the one (chunk, V) fp32 tile, then cast once
            dlogits = _chunk_logits(h, weight, ctx.temperature).sub_(lse[s : s + ctx.chunk_size, None]).exp_()
            dlogits.mul_(-g[:, None]).scatter_add_(-1, targets[s : s + ctx.chunk_size, None], g[:, None])
            dlogits = dlogits.to(weight.dtype)
            if grad_hidden is not None:
                grad_hidden[s : s + ctx.chunk_size] = dlogits @ weight
            accumulate_head_grad(grad_weight, dlogits, h)
        return grad_hidden, grad_weight.to(weight.dtype), None, None, None


def _entropy(hidden: Tensor, weight: Tensor, temperature: float) -> Tensor:
    logprobs = torch.log_softmax(_chunk_logits(hidden, weight, temperature), -1)
    return -(logprobs.exp() * logprobs).sum(-1)


def chunked_entropy(hidden: Tensor, weight: Tensor, temperature: float, chunk_size: int, grad: bool) -> Tensor:
    """The policy's entropy at each row of ``hidden``; with ``grad``, each chunk is recomputed in backward."""
    parts = []
    for s in range(0, hidden.shape[0], chunk_size):
        h = hidden[s : s + chunk_size]
        if grad:
            parts.append(checkpoint(_entropy, h, weight, temperature, use_reentrant=False))
        else:
            with torch.no_grad():
                parts.append(_entropy(h.detach(), weight.detach(), temperature))
    return torch.cat(parts) if parts else hidden.new_zeros(0, dtype=torch.float32)


class _PromptKV:
    """Where the decoder's attention layers leave the prompt's keys and values (the ``past_key_values``
    they write). A checkpointed layer's recompute writes them again: the same values, and nothing reads
    the copy, so the layers may keep this cache under gradient checkpointing."""

    def __init__(self):
        self.layers: dict[int, tuple[Tensor, Tensor]] = {}

    def update(self, key: Tensor, value: Tensor, layer_idx: int, *args, **kwargs) -> tuple[Tensor, Tensor]:
        self.layers[layer_idx] = (key, value)
        return key, value


class _SharedPrompt:
    """The responses' ``past_key_values``: each layer attends to its group's prompt keys and values (repeated
    for the group's n rows) before the responses' own. It only reads, so a recompute reads the same."""

    def __init__(self, prompt: _PromptKV, n: int):
        self.layers, self.n = dict(prompt.layers), n

    def update(self, key: Tensor, value: Tensor, layer_idx: int, *args, **kwargs) -> tuple[Tensor, Tensor]:
        prompt_key, prompt_value = (x.repeat_interleave(self.n, 0) for x in self.layers[layer_idx])
        return torch.cat([prompt_key, key], 2), torch.cat([prompt_value, value], 2)


def shared_prompt_hidden(decoder: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, position_ids: Tensor,
                         width_t: int, n: int) -> Tensor:  # fmt: skip
    """The final hidden states (B, T, H) that predict the T response tokens, each group's prompt through
    ``decoder`` (the model's base) once. Rows: groups of n with the same (left-padded) prompt."""
    rows, width = input_ids.shape
    width_p = width - width_t
    prompt_ids, seen = input_ids[::n, :width_p], attention_mask.bool()
    if not (input_ids[:, :width_p].view(-1, n, width_p) == prompt_ids[:, None]).all():
        raise ValueError(f"prompt sharing needs rows in groups of {n} with one prompt each")

    def causal(size: int, keys: Tensor) -> Tensor:  # (rows, size, size): real keys up to each position, and itself
        lower = torch.ones(size, size, dtype=torch.bool, device=keys.device).tril()
        return (lower & keys[:, None, :]) | torch.eye(size, dtype=torch.bool, device=keys.device)

    # boolean masks of (rows, 1, queries, keys), as SDPA takes them; a padding position sees itself
    kv, mask = _PromptKV(), causal(width_p, seen[::n, :width_p])
    prompt = decoder(input_ids=prompt_ids, attention_mask={"full_attention": mask[:, None]},
                     position_ids=position_ids[::n, :width_p], past_key_values=kv, use_cache=False)  # fmt: skip
    mask = torch.cat([seen[:, None, :width_p].expand(rows, width_t, width_p), causal(width_t, seen[:, width_p:])], -1)
    response = decoder(input_ids=input_ids[:, width_p:], attention_mask={"full_attention": mask[:, None]},
                       position_ids=position_ids[:, width_p:], past_key_values=_SharedPrompt(kv, n),
                       use_cache=False)  # fmt: skip
    # the hidden state at position j predicts token j + 1: the first response token's is the prompt's last
    last = prompt.last_hidden_state[:, -1:].repeat_interleave(n, 0)
    return torch.cat([last, response.last_hidden_state[:, :-1]], 1)


class PolicyScorer(torch.nn.Module):
    """A causal LM as the trainer calls it: ``forward(batch pieces) -> (logprobs (B, T), entropy (B, T) | None)``
    over the response positions (0 at padding). ``chunk_size`` None computes the full logits (the old path,
    kept to check against)."""

    def __init__(self, model: torch.nn.Module, chunk_size: int | None, share_prompt: bool = False,
                 pack: bool = False, autotune: bool = False):  # fmt: skip
        """``share_prompt``: forwards with ``group_size`` > 1 take each prompt once (``check_full_sdpa``).
        ``pack``: the rows go through the decoder as one sequence without padding (``pacs.tensors.varlen``), with
        ``autotune`` on FlexAttention compiled with autotuning."""
        super().__init__()
        self.model, self.chunk_size, self.share_prompt, self.pack = model, chunk_size, share_prompt, pack
        self._no_split_modules = getattr(model, "_no_split_modules", None)
        if pack:
            use_varlen_attention(model, autotune)
        elif share_prompt:
            check_full_sdpa(model, "share_prompt")  # it builds SDPA boolean masks
            for layer in model.modules():  # they may keep the prompt's cache under checkpointing (see _PromptKV)
                if hasattr(layer, "_can_checkpoint_with_cache"):
                    layer._can_checkpoint_with_cache = True

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, response_mask=None,
                temperature: float = 1.0, entropy: str | None = None, group_size: int = 1,
                packed: PackedRows | None = None,
                generate: dict | None = None) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        """``entropy``: None, "no_grad" (for logging) or "grad" (an entropy loss term). ``group_size``: rows
        come in groups of this many with one prompt (shared when ``share_prompt``). ``packed``: the rows' layout
        when ``pack``, built on the host (``pacs.train.update.minibatch``); without it, read from the masks (which waits
        for the device). ``generate``: instead, the model's ``generate(**generate)``, inside this module's
        forward so that FSDP2 gathers the parameters around it as it does around scoring."""
        if generate is not None:
            return self.model.generate(**generate)
        width_t = response_mask.shape[1]
        decoder, head = self.model.base_model, self.model.get_output_embeddings()
        if self.pack:
            if packed is None:
                packed = PackedRows.of(input_ids.cpu(), attention_mask.cpu(), response_mask.cpu(),
                                       group_size if self.share_prompt else 1).to(input_ids.device)  # fmt: skip
            hidden = packed_hidden(decoder, packed, input_ids, position_ids)  # (N, H): response tokens only
            targets = input_ids.reshape(-1)[packed.target_index]

            def place(x: Tensor) -> Tensor:  # (N, ...) response tokens -> (B, T, ...), 0 at padding; no sync
                whole = x.new_zeros(response_mask.numel(), *x.shape[1:]).index_copy_(0, packed.response_index, x)
                return whole.view(*response_mask.shape, *x.shape[1:])
        else:
            if self.share_prompt and group_size > 1:
                hidden = shared_prompt_hidden(decoder, input_ids, attention_mask, position_ids, width_t, group_size)
            else:
                out = decoder(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
                # the hidden state at position j predicts token j + 1: the response's come from the prompt's last
                hidden = out.last_hidden_state[:, -width_t - 1 : -1]
            hidden, targets = hidden[response_mask], input_ids[:, -width_t:][response_mask]  # (N, H), (N,)

            def place(x: Tensor) -> Tensor:
                whole = x.new_zeros(*response_mask.shape, *x.shape[1:])
                return whole.masked_scatter(response_mask.view(*response_mask.shape, *[1] * (x.dim() - 1)), x)
        if self.chunk_size is None:  # the full logits of the response tokens at once (the old path)
            logprobs = torch.log_softmax(head(hidden).float() / temperature, -1)
            chosen = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            ent = None
            if entropy is not None:
                ent = -(logprobs.exp() * logprobs).sum(-1)
                ent = place(ent if entropy == "grad" else ent.detach())
            return place(chosen), ent
        if getattr(head, "bias", None) is not None:
            raise ValueError("chunked log-probs need an LM head without bias; set trainer.logprob_chunk_size: null")
        chosen = ChunkedLogprobs.apply(hidden, head.weight, targets, temperature, self.chunk_size)
        ent = None
        if entropy is not None:
            ent = place(chunked_entropy(hidden, head.weight, temperature, self.chunk_size, grad=entropy == "grad"))
        return place(chosen), ent
