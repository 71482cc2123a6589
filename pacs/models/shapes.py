"""The architectures of the paper's models, as their ``config.json`` on the Hugging Face hub gives them, to
build models with random weights (benchmarks on a machine with no hub) and to count their parameters.

``qwen2_config("qwen2.5-0.5b", num_hidden_layers=4)`` is a ``Qwen2Config``; keys override the shape.
"""

_QWEN2 = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0, "max_position_embeddings": 32768}
SHAPES = {
    "qwen2.5-0.5b": {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24,
                     "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
                     "tie_word_embeddings": True},
    "qwen2.5-1.5b": {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
                     "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
                     "tie_word_embeddings": True},
    "qwen2.5-3b": {"hidden_size": 2048, "intermediate_size": 11008, "num_hidden_layers": 36,
                   "num_attention_heads": 16, "num_key_value_heads": 2, "vocab_size": 151936,
                   "tie_word_embeddings": True},
    "qwen2.5-7b": {"hidden_size": 3584, "intermediate_size": 18944, "num_hidden_layers": 28,
                   "num_attention_heads": 28, "num_key_value_heads": 4, "vocab_size": 152064,
                   "tie_word_embeddings": False},
}  # fmt: skip


def qwen2_config(name: str, **overrides):
    """The ``Qwen2Config`` of shape ``name`` (a key of ``SHAPES``), with ``overrides`` applied."""
    from transformers import Qwen2Config

    if name not in SHAPES:
        raise ValueError(f"unknown model shape {name!r}; known: {', '.join(SHAPES)}")
    unknown = set(overrides) - set(Qwen2Config().to_dict())
    if unknown:
        raise ValueError(f"model shape {name}: {', '.join(sorted(unknown))} is not a Qwen2Config key")
    return Qwen2Config(**{**_QWEN2, **SHAPES[name], **overrides})


def parameter_count(config) -> int:
    """Parameters of a Qwen2 causal LM of ``config`` (tied embeddings counted once), without building it."""
    h, i, layers, vocab = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    head = h // config.num_attention_heads
    kv = config.num_key_value_heads * head
    attention = h * h + 2 * h * kv + (h + 2 * kv) + h * h  # q, k, v (with biases), o
    layer = attention + 3 * h * i + 2 * h  # gate, up, down; two RMSNorms
    return vocab * h * (1 if config.tie_word_embeddings else 2) + layers * layer + h
