"""Paired differences in pass@k between two methods of one model on one benchmark, with their uncertainty.

The paper's claims are differences between methods on 30 to 500 problems. Both methods answered the same
problems, so the difference is estimated problem by problem: d_i = pass@k_i(A) − pass@k_i(B), and its
mean is the difference of the two reported pass@k. A paired bootstrap resamples problems with replacement,
one resampling shared by both methods, and recomputes the mean difference: the percentile interval of
those replicates, and the share of replicates in which the difference is ≤ 0 (a one-sided bootstrap
p-value for "A is better than B"), describe how much of it is which problems the benchmark happens to
hold. Pairing removes the problems' shared difficulty from the noise, so the interval is narrower than
one built from the two methods' separate intervals. The sampling noise within a problem (n answers) is
not in it, as in the per-method intervals (``pacs.eval.passk.bootstrap_ci``).

Which pairs: every method against the base model, and every PACS variant against every baseline
(PPO, GRPO) of the same model, at every k both were evaluated at.
"""

import numpy as np
import pandas as pd

from pacs.eval.passk import pass_at_k_per_problem
from pacs.report.collect import final_rows, published_value, read_metrics

COLUMNS = ["model", "benchmark", "k", "method", "against", "difference", "ci_low", "ci_high", "p_le_0",
           "problems", "published_difference"]  # fmt: skip
BASELINES = ("ppo", "grpo")


def paired_bootstrap(a, b, confidence: float = 0.95, resamples: int = 10000, seed: int = 0) -> dict:
    """The mean of a − b over problems (two arrays, one value per problem, same order), its percentile
    bootstrap interval and the share of replicates ≤ 0, resampling problems jointly for a and b."""
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired values need two equal, non-empty 1-D arrays, got {a.shape} and {b.shape}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    d = a - b
    index = np.random.default_rng(seed).integers(0, d.size, size=(resamples, d.size))
    replicates = d[index].mean(axis=1)
    alpha = (1 - confidence) / 2
    low, high = np.quantile(replicates, [alpha, 1 - alpha])
    return {"difference": float(d.mean()), "ci_low": float(low), "ci_high": float(high),
            "p_le_0": float((replicates <= 0).mean()), "problems": int(d.size)}  # fmt: skip


def read_per_problem(manifest: dict) -> pd.DataFrame:
    """One row per (evaluation, problem): model, method, step, benchmark, id, n, correct; from the
    ``per_problem`` records of each evaluation's metrics.json."""
    frames = []
    for e in manifest["evaluations"]:
        records = read_metrics(e).get("per_problem")
        if not records:
            raise ValueError(f"{e['metrics']}: no per_problem counts (written by pacs evaluate): re-run its evaluation")
        frame = pd.DataFrame(records)[["id", "n", "correct"]]
        frames.append(frame.assign(model=e["model"], method=e["method"], step=e["step"], benchmark=e["benchmark"]))
    return pd.concat(frames, ignore_index=True)


def _pairs(methods: dict) -> list[tuple[str, str]]:
    """(method, against) pairs: every method against base, every PACS variant against every baseline."""
    algorithms = {m: spec.get("algorithm") for m, spec in methods.items()}
    pairs = [(m, "base") for m in methods if m != "base"]
    pairs += [(m, b) for m, a in algorithms.items() if a == "pacs" for b, c in algorithms.items() if c in BASELINES]
    return pairs


def significance_table(manifest: dict, per_problem: pd.DataFrame, published: pd.DataFrame | None = None,
                       confidence: float = 0.95, resamples: int = 10000, seed: int = 0) -> pd.DataFrame:  # fmt: skip
    """Every pair of ``_pairs`` on every (model, benchmark, k) both methods were evaluated at (the last
    checkpoint of each); differences in percentage points, and the paper's own difference where it
    published both numbers (``published``: the columns of ``collect.read_published``)."""
    final = final_rows(per_problem)
    rows = []
    for (model, benchmark), frame in final.groupby(["model", "benchmark"], sort=False):
        by_method = {m: f.set_index("id") for m, f in frame.groupby("method")}
        for method, against in _pairs(manifest["methods"]):
            if method not in by_method or against not in by_method:
                continue
            a, b = by_method[method], by_method[against]
            if set(a.index) != set(b.index):
                raise ValueError(f"{model}/{benchmark}: {method} and {against} were evaluated on different problems")
            b = b.loc[a.index]
            n = int(min(a["n"].min(), b["n"].min()))
            for k in (k for k in manifest["benchmarks"][benchmark]["ks"] if k <= n):
                pa = pass_at_k_per_problem(a["n"].tolist(), a["correct"].tolist(), k)
                pb = pass_at_k_per_problem(b["n"].tolist(), b["correct"].tolist(), k)
                result = paired_bootstrap(100 * pa, 100 * pb, confidence, resamples, seed)
                paper = _published_difference(manifest, published, model, benchmark, k, method, against)
                rows.append({"model": model, "benchmark": benchmark, "k": k, "method": method, "against": against,
                             **result, "published_difference": paper})  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def _published_difference(manifest, published, model, benchmark, k, method, against) -> float:
    return published_value(published, manifest, model, method, benchmark, k) - published_value(
        published, manifest, model, against, benchmark, k)  # fmt: skip


def _signed(x: float) -> str:
    """+1.23 / -1.23, and +0.00 for what rounds to zero from below (no "-0.00")."""
    text = f"{x:+.2f}"
    return "+0.00" if text == "-0.00" else text


READABLE = ["model", "benchmark", "k", "method − against", "difference (95% CI)", "P(≤ 0)", "paper"]


def readable(table: pd.DataFrame, manifest: dict) -> pd.DataFrame:
    """The table as people read it (REPORT.md, the HTML page of ``snakemake --report``): labels instead of keys,
    the difference with its interval in one cell, the share ≤ 0, and the paper's difference (``READABLE``)."""
    label = {group: {key: spec["label"] for key, spec in manifest[group].items()} for group in
             ("models", "methods", "benchmarks")}  # fmt: skip
    rows = [(label["models"][r.model], label["benchmarks"][r.benchmark], r.k,
             f"{label['methods'][r.method]} − {label['methods'][r.against]}",
             f"{_signed(r.difference)} ({_signed(r.ci_low)} to {_signed(r.ci_high)})", f"{r.p_le_0:.3f}",
             "–" if np.isnan(r.published_difference) else _signed(r.published_difference))
            for r in table.itertuples(index=False)]  # fmt: skip
    return pd.DataFrame(rows, columns=READABLE)


def to_markdown(table: pd.DataFrame, manifest: dict) -> str:
    """One row per pair and k: the difference with its interval, the share ≤ 0, and the paper's difference."""
    if table.empty:
        return "No pair of methods was evaluated on the same benchmark.\n"
    shown = readable(table, manifest)
    lines = ["| " + " | ".join(shown.columns) + " |", "|" + "---|" * len(shown.columns)]
    lines += ["| " + " | ".join(str(v) for v in row) + " |" for row in shown.itertuples(index=False)]
    return "\n".join(lines) + "\n"
