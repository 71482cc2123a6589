"""Figures as PNG and PDF, each named ``<kind>_<model>[_<what>]``:

- ``passk``: pass@k against k (log2 axis, bootstrap bands) per model and benchmark, last checkpoints;
- ``dynamics``: pass@1 against training step per model and benchmark, one line per method from the base
  model (step 0) through every evaluated checkpoint (v2's Figure 3), when some run has several;
- ``entropy``: policy entropy against step per model, one line per method (v2's Figure 5a);
- ``sweep``: pass@k against a swept option per model and benchmark, one line per k (v2's β ablation, Figure 4);
- ``ood``: pass@k on the out-of-domain benchmarks per model, a bar per method with its interval and the paper's
  value marked (v2's Figure 6);
- ``diversity``: the PCA of correct answers' embeddings for a few problems (v2's Figure 5b; pacs.report.diversity);
- ``train``: training curves (reward, accuracy, entropy, response length against step) per run.

A figure with nothing to show says why in words (``blank_figures``; REPORT.md repeats it under the figure).
"""

import json
import math
import textwrap
from pathlib import Path

import pandas as pd

from pacs.report.collect import final_rows, published_value
from pacs.report.diversity import diversity_blank, diversity_figures
from pacs.report.plotting import colormap, save_figure, subplots

TRAINING_PANELS = {  # metrics.jsonl key → panel title
    "reward/mean": "mean reward",
    "eval/accuracy": "held-out greedy accuracy",
    "policy/entropy": "policy entropy",
    "response_length/mean": "mean response length (tokens)",
}


def _line(ax, x, rows: pd.DataFrame, label: str) -> None:
    """pass@k of ``rows`` against ``x``, with its 95 % interval as a band of the line's colour."""
    (line,) = ax.plot(x, rows["pass_at_k"], marker="o", ms=3, label=label)
    ax.fill_between(x, rows["ci_low"], rows["ci_high"], color=line.get_color(), alpha=0.15, lw=0)


