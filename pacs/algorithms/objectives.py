"""The registry of objectives: each one's options (``pacs.algorithms.options``) with its tensor math."""

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from pacs.algorithms.core import policy_batch_loss
from pacs.algorithms.grpo import grpo_prepare
from pacs.algorithms.options import ALGORITHMS, Algorithm, get_algorithm
from pacs.algorithms.pacs import pacs_batch_loss, pacs_prepare
from pacs.algorithms.ppo import ppo_prepare, ppo_value_loss

Batch = Mapping[str, Tensor]
LossFn = Callable[[Batch, int, Any], tuple[Tensor, dict[str, Tensor]]]


@dataclass(frozen=True)
class Objective:
    algorithm: Algorithm  # its options, the batch tensors they need, its reductions
    prepare: Callable[[Batch, int, Any], dict[str, Tensor]]  # once per step, on the whole batch
    loss: LossFn  # per micro-batch of whole groups, with grad
    value_loss: Callable[[Batch, Any], tuple[Tensor, dict[str, Tensor]]] | None = None  # critic, if any

    @property
    def config(self) -> type:
        return self.algorithm.options

    def needs(self, config) -> frozenset[str]:
        return self.algorithm.needs(config)

    def reduction(self, config) -> str:
        return self.algorithm.reduction(config)

    def value_reduction(self, config) -> str:
        return self.algorithm.value_reduction(config)


OBJECTIVES: dict[str, Objective] = {
    "pacs": Objective(ALGORITHMS["pacs"], pacs_prepare, pacs_batch_loss),
    "grpo": Objective(ALGORITHMS["grpo"], grpo_prepare, policy_batch_loss),
    "ppo": Objective(ALGORITHMS["ppo"], ppo_prepare, policy_batch_loss, value_loss=ppo_value_loss),
}
assert OBJECTIVES.keys() == ALGORITHMS.keys()


def get_objective(name: str) -> Objective:
    get_algorithm(name)  # an unknown name: its error
    return OBJECTIVES[name]
