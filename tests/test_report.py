"""pacs report on hand-made metrics: the long table, the paper's layout with best/second marks, the
comparison with published numbers, and the files each verb writes."""

import json

import pandas as pd
import pytest

from pacs.cli import main
from pacs.report.collect import COLUMNS, PUBLISHED, collect_pass_at_k, comparison, published_for, read_published
from pacs.report.tables import paper_table, ranks, to_latex, to_markdown

METHODS = {"base": "Base", "ppo": "PPO", "pacs": "PACS"}


@pytest.fixture
def manifest(tmp_path) -> dict:
    """Two methods and the base model on one benchmark, pass@1 and pass@2, written as metrics.json files."""
    values = {"base": (0.5, 0.6), "ppo": (0.7, 0.8), "pacs": (0.7, 0.9)}
    # problems with 2 and with 1 of their 2 answers correct, which give those pass@1 and pass@2
    counts = {"base": (12, 6), "ppo": (18, 6), "pacs": (15, 12)}
    evaluations = []
    for method, (p1, p2) in values.items():
        both, one = counts[method]
        correct = [2] * both + [1] * one + [0] * (30 - both - one)
        path = tmp_path / method / "metrics.json"
        path.parent.mkdir()
        path.write_text(json.dumps({
            "pass_at_k": {"1": {"mean": p1, "ci_low": p1 - 0.1, "ci_high": p1 + 0.1},
                          "2": {"mean": p2, "ci_low": p2 - 0.1, "ci_high": p2 + 0.1}},
            "samples_per_problem": 2, "problems": 30, "verifier_failures": 1,
            "per_problem": [{"problem": i, "id": str(i), "n": 2, "correct": c} for i, c in enumerate(correct)],
        }))  # fmt: skip
        evaluations.append({"model": "m", "method": method, "step": 0 if method == "base" else 10,
                            "benchmark": "aime2024", "metrics": str(path)})  # fmt: skip
    return {
        "name": "t",
        "models": {"m": {"label": "Model", "published_as": "Qwen2.5-7B"}},
        "methods": {
            m: {"label": label, "published_as": label, "algorithm": None if m == "base" else m}
            for m, label in METHODS.items()
        },  # fmt: skip
        "benchmarks": {"aime2024": {"label": "AIME 2024", "published_as": "AIME24", "ks": [1]}},
        "evaluations": evaluations,
        "runs": [],
    }


def test_collect_reads_percent_and_the_table_marks_best_and_second(manifest):
    table = collect_pass_at_k(manifest)
    assert len(table) == 6 and table["pass_at_k"].max() == pytest.approx(90.0)
    main_table = paper_table(table, "m", manifest)
    assert list(main_table.index) == ["Base", "PPO", "PACS"] and list(main_table.columns) == [("AIME 2024", 1)]
    full = paper_table(table, "m", manifest, full=True)
    assert list(full.columns) == [("AIME 2024", 1), ("AIME 2024", 2)]
    assert ranks(full).to_dict("list") == {("AIME 2024", 1): [2, 1, 1], ("AIME 2024", 2): [0, 2, 1]}  # ties share
    md = to_markdown(full)
    assert "| PACS | **70.00** | **90.00** |" in md and "| Base | <u>50.00</u> | 60.00 |" in md
    tex = to_latex(full, "caption")
    assert "\\textbf{90.00}" in tex and "\\underline{80.00}" in tex and "\\multicolumn{2}{c}{AIME 2024}" in tex


def test_comparison_joins_published_cells_and_takes_deltas(manifest):
    comp = comparison(collect_pass_at_k(manifest), manifest, read_published(PUBLISHED))
    published = read_published(PUBLISHED)
    cell = published[(published["model"] == "Qwen2.5-7B") & (published["method"] == "PACS")
                     & (published["benchmark"] == "AIME24") & (published["k"] == 1)]["pass_at_k"].iloc[0]  # fmt: skip
    row = comp[(comp["method"] == "pacs") & (comp["k"] == 1)].iloc[0]
    assert row["published"] == cell and row["delta"] == pytest.approx(70.0 - cell)
    assert set(comp["k"]) == {1}  # the paper has no AIME pass@2


