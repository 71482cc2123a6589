"""Bytes per GPU of a training or evaluation job, by component, from the model's shape and the job's config.

A training step is counted per GPU in the phases that ``pacs.ranks.memory`` measures (``PHASES``, in the
step's order), and the job's peak is the largest:

- **generate**: the trainer's parameters and moments (gradients are freed after each optimizer step) and a
  reference's parameters, beside the engine: vLLM's share of the card, ``rollout.vllm.gpu_memory_utilization``
  (its KV cache is what is left of that share after its weights, in the compute dtype, and
  ``vllm_overhead_bytes``), or transformers' KV cache of one ``generate`` call (``rollout.engine: hf``) and,
  under fsdp, the policy gathered whole in the compute dtype for that call.
- **no_grad**: old log-probs, reference log-probs and values: the trainer's state as in generate, FSDP2's
  gathered root and two layers (compute dtype, no gradients), one micro-batch through a forward without
  autograd (``forward_bytes``) and its logits. vLLM sleeps (``rollout.vllm.sleep_level`` 1: its weights
  backed up in host memory; 2: dropped; its weights and KV cache leave the GPU, its CUDA graphs stay: vLLM 0.32
  keeps them outside its pool, ``vllm graphs``, none with ``enforce_eager``) or keeps its share of the card (0).
- **update**: each trained model's parameters and AdamW moments and the larger model's gradients (the critic's are
  freed before the actor's update) in ``model.dtype`` (1/world of each under fsdp; ddp adds its gradient buckets,
  a second copy of the gradients), a reference model's parameters, FSDP2's unsharded working set (the root module
  and two decoder layers gathered in the compute dtype; in backward the root's and a layer's gradients and, below
  fp32, the fp32 copy reduce-scatter takes), one micro-batch's activations at the peak of its backward, and
  ``backward``: the larger of the LM head's transients (a chunk's logits, the head's fp32 gradient) and a
  decoder layer's (``backward_bytes``). vLLM sleeps or keeps its share as in no_grad.

Each phase on a GPU adds ``overhead_bytes`` (the CUDA context, NCCL's buffers): what the preflight's device
figure counts and torch's does not; a job fits within the card less the calibration's headroom
(``pacs.plan.fit.usable_bytes``). On a CPU (0 GPUs) vLLM and the process's own libraries are not counted.
Held, for every paper job, to pacs's own step traced on fake tensors (``pacs.bench.traced``,
tests/test_memory_trace.py).

Activations per token of one decoder layer (Qwen2 and Qwen3, SDPA attention) are the tensors autograd saves, counted
from transformers' implementation and checked against ``torch.autograd.graph.saved_tensors_hooks``
(tests/test_plan.py): in the compute dtype (b bytes) the two RMSNorm outputs and their normalized inputs
(4h), the rotated queries and the attention output (2·q), keys and values (2·kv), and the MLP's gate, up,
activation and product (4·i); in fp32 the two RMSNorm inputs (2h), the attention's log-sum-exp (one per
head) and the two reciprocal norms; with Liger's kernels each RMSNorm keeps its input and a reciprocal norm, and
SwiGLU its gate and up projections (3·i). With activation checkpointing of the first K layers each keeps only its
input (b·h), and backward frees the other layers' activations before it recomputes the first K (every layer
recomputing: one layer's alive again). Qwen3's RMSNorm over each query and key head adds
their fp32 inputs and normalized inputs (q + kv, in fp32 and in b bytes) and one reciprocal norm per head.
"""

import math

# an evaluation engine's max_model_len when the config leaves it to vLLM (longest prompt + max_tokens): the
# paper's benchmark prompts are under 1,024 tokens (the longest, in MATH-500 and AIME 2025, are 1,734 characters)
EVAL_PROMPT_TOKENS = 1024
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
PHASES = ("generate", "no_grad", "update")  # a training step's, in its order


