"""v2's Table 3 (S_div of the correct answers) and Figure 5b (their embeddings in 2D), from the files
`pacs diversity` wrote, listed under the report manifest's ``"diversity"`` key:
``[{"model", "benchmark", "file": diversity.json, "embeddings": embeddings.npz}, ...]``, each file's methods
keyed as the manifest's methods.

- ``diversity_<model>.{csv,md,html}``: rows the methods, per benchmark S_div, the problems used and skipped
  (fewer than two correct answers), v2's published value where the cell has one, and ours − published;
- ``diversity_<model>_<benchmark>.{png,pdf}``: for up to four problems, a PCA (fit on every method's correct
  answers to that problem together) of the answers' embeddings, one colour per method.
"""

import json
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd

from pacs.io import atomic_write_text
from pacs.report.plotting import colormap, save_figure, subplots
from pacs.report.tables import to_html

PUBLISHED_DIVERSITY = Path(__file__).with_name("published_diversity_v2.csv")  # v2's Table 3
PANELS = 4  # problems per figure at most
COLUMNS = ["model", "method", "benchmark", "s_div", "problems_used", "problems_skipped", "answers", "truncated",
           "published", "delta"]  # fmt: skip


def read_diversity(entry: dict) -> dict:
    """A manifest entry's diversity.json; missing is an error naming the model and benchmark."""
    path = Path(entry["file"])
    if not path.is_file():
        raise FileNotFoundError(f"{path}: diversity of {entry['model']} on {entry['benchmark']} missing")
    return json.loads(path.read_text(encoding="utf-8"))


def read_published_diversity(path: Path = PUBLISHED_DIVERSITY) -> pd.DataFrame:
    frame = pd.read_csv(path)
    expected = {"model", "method", "benchmark", "s_div"}
    if not expected <= set(frame.columns):
        raise ValueError(f"{path}: expected columns {sorted(expected)}, got {list(frame.columns)}")
    return frame


def _check_keys(manifest: dict, entry: dict, methods) -> None:
    for kind, key in (("models", entry["model"]), ("benchmarks", entry["benchmark"])):
        if key not in manifest[kind]:
            raise ValueError(f"diversity of {entry['model']} on {entry['benchmark']}: {key!r} is not in {kind}")
    unknown = [m for m in methods if m not in manifest["methods"]]
    if unknown:
        known = ", ".join(manifest["methods"])
        raise ValueError(f"{entry['file']}: methods {unknown} are not the manifest's ({known})")


def diversity_rows(manifest: dict, published: pd.DataFrame) -> pd.DataFrame:
    """One row per (model, method, benchmark) of the manifest's diversity files, with v2's value where the
    cell's ``published_as`` names one (else NaN) and ``delta`` = ours − published."""
    paper = published.set_index(["model", "method", "benchmark"])["s_div"]
    rows = []
    for entry in manifest.get("diversity", []):
        result = read_diversity(entry)
        _check_keys(manifest, entry, result["methods"])
        model, bench = entry["model"], entry["benchmark"]
        for method, r in result["methods"].items():
            key = (manifest["models"][model].get("published_as"), manifest["methods"][method].get("published_as"),
                   manifest["benchmarks"][bench].get("published_as"))  # fmt: skip
            value = float(paper.get(key, float("nan")))
            ours = float("nan") if r["s_div"] is None else r["s_div"]
            rows.append([model, method, bench, ours, r["problems_used"], r["problems_skipped"], r["answers"],
                         r["truncated"], value, ours - value])  # fmt: skip
    return pd.DataFrame(rows, columns=COLUMNS)


def _number(value: float, signed: bool = False) -> str:
    return "–" if pd.isna(value) else f"{value:+.4f}" if signed else f"{value:.4f}"