def test_report_verbs_write_tables_figures_and_report(manifest, tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    csv = tmp_path / "report" / "pass_at_k.csv"
    assert main(["report", "collect", "--manifest", str(path), "--out", str(csv)]) == 0
    args = ["--manifest", str(path), "--pass-at-k", str(csv)]
    per_problem = ["--per-problem", str(csv.with_name("per_problem.csv"))]
    assert main(["report", "tables", *args, *per_problem, "--out", str(tmp_path / "tables")]) == 0
    assert main(["report", "figures", *args, "--out", str(tmp_path / "figures")]) == 0
    report = tmp_path / "REPORT.md"
    summary = ["--tables", str(tmp_path / "tables"), "--figures", str(tmp_path / "figures"), "--out", str(report)]
    assert main(["report", "summary", *args, *summary]) == 0
    for name in (
        "m.csv",
        "m.md",
        "m.tex",
        "m.html",
        "m_full.csv",
        "comparison.csv",
        "comparison.md",
        "comparison.html",
        "significance.md",
        "significance.html",
    ):
        assert (tmp_path / "tables" / name).is_file()
    assert (tmp_path / "figures" / "passk_m_aime2024.pdf").stat().st_size > 1000
    text = report.read_text()
    assert "figures/passk_m_aime2024.png" in text and "| m → Qwen2.5-7B | pacs → PACS |" in text
    assert pd.read_csv(tmp_path / "tables" / "m.csv", index_col=0).loc["PACS", "AIME 2024 @1"] == 70.0
    pairs = pd.read_csv(tmp_path / "tables" / "significance.csv").set_index(["method", "against", "k"])
    assert pairs.loc[("pacs", "ppo", 1), "difference"] == pytest.approx(0.0, abs=1e-9)  # 70.00 both
    assert pairs.loc[("pacs", "base", 1), "difference"] == pytest.approx(20.0)
    assert "| Model | AIME 2024 | 1 | PACS − PPO | +0.00" in text and "paired bootstrap" in text
    page = (tmp_path / "tables" / "significance.html").read_text()  # what snakemake --report shows: labels, not keys
    assert "<td>PACS − PPO</td>" in page and "<td>+20.00 (" in page and ">pacs<" not in page
    manifest["evaluations"][0]["metrics"] = str(tmp_path / "missing.json")
    path.write_text(json.dumps(manifest))
    assert main(["report", "collect", "--manifest", str(path), "--out", str(csv)]) == 2


def test_each_paper_version_has_its_published_numbers(manifest, tmp_path):
    v1, v2 = published_for("v1"), published_for("v2")
    assert len(v1) == 216 and len(v2) == 300 + 102 + 8  # v2: its tables, App. D.3 and Table 1, Figure 6
    cell = v2.set_index(["model", "method", "benchmark", "k"])["pass_at_k"]
    assert (cell[("Qwen3-8B", "PACS", "LiveCodeBench", 1)], cell[("Qwen3-8B", "Base", "GPQA", 1)]) == (45.96, 48.04)
    # the prose of v2: 8B BeyondAIME pass@64, PACS 64.02 against GRPO 57.64
    assert (cell[("Qwen3-8B", "PACS", "BeyondAIME", 64)], cell[("Qwen3-8B", "GRPO", "BeyondAIME", 64)]) == (
        64.02,
        57.64,
    )
    with pytest.raises(ValueError, match="paper version"):
        published_for("v3")
    manifest["paper"] = "v2"  # the comparison then takes v2's cells: none for a model published as Qwen2.5-7B
    manifest["models"]["m"]["published_as"] = "Qwen3-8B"
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    csv = tmp_path / "report" / "pass_at_k.csv"
    assert main(["report", "collect", "--manifest", str(path), "--out", str(csv)]) == 0
    tables = ["--per-problem", str(csv.with_name("per_problem.csv")), "--out", str(tmp_path / "tables")]
    assert main(["report", "tables", "--manifest", str(path), "--pass-at-k", str(csv), *tables]) == 0
    comp = pd.read_csv(tmp_path / "tables" / "comparison.csv")
    assert set(comp["paper_model"]) == {"Qwen3-8B"} and set(comp["k"]) == {1}
    assert comp.set_index("method").loc["pacs", "published"] == cell[("Qwen3-8B", "PACS", "AIME24", 1)]


def sweep_manifest(tmp_path) -> tuple[dict, pd.DataFrame]:
    """GRPO and a β sweep (0.1, 1, 10) of one model on two benchmarks: the toy one evaluated at steps 10 and
    20, the other at 20 only; training logs with entropy; and the pass@k table pacs report collect writes."""
    swept = {f"pacs_beta_{v}": {"sweep": "pacs_beta", "key": "algorithm.options.beta", "label": "β", "value": v}
             for v in (0.1, 1, 10)}  # fmt: skip
    methods = {"base": {"label": "Base", "algorithm": None, "sweep": None},
               "grpo": {"label": "GRPO", "algorithm": "grpo", "sweep": None},
               **{m: {"label": f"PACS (β={s['value']})", "algorithm": "pacs", "sweep": s}
                  for m, s in swept.items()}}  # fmt: skip
    runs = []
    for i, method in enumerate(m for m in methods if m != "base"):
        path = tmp_path / f"{method}.jsonl"
        path.write_text(
            "".join(json.dumps({"step": s, "policy/entropy": 1.0 + i - 0.01 * s}) + "\n" for s in (1, 2, 3))
        )
        runs.append({"model": "q2.5", "method": method, "metrics": str(path)})
    rows = []
    for bench, steps in (("toy_heldout", (10, 20)), ("aime2024", (20,))):
        rows += [["q2.5", "base", 0, bench, k, 10.0 * k, 9.0 * k, 11.0 * k, 4, 30, 0] for k in (1, 2)]
        for j, method in enumerate(m for m in methods if m != "base"):
            for step in steps:
                value = 20.0 + j + step
                rows += [
                    ["q2.5", method, step, bench, k, value * k, value * k - 1, value * k + 1, 4, 30, 0] for k in (1, 2)
                ]
    manifest = {
        "name": "t", "paper": "v1", "models": {"q2.5": {"label": "Model one"}}, "methods": methods, "runs": runs,
        "benchmarks": {"toy_heldout": {"label": "Toy", "ks": [1, 2]}, "aime2024": {"label": "AIME 2024", "ks": [1, 2]}},
    }  # fmt: skip
    return manifest, pd.DataFrame(rows, columns=COLUMNS)


def test_training_dynamics_sweep_and_entropy_figures(tmp_path, monkeypatch):
    """pass@1 against step from the base model where a run has several checkpoints (not for aime2024, with
    one); pass@k against β, one line per k, from the last checkpoints; entropy against step per method."""
    from pacs.report import figures

    manifest, table = sweep_manifest(tmp_path)
    drawn = {}

    def keep(fig, stem):
        drawn[stem.name] = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
                            for line in fig.axes[0].lines}  # fmt: skip
        return [stem.with_suffix(".png")]

    monkeypatch.setattr(figures, "save_figure", keep)
    figures.all_figures(table, manifest, tmp_path)
    assert sorted(n for n in drawn if not n.startswith(("passk", "train"))) == [
        "dynamics_q2.5_toy_heldout", "entropy_q2.5", "sweep_q2.5_aime2024_pacs_beta",
        "sweep_q2.5_toy_heldout_pacs_beta"]  # fmt: skip
    assert drawn["dynamics_q2.5_toy_heldout"]["GRPO"] == ([0, 10, 20], [10.0, 30.0, 40.0])  # base, then its steps
    assert drawn["dynamics_q2.5_toy_heldout"]["PACS (β=10)"] == ([0, 10, 20], [10.0, 33.0, 43.0])
    assert drawn["sweep_q2.5_toy_heldout_pacs_beta"] == {
        "pass@1": ([0.1, 1, 10], [41.0, 42.0, 43.0]), "pass@2": ([0.1, 1, 10], [82.0, 84.0, 86.0])}  # fmt: skip
    assert drawn["entropy_q2.5"]["GRPO"] == ([1, 2, 3], [0.99, 0.98, 0.97])
    assert set(drawn["entropy_q2.5"]) == {"GRPO", "PACS (β=0.1)", "PACS (β=1)", "PACS (β=10)"}


