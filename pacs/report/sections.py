"""The report's pages for v2's evidence beyond its pass@k tables, each ours beside the published value:

- ``out_of_domain_<model>``: pass@k on the out-of-domain benchmarks (v2's Figure 6: LiveCodeBench, GPQA), every
  method of the model with its 95 % interval;
- ``released``: pass@1 on the benchmarks in domain of the models only evaluated (v2's Table 1), with each
  trained model's Base and PACS rows, and the mean over those benchmarks;
- ``variants_<model>``: every PACS variant the experiment trained (the β sweep of Figure 4, the score functions
  of Tables 9–13, PACS w/o weight) at every k of the tables.

Each is written as CSV (long: one row per cell, ``ours``, ``ci_low``, ``ci_high``, ``published``, ``delta``),
Markdown and an HTML page (what ``snakemake --report`` shows), from the collected pass@k only.
"""

from pathlib import Path

import pandas as pd

from pacs.io import atomic_write_text
from pacs.report.collect import final_rows, published_value
from pacs.report.tables import to_html

LONG = ["row", "model", "method", "benchmark", "k", "ours", "ci_low", "ci_high", "published", "delta"]


def in_domain(manifest: dict) -> list[str]:
    return [b for b, s in manifest["benchmarks"].items() if not s.get("out_of_domain")]


def out_of_domain(manifest: dict) -> list[str]:
    return [b for b, s in manifest["benchmarks"].items() if s.get("out_of_domain")]


def trained_models(manifest: dict) -> list[str]:
    return [m for m, s in manifest["models"].items() if not s.get("released")]


def cells(table: pd.DataFrame, manifest: dict, published: pd.DataFrame, rows: list[tuple[str, str]],
          benchmarks: list[str], ks: dict[str, list[int]]) -> pd.DataFrame:  # fmt: skip
    """The long table of ``rows`` ((model, method) pairs) × ``benchmarks`` × their ``ks``: our pass@k at the last
    checkpoint with its interval, and the paper's where the model, method and benchmark have a published_as."""
    final = final_rows(table).set_index(["model", "method", "benchmark", "k"])
    out = []
    for model, method in rows:
        label = f"{manifest['models'][model]['label']}, {manifest['methods'][method]['label']}"
        for bench in benchmarks:
            for k in ks[bench]:
                ours = final["pass_at_k"].get((model, method, bench, k), float("nan"))
                theirs = published_value(published, manifest, model, method, bench, k)
                out.append([label, model, method, bench, k, ours, final["ci_low"].get((model, method, bench, k)),
                            final["ci_high"].get((model, method, bench, k)), theirs, ours - theirs])  # fmt: skip
    return pd.DataFrame(out, columns=LONG)


def _cell(r) -> str:
    interval = "" if pd.isna(r.ci_low) else f" [{r.ci_low:.2f}, {r.ci_high:.2f}]"
    ours = "–" if pd.isna(r.ours) else f"{r.ours:.2f}{interval}"
    return ours if pd.isna(r.published) else f"{ours} (paper {r.published:.2f})"


def wide(long: pd.DataFrame, manifest: dict) -> pd.DataFrame:
    """One row per (model, method), one column per benchmark and k: ours [interval] (paper)."""
    long = long.assign(column=[f"{manifest['benchmarks'][b]['label']} @{k}" for b, k in zip(long["benchmark"],
                                                                                          long["k"], strict=True)])
    shown = long.assign(cell=[_cell(r) for r in long.itertuples(index=False)])
    out = shown.pivot_table(index="row", columns="column", values="cell", aggfunc="first", sort=False)
    return out.reindex(index=list(dict.fromkeys(long["row"])), columns=list(dict.fromkeys(long["column"])))


def markdown(frame: pd.DataFrame, title: str) -> str:
    header = ["", *frame.columns]
    lines = [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join([str(i), *(str(v) for v in row)]) + " |" for i, row in frame.iterrows()]
    return "\n".join(lines) + "\n"


def _write(long: pd.DataFrame, manifest: dict, title: str, stem: Path) -> list[Path]:
    shown = wide(long, manifest)
    written = []
    for path, text in ((stem.with_name(f"{stem.name}.csv"), long.round(4).to_csv(index=False)),
                       (stem.with_name(f"{stem.name}.md"), markdown(shown, title)),
                       (stem.with_name(f"{stem.name}.html"), to_html(shown, title))):  # fmt: skip
        atomic_write_text(path, text)
        written.append(path)
    return written