def model_tables(rows: pd.DataFrame, model: str, manifest: dict) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``model``'s table: numbers (flat columns ``<benchmark> <field>``, for the CSV) and as shown (columns
    (benchmark, field), S_div to four decimals)."""
    mine = rows[rows["model"] == model]
    methods = [m for m in manifest["methods"] if m in set(mine["method"])]
    benches = [b for b in manifest["benchmarks"] if b in set(mine["benchmark"])]
    cells = mine.set_index(["method", "benchmark"])
    numbers, shown = {}, {}
    for b in benches:
        label = manifest["benchmarks"][b]["label"]
        got = [cells.loc[(m, b)] if (m, b) in cells.index else None for m in methods]
        for field in ("s_div", "problems_used", "problems_skipped", "published", "delta"):
            numbers[f"{label} {field}"] = [np.nan if g is None else g[field] for g in got]
        shown[(label, "S_div")] = [_number(np.nan if g is None else g["s_div"]) for g in got]
        shown[(label, "problems used / skipped")] = [
            "–" if g is None else f"{int(g['problems_used'])} / {int(g['problems_skipped'])}" for g in got
        ]
        shown[(label, "published")] = [_number(np.nan if g is None else g["published"]) for g in got]
        shown[(label, "Δ")] = [_number(np.nan if g is None else g["delta"], signed=True) for g in got]
    index = pd.Index([manifest["methods"][m]["label"] for m in methods], name="method")
    display = pd.DataFrame(shown, index=index)
    display.columns = pd.MultiIndex.from_tuples(display.columns, names=["benchmark", ""])
    return pd.DataFrame(numbers, index=index), display


def _markdown(display: pd.DataFrame) -> str:
    header = ["method", *(f"{b} {field}" for b, field in display.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join([str(method), *row]) + " |" for method, row in display.iterrows()]
    return "\n".join(lines) + "\n"


def diversity_tables(manifest: dict, out: Path, published: Path = PUBLISHED_DIVERSITY) -> list[Path]:
    """``diversity_<model>.{csv,md,html}`` for each model with diversity files."""
    rows, written = diversity_rows(manifest, read_published_diversity(published)), []
    for model in manifest["models"]:
        if model not in set(rows["model"]):
            continue
        numbers, display = model_tables(rows, model, manifest)
        label = manifest["models"][model]["label"]
        what = "S_div of the correct answers (1 − mean pairwise cosine of their embeddings; v2's Table 3)"
        stem = Path(out) / f"diversity_{model}"  # suffixes appended: a model's key may have a dot
        for suffix, text in ((".csv", numbers.to_csv()), (".md", f"**{label}**: {what}\n\n" + _markdown(display)),
                             (".html", to_html(display, f"{label}: {what}"))):  # fmt: skip
            path = stem.with_name(stem.name + suffix)
            atomic_write_text(path, text)
            written.append(path)
    return written


def read_embeddings(path: Path) -> dict[str, np.ndarray]:
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: embeddings of the correct answers missing (pacs diversity --embeddings)")
    with np.load(path) as stored:
        return {k: stored[k] for k in ("embeddings", "method", "problem", "id", "sample")}


def chosen_problems(stored: dict[str, np.ndarray], methods: list[str], limit: int = PANELS) -> list[int]:
    """Problems ranked by the fewest correct answers of any method, then by all of them: those every method
    answers most often, up to ``limit``, each with at least two answers to place."""
    if not len(stored["problem"]):
        return []
    counts = pd.crosstab(stored["problem"], stored["method"]).reindex(columns=methods, fill_value=0)
    ranked = pd.DataFrame({"least": counts.min(axis=1), "total": counts.sum(axis=1)})
    ranked = ranked[ranked["total"] >= 2].sort_values(["least", "total"], ascending=False, kind="stable")
    return [int(p) for p in ranked.index[:limit]]


def pca_2d(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rows of ``x`` on its first two principal axes ``(n, 2)`` and the variance share of each."""
    centred = np.asarray(x, dtype=np.float64) - np.asarray(x, dtype=np.float64).mean(axis=0)
    _, singular, axes = np.linalg.svd(centred, full_matrices=False)
    coords = np.zeros((len(x), 2))
    coords[:, : min(2, len(axes))] = centred @ axes[:2].T
    variance = singular**2
    share = np.zeros(2)
    if variance.sum() > 0:
        share[: min(2, len(variance))] = variance[:2] / variance.sum()
    return coords, share


