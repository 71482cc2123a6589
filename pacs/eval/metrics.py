"""An evaluation's numbers, from its saved responses only: pass@k with intervals, lengths, statuses; for
code, the isolation the programs ran under and the timeouts in force."""

import pandas as pd

from pacs.eval.passk import bootstrap_ci, pass_at_k_per_problem, powers_of_two_up_to
from pacs.verify import PASSING, TASK_STATUSES
from pacs.verify.code import CodeConfig
from pacs.verify.sandbox import LEVELS

# Statuses that are the verifier's failure, not the answer's: scored 0, counted, never hidden in "wrong".
# A code program's timeout, crash or memory is the program's own verdict; only a sandbox that broke is ours.
# Reading a multiple-choice letter cannot fail
VERIFIER_FAILURES = {"math": ("timeout", "gold_unparseable", "error"), "code": ("sandbox_error",), "choice": ()}


def problem_counts(responses: pd.DataFrame, task: str = "math") -> pd.DataFrame:
    """One row per problem: ``problem`` (its index in the prepared file), ``id``, ``n`` samples, ``correct``
    (the samples the task's verifier passed: math's and choice's ``correct``, code's ``passed``)."""
    grouped = responses.groupby("problem", sort=True)
    return pd.DataFrame(
        {
            "id": grouped["id"].first(),
            "n": grouped.size(),
            "correct": grouped["status"].agg(lambda s: int((s == PASSING[task]).sum())),
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


def code_metrics(responses: pd.DataFrame, code: CodeConfig) -> dict:
    """The timeouts in force, and how many answers ran at each isolation level, every level present (zeros
    included; ``not_run``: no code was found, the sandbox never started, or the pool killed its worker past
    the program's deadline)."""
    levels = responses["isolation"].value_counts()
    isolation = {**{level: 0 for level in LEVELS}, **{k: int(v) for k, v in levels.items() if k}}
    ran = responses[responses["isolation"] != ""]
    return {
        "grading": code.profile,  # whose grader: judge, livecodebench or glm45 (pacs.verify.code)
        "test_timeout_s": code.test_timeout_s,  # seconds per test: the profile's, or code.timeout_s
        "budget_s": code.budget_s,
        "isolation": {**isolation, "not_run": int(levels.get("", 0))},
        "mean_verify_s": float(ran["verify_s"].mean()) if len(ran) else None,  # per program run, its start included
    }


def eval_metrics(responses: pd.DataFrame, confidence: float, resamples: int, task: str = "math",
                 code: CodeConfig = CodeConfig()) -> dict:  # fmt: skip
    """``code``: the code verifier's settings the responses were scored under (a code task's)."""
    counts = problem_counts(responses, task)
    n = int(counts["n"].min())
    if counts["n"].nunique() != 1:
        raise ValueError(f"problems have different sample counts {sorted(counts['n'].unique())}: incomplete responses")
    statuses = responses["status"].value_counts()
    unknown = set(statuses.index) - set(TASK_STATUSES[task])
    if unknown:
        raise ValueError(f"statuses that are not {task} verdicts in the responses: {sorted(unknown)}")
    failures = int(sum(statuses.get(s, 0) for s in VERIFIER_FAILURES[task]))
    return {
        "task": task,
        "problems": len(counts),
        "samples_per_problem": n,
        "responses": len(responses),
        "pass_at_k": pass_at_k_table(counts, powers_of_two_up_to(n), confidence, resamples),
        "confidence": confidence,
        "mean_response_tokens": float(responses["response_tokens"].mean()),
        "truncation_rate": float((responses["finish_reason"] == "length").mean()),
        "statuses": {s: int(statuses.get(s, 0)) for s in TASK_STATUSES[task]},
        "verifier_failures": failures,  # VERIFIER_FAILURES: scored 0, never hidden in "wrong"
        **({"code": code_metrics(responses, code)} if task == "code" else {}),
        "per_problem": counts.to_dict("records"),
    }
