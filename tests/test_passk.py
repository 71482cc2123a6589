import itertools
import random

import numpy as np
import pytest

from pacs.eval.passk import bootstrap_ci, mean_pass_at_k, pass_at_k, pass_at_k_per_problem, powers_of_two_up_to


def brute_force(n: int, c: int, k: int) -> float:
    """Fraction of all k-subsets of n samples (c correct) that contain a correct one."""
    samples = [1] * c + [0] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_matches_enumeration_of_all_k_subsets_on_random_cases():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(1, 12)
        c = rng.randint(0, n)
        k = rng.randint(1, n)
        assert pass_at_k(n, c, k) == pytest.approx(brute_force(n, c, k), abs=1e-12)


def test_edges_and_large_n_are_stable():
    assert pass_at_k(256, 0, 256) == 0.0
    assert pass_at_k(256, 1, 256) == 1.0
    assert pass_at_k(256, 256, 1) == 1.0
    assert pass_at_k(256, 1, 1) == pytest.approx(1 / 256)
    assert pass_at_k(1024, 3, 100) == pytest.approx(1 - (924 * 923 * 922) / (1024 * 1023 * 1022))


def test_k_above_n_is_an_error():
    with pytest.raises(ValueError, match="pass@9 needs"):
        pass_at_k(8, 2, 9)
    with pytest.raises(ValueError, match="c <= n"):
        pass_at_k(8, 9, 1)


def test_mean_over_problems_with_different_n():
    n, c = [4, 8, 16], [1, 0, 16]
    assert mean_pass_at_k(n, c, 2) == pytest.approx((0.5 + 0.0 + 1.0) / 3)
    assert pass_at_k_per_problem(n, c, 1).tolist() == pytest.approx([0.25, 0.0, 1.0])


def test_bootstrap_interval_brackets_the_mean_and_narrows_with_more_problems():
    rng = np.random.default_rng(0)
    small = rng.random(20)
    large = rng.random(2000)
    lo, hi = bootstrap_ci(small, seed=1)
    assert lo < small.mean() < hi
    assert bootstrap_ci(small, seed=1) == (lo, hi)  # seeded: reproducible
    lo2, hi2 = bootstrap_ci(large, seed=1)
    assert hi2 - lo2 < (hi - lo) / 3
    assert bootstrap_ci([0.5] * 10) == (0.5, 0.5)


def test_powers_of_two():
    assert powers_of_two_up_to(256) == [1, 2, 4, 8, 16, 32, 64, 128, 256]
    assert powers_of_two_up_to(40) == [1, 2, 4, 8, 16, 32]
