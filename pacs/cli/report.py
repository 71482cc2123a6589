"""`pacs report ...`: tables, figures and REPORT.md from the workflow's result files (pacs.report)."""

import argparse
from pathlib import Path

from pacs.io import atomic_write_csv


def _add_collect(parts) -> None:
    rc = parts.add_parser("collect", help="every listed metrics.json → one pass@k CSV (percent)")
    rc.add_argument("--manifest", type=Path, required=True, help="report manifest written by the workflow")
    rc.add_argument("--out", type=Path, required=True)
    rc.add_argument("--per-problem", type=Path, help="each problem's counts (default: per_problem.csv beside --out)")
    rc.set_defaults(func=cmd_report_collect)


def cmd_report_collect(args: argparse.Namespace) -> int:
    from pacs.report.collect import collect_pass_at_k, read_manifest
    from pacs.report.significance import read_per_problem

    manifest = read_manifest(args.manifest)
    table, per_problem = collect_pass_at_k(manifest), read_per_problem(manifest)
    per_problem_path = args.per_problem or args.out.with_name("per_problem.csv")
    atomic_write_csv(args.out, table)
    atomic_write_csv(per_problem_path, per_problem)
    print(f"wrote {args.out}: {len(table)} rows, and {per_problem_path}: {len(per_problem)} problem rows")
    return 0


def _inputs(parts, name: str, helptext: str, func) -> argparse.ArgumentParser:
    """``pacs report tables`` and ``figures``: the manifest, the collected pass@k and a directory to write."""
    sub = parts.add_parser(name, help=helptext)
    sub.add_argument("--manifest", type=Path, required=True)
    sub.add_argument("--pass-at-k", type=Path, required=True, help="from `pacs report collect`")
    sub.add_argument("--out", type=Path, required=True, help="directory")
    sub.set_defaults(func=func)
    return sub


def _add_tables(parts) -> None:
    sub = _inputs(parts, "tables", "the paper's tables and the published comparison", cmd_report_tables)
    sub.add_argument("--published", type=Path, help="published pass@k CSV (percent); default: the manifest's "
                     "paper version's (pacs.report.collect.PAPER_VERSIONS)")  # fmt: skip
    sub.add_argument("--per-problem", type=Path, required=True, help="from `pacs report collect`")


def cmd_report_tables(args: argparse.Namespace) -> int:
    import pandas as pd

    from pacs.io import atomic_write_text
    from pacs.report import significance
    from pacs.report.collect import comparison, published_for, read_manifest, read_published
    from pacs.report.diversity import diversity_tables
    from pacs.report.sections import all_sections
    from pacs.report.summary import comparison_markdown
    from pacs.report.tables import to_html, write_tables

    manifest, table = read_manifest(args.manifest), pd.read_csv(args.pass_at_k)
    published = read_published(args.published) if args.published else published_for(manifest.get("paper", "v1"))
    written = write_tables(table, manifest, args.out) + all_sections(table, manifest, published, args.out)
    if manifest.get("diversity"):
        written += diversity_tables(manifest, args.out)
    comp = comparison(table, manifest, published)
    atomic_write_csv(args.out / "comparison.csv", comp)
    atomic_write_text(args.out / "comparison.md", comparison_markdown(comp))
    comp_title = "Reproduced against published pass@k (%)"
    atomic_write_text(args.out / "comparison.html", to_html(comp, comp_title, index=False))
    per_problem = pd.read_csv(args.per_problem, dtype={"id": str})
    pairs = significance.significance_table(manifest, per_problem, published)
    atomic_write_csv(args.out / "significance.csv", pairs)
    atomic_write_text(args.out / "significance.md", significance.to_markdown(pairs, manifest))
    title = "Paired differences between methods (percentage points, 95 % bootstrap intervals over problems)"
    shown = significance.readable(pairs, manifest)
    atomic_write_text(args.out / "significance.html", to_html(shown, title, index=False))
    print(f"wrote {len(written)} tables, comparison.csv ({len(comp)} cells with a published value) and "
          f"significance.csv ({len(pairs)} paired differences) to {args.out}")  # fmt: skip
    return 0


def _add_figures(parts) -> None:
    _inputs(parts, "figures", "pass@k, training dynamics, entropy, sweep and training curves", cmd_report_figures)


def cmd_report_figures(args: argparse.Namespace) -> int:
    import pandas as pd

    from pacs.report.collect import published_for, read_manifest
    from pacs.report.figures import all_figures

    manifest, table = read_manifest(args.manifest), pd.read_csv(args.pass_at_k)
    written = all_figures(table, manifest, args.out, published_for(manifest.get("paper", "v1")))
    print(f"wrote {len(written)} figure files to {args.out}")
    return 0


def _finished(parts, name: str, helptext: str, func) -> argparse.ArgumentParser:
    """``pacs report summary`` and ``wandb``: what the tables and figures rules wrote, and a file to write."""
    sub = parts.add_parser(name, help=helptext)
    sub.add_argument("--manifest", type=Path, required=True)
    sub.add_argument("--pass-at-k", type=Path, required=True)
    sub.add_argument("--tables", type=Path, required=True)
    sub.add_argument("--figures", type=Path, required=True)
    sub.set_defaults(func=func)
    return sub


def _add_summary(parts) -> None:
    rs = _finished(parts, "summary", "REPORT.md linking tables, comparison and figures", cmd_report_summary)
    rs.add_argument("--out", type=Path, required=True)


def cmd_report_summary(args: argparse.Namespace) -> int:
    import pandas as pd

    from pacs.io import atomic_write_text
    from pacs.report.collect import read_manifest
    from pacs.report.summary import write_report

    manifest, table = read_manifest(args.manifest), pd.read_csv(args.pass_at_k)
    comp = pd.read_csv(args.tables / "comparison.csv")
    atomic_write_text(args.out, write_report(manifest, table, comp, args.tables, args.figures, args.out))
    print(f"wrote {args.out}")
    return 0


def _add_wandb(parts) -> None:
    from pacs.wandb_runs import MODES

    rw = _finished(parts, "wandb", "the experiment's results as one wandb run (pacs.report.wandb_report)",
                   cmd_report_wandb)  # fmt: skip
    rw.add_argument("--mode", choices=MODES, default="offline", help="as training's logging.wandb")
    rw.add_argument("--project", default="pacs")
    rw.add_argument("--out", type=Path, required=True, help="JSON: the run's id, directory and keys; the run "
                    "lies in wandb/ beside it")  # fmt: skip


def cmd_report_wandb(args: argparse.Namespace) -> int:
    import pandas as pd

    from pacs.io import atomic_write_json
    from pacs.report.collect import read_manifest
    from pacs.report.wandb_report import log_results

    manifest, table = read_manifest(args.manifest), pd.read_csv(args.pass_at_k)
    logged = log_results(manifest, table, args.tables, args.figures, args.out.parent, args.mode, args.project)
    atomic_write_json(args.out, {"mode": args.mode, "project": args.project, **logged})
    print(f"wandb run ({args.mode}): {logged.get('run_dir')}, {len(logged['keys'])} keys; wrote {args.out}")
    return 0


def add_parser(verbs) -> None:
    rp = verbs.add_parser("report", help="tables, figures and REPORT.md from the workflow's result files")
    parts = rp.add_subparsers(dest="what", required=True)
    for add in (_add_collect, _add_tables, _add_figures, _add_summary, _add_wandb):
        add(parts)
