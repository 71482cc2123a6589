"""How one model is evaluated on one prepared benchmark; defaults are the paper's protocol."""

from dataclasses import dataclass, field
from typing import Literal

from pacs.rollout.vllm import VLLMOptions
from pacs.verify import CodeConfig, VerifyConfig


@dataclass(frozen=True)
class EvalConfig:
    n: int = 32  # samples per problem (the paper: 256 for AMC23 and the AIMEs, 32 or more for MATH-500)
    temperature: float = 0.6  # 0: greedy (then n must be 1)
    top_p: float = 0.95  # nucleus sampling
    max_tokens: int = 4096  # new tokens per sample
    # the chat template's own variables, e.g. Qwen3's {enable_thinking: true}; a template ignores unknown ones
    chat_template_kwargs: dict = field(default_factory=dict)
    # another tokenizer (hub id or directory) whose chat template renders the prompts; null: the model's own
    chat_template: str | None = None
    seed: int = 0  # each chunk samples with a seed derived from this and the chunk's number
    limit: int | None = None  # evaluate only the first `limit` problems (a quick subset)
    chunk_problems: int = 64  # problems generated and written together: the unit of resume
    engine: Literal["auto", "vllm", "hf"] = "auto"  # auto: vLLM when the `vllm` module is importable
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"  # auto: the checkpoint's own
    prompt_batch_size: int = 64  # hf engine: prompts per generate call
    vllm: VLLMOptions = field(default_factory=VLLMOptions)  # the vLLM engine's options
    verifier: VerifyConfig = field(default_factory=VerifyConfig)  # a math dataset's answers
    code: CodeConfig = field(default_factory=CodeConfig)  # a code dataset's programs: timeouts, limits, isolation
    verifier_workers: int = 2  # verifier processes (math answers or programs)
    bootstrap_resamples: int = 2000  # percentile bootstrap over problems, for the pass@k intervals
    confidence: float = 0.95  # level of the pass@k intervals

    def __post_init__(self):
        for name in ("n", "max_tokens", "chunk_problems", "prompt_batch_size", "verifier_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.limit is not None and self.limit < 1:
            raise ValueError(f"limit must be >= 1 or null, got {self.limit}")
        if self.temperature == 0 and self.n != 1:
            raise ValueError(f"temperature 0 is greedy decoding: n must be 1, got {self.n}")


# Keys that change no generated response or score: they may differ when an evaluation is resumed.
RESUMABLE_KEYS = ("eval.vllm", "eval.verifier_workers", "eval.bootstrap_resamples", "eval.confidence")
GREEDY = {"n": 1, "temperature": 0.0, "top_p": 1.0}
