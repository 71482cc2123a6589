"""pacs: reproduction of PACS (arXiv 2509.02522) with PPO and GRPO baselines."""

import re
from importlib import metadata

__version__ = "0.1.0"

# The oldest torch every code path runs on: addmm with out_dtype into an fp32 gradient from bf16 operands (the LM
# head's backward on CUDA; the overload exists from 2.8, the mixed dtypes pass from 2.10), SDPA's enable_gqa
# (2.5) and FlexAttention. pyproject.toml states the same floor (tests/test_torch_floor.py keeps them equal); it
# is read here rather than from the installed metadata, which stays as it was at the last `pip install -e`.
TORCH_FLOOR = "2.10"


def require_torch(floor: str = TORCH_FLOOR) -> None:
    """Fail at start, naming both versions, where the installed torch is older than `floor`. Compares the
    release only, so a 2.10 pre-release or source build (NGC's `2.10.0a0+...`) counts as 2.10."""
    try:
        installed = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return  # `import torch` says so where it is needed
    release = re.match(r"(\d+)\.(\d+)", installed)
    if release and tuple(map(int, release.groups())) < tuple(map(int, floor.split("."))):
        raise ImportError(f"pacs needs torch >= {floor}, but torch {installed} is installed "
                          "(docs/installing.md says which torch to install)")  # fmt: skip


require_torch()