def dims(shape) -> dict:
    """The sizes the formulas use, from a ``Qwen2Config``-like ``shape``."""
    heads = shape.num_attention_heads
    head_dim = getattr(shape, "head_dim", None) or shape.hidden_size // heads
    kv_heads = getattr(shape, "num_key_value_heads", None) or heads
    h, i, v = shape.hidden_size, shape.intermediate_size, shape.vocab_size
    q, kv = heads * head_dim, kv_heads * head_dim
    qk_norm = (getattr(shape, "model_type", None) or "qwen2") == "qwen3"  # no biases; RMSNorm per q and k head
    layer = h * q + 2 * h * kv + q * h + 3 * h * i + 2 * h  # q, k, v, o, MLP, norms
    bias = (getattr(shape, "model_type", None) or "qwen2") == "qwen2"
    layer += 2 * head_dim if qk_norm else (q + 2 * kv) * bias  # qwen3's q and k norms, or qwen2's q, k, v biases
    root = v * h * (1 if shape.tie_word_embeddings else 2) + h  # embedding, head when untied, final norm
    return {"h": h, "i": i, "vocab": v, "q": q, "kv": kv, "heads": heads, "kv_heads": kv_heads, "qk_norm": qk_norm,
            "layers": shape.num_hidden_layers, "layer_params": layer, "root_params": root,
            "params": root + shape.num_hidden_layers * layer,
            "kv_bytes_per_token_fp": 2 * shape.num_hidden_layers * kv}  # fmt: skip


def critic_params(d: dict, shape) -> int:
    """A critic's parameters: the policy's, its untied LM head replaced by a one-output value head."""
    return d["params"] - (d["vocab"] * d["h"] if not shape.tie_word_embeddings else 0) + d["h"] + 1


def layer_activation_bytes(d: dict, b: int, liger: bool = False) -> int:
    """Bytes autograd saves per token in one decoder layer computing in a ``b``-byte dtype; ``liger``: with Liger's
    RMSNorm, SwiGLU and rotary kernels (module docstring)."""
    if liger:  # each norm its input and a reciprocal norm; SwiGLU its gate and up projections
        saved = b * (4 * d["h"] + 2 * d["q"] + 2 * d["kv"] + 3 * d["i"]) + 4 * (d["heads"] + 2)
        if d["qk_norm"]:
            saved += b * (d["q"] + d["kv"]) + 4 * (d["heads"] + d["kv_heads"])
        return saved
    saved = b * (4 * d["h"] + 2 * d["q"] + 2 * d["kv"] + 4 * d["i"]) + 4 * (2 * d["h"] + d["heads"] + 2)
    if d["qk_norm"]:  # each head norm keeps its fp32 input, its normalized input and a reciprocal norm per head
        saved += (4 + b) * (d["q"] + d["kv"]) + 4 * (d["heads"] + d["kv_heads"])
    return saved


def activation_bytes(d: dict, b: int, tokens: int, checkpointing: bool, layers: int | None = None,
                     liger: bool = False) -> int:  # fmt: skip
    """A micro-batch of ``tokens`` through the decoder at the peak of its backward: every layer's activations; or
    with checkpointing, each recomputing layer's input (the first ``layers``, None: all) and the other layers'
    activations whole, which backward frees before it recomputes the first (so with every layer recomputing, one
    layer's activations alive again); plus the final norm's (fp32 input, output) and ids."""
    per_layer = layer_activation_bytes(d, b, liger)
    recomputed = min(d["layers"] if layers is None else layers, d["layers"]) if checkpointing else 0
    kept = recomputed * b * d["h"] + max(d["layers"] - recomputed, 1) * per_layer
    return tokens * (kept + 4 * d["h"] + b * d["h"] + 12)


def backward_bytes(d: dict, b: int, tokens: int) -> int:
    """A decoder layer's backward beyond what it saved, at its peak: the MLP's three gradients of intermediate width
    (the down projection's input, the activation's and the up projection's) and the residual stream's incoming and
    accumulated gradients. With Liger's SwiGLU, whose backward writes into its saved tensors, fewer: not counted."""
    return tokens * b * (3 * d["i"] + 2 * d["h"])


