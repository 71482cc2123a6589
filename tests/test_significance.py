"""The paired bootstrap of method differences: its limits, its agreement with exact enumeration, and the
significance table built from evaluations' per-problem counts."""

import itertools
import json

import numpy as np
import pandas as pd
import pytest

from pacs.eval.passk import mean_pass_at_k
from pacs.report.significance import paired_bootstrap, read_per_problem, significance_table, to_markdown


def test_identical_methods_differ_by_zero():
    values = np.random.default_rng(0).random(40)
    result = paired_bootstrap(values, values)
    assert result["difference"] == 0 and result["ci_low"] <= 0 <= result["ci_high"]
    assert result["p_le_0"] == 1.0  # every replicate is exactly 0


def test_always_right_against_always_wrong_excludes_zero():
    result = paired_bootstrap(np.ones(30), np.zeros(30))
    assert result["difference"] == 1 and result["ci_low"] > 0 and result["p_le_0"] == 0.0


def test_the_interval_shrinks_as_problems_are_added():
    rng = np.random.default_rng(1)
    a, b = rng.random(30), rng.random(30)
    widths = []
    for copies in (1, 4, 16):  # the same problems again: the same mean difference, more of them
        r = paired_bootstrap(np.tile(a, copies), np.tile(b, copies))
        assert r["difference"] == pytest.approx(float((a - b).mean()))
        widths.append(r["ci_high"] - r["ci_low"])
    assert widths[0] > 1.8 * widths[1] > 3.2 * widths[2]  # about 1/sqrt(problems)


def test_pairing_is_narrower_than_two_separate_intervals():
    """Problems of shared difficulty: method A is B plus a small gain on each. Resampled jointly the gain
    is sure; resampled separately the problems' spread would swamp it."""
    rng = np.random.default_rng(2)
    b = rng.random(50)
    a = np.clip(b + 0.05, 0, 1)
    paired = paired_bootstrap(a, b)
    assert paired["ci_low"] > 0
    unpaired = a[rng.integers(0, 50, (10000, 50))].mean(1) - b[rng.integers(0, 50, (10000, 50))].mean(1)
    assert np.quantile(unpaired, 0.025) < 0 < paired["ci_low"]


def test_the_bootstrap_matches_exact_enumeration_on_a_small_case():
    """Four problems: all 4^4 equally likely resamples give the exact distribution of the mean difference."""
    a, b = np.array([1.0, 0.5, 0.25, 0.0]), np.array([0.0, 0.75, 0.0, 0.5])
    d = a - b
    exact = np.array([d[list(i)].mean() for i in itertools.product(range(4), repeat=4)])
    result = paired_bootstrap(a, b, resamples=40000, seed=3)
    assert result["p_le_0"] == pytest.approx(float((exact <= 0).mean()), abs=0.01)

    def cdf(x):
        return float((exact <= x + 1e-12).mean())

    # the interval's ends are the exact distribution's 2.5 % and 97.5 % points, up to Monte Carlo error
    assert cdf(result["ci_low"]) >= 0.025 - 0.01 and cdf(result["ci_low"] - 1e-6) <= 0.025 + 0.01
    assert cdf(result["ci_high"]) >= 0.975 - 0.01 and cdf(result["ci_high"] - 1e-6) <= 0.975 + 0.01


def test_bad_input_is_an_error():
    with pytest.raises(ValueError, match="equal, non-empty"):
        paired_bootstrap([1.0, 0.0], [1.0])
    with pytest.raises(ValueError, match="confidence"):
        paired_bootstrap([1.0], [0.0], confidence=1.0)


def _manifest(tmp_path, counts: dict) -> dict:
    """``counts``: method -> correct answers of each problem (4 samples each), as metrics.json files."""
    evaluations = []
    for method, correct in counts.items():
        path = tmp_path / method / "metrics.json"
        path.parent.mkdir()
        per_problem = [{"problem": i, "id": f"p{i}", "n": 4, "correct": c} for i, c in enumerate(correct)]
        path.write_text(json.dumps({"per_problem": per_problem[::-1]}))  # order must not matter: ids pair them
        evaluations.append({"model": "m", "method": method, "step": 0 if method == "base" else 10,
                            "benchmark": "aime2024", "metrics": str(path)})  # fmt: skip
    algorithms = {"base": None, "ppo": "ppo", "grpo": "grpo", "pacs": "pacs"}
    return {
        "name": "t",
        "models": {"m": {"label": "Model", "published_as": "Qwen2.5-7B"}},
        "methods": {
            m: {"label": m.upper(), "published_as": {"base": "Base"}.get(m, m.upper()), "algorithm": algorithms[m]}
            for m in counts
        },  # fmt: skip
        "benchmarks": {"aime2024": {"label": "AIME 2024", "published_as": "AIME24", "ks": [1, 2, 8]}},
        "evaluations": evaluations,
        "runs": [],
    }


def test_the_table_pairs_every_method_with_base_and_pacs_with_every_baseline(tmp_path):
    counts = {"base": [0, 1, 2, 0, 4], "ppo": [1, 1, 2, 0, 4], "grpo": [0, 2, 3, 1, 4], "pacs": [2, 3, 3, 1, 4]}
    manifest = _manifest(tmp_path, counts)
    published = pd.DataFrame({"model": "Qwen2.5-7B", "benchmark": "AIME24", "k": 1,
                              "method": ["PACS", "GRPO"], "pass_at_k": [60.0, 45.5]})  # fmt: skip
    table = significance_table(manifest, read_per_problem(manifest), published)
    pairs = set(zip(table["method"], table["against"], strict=True))
    assert pairs == {("ppo", "base"), ("grpo", "base"), ("pacs", "base"), ("pacs", "ppo"), ("pacs", "grpo")}
    assert set(table["k"]) == {1, 2}  # k = 8 needs 8 samples per problem
    for r in table.itertuples():  # the difference is the difference of the two benchmark scores
        want = 100 * (mean_pass_at_k([4] * 5, counts[r.method], r.k) - mean_pass_at_k([4] * 5, counts[r.against], r.k))
        assert r.difference == pytest.approx(want) and r.ci_low <= r.difference <= r.ci_high and r.problems == 5
    paper = table.set_index(["method", "against", "k"])["published_difference"]
    assert paper[("pacs", "grpo", 1)] == pytest.approx(14.5) and np.isnan(paper[("pacs", "ppo", 1)])
    markdown = to_markdown(table, manifest)
    assert "| Model | AIME 2024 | 1 | PACS − GRPO |" in markdown and "+14.50 |" in markdown


def test_methods_on_different_problems_are_an_error(tmp_path):
    manifest = _manifest(tmp_path, {"base": [0, 1, 2], "pacs": [1, 1, 2]})
    per_problem = read_per_problem(manifest)
    per_problem.loc[per_problem["method"] == "pacs", "id"] = ["q0", "q1", "q2"]
    with pytest.raises(ValueError, match="different problems"):
        significance_table(manifest, per_problem)
