"""Unbiased pass@k (Chen et al. 2021, "Evaluating Large Language Models Trained on Code").

For a problem with c correct answers among n samples, the probability that a random k-subset
holds at least one correct answer is 1 − C(n−c, k)/C(n, k). The ratio of binomials is computed
as the product Π_{i=n−c+1}^{n} (1 − k/i), which never forms a large binomial (human-eval's form).
"""

from collections.abc import Sequence

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one problem with c correct answers among n samples."""
    if not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got c={c}, n={n}")
    if not 1 <= k <= n:
        raise ValueError(f"pass@{k} needs 1 <= k <= n samples, got n={n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_per_problem(n: Sequence[int], c: Sequence[int], k: int) -> np.ndarray:
    """pass@k of each problem; n may differ between problems."""
    if len(n) != len(c):
        raise ValueError(f"{len(n)} sample counts but {len(c)} correct counts")
    return np.array([pass_at_k(int(ni), int(ci), k) for ni, ci in zip(n, c, strict=True)], dtype=float)


def mean_pass_at_k(n: Sequence[int], c: Sequence[int], k: int) -> float:
    """A benchmark's pass@k: the mean over its problems."""
    values = pass_at_k_per_problem(n, c, k)
    if values.size == 0:
        raise ValueError("no problems")
    return float(values.mean())


def bootstrap_ci(
    per_problem: Sequence[float], confidence: float = 0.95, resamples: int = 2000, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean, resampling problems with replacement.

    It covers the spread from which problems the benchmark happens to hold; the sampling noise
    of each problem's estimate is not in it.
    """
    values = np.asarray(per_problem, dtype=float)
    if values.size == 0:
        raise ValueError("no problems")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, values.size, size=(resamples, values.size))].mean(axis=1)
    alpha = (1 - confidence) / 2
    lo, hi = np.quantile(means, [alpha, 1 - alpha])
    return float(lo), float(hi)


def powers_of_two_up_to(n: int) -> list[int]:
    """k = 1, 2, 4, … ≤ n: the paper's grid."""
    return [2**i for i in range(int(np.log2(n)) + 1)] if n >= 1 else []