def test_every_figure_and_table_name_describes_itself(tmp_path):
    """`snakemake --report` labels each figure and table by what its name says (model and benchmark labels)."""
    from pacs.report import figures, tables

    manifest, table = sweep_manifest(tmp_path)
    written = figures.all_figures(table, manifest, tmp_path / "figures")
    described = {p.stem: figures.describe(p.stem, manifest) for p in written if p.suffix == ".png"}
    assert described["sweep_q2.5_toy_heldout_pacs_beta"] == {
        "kind": "pass@k against a swept option", "model": "Model one", "benchmark": "Toy", "option": "β"}  # fmt: skip
    assert described["dynamics_q2.5_toy_heldout"]["benchmark"] == "Toy"
    assert described["train_q2.5_pacs_beta_0.1"]["method"] == "PACS (β=0.1)"
    assert described["entropy_q2.5"] == {"kind": "policy entropy against step", "model": "Model one"}
    assert len(described) == 2 + 1 + 2 + 1 + 4  # passk ×2, dynamics, sweep ×2, entropy, train ×4
    with pytest.raises(ValueError, match="names no model"):
        figures.describe("passk_m_2_toy_heldout", manifest)
    described = list(tables.describe("q2.5_full", manifest).items())  # model first: no toggle in the report
    assert described == [("model", "Model one"), ("table", "pass@k, every k")]
    # a model key with a dot keeps it in every file name (qwen2.5-7b's tables are not "qwen2.csv")
    assert {p.name for p in tables.write_tables(table, manifest, tmp_path / "tables")} == {
        f"q2.5{full}.{suffix}" for full in ("", "_full") for suffix in ("csv", "md", "tex", "html")}  # fmt: skip
    assert {p.name for p in written} >= {"passk_q2.5_aime2024.png", "passk_q2.5_aime2024.pdf"}
    assert tables.describe("significance", manifest)["table"] == "paired differences between methods"