def _finish(ax, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def passk_curves(table: pd.DataFrame, manifest: dict, out: Path) -> list[Path]:
    final, written = final_rows(table), []
    final = final[final["method"] != "released"]  # one line each: their pass@1 is the `released` table
    for model, bench in final[["model", "benchmark"]].drop_duplicates().itertuples(index=False):
        fig, ax = subplots(figsize=(4.5, 3.4))
        rows = final[(final["model"] == model) & (final["benchmark"] == bench)]
        for method in (m for m in manifest["methods"] if m in set(rows["method"])):
            r = rows[rows["method"] == method].sort_values("k")
            _line(ax, r["k"], r, manifest["methods"][method]["label"])
        ax.set_xscale("log", base=2)
        _finish(ax, "k", "pass@k (%)", _title(manifest, model, bench))
        if blank := passk_blank(table, manifest, model, bench):
            _say(ax, blank)
        written += save_figure(fig, Path(out) / f"passk_{model}_{bench}")
    return written


def _methods(manifest: dict, present) -> list[str]:
    present = set(present)
    return [m for m in manifest["methods"] if m in present]


def _title(manifest: dict, model: str, bench: str | None = None) -> str:
    label = manifest["models"][model]["label"]
    return f"{label}: {manifest['benchmarks'][bench]['label']}" if bench else label


def dynamics_curves(table: pd.DataFrame, manifest: dict, out: Path) -> list[Path]:
    """pass@1 against step, one line per trained method starting at the base model's step 0."""
    written = []
    ones = table[table["k"] == 1]
    for model, bench in ones[["model", "benchmark"]].drop_duplicates().itertuples(index=False):
        rows = ones[(ones["model"] == model) & (ones["benchmark"] == bench)]
        trained = rows[rows["method"] != "base"]
        steps = trained.groupby("method")["step"].nunique()
        trained = trained[trained["method"].isin(steps[steps >= 2].index)]  # a last step alone is no curve
        if trained.empty:
            continue
        base = rows[rows["method"] == "base"]
        fig, ax = subplots(figsize=(4.5, 3.4))
        for method in _methods(manifest, trained["method"]):
            r = pd.concat([base, trained[trained["method"] == method]]).sort_values("step")
            _line(ax, r["step"], r, manifest["methods"][method]["label"])
        _finish(ax, "training step (0: base model)", "pass@1 (%)", _title(manifest, model, bench))
        written += save_figure(fig, Path(out) / f"dynamics_{model}_{bench}")
    return written


def entropy_curves(manifest: dict, out: Path) -> list[Path]:
    """Policy entropy against step from the runs' training logs, one line per method of each model."""
    written = []
    for model in manifest["models"]:
        runs = [r for r in manifest["runs"] if r["model"] == model]
        curves = {r["method"]: read_training_metrics(r["metrics"]) for r in runs}
        curves = {m: c[["step", "policy/entropy"]].dropna() for m, c in curves.items() if "policy/entropy" in c}
        if not curves:
            continue
        fig, ax = subplots(figsize=(4.5, 3.4))
        for method in _methods(manifest, curves):
            c = curves[method]
            ax.plot(c["step"], c["policy/entropy"], marker="o" if len(c) < 20 else None, ms=2,
                    label=manifest["methods"][method]["label"])  # fmt: skip
        _finish(ax, "training step", "policy entropy (nats per token)", _title(manifest, model))
        written += save_figure(fig, Path(out) / f"entropy_{model}")
    return written


def sweeps(manifest: dict) -> dict[str, list[str]]:
    """``{sweep: [method, ...]}`` in config order, for the methods a sweep made."""
    out: dict[str, list[str]] = {}
    for method, spec in manifest["methods"].items():
        if spec.get("sweep"):
            out.setdefault(spec["sweep"]["sweep"], []).append(method)
    return out


def sweep_curves(table: pd.DataFrame, manifest: dict, out: Path) -> list[Path]:
    """pass@k (last checkpoints) against the swept value, one line per k of the benchmark's table."""
    final, written = final_rows(table), []
    for name, members in sweeps(manifest).items():
        spec = [manifest["methods"][m]["sweep"] for m in members]
        values = [s["value"] for s in spec]
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
        x = dict(zip(members, values if numeric else range(len(values)), strict=True))
        rows = final[final["method"].isin(members)]
        for model, bench in rows[["model", "benchmark"]].drop_duplicates().itertuples(index=False):
            cell = rows[(rows["model"] == model) & (rows["benchmark"] == bench)]
            if cell["method"].nunique() < 2:  # a sweep on another model: one point is no curve
                continue
            fig, ax = subplots(figsize=(4.5, 3.4))
            for k in manifest["benchmarks"][bench]["ks"]:
                r = cell[cell["k"] == k]
                r = r.assign(x=r["method"].map(x)).sort_values("x")
                if r.empty:
                    continue
                _line(ax, r["x"], r, f"pass@{k}")
            if numeric and min(values) > 0 and max(values) / min(values) >= 10:
                ax.set_xscale("log")
            if not numeric:
                ax.set_xticks(range(len(values)), [str(v) for v in values])
            _finish(ax, spec[0]["label"], "pass@k (%)", _title(manifest, model, bench))
            if blank := sweep_blank(table, manifest, model, bench, members):
                _say(ax, blank)
            written += save_figure(fig, Path(out) / f"sweep_{model}_{bench}_{name}")
    return written


def _answers(manifest: dict, rows: pd.DataFrame, bench: str) -> dict[str, int]:
    """The verifier's statuses of every answer on ``bench`` of the evaluations in ``rows`` (model, method, step),
    summed, from each evaluation's metrics.json, with ``"truncated"``: the answers cut at the token limit."""
    evaluated = {(r.model, r.method, r.step) for r in rows[rows["benchmark"] == bench].itertuples()}
    total: dict[str, int] = {}
    for e in manifest["evaluations"]:
        if e["benchmark"] == bench and (e["model"], e["method"], e["step"]) in evaluated:
            metrics = json.loads(Path(e["metrics"]).read_text(encoding="utf-8"))
            for status, count in {**metrics["statuses"], "truncated": round(
                    metrics["truncation_rate"] * metrics["responses"])}.items():  # fmt: skip
                total[status] = total.get(status, 0) + count
    return total


def nothing_correct(table: pd.DataFrame, manifest: dict, model: str, benches: list[str],
                    methods: list[str] | None = None) -> str | None:  # fmt: skip
    """When no answer of ``model`` on ``benches`` (by ``methods``; default every trained method and the base
    model, last checkpoints) was correct, so every pass@k and interval is 0: what the answers were, per benchmark,
    from the evaluations' verifier statuses. None when some pass@k is above 0."""
    final = final_rows(table)
    rows = final[(final["model"] == model) & final["benchmark"].isin(benches) & (final["method"] != "released")]
    if methods is not None:
        rows = rows[rows["method"].isin(methods)]
    if rows.empty or (rows["ci_high"] > 0).any() or (rows["pass_at_k"] > 0).any():
        return None
    said = []
    for bench in [b for b in benches if b in set(rows["benchmark"])]:
        answers = _answers(manifest, rows, bench)
        truncated = answers.pop("truncated", 0)
        statuses = ", ".join(f"{s} {n}" for s, n in answers.items() if n)
        said.append(f"{manifest['benchmarks'][bench]['label']}: 0 of {sum(answers.values())} answers correct "
                    f"({statuses}; {truncated} cut at the token limit)")  # fmt: skip
    return "; ".join(said)


def _say(ax, why: str) -> None:
    """Why a figure shows nothing, in words across the lower half of its axes (0–100 %: its lines or bars lie
    at 0), the legend kept above it."""
    ax.set_ylim(-2, 100)
    if ax.get_legend():
        ax.legend(fontsize=7, loc="upper right")
    width = max(30, int(ax.get_window_extent().width / ax.figure.dpi * 14))  # characters of 7 pt per line
    text = textwrap.fill(why, width, break_on_hyphens=False)
    ax.text(0.5, 0.3, text, transform=ax.transAxes, ha="center", va="center", fontsize=7,
            bbox={"facecolor": "white", "edgecolor": "0.6"})  # fmt: skip


def passk_blank(table: pd.DataFrame, manifest: dict, model: str, bench: str) -> str | None:
    said = nothing_correct(table, manifest, model, [bench])
    return said and f"No method answered a problem correctly, so every line is at 0: {said}."


def sweep_blank(table: pd.DataFrame, manifest: dict, model: str, bench: str, members: list[str]) -> str | None:
    said = nothing_correct(table, manifest, model, [bench], members)
    return said and f"No run of the sweep answered a problem correctly, so every line is at 0: {said}."


def out_of_domain_blank(table: pd.DataFrame, manifest: dict, model: str) -> str | None:
    """Why ``model``'s out-of-domain figure has nothing to compare, in words (``nothing_correct``), or None."""
    benches = [b for b, s in manifest["benchmarks"].items() if s.get("out_of_domain")]
    said = nothing_correct(table, manifest, model, benches)
    return said and f"No method answered any out-of-domain problem correctly, so every bar is 0: {said}."


def out_of_domain_bars(table: pd.DataFrame, manifest: dict, published: pd.DataFrame | None, out: Path) -> list[Path]:
    """Per model, pass@k (the benchmark's first k) on each out-of-domain benchmark: a bar per method with its
    95 % interval, and the paper's value as a black mark where it has one. Where no bar is above 0, the figure
    says why in words (``out_of_domain_blank``)."""
    final, written = final_rows(table), []
    benches = [b for b, s in manifest["benchmarks"].items() if s.get("out_of_domain")]
    for model in manifest["models"]:
        rows = final[(final["model"] == model) & final["benchmark"].isin(benches)]
        if rows.empty:
            continue
        present = [b for b in benches if b in set(rows["benchmark"])]
        methods = _methods(manifest, rows["method"])
        fig, ax = subplots(figsize=(1.2 + 1.1 * len(present) * max(len(methods), 2) / 3, 3.4))
        width, tab20 = 0.8 / len(methods), colormap("tab20")
        for i, method in enumerate(methods):
            for j, bench in enumerate(present):
                k = manifest["benchmarks"][bench]["ks"][0]
                r = rows[(rows["method"] == method) & (rows["benchmark"] == bench) & (rows["k"] == k)]
                if r.empty:
                    continue
                x, v = j - 0.4 + width * (i + 0.5), r.iloc[0]
                label = manifest["methods"][method]["label"] if j == 0 else None
                ax.bar(x, v["pass_at_k"], width, color=tab20(i % 20), label=label,
                       yerr=[[v["pass_at_k"] - v["ci_low"]], [v["ci_high"] - v["pass_at_k"]]], capsize=2)
                paper = published_value(published, manifest, model, method, bench, k)
                if not math.isnan(paper):
                    ax.plot(x, paper, marker="D", color="black", ms=4, label="paper" if (i, j) == (0, 0) else None)
        ax.set_xticks(range(len(present)), [manifest["benchmarks"][b]["label"] for b in present])
        _finish(ax, "out-of-domain benchmark", "pass@1 (%)", _title(manifest, model))
        if blank := out_of_domain_blank(table, manifest, model):
            _say(ax, blank)
        written += save_figure(fig, Path(out) / f"ood_{model}")
    return written


def all_figures(table: pd.DataFrame, manifest: dict, out: Path, published: pd.DataFrame | None = None) -> list[Path]:
    return (passk_curves(table, manifest, out) + dynamics_curves(table, manifest, out)
            + sweep_curves(table, manifest, out) + entropy_curves(manifest, out)
            + training_curves(manifest, out) + out_of_domain_bars(table, manifest, published, out)
            + (diversity_figures(manifest, out) if manifest.get("diversity") else []))  # fmt: skip


def blank_figures(table: pd.DataFrame, manifest: dict) -> dict[str, str]:
    """``{figure stem: why it has nothing to show}`` for the figures that say so in their picture: pass@k, a
    sweep or out of domain where no answer was correct, diversity with every answer on one point. REPORT.md says
    it under the figure."""
    final = final_rows(table)
    final = final[final["method"] != "released"]
    said = {f"ood_{m}": out_of_domain_blank(table, manifest, m) for m in manifest["models"]}
    for model, bench in final[["model", "benchmark"]].drop_duplicates().itertuples(index=False):
        said[f"passk_{model}_{bench}"] = passk_blank(table, manifest, model, bench)
        for name, members in sweeps(manifest).items():
            said[f"sweep_{model}_{bench}_{name}"] = sweep_blank(table, manifest, model, bench, members)
    said |= {f"diversity_{e['model']}_{e['benchmark']}": diversity_blank(manifest, e)
             for e in manifest.get("diversity", [])}  # fmt: skip
    return {stem: why for stem, why in said.items() if why}


KINDS = {  # a figure's name prefix → what it shows: the category of `snakemake --report`
    "passk": "pass@k against k",
    "dynamics": "pass@1 against training step",
    "sweep": "pass@k against a swept option",
    "entropy": "policy entropy against step",
    "train": "training curves of each run",
    "ood": "pass@k out of domain",
    "diversity": "diversity of correct answers (embeddings, two principal components)",
}


def describe(stem: str, manifest: dict) -> dict[str, str]:
    """What the figure ``stem`` (a name all_figures writes) shows: ``{"kind", "model", ...}`` with labels, the
    benchmark's for passk, dynamics and sweep figures, the sweep's option, the method's for a run's curves."""
    kind, _, rest = stem.partition("_")
    if kind not in KINDS:
        raise ValueError(f"figure {stem!r}: not a name pacs report figures writes ({', '.join(KINDS)})")
    for model, spec in manifest["models"].items():
        if rest != model and not rest.startswith(model + "_"):
            continue
        what, tail = {"kind": KINDS[kind], "model": spec["label"]}, rest[len(model) + 1 :]
        if kind in ("entropy", "ood") and not tail:
            return what
        if kind == "train" and tail in manifest["methods"]:
            return {**what, "method": manifest["methods"][tail]["label"]}
        for bench, b in manifest["benchmarks"].items():
            if kind in ("passk", "dynamics", "diversity") and tail == bench:
                return {**what, "benchmark": b["label"]}
            if kind == "sweep" and tail.startswith(bench + "_") and tail[len(bench) + 1 :] in sweeps(manifest):
                member = sweeps(manifest)[tail[len(bench) + 1 :]][0]
                return {**what, "benchmark": b["label"], "option": manifest["methods"][member]["sweep"]["label"]}
    raise ValueError(f"figure {stem!r}: names no model, benchmark, method or sweep of the manifest")


def read_training_metrics(path: Path) -> pd.DataFrame:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: training metrics missing")
    return pd.DataFrame([json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()])


def training_curves(manifest: dict, out: Path) -> list[Path]:
    written = []
    for run in manifest["runs"]:
        records = read_training_metrics(run["metrics"])
        fig, axes = subplots(1, len(TRAINING_PANELS), figsize=(3.2 * len(TRAINING_PANELS), 2.8))
        for ax, (key, title) in zip(axes, TRAINING_PANELS.items(), strict=True):
            if key in records:
                r = records[["step", key]].dropna()
                ax.plot(r["step"], r[key], marker="o" if len(r) < 20 else None, ms=3)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        label = f"{manifest['models'][run['model']]['label']}, {manifest['methods'][run['method']]['label']}"
        fig.suptitle(label, fontsize=10, y=1.04)
        written += save_figure(fig, Path(out) / f"train_{run['model']}_{run['method']}")
    return written
