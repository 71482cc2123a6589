"""A tiny embedding model in Qwen3-Embedding's form, random weights, built offline in seconds: what the tests
and the tiny workflow embed answers with instead of Qwen3-Embedding-0.6B.

The same modules as the real one: a Qwen3 model (``Qwen3Model``) → last-token pooling → normalization, its
tokenizer appending ``<|endoftext|>`` to every text (the token whose state is pooled) and padding on the left.
Saved with ``SentenceTransformer.save``, so that ``SentenceTransformer(DIR)`` loads it with no network.
"""

import random
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import processors
from transformers import Qwen3Config, Qwen3Model

from pacs.models.tiny import train_tokenizer


@dataclass(frozen=True)
class TinyEmbedderConfig:
    vocab_size: int = 512  # byte-level BPE on a small built-in corpus (any text still encodes: bytes)
    hidden_size: int = 64  # the embedding's dimension
    num_layers: int = 2
    num_heads: int = 4
    num_kv_heads: int = 2  # grouped-query attention, as Qwen3-Embedding
    head_dim: int = 16
    intermediate_size: int = 128
    max_length: int = 2048  # tokens per text (longer ones truncated)
    seed: int = 0  # the weights'; the tokenizer is the same for every seed


def embedder_corpus(size: int = 400) -> list[str]:
    """Math answers as the toy task and the benchmarks write them: thinking, sums, a boxed answer."""
    rng = random.Random(0)
    words = ("so the answer is", "first we compute", "let us check", "therefore", "wait", "the sum of",
             "multiply both sides by", "which gives", "hence", "we get")  # fmt: skip
    texts = ["user\nassistant\n", "<think>\n</think>\n\n"]
    for _ in range(size):
        a, b = rng.randrange(1000), rng.randrange(1000)
        w1, w2 = rng.choice(words), rng.choice(words)
        texts.append(
            f"<think>\n{w1} {a} + {b} = {a + b}, {w2} {a * 2}.\n</think>\n\nThe answer is $\\boxed{{{a + b}}}$."
        )
    return texts


def build_tiny_embedder(out: Path, config: TinyEmbedderConfig = TinyEmbedderConfig()) -> Path:
    """Write the model to ``out`` (replaced whole, or left as it was if building fails); returns ``out``."""
    from pacs import imports_left_out

    imports_left_out.take_back()  # sentence-transformers needs scikit-learn and SciPy
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    out = Path(out)
    tokenizer = train_tokenizer(embedder_corpus(), config.vocab_size)
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(  # Qwen3-Embedding's: each text + eot
        single="$A <|endoftext|>", pair="$A <|endoftext|> $B <|endoftext|>", special_tokens=[("<|endoftext|>", end)]
    )
    tokenizer.padding_side = "left"
    tokenizer.init_kwargs["padding_side"] = "left"  # what save_pretrained writes
    model_config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        head_dim=config.head_dim,
        max_position_embeddings=config.max_length,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=end,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):  # the caller's random state is left as it was
        torch.manual_seed(config.seed)
        model = Qwen3Model(model_config)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{out.name}.") as work:
        backbone, staging = Path(work) / "backbone", Path(work) / "model"
        model.save_pretrained(backbone)
        tokenizer.save_pretrained(backbone)
        transformer = Transformer(str(backbone), max_seq_length=config.max_length)
        pooling = Pooling(config.hidden_size, pooling_mode="lasttoken")
        SentenceTransformer(modules=[transformer, pooling, Normalize()], device="cpu").save(str(staging))
        if out.exists():
            shutil.rmtree(out)
        staging.rename(out)
    return out
