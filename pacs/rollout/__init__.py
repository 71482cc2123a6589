"""Rollout engines: prompts (token ids) and sampling parameters in, n completions per prompt out.

The trainer and the evaluator only see ``RolloutEngine``; transformers details live in ``hf.py``,
every vLLM detail in ``vllm.py``.
"""

from pacs.rollout.base import Completion, RolloutEngine, SamplingParams

__all__ = ["Completion", "RolloutEngine", "SamplingParams"]
