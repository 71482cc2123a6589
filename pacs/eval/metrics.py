"""An evaluation's numbers, from its saved responses only: pass@k with intervals, lengths, statuses."""

import pandas as pd

from pacs.eval.passk import bootstrap_ci, pass_at_k_per_problem, powers_of_two_up_to
from pacs.verify import STATUSES


def problem_counts(responses: pd.DataFrame) -> pd.DataFrame:
    """One row per problem: ``problem`` (its index in the prepared file), ``id``, ``n`` samples, ``correct``."""
    grouped = responses.groupby("problem", sort=True)
    return pd.DataFrame(
        {
            "id": grouped["id"].first(),
            "n": grouped.size(),
            "correct": grouped["status"].agg(lambda s: int((s == "correct").sum())),
        }
    ).reset_index()


def pass_at_k_table(counts: pd.DataFrame, ks: list[int], confidence: float, resamples: int, seed: int = 0) -> dict:
    """``{k: {"mean", "ci_low", "ci_high"}}``: the unbiased estimate averaged over problems, and a
    bootstrap interval over problems."""
    table = {}
    for k in ks:
        values = pass_at_k_per_problem(counts["n"].tolist(), counts["correct"].tolist(), k)
        low, high = bootstrap_ci(values, confidence, resamples, seed)
        table[str(k)] = {"mean": float(values.mean()), "ci_low": low, "ci_high": high}
    return table


def eval_metrics(responses: pd.DataFrame, confidence: float, resamples: int) -> dict:
    counts = problem_counts(responses)
    n = int(counts["n"].min())
    if counts["n"].nunique() != 1:
        raise ValueError(f"problems have different sample counts {sorted(counts['n'].unique())}: incomplete responses")
    statuses = responses["status"].value_counts()
    unknown = set(statuses.index) - set(STATUSES)
    if unknown:
        raise ValueError(f"unknown verifier statuses in the responses: {sorted(unknown)}")
    failures = int(statuses.drop(["correct", "wrong", "no_answer"], errors="ignore").sum())
    return {
        "problems": len(counts),
        "samples_per_problem": n,
        "responses": len(responses),
        "pass_at_k": pass_at_k_table(counts, powers_of_two_up_to(n), confidence, resamples),
        "confidence": confidence,
        "mean_response_tokens": float(responses["response_tokens"].mean()),
        "truncation_rate": float((responses["finish_reason"] == "length").mean()),
        "statuses": {s: int(statuses.get(s, 0)) for s in STATUSES},
        "verifier_failures": failures,  # timeout, gold_unparseable, error: scored 0, never hidden in "wrong"
        "per_problem": counts.to_dict("records"),
    }
