"""Every evaluation's pass@k in one long table, from the metrics.json files a manifest lists.

The manifest (written by the workflow, `workflow/rules/common.smk`) names each evaluation's model,
method, checkpoint step and benchmark, with the labels and the published counterparts to use.
"""

import json
from pathlib import Path

import pandas as pd

PUBLISHED = Path(__file__).with_name("published_pass_at_k.csv")  # the paper's Tables 1 and 2, in percent
# Each version of the paper (a config's `paper`): its published pass@k files, in percent. v1: Tables 1 and 2
# (Qwen2.5-3B/7B). v2 (arXiv 2509.02522v2): Tables 2, 6, 7 and 8 (Qwen3-4B/8B, five benchmarks), then the
# score-function ablation of App. D.3 and Table 1's pass@1 of other models (transcribed from v2's text), then
# Figure 6's out-of-domain pass@1 of Qwen3-8B (its bar labels; GRPO's LiveCodeBench bar reads 38.04, the text 38.01).
PAPER_VERSIONS = {
    "v1": (PUBLISHED,),
    "v2": (PUBLISHED.with_name("published_pass_at_k_v2.csv"), PUBLISHED.with_name("published_pass_at_k_v2_extra.csv"),
           PUBLISHED.with_name("published_pass_at_k_v2_ood.csv")),
}
COLUMNS = ["model", "method", "step", "benchmark", "k", "pass_at_k", "ci_low", "ci_high", "n", "problems",
           "verifier_failures"]  # fmt: skip


def read_manifest(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"report manifest {path} does not exist")
    manifest = json.loads(path.read_text(encoding="utf-8"))
    for key in ("models", "methods", "benchmarks", "evaluations", "runs"):
        if key not in manifest:
            raise ValueError(f"{path}: no {key!r} in the report manifest")
    return manifest


def read_metrics(evaluation: dict) -> dict:
    """An evaluation's metrics.json (a manifest entry's ``metrics``); missing is an error naming the evaluation."""
    path = Path(evaluation["metrics"])
    if not path.is_file():
        e = evaluation
        raise FileNotFoundError(f"{path}: evaluation of {e['model']}/{e['method']} on {e['benchmark']} missing")
    return json.loads(path.read_text(encoding="utf-8"))


def collect_pass_at_k(manifest: dict) -> pd.DataFrame:
    """One row per (evaluation, k); pass@k and its interval in percent, as the paper reports them."""
    rows = []
    for e in manifest["evaluations"]:
        metrics = read_metrics(e)
        for k, v in metrics["pass_at_k"].items():
            rows.append([e["model"], e["method"], e["step"], e["benchmark"], int(k), 100 * v["mean"],
                         100 * v["ci_low"], 100 * v["ci_high"], metrics["samples_per_problem"],
                         metrics["problems"], metrics["verifier_failures"]])  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def read_published(path: Path = PUBLISHED) -> pd.DataFrame:
    frame = pd.read_csv(path)
    expected = {"model", "method", "benchmark", "k", "pass_at_k"}
    if not expected <= set(frame.columns):
        raise ValueError(f"{path}: expected columns {sorted(expected)}, got {list(frame.columns)}")
    return frame


def published_for(version: str) -> pd.DataFrame:
    """The published pass@k of one version of the paper (``PAPER_VERSIONS``), every file of it in one table."""
    if version not in PAPER_VERSIONS:
        raise ValueError(f"paper version {version!r}: expected one of {sorted(PAPER_VERSIONS)}")
    return pd.concat([read_published(p) for p in PAPER_VERSIONS[version]], ignore_index=True)


def published_value(published: pd.DataFrame | None, manifest: dict, model: str, method: str, benchmark: str,
                    k: int) -> float:  # fmt: skip
    """The paper's pass@k of one cell, through the manifest's published_as names; NaN where it has none."""
    names = (manifest["models"][model].get("published_as"), manifest["methods"][method].get("published_as"),
             manifest["benchmarks"][benchmark].get("published_as"))  # fmt: skip
    if published is None or None in names:
        return float("nan")
    cell = published[(published["model"] == names[0]) & (published["method"] == names[1])
                     & (published["benchmark"] == names[2]) & (published["k"] == k)]  # fmt: skip
    return float(cell["pass_at_k"].iloc[0]) if len(cell) else float("nan")


def final_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Each (model, method, benchmark) at its last evaluated step: what the paper's tables report."""
    last = table.groupby(["model", "method", "benchmark"])["step"].transform("max")
    return table[table["step"] == last]


def comparison(table: pd.DataFrame, manifest: dict, published: pd.DataFrame) -> pd.DataFrame:
    """Reproduced next to published pass@k (percent) wherever the paper has the same cell; delta = ours − paper."""
    ours = final_rows(table).copy()
    ours["paper_model"] = ours["model"].map(lambda m: manifest["models"][m].get("published_as"))
    ours["paper_method"] = ours["method"].map(lambda m: manifest["methods"][m].get("published_as"))
    ours["paper_benchmark"] = ours["benchmark"].map(lambda b: manifest["benchmarks"][b].get("published_as"))
    paper = published.rename(columns={"model": "paper_model", "method": "paper_method",
                                      "benchmark": "paper_benchmark", "pass_at_k": "published"})  # fmt: skip
    merged = ours.merge(paper, on=["paper_model", "paper_method", "paper_benchmark", "k"], how="inner")
    merged["delta"] = merged["pass_at_k"] - merged["published"]
    columns = ["model", "method", "benchmark", "k", "pass_at_k", "ci_low", "ci_high", "published", "delta",
               "paper_model", "paper_method", "paper_benchmark"]  # fmt: skip
    return merged[columns].sort_values(["model", "benchmark", "method", "k"]).reset_index(drop=True)
