"""The architectures of the paper's models, as their ``config.json`` on the Hugging Face hub gives them, to
build models with random weights (benchmarks on a machine with no hub) and to
plan a workflow config's jobs (``model_shape``) without downloading anything.

``qwen2_config("qwen2.5-0.5b", num_hidden_layers=4)`` is a ``Qwen2Config``; keys override the shape.
"""

import json
from pathlib import Path
from types import SimpleNamespace

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
    # pacs.models.tiny's model (TinyModelConfig's defaults); its vocabulary is the tokenizer's, at most this
    "tiny": {"hidden_size": 128, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 2,
             "num_key_value_heads": 2, "vocab_size": 512, "tie_word_embeddings": True},
}  # fmt: skip
# what sizes a model: the keys a plan reads from a config.json (head_dim: hidden_size / heads when absent)
SIZE_KEYS = (
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
HUB_IDS = {f"Qwen/Qwen2.5-{size}{kind}": f"qwen2.5-{size.lower()}"
           for size in ("0.5B", "1.5B", "3B", "7B") for kind in ("", "-Instruct")}  # fmt: skip


def qwen2_config(name: str, **overrides):
    """The ``Qwen2Config`` of shape ``name`` (a key of ``SHAPES``), with ``overrides`` applied."""
    from transformers import Qwen2Config

    if name not in SHAPES:
        raise ValueError(f"unknown model shape {name!r}; known: {', '.join(SHAPES)}")
    unknown = set(overrides) - set(Qwen2Config().to_dict())
    if unknown:
        raise ValueError(f"model shape {name}: {', '.join(sorted(unknown))} is not a Qwen2Config key")
    return Qwen2Config(**{**_QWEN2, **SHAPES[name], **overrides})


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
        return SimpleNamespace(**SHAPES[name])
    if shape is None and path and (Path(path) / "config.json").is_file():
        shape = json.loads((Path(path) / "config.json").read_text())
        shape = {
            "tie_word_embeddings": False,
            "num_key_value_heads": shape.get("num_attention_heads"),
            **{k: v for k, v in shape.items() if k in SIZE_KEYS},
        }  # Qwen2Config's defaults for these two
    if isinstance(shape, dict):
        missing, unknown = set(SIZE_KEYS) - set(shape) - {"head_dim"}, set(shape) - set(SIZE_KEYS)
        if missing or unknown:
            raise ValueError(f"{where}.shape: needs the keys {', '.join(SIZE_KEYS)} (head_dim optional); "
                             f"missing {sorted(missing)}, unknown {sorted(unknown)}")  # fmt: skip
        return SimpleNamespace(**{"head_dim": None, **shape})
    raise ValueError(
        f"{where}: the architecture of {path!r} is not known offline; set {where}.shape to one of "
        f"{', '.join(SHAPES)} or to its config.json keys ({', '.join(SIZE_KEYS)})"
    )
