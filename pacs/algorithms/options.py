"""Each objective's options and what they ask of a trainer, without torch: a run's config is checked, the
workflow planned and a launcher started without importing it (``pacs.algorithms.objectives`` holds the
objectives' tensor math under the same names)."""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm")
KL_ESTIMATORS = ("k1", "k3")
GROUP_SCORES = ("rloo", "grpo", "none")
REWARD_PROXIES = ("log-ratio", "length-normalized", "reference")
WEIGHTINGS = ("balanced", "positive", "negative", "none")


def check_tis_cap(cap: float | None) -> None:
    if cap is not None and cap < 1:
        raise ValueError(f"tis_cap must be >= 1 (on-policy samples have ratio 1) or null, got {cap}")


@dataclass(frozen=True)
class PolicyLossConfig:
    """Options of the clipped policy loss shared by GRPO and PPO (verl names in brackets)."""

    clip_ratio_low: float = 0.2  # ε_low: ratio clipped below at 1 − ε_low [clip_ratio_low]
    clip_ratio_high: float = 0.2  # ε_high: ratio clipped above at 1 + ε_high (DAPO uses 0.28) [clip_ratio_high]
    clip_ratio_c: float = 3.0  # dual-clip bound for negative advantages (Ye et al. 2020) [clip_ratio_c]
    loss_agg_mode: str = "seq-mean-token-sum-norm"  # the paper's baselines; see aggregate_loss
    max_response_length: int | None = None  # L of seq-mean-token-sum-norm; None uses the padded T
    kl_coef: float = 0.0  # weight of the KL-to-reference loss; 0 disables it [use_kl_loss, kl_loss_coef]
    kl_estimator: str = "k3"  # k1 or k3 [kl_loss_type: kl, low_var_kl]
    entropy_coef: float = 0.0  # entropy bonus; the paper used 0 [entropy_coeff]
    # rollout correction: each token's loss weighted by min(π_old/π_sampler, C), C this cap (verl's
    # tis_imp_ratio_cap, typically 2); null: off, as the paper trained
    tis_cap: float | None = None

    def __post_init__(self):
        check_tis_cap(self.tis_cap)
        if self.clip_ratio_c <= 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 for dual-clip PPO, got {self.clip_ratio_c}")
        if self.loss_agg_mode not in LOSS_AGG_MODES:
            raise ValueError(f"loss_agg_mode {self.loss_agg_mode!r} is not one of {LOSS_AGG_MODES}")
        if self.kl_estimator not in KL_ESTIMATORS:
            raise ValueError(f"kl_estimator {self.kl_estimator!r} is not one of {KL_ESTIMATORS}")


@dataclass(frozen=True)
class GrpoConfig(PolicyLossConfig):
    """GRPO options: the clipped policy loss's, plus how rewards are normalised in a group."""

    norm_by_std: bool = True  # divide by the group std; False is Dr. GRPO [norm_adv_by_std_in_grpo]
    eps: float = 1e-6  # added to the group std


@dataclass(frozen=True)
class PacsConfig:
    """PACS options; defaults are the official scripts' (official names in brackets)."""

    beta: float = 1.0  # β, scale of the reward proxy; the paper runs 1 and 2 [beta]
    reward_proxy: str = "log-ratio"  # log-ratio: β Σ (log π_θ − log π_old) [reward_method=1];
    #   length-normalized: β Σ log π_θ / |o| [reward_method=2]; reference: β Σ (log π_θ − log π_ref)
    score: str = "rloo"  # group score ψ from r̂: rloo, grpo or none [adv_estimator: rloo, grpo, naive]
    norm_by_std: bool = True  # for score=grpo: divide by the group std [norm_adv_by_std_in_grpo]
    eps: float = 1e-6  # for score=grpo: added to the std
    weighting: str = "balanced"  # balanced [use_weight, weight_mode=question], positive [only_positive],
    #   negative [only_negative] or none [use_weight=False]
    # rollout correction: each answer's BCE term weighted by min(π_old(o)/π_sampler(o), C), C this cap (the
    # sequence-level form of truncated importance sampling: pacs_loss); null: off, as the paper trained
    tis_cap: float | None = None

    def __post_init__(self):
        check_tis_cap(self.tis_cap)
        for key, value, choices in (
            ("reward_proxy", self.reward_proxy, REWARD_PROXIES),
            ("score", self.score, GROUP_SCORES),
            ("weighting", self.weighting, WEIGHTINGS),
        ):
            if value not in choices:
                raise ValueError(f"pacs.{key} = {value!r} is not one of {choices}")