def logit_bytes(d: dict, b: int, tokens: int, response_tokens: int, chunk: int | None) -> int:
    """The LM head's logits at their peak: with chunks, one chunk's (the matmul output, its fp32 copy and the
    softmax gradient) plus the head's fp32 gradient accumulator and the response hidden states; without,
    the whole micro-batch's logits and three fp32 tensors over its response positions."""
    if chunk is None:
        return d["vocab"] * (tokens * b + response_tokens * 12)
    rows = min(chunk, response_tokens)
    return rows * d["vocab"] * (b + 8) + d["vocab"] * d["h"] * 4 + response_tokens * d["h"] * b


def forward_bytes(d: dict, b: int, tokens: int) -> int:
    """A forward without autograd of ``tokens`` through the decoder, at its peak: the residual stream and a
    layer's normalized input (2h), and the larger of that layer's transients: the MLP's activation, up
    projection and their product (3i), or the attention's queries, keys, values and output (2q + 2kv) beside
    RMSNorm's fp32 input and normalized input (8h, in bytes)."""
    return tokens * (2 * b * d["h"] + max(3 * b * d["i"], b * (2 * d["q"] + 2 * d["kv"]) + 8 * d["h"]))


def forward_logit_bytes(d: dict, b: int, tokens: int, response_tokens: int, chunk: int | None) -> int:
    """The LM head's logits in a pass without autograd: one chunk's matmul output, its fp32 copy and the
    entropy's two fp32 tensors; without chunks, as ``logit_bytes``."""
    if chunk is None:
        return d["vocab"] * (tokens * b + response_tokens * 12)
    return min(chunk, response_tokens) * d["vocab"] * (b + 12)