def _model_pages(table: pd.DataFrame, manifest: dict, published: pd.DataFrame, out: Path, benches: list[str],
                 methods: list[str], prefix: str, what: str, fewest: int = 1) -> list[Path]:
    """``<prefix>_<model>`` for each trained model evaluated with at least ``fewest`` of ``methods`` on
    ``benches``: those methods and benchmarks (in manifest order) at every k of the benchmark's table."""
    final, written = final_rows(table), []
    for model in trained_models(manifest):
        rows = final[(final["model"] == model) & final["benchmark"].isin(benches) & final["method"].isin(methods)]
        if rows["method"].nunique() < max(fewest, 1):
            continue
        present = [b for b in benches if b in set(rows["benchmark"])]
        long = cells(table, manifest, published, [(model, m) for m in methods if m in set(rows["method"])], present,
                     {b: manifest["benchmarks"][b]["ks"] for b in present})  # fmt: skip
        title = f"{manifest['models'][model]['label']}: {what}, pass@k (%) [95% CI] (paper)"
        written += _write(long, manifest, title, Path(out) / f"{prefix}_{model}")
    return written


def out_of_domain_tables(table: pd.DataFrame, manifest: dict, published: pd.DataFrame, out: Path) -> list[Path]:
    """``out_of_domain_<model>``: each model with out-of-domain evaluations, every method it was evaluated with."""
    return _model_pages(table, manifest, published, out, out_of_domain(manifest), list(manifest["methods"]),
                        "out_of_domain", "out of domain")  # fmt: skip


def released_table(table: pd.DataFrame, manifest: dict, published: pd.DataFrame, out: Path) -> list[Path]:
    """``released``: pass@1 of every released model on the benchmarks in domain, then each trained model's Base
    and the methods published as PACS, as v2's Table 1 lays them out; ``Avg.`` the mean over the benchmarks."""
    final = final_rows(table)
    released = [m for m, s in manifest["models"].items() if s.get("released") and m in set(final["model"])]
    if not released:
        return []
    rows = [(m, "released") for m in released]
    for model in trained_models(manifest):
        rows += [(model, m) for m in manifest["methods"] if m == "base" or manifest["methods"][m].get("published_as")
                 == "PACS"]  # fmt: skip
    benches = [b for b in in_domain(manifest) if 1 in set(final.loc[final["benchmark"] == b, "k"])]
    long = cells(table, manifest, published, rows, benches, {b: [1] for b in benches})
    long = long[long.groupby("row")["ours"].transform(lambda v: v.notna().any())]
    means = long.groupby("row", sort=False).agg(ours=("ours", "mean"), published=("published", "mean"),
                                                 cells=("published", "count"), done=("ours", "count"),
                                                 n=("ours", "size"))  # fmt: skip
    # the mean over every benchmark, as Table 1's Avg.: none for a row missing one
    avg = [{"row": row, "model": "", "method": "", "benchmark": "average", "k": 1,
            "ours": r.ours if r.done == r.n else float("nan"),
            "ci_low": float("nan"), "ci_high": float("nan"),
            "published": r.published if r.cells == r.n else float("nan"),
            "delta": r.ours - r.published if r.cells == r.n else float("nan")}
           for row, r in means.iterrows()]  # fmt: skip
    manifest = {**manifest, "benchmarks": {**manifest["benchmarks"], "average": {"label": "Avg."}}}
    long = pd.concat([long, pd.DataFrame(avg, columns=LONG)], ignore_index=True)
    title = "Released models and ours: pass@1 (%) [95% CI] (paper), v2's Table 1"
    return _write(long, manifest, title, Path(out) / "released")


def variants_tables(table: pd.DataFrame, manifest: dict, published: pd.DataFrame, out: Path) -> list[Path]:
    """``variants_<model>``: every PACS variant of the model (methods whose algorithm is pacs), in domain, at every
    k of the tables: v2's β ablation (Figure 4) and score functions (Tables 9–13) beside the published rows."""
    variants = [m for m, s in manifest["methods"].items() if s.get("algorithm") == "pacs"]
    return _model_pages(table, manifest, published, out, in_domain(manifest), variants, "variants", "PACS variants",
                        fewest=2)  # fmt: skip


def all_sections(table: pd.DataFrame, manifest: dict, published: pd.DataFrame, out: Path) -> list[Path]:
    return (out_of_domain_tables(table, manifest, published, out) + released_table(table, manifest, published, out)
            + variants_tables(table, manifest, published, out))  # fmt: skip
