"""results/<name>/REPORT.md: the tables, the comparison with the paper and the figures, for a person to read."""

import os
from pathlib import Path

import pandas as pd

from pacs.report.collect import final_rows
from pacs.report.figures import blank_figures

PUBLISHED_NOTE = {
    "v1": "Published numbers: the paper's v1 Tables 1 and 2 (`pacs/report/published_pass_at_k.csv`). The paper's "
    "abstract calls 59.78 an AIME 2025 score; its Table 2 puts it under AIME 2024, as we do.",
    "v2": "Published numbers: the paper's v2 (arXiv 2509.02522v2) Tables 2, 6, 7 and 8, its App. D.3 and Table 1, "
    "Figure 6's bar labels and Table 3 (`pacs/report/published_pass_at_k_v2.csv`, `published_pass_at_k_v2_extra.csv`, "
    "`published_pass_at_k_v2_ood.csv`, `published_diversity_v2.csv`).",
}


def _rel(path: Path, start: Path) -> str:
    return os.path.relpath(path, start)


def comparison_markdown(comp: pd.DataFrame) -> str:
    if comp.empty:
        return "No cell of this experiment has a published counterpart.\n"
    lines = ["| model | method | benchmark | k | ours (95% CI) | paper | Δ |", "|---|---|---|---|---|---|---|"]
    for r in comp.itertuples(index=False):
        lines.append(f"| {r.model} → {r.paper_model} | {r.method} → {r.paper_method} | {r.benchmark} → "
                     f"{r.paper_benchmark} | {r.k} | {r.pass_at_k:.2f} ({r.ci_low:.2f}–{r.ci_high:.2f}) | "
                     f"{r.published:.2f} | {r.delta:+.2f} |")  # fmt: skip
    return "\n".join(lines) + "\n"


def write_report(manifest: dict, table: pd.DataFrame, comp: pd.DataFrame, tables: Path, figures: Path,
                 out: Path) -> str:  # fmt: skip
    base = Path(out).parent
    final = final_rows(table)
    parts = [f"# Report: {manifest['name']}", "", manifest.get("description", ""), ""]
    parts += ["## Evaluations", "",
              f"{len(final.groupby(['model', 'method', 'benchmark']))} evaluations (model × method × benchmark, "
              f"last checkpoint); samples per problem: "
              f"{', '.join(f'{b} {n}' for b, n in final.groupby('benchmark')['n'].max().items())}. "
              f"Verifier failures (timeouts, unparseable golds, errors; scored 0, counted): "
              f"{int(final.drop_duplicates(['model', 'method', 'benchmark'])['verifier_failures'].sum())}.",
              ""]  # fmt: skip
    parts += ["## Tables (pass@k, %)", ""]
    for model in manifest["models"]:
        md = Path(tables) / f"{model}.md"
        if md.is_file():
            parts += [md.read_text(encoding="utf-8"), f"Also: [{model}.csv]({_rel(tables / f'{model}.csv', base)}), "
                      f"[LaTeX]({_rel(tables / f'{model}.tex', base)}), "
                      f"[every k]({_rel(tables / f'{model}_full.md', base)}).", ""]  # fmt: skip
    parts += ["## Reproduced vs published", "",
              PUBLISHED_NOTE[manifest.get("paper", "v1")], "",
              comparison_markdown(comp),
              f"As CSV: [comparison.csv]({_rel(tables / 'comparison.csv', base)}).", ""]  # fmt: skip
    significance = Path(tables) / "significance.md"
    if significance.is_file():
        parts += ["## Differences between methods, with their uncertainty", "",
                  "Each method against the base model, and PACS against each baseline, on the same problems: the "
                  "difference in pass@k (percentage points), a 95 % paired bootstrap interval over problems (one "
                  "resampling of the problems for both methods), P(≤ 0) = the share of bootstrap replicates in "
                  "which the difference is zero or negative, and the paper's own difference where it published "
                  "both numbers. An interval that contains 0 is a difference this benchmark cannot tell from noise.",
                  "", significance.read_text(encoding="utf-8"),
                  f"As CSV: [significance.csv]({_rel(Path(tables) / 'significance.csv', base)}).", ""]  # fmt: skip
    parts += _pages(Path(tables), base, manifest)
    parts += ["## Figures", ""]
    blank = blank_figures(table, manifest)
    for png in sorted(Path(figures).glob("*.png")):
        parts += [f"![{png.stem}]({_rel(png, base)})", ""]
        if png.stem in blank:
            parts += [f"*{png.stem}: {blank[png.stem]}*", ""]
    return "\n".join(parts)


# v2's pages beyond pass@k (pacs.report.sections, pacs.report.diversity): heading, what it is, table stems
PAGES = [
    ("Out of domain (v2's Figure 6)", "pass@k on the benchmarks out of domain, every method of the model with its "
     "95 % interval, and the paper's value where it has one (figures `ood_*`).", "out_of_domain_{model}"),
    ("Released models (v2's Table 1)", "pass@1 of the models only evaluated, beside each trained model's Base and "
     "PACS, and each published row; Avg. is the mean over the benchmarks.", "released"),
    ("PACS variants (v2's Figure 4 and Tables 9–13)", "every PACS variant trained (β sweep, score functions, "
     "without weights) at every k, beside the published rows (figures `sweep_*`).", "variants_{model}"),
    ("Diversity of correct answers (v2's Table 3)", "S_div = the mean over problems of 1 − the mean cosine "
     "similarity of a problem's correct answers; problems with fewer than two correct answers are left out and "
     "counted (figures `diversity_*`: their embeddings' PCA, v2's Figure 5b).", "diversity_{model}"),
]


def _pages(tables: Path, base: Path, manifest: dict) -> list[str]:
    parts = []
    for title, what, stem in PAGES:
        names = [stem] if "{model}" not in stem else [stem.format(model=m) for m in manifest["models"]]
        found = [tables / f"{n}.md" for n in names if (tables / f"{n}.md").is_file()]
        if not found:
            continue
        parts += [f"## {title}", "", what, ""]
        for md in found:
            parts += [md.read_text(encoding="utf-8"), f"As CSV: [{md.stem}.csv]({_rel(md.with_suffix('.csv'), base)}).",
                      ""]  # fmt: skip
    return parts