@dataclass(frozen=True)
class PpoConfig(PolicyLossConfig):
    """PPO options: the clipped policy loss's, plus GAE and the critic's loss (verl names)."""

    gamma: float = 1.0  # discount γ; the official baseline used 1 [algorithm.gamma]
    lam: float = 1.0  # GAE λ; the official baseline used 1 [algorithm.lam]
    whiten_advantages: bool = True  # normalise advantages over the batch's response tokens
    value_clip: float = 0.5  # critic predictions clipped to old value ± this [critic.cliprange_value]
    # aggregation of the critic loss; null: the actor's loss_agg_mode, as the fork's
    # critic.loss_agg_mode: ${actor_rollout_ref.actor.loss_agg_mode} [critic.loss_agg_mode]
    value_loss_agg_mode: str | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.value_loss_agg_mode not in (None, *LOSS_AGG_MODES):
            raise ValueError(f"value_loss_agg_mode {self.value_loss_agg_mode!r} is not one of {LOSS_AGG_MODES}")

    @property
    def value_agg(self) -> str:
        return self.value_loss_agg_mode or self.loss_agg_mode


def _correction_needs(config) -> set[str]:
    return {"old_logprobs", "sampler_logprobs"} if config.tis_cap is not None else set()


def _pacs_needs(config: PacsConfig) -> frozenset[str]:
    needs = {"log-ratio": {"old_logprobs"}, "reference": {"ref_logprobs"}}.get(config.reward_proxy, set())
    return frozenset(needs | _correction_needs(config))


def _policy_needs(config: PolicyLossConfig) -> frozenset[str]:
    needs = {"old_logprobs"} | _correction_needs(config)
    if config.kl_coef:
        needs.add("ref_logprobs")
    if config.entropy_coef:
        needs.add("entropy")
    return frozenset(needs)


AGG_REDUCTION = {
    "token-mean": "tokens",
    "seq-mean-token-sum": "sequences",
    "seq-mean-token-mean": "sequences",
    "seq-mean-token-sum-norm": "sum",
}


@dataclass(frozen=True)
class Algorithm:
    """An objective as a run's config sees it."""

    options: type  # frozen dataclass of the objective's options; defaults are the paper's
    needs: Callable[[Any], frozenset[str]]  # batch tensors beyond logprobs, response_mask, rewards
    # what its loss averages over, so that a trainer can weight micro-batches to get the loss of the whole
    # mini-batch: "sequences", "tokens", or "sum" (a sum with a constant divisor: micro-batch losses add up)
    reduction: Callable[[Any], str]
    value_reduction: Callable[[Any], str] | None = None  # the critic's, for an objective with one
    # its loss reads a group's rows together (PACS: each score is relative to the group's others), so a
    # micro-batch holds whole groups; else a group larger than a token budget is split (pacs.train.update.packing)
    whole_groups: bool = False

    @property
    def critic(self) -> bool:
        return self.value_reduction is not None


ALGORITHMS: dict[str, Algorithm] = {
    "pacs": Algorithm(PacsConfig, _pacs_needs, lambda c: "sequences", whole_groups=True),
    "grpo": Algorithm(GrpoConfig, _policy_needs, lambda c: AGG_REDUCTION[c.loss_agg_mode]),
    "ppo": Algorithm(
        PpoConfig,
        lambda c: _policy_needs(c) | {"values"},
        lambda c: AGG_REDUCTION[c.loss_agg_mode],
        value_reduction=lambda c: AGG_REDUCTION[c.value_agg],
    ),
}


def get_algorithm(name: str) -> Algorithm:
    if name not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {name!r}; choose one of {sorted(ALGORITHMS)}")
    return ALGORITHMS[name]
