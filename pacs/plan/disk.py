"""Bytes on disk of one training checkpoint, by part, from the model's shape and the run config
(``pacs.runs.checkpoint`` says what each part is):

- **policy**: the HF weights in the compute dtype (``trainer.compute_dtype``, else ``model.dtype``);
- **critic** (PPO): its HF weights in ``model.dtype`` (the LM head replaced by a one-output value head);
- **reference** (a reference reset: PACS v2): a snapshot of the policy in the compute dtype;
- **resume**: AdamW's two moments of every trained model in ``model.dtype``, and the policy's master weights
  when the HF weights are in a lower dtype than ``model.dtype``;
- **inflight** (``rollout.staleness`` k ≥ 1): the k batches sampled ahead (``pacs.train.sampling.staleness``), at
  most: every row padded to the longest prompt and response (token ids, attention mask and positions in
  int64), the response mask and the behaviour log-probs (fp32), and the completions as pickled (token ids,
  log-probs and text): ``INFLIGHT_RESPONSE_BYTES`` a response token.

File headers, the tokenizer and the counters (kilobytes) are not counted.
"""

from pacs.plan.memory import DTYPE_BYTES, critic_params, dims

# a response token beyond the padded int64 tensors, at most: response mask 1 and behaviour log-prob 4 (tensors),
# pickled token id up to 5 and engine log-prob 9 (a Python float), text up to 8 (measured per padded response
# column on the tiny runs: 22.6 with vllm, 23.3 to 23.8 with hf)
INFLIGHT_RESPONSE_BYTES = 27


def checkpoint_bytes(shape, run: dict, has_critic: bool) -> dict[str, int]:
    """``{part: bytes}`` of one checkpoint of run config ``run`` (resolved)."""
    d = dims(shape)
    master, compute = run["model"]["dtype"], run["trainer"]["compute_dtype"] or run["model"]["dtype"]
    params = d["params"]
    critic = critic_params(d, shape) if has_critic else 0
    parts = {"policy": params * DTYPE_BYTES[compute], "critic": critic * DTYPE_BYTES[master]}
    parts["reference"] = params * DTYPE_BYTES[compute] if run["trainer"]["reference_reset_every"] else 0
    parts["resume"] = 2 * (params + critic) * DTYPE_BYTES[master]
    parts["resume"] += params * DTYPE_BYTES[master] if compute != master else 0
    rollout, width = run["rollout"], run["data"]["max_prompt_length"] + run["rollout"]["max_response_length"]
    rows = rollout["staleness"] * run["trainer"]["batch_size"] * rollout["n"]
    parts["inflight"] = rows * (3 * 8 * width + INFLIGHT_RESPONSE_BYTES * rollout["max_response_length"])
    return parts


def run_disk_bytes(parts: dict[str, int], run: dict, kept_steps: list[int]) -> dict[str, int]:
    """Disk of a run under retention: ``peak`` while its last checkpoint is written (``keep_resumable`` whole
    checkpoints, the one being staged, and the policy weights of the other kept steps) and ``final`` when it
    is done; ``checkpoints``: how many it saves."""
    c, last = run["checkpoint"], run["trainer"]["total_steps"]
    saved = sorted(set(range(c["save_every"], last + 1, c["save_every"])) | {last})
    whole = saved[-c["keep_resumable"] :]
    weights_only = [s for s in saved if s not in whole and s in kept_steps]
    full = sum(parts.values())
    final = len(whole) * full + len(weights_only) * parts["policy"]
    return {"peak": final + full, "final": final, "checkpoints": len(saved)}
