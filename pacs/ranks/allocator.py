"""torch's CUDA caching allocator as a training job configures it (imports nothing: the launcher sets it before
torch starts, for itself and the ranks it starts, which inherit its environment).

Expandable segments: a segment grows in place instead of a new block being reserved beside the old, so that
micro-batches of changing lengths do not leave the card in blocks no later tensor fits (fragmentation: what
torch reserves beyond what it allocates, which the plan's headroom covers, ``pacs.plan.fit``). A setting of the
user's own (``PYTORCH_CUDA_ALLOC_CONF`` in the environment) is kept. vLLM 0.32 turns expandable segments off around
its own memory pool (its sleep mode, ``vllm/device_allocator/cumem.py``) and back on after.
"""

import os

CUDA_ALLOCATOR = ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")


def configure_allocator(environ=os.environ) -> str:
    """``CUDA_ALLOCATOR`` into ``environ`` where it sets none; the setting in force."""
    name, value = CUDA_ALLOCATOR
    return environ.setdefault(name, value)
