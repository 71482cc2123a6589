"""The paper's Table 1 / Table 2 layout: one table per model, rows Base and the methods, columns
(benchmark, k), pass@k in percent; the best value of each column in bold, the second underlined.
The appendix's full-k tables have every k that was evaluated. Written as CSV, Markdown and LaTeX
(booktabs), and as an HTML page (what `snakemake --report` shows)."""

from pathlib import Path

import pandas as pd

from pacs.io import atomic_write_text
from pacs.report.collect import final_rows


def paper_table(final: pd.DataFrame, model: str, manifest: dict, full: bool = False) -> pd.DataFrame:
    """Rows: method labels in the manifest's order; columns: (benchmark label, k), the benchmarks in domain (the
    out-of-domain ones have their own page, pacs.report.sections)."""
    rows = final[final["model"] == model]
    methods = [m for m in manifest["methods"] if m in set(rows["method"])]
    columns = []
    for bench, spec in manifest["benchmarks"].items():
        if spec.get("out_of_domain"):
            continue
        ks = sorted(rows.loc[rows["benchmark"] == bench, "k"].unique())
        columns += [(bench, k) for k in (ks if full else [k for k in spec["ks"] if k in ks])]
    values = rows.set_index(["method", "benchmark", "k"])["pass_at_k"]
    table = pd.DataFrame(
        [[values.get((m, b, k), float("nan")) for b, k in columns] for m in methods],
        index=[manifest["methods"][m]["label"] for m in methods],
        columns=pd.MultiIndex.from_tuples(
            [(manifest["benchmarks"][b]["label"], k) for b, k in columns], names=["benchmark", "k"]
        ),  # fmt: skip
    )
    table.index.name = "method"
    return table


def ranks(table: pd.DataFrame) -> pd.DataFrame:
    """1 for the best value of a column, 2 for the second (ties share), 0 otherwise."""
    dense = table.rank(axis=0, method="dense", ascending=False)
    return dense.where(dense <= 2, 0).fillna(0).astype(int)


def _cell(value: float, rank: int, bold: str, under: str) -> str:
    if pd.isna(value):
        return "–"
    text = f"{value:.2f}"
    return bold.format(text) if rank == 1 else under.format(text) if rank == 2 else text


