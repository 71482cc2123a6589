"""The architectures of the paper's models, as their ``config.json`` on the Hugging Face hub gives them, to
build models with random weights (benchmarks on a machine with no hub) and to
plan a workflow config's jobs (``model_shape``) without downloading anything.

``model_config("qwen2.5-0.5b", num_hidden_layers=4)`` is a ``Qwen2Config`` (a ``Qwen3Config`` for the Qwen3
shapes); keys override the shape. Two architectures are known (``model_type``): ``qwen2`` (q, k and v
projections with biases) and ``qwen3`` (no biases, an RMSNorm over each query and key head, head_dim 128
whatever the width).
"""

import json
from pathlib import Path
from types import SimpleNamespace

_COMMON = {"hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 1_000_000.0}
_ARCHITECTURES = {"qwen2": {**_COMMON, "max_position_embeddings": 32768},
                  "qwen3": {**_COMMON, "max_position_embeddings": 40960, "attention_bias": False},
                  "llama": {"hidden_act": "silu", "rms_norm_eps": 1e-5, "rope_theta": 500_000.0,
                            "max_position_embeddings": 131072}}  # fmt: skip
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
    # PACS v2's models (their -Base releases have the same architecture)
    "qwen3-4b": {"model_type": "qwen3", "hidden_size": 2560, "intermediate_size": 9728, "num_hidden_layers": 36,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                 "tie_word_embeddings": True},
    "qwen3-8b": {"model_type": "qwen3", "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
                 "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                 "tie_word_embeddings": False},
    # the released models of v2's Table 1 that are only evaluated (config/paper_v2.yaml, released): their base
    # architectures' config.json (Qwen3-14B; LIMO: Qwen2.5-32B-Instruct; Deepthought-8B: Llama-3.1-8B; the
    # 7B ones are Qwen2 / Qwen2.5(-Math)-7B, the qwen2.5-7b shape)
    "qwen3-14b": {"model_type": "qwen3", "hidden_size": 5120, "intermediate_size": 17408, "num_hidden_layers": 40,
                  "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936,
                  "tie_word_embeddings": False},
    "qwen2.5-32b": {"hidden_size": 5120, "intermediate_size": 27648, "num_hidden_layers": 64,
                    "num_attention_heads": 40, "num_key_value_heads": 8, "vocab_size": 152064,
                    "tie_word_embeddings": False},
    "llama3.1-8b": {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
                    "tie_word_embeddings": False},
    # pacs.models.tiny's model (TinyModelConfig's defaults); its vocabulary is the tokenizer's, at most this
    "tiny": {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 2, "vocab_size": 512, "tie_word_embeddings": True},
}  # fmt: skip
# what sizes a model: the keys a plan reads from a config.json (head_dim: hidden_size / heads when absent;
# model_type: qwen2 when absent)
SIZE_KEYS = (
    "model_type",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "vocab_size",
    "tie_word_embeddings",
    "head_dim",
)


# hub ids whose architecture is a shape above (the post-trained releases share their base model's)
HUB_IDS = {**{f"Qwen/Qwen2.5-{size}{kind}": f"qwen2.5-{size.lower()}"
              for size in ("0.5B", "1.5B", "3B", "7B") for kind in ("", "-Instruct")},
           **{f"Qwen/Qwen3-{size}{kind}": f"qwen3-{size.lower()}"
              for size in ("4B", "8B") for kind in ("", "-Base")},
           "Qwen/Qwen3-14B": "qwen3-14b", "GAIR/LIMO": "qwen2.5-32b",
           "ruliad/deepthought-8b-llama-v0.01-alpha": "llama3.1-8b", "PRIME-RL/Eurus-2-7B-PRIME": "qwen2.5-7b",
           "AIDC-AI/Marco-o1": "qwen2.5-7b", "open-thoughts/OpenThinker3-7B": "qwen2.5-7b",
           "NovaSky-AI/Sky-T1-7B": "qwen2.5-7b"}  # fmt: skip
OPTIONAL_KEYS = {"head_dim": None, "model_type": "qwen2"}


def model_config(name: str, **overrides):
    """The transformers config (``Qwen2Config``, ``Qwen3Config`` or ``LlamaConfig``) of shape ``name`` (a key of
    ``SHAPES``), with ``overrides`` applied."""
    from transformers import LlamaConfig, Qwen2Config, Qwen3Config

    if name not in SHAPES:
        raise ValueError(f"unknown model shape {name!r}; known: {', '.join(SHAPES)}")
    keys = {**OPTIONAL_KEYS, **SHAPES[name]}
    kind = {"qwen2": Qwen2Config, "qwen3": Qwen3Config, "llama": LlamaConfig}[keys.pop("model_type")]
    if keys["head_dim"] is None:
        del keys["head_dim"]
    unknown = set(overrides) - set(kind().to_dict())
    if unknown:
        raise ValueError(f"model shape {name}: {', '.join(sorted(unknown))} is not a {kind.__name__} key")
    return kind(**{**_ARCHITECTURES[kind.model_type], **keys, **overrides})


def model_shape(spec: dict, where: str) -> SimpleNamespace:
    """The architecture of a workflow config's model ``spec`` (``models.<key>``), as the ``config.json`` keys
    that size it: its ``shape`` (a name of ``SHAPES``, or those keys), else the ``config.json`` of a local
    ``path``, else a known hub id (``HUB_IDS``), else, for ``build: tiny``, the tiny model's (``SHAPES["tiny"]``;
    its vocabulary is the tokenizer's, at most that). Reads no weights and imports no transformers."""
    shape, path = spec.get("shape"), spec.get("path")
    if isinstance(shape, str) or (shape is None and path in HUB_IDS) or (shape is None and spec.get("build") == "tiny"):
        name = shape if isinstance(shape, str) else HUB_IDS.get(path, "tiny")
        if name not in SHAPES:
            raise ValueError(f"{where}.shape: unknown model shape {name!r}; known: {', '.join(SHAPES)}")
        return SimpleNamespace(**{**OPTIONAL_KEYS, **SHAPES[name]})
    if shape is None and path and (Path(path) / "config.json").is_file():
        shape = json.loads((Path(path) / "config.json").read_text())
        shape = {
            "tie_word_embeddings": False,
            "num_key_value_heads": shape.get("num_attention_heads"),
            **{k: v for k, v in shape.items() if k in SIZE_KEYS},
        }  # Qwen2Config's defaults for these two
    if isinstance(shape, dict):
        missing, unknown = set(SIZE_KEYS) - set(shape) - set(OPTIONAL_KEYS), set(shape) - set(SIZE_KEYS)
        if missing or unknown:
            raise ValueError(f"{where}.shape: needs the keys {', '.join(SIZE_KEYS)} (head_dim, model_type "
                             f"optional); missing {sorted(missing)}, unknown {sorted(unknown)}")  # fmt: skip
        shape = {**OPTIONAL_KEYS, **shape}
        if shape["model_type"] not in _ARCHITECTURES:
            raise ValueError(f"{where}.shape: model_type {shape['model_type']!r} is not one the plan knows "
                             f"({', '.join(_ARCHITECTURES)})")  # fmt: skip
        return SimpleNamespace(**shape)
    raise ValueError(
        f"{where}: the architecture of {path!r} is not known offline; set {where}.shape to one of "
        f"{', '.join(SHAPES)} or to its config.json keys ({', '.join(SIZE_KEYS)})"
    )