def sampling_bytes(d: dict, b: int, run: dict, world: int) -> int:
    """transformers' ``generate`` (``rollout.engine: hf``): the KV cache of one call's sequences (``prompt_batch_size``
    prompts of this rank's share, n samples each) at their longest, and three fp32 tensors of next-token scores."""
    r, t = run["rollout"], run["trainer"]
    sequences = min(r["prompt_batch_size"], max(t["batch_size"] // world, 1)) * r["n"]
    length = run["data"]["max_prompt_length"] + r["max_response_length"]
    return sequences * (length * d["kv_bytes_per_token_fp"] * b + 12 * d["vocab"])


def group_tokens(run: dict) -> tuple[int, int]:
    """(positions, response tokens) of one group of n samples at the maximum lengths, as the trainer computes
    it and a token budget counts it (``pacs.train.update.packing.cost``): packed with its prompt shared
    (``trainer.pack_sequences`` and ``share_prompt``), the prompt once and n responses; else n prompts and n
    responses."""
    t, r = run["trainer"], run["rollout"]
    n, prompt, response = r["n"], run["data"]["max_prompt_length"], r["max_response_length"]
    shared = t.get("pack_sequences", True) and t.get("share_prompt", True) and n > 1
    return (prompt if shared else n * prompt) + n * response, n * response


def splits_groups(trainer, whole_groups: bool = False) -> bool:
    """Whether passes by a token budget run a group above it in parts (``pacs.train.update.packing``): with a budget,
    where a part's rows keep their prompt (packed rows, or every row its own prompt), and, for an update, a loss
    that treats rows apart (``whole_groups`` False: not PACS's, ``Algorithm.whole_groups``). ``trainer``: the run's
    trainer section, a dict or ``TrainerConfig``."""
    get = trainer.get if isinstance(trainer, dict) else lambda k, default=None: getattr(trainer, k, default)
    layout = get("pack_sequences", True) or not get("share_prompt", True)
    return bool(get("max_tokens_per_micro_batch")) and layout and not whole_groups


def update_splits_groups(run: dict) -> bool:
    """``splits_groups`` for the update of run config ``run`` (a run of no known objective: not)."""
    from pacs.algorithms.options import ALGORITHMS

    name = run.get("algorithm", {}).get("name")
    return name in ALGORITHMS and splits_groups(run["trainer"], ALGORITHMS[name].whole_groups)


def floor_tokens(run: dict) -> int:
    """The smallest token budget a run can take: one group at the maximum lengths (``group_tokens``), or, where
    the update splits groups (``update_splits_groups``), one row at them."""
    if update_splits_groups(run):  # a budget to size is set (auto or a number)
        return run["data"]["max_prompt_length"] + run["rollout"]["max_response_length"]
    return group_tokens(run)[0]


def micro_batch_tokens(run: dict) -> tuple[int, int]:
    """(positions, response tokens) of the largest micro-batch: the token budget (the positions a micro-batch
    may hold), or micro_batch_size groups at the maximum lengths."""
    t = run["trainer"]
    if "auto" in (t["max_tokens_per_micro_batch"], t.get("checkpoint_layers")):
        raise ValueError("trainer sizes of 'auto' are resolved for a device first (pacs.plan.fit.fit_sizes)")
    group, responses = group_tokens(run)
    tokens = t["max_tokens_per_micro_batch"] or t["micro_batch_size"] * group
    return tokens, tokens * responses // group


def liger_in(run: dict, shape, gpus: int) -> bool:
    """Whether the trainer computes with Liger's kernels (``pacs.tensors.kernels.liger_on``): as
    ``trainer.liger_kernels`` says, or where it is null on GPUs for Qwen2 and Qwen3 unless ``trainer.compile``."""
    t = run["trainer"]
    if t.get("liger_kernels") is not None:
        return t["liger_kernels"]
    family = getattr(shape, "model_type", None) or "qwen2"
    return gpus > 0 and family in ("qwen2", "qwen3") and not t.get("compile")


def training_memory(shape, run: dict, gpus: int, needs_reference: bool, has_critic: bool, gpu_memory: int,
                    cal) -> dict:  # fmt: skip
    """``{phase: {component: bytes}}`` for each of ``PHASES``, and ``"kv_cache"`` with a vLLM engine, per GPU of
    run config ``run`` on ``gpus`` GPUs (0: one CPU process) of ``gpu_memory`` bytes (vLLM's share is of it); ``cal``
    (``pacs.plan.calibration.Calibration``): the overheads it adds."""
    d, t = dims(shape), run["trainer"]
    world = max(gpus, 1)
    bm = DTYPE_BYTES[run["model"]["dtype"]]
    bc = DTYPE_BYTES[t["compute_dtype"] or run["model"]["dtype"]]
    fsdp = t["strategy"] == "fsdp" and (world > 1 or bc != bm)  # one rank shards only to compute in bf16
    shard = world if fsdp else 1
    trained = d["params"] + (critic_params(d, shape) if has_critic else 0)
    tokens, response = micro_batch_tokens(run)
    acts = activation_bytes(d, bc, tokens, t["gradient_checkpointing"], t.get("checkpoint_layers"),
                            liger_in(run, shape, gpus))  # fmt: skip
    gathered = d["root_params"] + 2 * d["layer_params"]  # FSDP2's root and two layers, unsharded
    # in backward: those, the root's and one layer's unsharded gradients and, below fp32, that layer's fp32 copy that
    # reduce-scatter takes (the root stays gathered until its backward, the embedding's, ends the pass)
    gathered_grads = (d["root_params"] + d["layer_params"]) * bc + (d["layer_params"] * 4 if bc != 4 else 0)
    state = {
        "parameters": math.ceil(trained * bm / shard),
        "optimizer": math.ceil(2 * trained * bm / shard),
        "reference": math.ceil(d["params"] * bm / shard) if needs_reference else 0,
    }
    update = {
        "parameters": state["parameters"],
        # the critic's are freed before the actor's update: the larger model's
        "gradients": math.ceil(max(d["params"], critic_params(d, shape) if has_critic else 0) * bm / shard)
        * (2 if t["strategy"] == "ddp" and world > 1 else 1),
        "optimizer": state["optimizer"],
        "reference": state["reference"],
        "gathered": gathered * bc + gathered_grads if fsdp else 0,
        "activations": acts,
        # the larger transient of backward: the LM head's (first, all activations still alive) or a layer's
        "backward": max(logit_bytes(d, bc, tokens, response, t["logprob_chunk_size"]), backward_bytes(d, bc, tokens)),
        "overhead": cal.overhead_bytes if gpus else 0,
    }
    no_grad = {**state, "gathered": gathered * bc if fsdp else 0, "forward": forward_bytes(d, bc, tokens),
               "logits": forward_logit_bytes(d, bc, tokens, response, t["logprob_chunk_size"]),
               "overhead": update["overhead"]}  # fmt: skip
    vllm = run["rollout"]["engine"] == "vllm" and gpus > 0
    options = run["rollout"]["vllm"]
    share = int(options["gpu_memory_utilization"] * gpu_memory) if vllm else 0
    if vllm and options.get("sleep_level", 2) == 0:
        update["vllm (awake)"] = no_grad["vllm (awake)"] = share
    elif vllm and not options.get("enforce_eager"):  # asleep, its CUDA graphs stay (outside its pool)
        update["vllm graphs"] = no_grad["vllm graphs"] = cal.vllm_graph_bytes
    generate = {**state, "overhead": update["overhead"]}
    if vllm:
        generate["vllm"] = share
    if run["rollout"]["engine"] != "vllm":  # transformers samples from the trained policy itself
        generate["sampling"] = sampling_bytes(d, bc, run, world)
        if fsdp:  # gathered whole in the compute dtype for the call (pacs.ranks.distributed.gathered)
            generate["gathered"] = d["params"] * bc
        return {"generate": generate, "no_grad": no_grad, "update": update}
    length = run["rollout"]["vllm"].get("max_model_len") or run["data"]["max_prompt_length"] + run["rollout"][
        "max_response_length"]  # fmt: skip
    weights, per_token = d["params"] * bc, d["kv_bytes_per_token_fp"] * bc
    kv = {"weights": weights, "cache": share - weights - cal.vllm_overhead_bytes if vllm else 0,
          "per_sequence": per_token * length, "max_model_len": length}  # fmt: skip
    return {"generate": generate, "no_grad": no_grad, "update": update, "kv_cache": kv}


def evaluation_memory(shape, settings: dict, gpus: int, gpu_memory: int, cal) -> dict:
    """``{"generate": {...}, "kv_cache": {...}}`` per GPU of one evaluation (one vLLM engine, bf16 weights;
    ``engine: auto`` counts as vLLM, what a GPU node runs)."""
    d = dims(shape)
    b = 2 if settings["dtype"] == "auto" else DTYPE_BYTES[settings["dtype"]]
    tp = settings["vllm"]["tensor_parallel_size"]
    share = int(settings["vllm"]["gpu_memory_utilization"] * gpu_memory) if gpus else 0
    weights = math.ceil(d["params"] * b / tp)
    length = settings["vllm"]["max_model_len"] or EVAL_PROMPT_TOKENS + settings["max_tokens"]
    per_token = d["kv_bytes_per_token_fp"] * b // tp
    overhead = cal.overhead_bytes if gpus else 0
    generate = {"vllm": share if gpus else weights, "overhead": overhead}
    if settings["engine"] == "hf":  # transformers: the weights and its own cache (not counted)
        return {"generate": {"weights": weights, "overhead": overhead}}
    kv = {"weights": weights, "cache": share - weights - cal.vllm_overhead_bytes if gpus else 0,
          "per_sequence": per_token * length, "max_model_len": length}  # fmt: skip
    return {"generate": generate, "kv_cache": kv}