def test_v2_pages_put_ours_beside_the_published_cells(tmp_path):
    """Figure 6's table, Table 1 and the PACS variants from a pass@k table written here: each cell ours with its
    interval and the paper's where the names match; Table 1's Avg. only over rows with every benchmark."""
    from pacs.report.collect import published_for
    from pacs.report.sections import all_sections

    manifest = {
        "models": {"q8": {"label": "Q8", "published_as": "Qwen3-8B", "released": False},
                   "limo": {"label": "LIMO", "published_as": "LIMO", "released": True}},
        "methods": {"base": {"label": "Base", "published_as": "Base", "algorithm": None},
                    "released": {"label": "As released", "published_as": "as-released", "algorithm": None},
                    "pacs": {"label": "PACS", "published_as": "PACS", "algorithm": "pacs"},
                    "pacs_grpo": {"label": "PACS (GRPO score)", "published_as": "PACS-GRPO-adv", "algorithm": "pacs"}},
        "benchmarks": {"aime2024": {"label": "AIME 2024", "published_as": "AIME24", "ks": [1]},
                       "amc23": {"label": "AMC23", "published_as": "AMC23", "ks": [1]},
                       "lcb": {"label": "LiveCodeBench", "published_as": "LiveCodeBench", "ks": [1],
                               "out_of_domain": True}},
    }  # fmt: skip
    rows = [("q8", "base", 0, "aime2024", 40.0), ("q8", "base", 0, "amc23", 80.0), ("q8", "base", 0, "lcb", 30.0),
            ("q8", "pacs", 9, "aime2024", 50.0), ("q8", "pacs", 9, "amc23", 90.0), ("q8", "pacs", 9, "lcb", 44.0),
            ("q8", "pacs_grpo", 9, "aime2024", 48.0), ("limo", "released", 0, "aime2024", 55.0)]  # fmt: skip
    table = pd.DataFrame([{"model": m, "method": k, "step": s, "benchmark": b, "k": 1, "pass_at_k": v,
                           "ci_low": v - 1, "ci_high": v + 1} for m, k, s, b, v in rows])  # fmt: skip
    written = all_sections(table, manifest, published_for("v2"), tmp_path)
    assert {p.name for p in written} >= {"out_of_domain_q8.csv", "released.csv", "variants_q8.html"}
    ood = pd.read_csv(tmp_path / "out_of_domain_q8.csv").set_index("method")
    assert list(ood["benchmark"]) == ["lcb", "lcb"] and ood.loc["pacs", "published"] == 45.96
    assert ood.loc["pacs", "delta"] == pytest.approx(44.0 - 45.96) and ood.loc["base", "published"] == 31.06
    released = pd.read_csv(tmp_path / "released.csv")
    limo = released[released["row"] == "LIMO, As released"].set_index("benchmark")
    assert limo.loc["aime2024", "ours"] == 55.0 and not pd.isna(limo.loc["aime2024", "published"])
    assert pd.isna(limo.loc["average", "ours"])  # no AMC23 evaluation: no Avg.
    pacs = released[released["row"] == "Q8, PACS"].set_index("benchmark")
    assert pacs.loc["average", "ours"] == 70.0 and "lcb" not in pacs.index  # the benchmarks in domain only
    variants = pd.read_csv(tmp_path / "variants_q8.csv").set_index(["method", "benchmark"])
    assert list(dict.fromkeys(variants.index.get_level_values("method"))) == ["pacs", "pacs_grpo"]
    assert pd.isna(variants.loc[("pacs_grpo", "aime2024"), "published"])  # Tables 9–13 are Qwen3-4B's only
    assert "44.00 [43.00, 45.00] (paper 45.96)" in (tmp_path / "out_of_domain_q8.md").read_text()


