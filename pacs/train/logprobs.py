"""Response-token log-probs from the final hidden states and the LM head, a chunk of positions at a time.

The full path (``log_softmax(model(...).logits)``) holds fp32 logits (rows, T, vocab) for a whole
micro-batch and again for their gradient: one group of 8 responses of 4,608 tokens with Qwen2.5's
151,936-token vocabulary is 22 GB. Here only the response positions are computed, ``chunk_size`` of
them at a time; the backward recomputes each chunk's softmax from the saved hidden states, the head's
weight and the log-sum-exp, so the largest logit tensor alive is (chunk_size, vocab).

``PolicyScorer`` wraps a causal LM so that the whole computation, head included, runs inside one
module's forward: FSDP2 all-gathers the root's parameters (embedding, final norm, head) around it and
reduce-scatters their gradients after it, as it does for the decoder layers.
"""

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint


def _chunk_logits(hidden: Tensor, weight: Tensor, temperature: float) -> Tensor:
    return (hidden @ weight.T).float() / temperature  # (N, V) in fp32, as the full path's .logits.float()


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
            h, g = hidden[s : s + ctx.chunk_size], grad[s : s + ctx.chunk_size]
            # d logprob / d logits = onehot(target) - softmax, scaled by the incoming gradient
            dlogits = _chunk_logits(h, weight, ctx.temperature).sub_(lse[s : s + ctx.chunk_size, None]).exp_()
            dlogits.mul_(-g[:, None]).scatter_add_(-1, targets[s : s + ctx.chunk_size, None], g[:, None])
            dlogits = (dlogits / ctx.temperature).to(weight.dtype)
            if grad_hidden is not None:
                grad_hidden[s : s + ctx.chunk_size] = dlogits @ weight
            grad_weight.addmm_(dlogits.T.float(), h.float())
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


class PolicyScorer(torch.nn.Module):
    """A causal LM as the trainer calls it: ``forward(batch pieces) -> (logprobs (B, T), entropy (B, T) | None)``
    over the response positions (0 at padding). ``chunk_size`` None computes the full logits (the old path,
    kept to check against)."""

    def __init__(self, model: torch.nn.Module, chunk_size: int | None):
        super().__init__()
        self.model, self.chunk_size = model, chunk_size
        self._no_split_modules = getattr(model, "_no_split_modules", None)

    def forward(self, input_ids, attention_mask, position_ids, response_mask, temperature: float = 1.0,
                entropy: str | None = None) -> tuple[Tensor, Tensor | None]:  # fmt: skip
        """``entropy``: None, "no_grad" (for logging) or "grad" (an entropy loss term)."""
        width_t = response_mask.shape[1]
        targets = input_ids[:, -width_t:]
        if self.chunk_size is None:
            logits = self.model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids).logits
            logprobs = torch.log_softmax(logits[:, -width_t - 1 : -1].float() / temperature, -1)
            chosen = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
            ent = None
            if entropy is not None:
                ent = -(logprobs.exp() * logprobs).sum(-1)
                ent = ent if entropy == "grad" else ent.detach()
            return torch.where(response_mask, chosen, 0.0), ent if ent is None else torch.where(response_mask, ent, 0.0)
        out = self.model.base_model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids)
        # the hidden state at position j predicts token j + 1: the response's come from the prompt's last token on
        hidden = out.last_hidden_state[:, -width_t - 1 : -1][response_mask]  # (N, H): response tokens only
        head = self.model.get_output_embeddings()
        if getattr(head, "bias", None) is not None:
            raise ValueError("chunked log-probs need an LM head without bias; set trainer.logprob_chunk_size: null")
        chosen = ChunkedLogprobs.apply(hidden, head.weight, targets[response_mask], temperature, self.chunk_size)
        logprobs = torch.zeros(response_mask.shape, dtype=torch.float32, device=hidden.device)
        logprobs = logprobs.masked_scatter(response_mask, chosen)
        ent = None
        if entropy is not None:
            values = chunked_entropy(hidden, head.weight, temperature, self.chunk_size, grad=entropy == "grad")
            ent = torch.zeros_like(logprobs).masked_scatter(response_mask, values)
        return logprobs, ent