def _one_point(embeddings: np.ndarray) -> bool:
    """Every row the same embedding: the PCA has no spread to show."""
    return bool(np.ptp(np.asarray(embeddings, dtype=np.float64), axis=0).max(initial=0.0) == 0)


def diversity_blank(manifest: dict, entry: dict) -> str | None:
    """Why the diversity figure of ``entry`` (a manifest's diversity file) shows nothing, in words: no problem
    has two correct answers, or on every problem it draws all the correct answers have one embedding, so they lie
    on one point. None when some problem's answers differ."""
    stored = read_embeddings(entry["embeddings"])
    return _blank(stored, chosen_problems(stored, [m for m in manifest["methods"] if m in set(stored["method"])]))


def _blank(stored: dict[str, np.ndarray], problems: list[int]) -> str | None:
    if not problems:
        return "No problem has two correct answers to compare, from any method: nothing to draw."
    if not all(_one_point(stored["embeddings"][stored["problem"] == p]) for p in problems):
        return None
    answers = sum(int((stored["problem"] == p).sum()) for p in problems)
    return (f"On each of the {len(problems)} problems drawn, every correct answer of every method has the same "
            f"embedding ({answers} answers, one point per problem), so the principal "
            "components explain nothing (0 %) and there is no spread to see.")  # fmt: skip


def diversity_figures(manifest: dict, out: Path) -> list[Path]:
    """Figure 5b for each (model, benchmark) of the manifest's diversity files; a problem whose correct answers
    all lie on one point says so in its panel, and a figure with nothing to show says why (``diversity_blank``)."""
    written = []
    for entry in manifest.get("diversity", []):
        stored = read_embeddings(entry["embeddings"])
        _check_keys(manifest, entry, set(stored["method"]))
        methods = [m for m in manifest["methods"] if m in set(stored["method"])]
        tab20 = colormap("tab20")
        colour = {m: tab20(i % 20) for i, m in enumerate(manifest["methods"])}  # one method, one colour everywhere
        problems = chosen_problems(stored, methods)
        fig, axes = subplots(1, max(len(problems), 1), figsize=(3.3 * max(len(problems), 1), 3.3), squeeze=False)
        for ax, problem in zip(axes[0], problems, strict=False):
            rows = stored["problem"] == problem
            coords, share = pca_2d(stored["embeddings"][rows])
            for method in methods:
                mine = stored["method"][rows] == method
                ax.scatter(coords[mine, 0], coords[mine, 1], s=12, alpha=0.7, color=colour[method],
                           label=f"{manifest['methods'][method]['label']} ({int(mine.sum())})")  # fmt: skip
            ax.set_title(f"problem {stored['id'][rows][0]}", fontsize=9)
            ax.set_xlabel(f"PC1 ({share[0]:.0%})", fontsize=8)
            ax.set_ylabel(f"PC2 ({share[1]:.0%})", fontsize=8)
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6)
            if _one_point(stored["embeddings"][rows]):
                ax.text(0.5, 0.25, f"all {int(rows.sum())} answers: one embedding", transform=ax.transAxes,
                        ha="center", fontsize=7, bbox={"facecolor": "white", "edgecolor": "0.6"})  # fmt: skip
        if not problems:
            axes[0][0].text(0.5, 0.5, "no problem with two correct answers", ha="center", va="center")
            axes[0][0].set_axis_off()
        model, bench = manifest["models"][entry["model"]], manifest["benchmarks"][entry["benchmark"]]
        fig.suptitle(f"{model['label']}, {bench['label']}: correct answers' embeddings (PCA)", fontsize=10)
        blank = _blank(stored, problems)  # diversity_blank's words, from what is drawn
        if blank and problems:
            text = textwrap.fill(blank, 45 * len(problems), break_on_hyphens=False)
            fig.text(0.5, -0.02, text, ha="center", va="top", fontsize=8)
        fig.tight_layout()
        written += save_figure(fig, Path(out) / f"diversity_{entry['model']}_{entry['benchmark']}")
    return written
