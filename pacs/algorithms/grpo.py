"""GRPO (Shao et al. 2024, DeepSeekMath): group-normalised outcome rewards as the advantage of
every token of an answer, optimised with the dual-clip PPO surrogate, no critic.
"""

from collections.abc import Mapping

from torch import Tensor

from pacs.algorithms.advantages import grpo_scores
from pacs.algorithms.options import GrpoConfig


def grpo_advantages(rewards: Tensor, n: int, config: GrpoConfig) -> Tensor:
    """(B,) advantage per answer, (R_i − mean) / (std + ε) within its group of n."""
    return grpo_scores(rewards, n, config.norm_by_std, config.eps)


def grpo_prepare(batch: Mapping[str, Tensor], n: int, config: GrpoConfig) -> dict[str, Tensor]:
    return {"advantages": grpo_advantages(batch["rewards"], n, config)}