def test_an_out_of_domain_figure_with_every_bar_at_0_says_why(manifest, tmp_path, monkeypatch):
    """No method answers a problem out of domain: the figure and REPORT.md say so, with the verifier's statuses
    of the answers; one correct answer anywhere and the bars speak for themselves."""
    from pacs.report import figures

    manifest["benchmarks"]["code"] = {"label": "Code", "published_as": None, "ks": [1], "out_of_domain": True}
    for e in list(manifest["evaluations"]):
        path = tmp_path / e["method"] / "code.json"
        path.write_text(json.dumps({
            "pass_at_k": {"1": {"mean": 0.0, "ci_low": 0.0, "ci_high": 0.0}}, "samples_per_problem": 2,
            "problems": 3, "verifier_failures": 0, "responses": 6, "truncation_rate": 0.5,
            "statuses": {"passed": 0, "failed": 2, "no_code": 4},
            "per_problem": [{"problem": i, "id": str(i), "n": 2, "correct": 0} for i in range(3)],
        }))  # fmt: skip
        manifest["evaluations"].append({**e, "benchmark": "code", "metrics": str(path)})
    path = tmp_path / "manifest.json"
    path.write_text(json.dumps(manifest))
    csv = tmp_path / "report" / "pass_at_k.csv"
    assert main(["report", "collect", "--manifest", str(path), "--out", str(csv)]) == 0
    table = pd.read_csv(csv)
    why = figures.out_of_domain_blank(table, manifest, "m")
    assert why == ("No method answered any out-of-domain problem correctly, so every bar is 0: Code: 0 of 18 answers "
                   "correct (failed 6, no_code 12; 9 cut at the token limit).")  # fmt: skip
    drawn = {}
    monkeypatch.setattr(figures, "save_figure", lambda fig, stem: drawn.update(
        {stem.name: " ".join(t.get_text() for t in fig.axes[0].texts).replace("\n", " ")}) or [])  # fmt: skip
    figures.out_of_domain_bars(table, manifest, None, tmp_path / "figures")
    assert drawn == {"ood_m": why}
    monkeypatch.undo()
    args = ["--manifest", str(path), "--pass-at-k", str(csv)]
    assert main(["report", "tables", *args, "--per-problem", str(csv.with_name("per_problem.csv")),
                 "--out", str(tmp_path / "tables")]) == 0  # fmt: skip
    assert main(["report", "figures", *args, "--out", str(tmp_path / "figures")]) == 0
    summary = ["--tables", str(tmp_path / "tables"), "--figures", str(tmp_path / "figures")]
    assert main(["report", "summary", *args, *summary, "--out", str(tmp_path / "REPORT.md")]) == 0
    text = (tmp_path / "REPORT.md").read_text()
    assert f"![ood_m](figures/ood_m.png)\n\n*ood_m: {why}*" in text
    assert "*passk_m_code: No method answered a problem correctly, so every line is at 0: Code: 0 of 18" in text
    assert "passk_m_aime2024:" not in text
    table.loc[(table["benchmark"] == "code") & (table["method"] == "pacs"), ["pass_at_k", "ci_high"]] = 1.0
    assert figures.out_of_domain_blank(table, manifest, "m") is None