def to_markdown(table: pd.DataFrame) -> str:
    marks = ranks(table)
    header = ["method", *(f"{b} @{k}" for b, k in table.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for method, row in table.iterrows():
        cells = [_cell(v, r, "**{}**", "<u>{}</u>") for v, r in zip(row, marks.loc[method], strict=True)]
        lines.append("| " + " | ".join([str(method), *cells]) + " |")
    return "\n".join(lines) + "\n"


def to_latex(table: pd.DataFrame, caption: str) -> str:
    marks = ranks(table)
    benches = list(dict.fromkeys(b for b, _ in table.columns))
    spans = [(b, sum(1 for c in table.columns if c[0] == b)) for b in benches]
    lines = [
        "\\begin{table}[t]",
        "\\centering",
        f"\\caption{{{caption}}}",
        "\\begin{tabular}{l" + "r" * len(table.columns) + "}",
        "\\toprule",
        " & " + " & ".join(f"\\multicolumn{{{n}}}{{c}}{{{b}}}" for b, n in spans) + " \\\\",
        " ".join(f"\\cmidrule(lr){{{s}-{s + n - 1}}}" for s, n in _starts(spans)),
        "$k$ & " + " & ".join(str(k) for _, k in table.columns) + " \\\\",
        "\\midrule",
    ]
    for method, row in table.iterrows():
        cells = [
            _cell(v, r, "\\textbf{{{}}}", "\\underline{{{}}}") for v, r in zip(row, marks.loc[method], strict=True)
        ]
        lines.append(" & ".join([_latex_escape(str(method)), *cells]).replace("–", "--") + " \\\\")
    lines += ["\\bottomrule", "\\end{tabular}", "\\end{table}"]
    return "\n".join(lines) + "\n"


def to_html(table: pd.DataFrame, title: str, index: bool = True) -> str:
    """``table`` as a small self-contained HTML page, values to two decimals."""
    body = table.to_html(float_format=lambda v: f"{v:.2f}", na_rep="–", border=0, index=index)
    style = ("body{font-family:sans-serif;font-size:13px}table{border-collapse:collapse}"
             "th,td{padding:2px 8px;text-align:right;border-bottom:1px solid #ddd}")  # fmt: skip
    return f"<!DOCTYPE html>\n<html><head><meta charset='utf-8'><title>{title}</title><style>{style}</style></head>" \
           f"<body><h3>{title}</h3>\n{body}\n</body></html>\n"  # fmt: skip


def _starts(spans: list[tuple[str, int]]) -> list[tuple[int, int]]:
    out, start = [], 2
    for _, n in spans:
        out.append((start, n))
        start += n
    return out


def _latex_escape(text: str) -> str:
    return text.replace("&", "\\&").replace("%", "\\%").replace("_", "\\_").replace("#", "\\#")


def write_tables(table: pd.DataFrame, manifest: dict, out: Path) -> list[Path]:
    """For each model: ``{model}.{csv,md,tex,html}`` (the paper's columns) and ``{model}_full.*`` (every k)."""
    final, written = final_rows(table), []
    for model, spec in manifest["models"].items():
        if model not in set(final["model"]) or spec.get("released"):  # a released model is a row of `released`
            continue
        label = manifest["models"][model]["label"]
        for full, suffix in ((False, ""), (True, "_full")):
            wide = paper_table(final, model, manifest, full)
            stem = Path(out) / f"{model}{suffix}"
            what = "every k" if full else "the paper's k"
            caption = f"pass@$k$ (\\%) of {_latex_escape(label)}, {what}; best in bold, second underlined."
            flat = wide.copy()
            flat.columns = [f"{b} @{k}" for b, k in wide.columns]
            # suffixes appended, not swapped: a model's key may have a dot (qwen2.5-7b)
            for path, text in ((stem.with_name(f"{stem.name}.csv"), flat.round(2).to_csv()),
                               (stem.with_name(f"{stem.name}.md"), f"**{label}** ({what})\n\n" + to_markdown(wide)),
                               (stem.with_name(f"{stem.name}.tex"), to_latex(wide, caption)),
                               (stem.with_name(f"{stem.name}.html"),
                                to_html(wide, f"{label}: pass@k (%), {what}"))):  # fmt: skip
                atomic_write_text(path, text)
                written.append(path)
    return written


def describe(stem: str, manifest: dict) -> dict[str, str]:
    """What the table ``stem`` (a CSV name ``pacs report tables`` writes) holds: ``{"model", "table"}``.

    The model comes first: `snakemake --report` turns a later label with two values, each on half the
    entries, into a toggle, and with the model later, a toggle between "every model" and one model would
    pair up tables that do not exist (the report's page then fails to render; seen in Chromium)."""
    fixed = {"comparison": "reproduced against published", "significance": "paired differences between methods",
             "released": "released models (v2 Table 1)"}  # fmt: skip
    if stem in fixed:
        return {"model": "every model", "table": fixed[stem]}
    pages = {"out_of_domain_": "out of domain (v2 Figure 6)", "variants_": "PACS variants (v2 Figure 4, Tables 9–13)",
             "diversity_": "diversity of correct answers (v2 Table 3)"}  # fmt: skip
    for prefix, what in pages.items():
        if stem.startswith(prefix) and stem[len(prefix) :] in manifest["models"]:
            return {"model": manifest["models"][stem[len(prefix) :]]["label"], "table": what}
    model, full = (stem[: -len("_full")], True) if stem.endswith("_full") else (stem, False)
    if model not in manifest["models"]:
        raise ValueError(f"table {stem!r}: names no model of the manifest")
    return {
        "model": manifest["models"][model]["label"],
        "table": "pass@k, every k" if full else "pass@k, the paper's k",
    }
