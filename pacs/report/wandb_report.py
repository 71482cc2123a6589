"""The experiment's results as one wandb run (job type ``report``), from the report's files only.

- ``pass_at_k_by_step/<model>/<benchmark>``: a table of pass@k (%) and its interval against training step for
  every trained method, each method's line starting at the base model's step 0; beside it, for every k, a line
  plot of it (``pass@<k>_by_step/<model>/<benchmark>``, a line per method);
- ``tables/<stem>``: every table the report wrote (``tables/*.csv``): the paper's layouts, the comparison with
  the published numbers (``comparison``), the paired differences (``significance``) and v2's pages;
- ``figures/<stem>``: every figure (``figures/*.png``).

Its id comes from the report's directory, so a rerun replaces it; ``wandb sync`` shares it with the runs'
training and evaluation runs.
"""

from pathlib import Path

import pandas as pd

from pacs.wandb_runs import Mode, start_run

BY_STEP = ["method", "label", "step", "k", "pass@k", "ci_low", "ci_high"]


def by_step(table: pd.DataFrame, manifest: dict) -> dict[tuple[str, str], pd.DataFrame]:
    """``{(model, benchmark): rows}`` of every trained method's pass@k against step, each method's rows after
    the base model's at step 0 (its start); models and benchmarks with no trained method are left out."""
    out = {}
    for (model, bench), rows in table.groupby(["model", "benchmark"], sort=False):
        base = rows[rows["method"] == "base"]
        trained = [m for m in manifest["methods"] if m not in ("base", "released") and m in set(rows["method"])]
        if not trained:
            continue
        parts = [pd.concat([base, rows[rows["method"] == m]]).assign(method=m) for m in trained]
        frame = pd.concat(parts).sort_values(["method", "k", "step"], kind="stable")
        frame["label"] = frame["method"].map(lambda m: manifest["methods"][m]["label"])
        out[(model, bench)] = frame.rename(columns={"pass_at_k": "pass@k"})[BY_STEP].reset_index(drop=True)
    return out


def _table(frame: pd.DataFrame):
    """A wandb.Table of ``frame``, missing values as None (a column of strings with NaN would be two types)."""
    import wandb

    frame = frame.astype(object).where(frame.notna(), None)
    return wandb.Table(columns=[str(c) for c in frame.columns], data=frame.values.tolist())


def log_results(manifest: dict, table: pd.DataFrame, tables: Path, figures: Path, out: Path, mode: Mode,
                project: str = "pacs") -> dict:  # fmt: skip
    """Write the run under ``out/wandb``; returns what was logged: ``{"run_id", "run_dir", "keys"}``, or
    ``{"keys": []}`` when ``mode`` is disabled."""
    if mode == "disabled":
        return {"keys": []}
    import wandb

    name = manifest.get("name", "experiment")
    config = {k: manifest.get(k) for k in ("name", "description", "paper")}
    config.update({k: {key: v["label"] for key, v in manifest[k].items()} for k in ("models", "methods", "benchmarks")})
    logged = {}
    for (model, bench), rows in by_step(table, manifest).items():
        where = f"{model}/{bench}"
        logged[f"pass_at_k_by_step/{where}"] = _table(rows)
        title = f"{manifest['models'][model]['label']}: {manifest['benchmarks'][bench]['label']}"
        for k in sorted(rows["k"].unique()):
            one, named = _table(rows[rows["k"] == k]), f"{title}, pass@{k} (%) against step"
            logged[f"pass@{k}_by_step/{where}"] = wandb.plot.line(one, "step", "pass@k", stroke="label", title=named)
    for path in sorted(Path(tables).glob("*.csv")):
        logged[f"tables/{path.stem}"] = _table(pd.read_csv(path))
    for path in sorted(Path(figures).glob("*.png")):
        logged[f"figures/{path.stem}"] = wandb.Image(str(path), caption=path.stem)
    run = start_run(out, mode, project, f"{name}-results", name, "report", config, replace=True)
    try:
        run.log(logged)
        run.summary.update({"evaluations": len(manifest["evaluations"]), "runs": len(manifest["runs"])})
        return {"run_id": run.id, "run_dir": str(Path(run.dir).parent), "keys": sorted(logged)}
    finally:
        run.finish()
