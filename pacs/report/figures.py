"""Figures as PNG and PDF: pass@k against k (log2 axis, bootstrap bands) per model and benchmark, and
training curves (reward, accuracy, entropy, response length against step) per run."""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from pacs.io import atomic_path  # noqa: E402
from pacs.report.collect import final_rows  # noqa: E402

TRAINING_PANELS = {  # metrics.jsonl key → panel title
    "reward/mean": "mean reward",
    "eval/accuracy": "held-out greedy accuracy",
    "policy/entropy": "policy entropy",
    "response_length/mean": "mean response length (tokens)",
}


def _save(fig, stem: Path) -> list[Path]:
    paths = []
    for suffix in (".png", ".pdf"):
        with atomic_path(stem.with_suffix(suffix)) as tmp:
            fig.savefig(tmp, format=suffix[1:], bbox_inches="tight", dpi=150)
        paths.append(stem.with_suffix(suffix))
    plt.close(fig)
    return paths


def passk_curves(table: pd.DataFrame, manifest: dict, out: Path) -> list[Path]:
    final, written = final_rows(table), []
    for model, bench in final[["model", "benchmark"]].drop_duplicates().itertuples(index=False):
        fig, ax = plt.subplots(figsize=(4.5, 3.4))
        rows = final[(final["model"] == model) & (final["benchmark"] == bench)]
        for method in (m for m in manifest["methods"] if m in set(rows["method"])):
            r = rows[rows["method"] == method].sort_values("k")
            (line,) = ax.plot(r["k"], r["pass_at_k"], marker="o", ms=3, label=manifest["methods"][method]["label"])
            ax.fill_between(r["k"], r["ci_low"], r["ci_high"], color=line.get_color(), alpha=0.15, lw=0)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("k")
        ax.set_ylabel("pass@k (%)")
        ax.set_title(f"{manifest['models'][model]['label']}: {manifest['benchmarks'][bench]['label']}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        written += _save(fig, Path(out) / f"passk_{model}_{bench}")
    return written


def read_training_metrics(path: Path) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: training metrics missing")
    return pd.DataFrame([json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()])


def training_curves(manifest: dict, out: Path) -> list[Path]:
    written = []
    for run in manifest["runs"]:
        records = read_training_metrics(run["metrics"])
        fig, axes = plt.subplots(1, len(TRAINING_PANELS), figsize=(3.2 * len(TRAINING_PANELS), 2.8))
        for ax, (key, title) in zip(axes, TRAINING_PANELS.items(), strict=True):
            if key in records:
                r = records[["step", key]].dropna()
                ax.plot(r["step"], r[key], marker="o" if len(r) < 20 else None, ms=3)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        label = f"{manifest['models'][run['model']]['label']}, {manifest['methods'][run['method']]['label']}"
        fig.suptitle(label, fontsize=10, y=1.04)
        written += _save(fig, Path(out) / f"train_{run['model']}_{run['method']}")
    return written
