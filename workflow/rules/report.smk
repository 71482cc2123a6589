# Tables, figures, REPORT.md and the results' wandb run, from result files only (`pacs report`). The tables and
# figures are also `snakemake --report report.zip` entries: a category per kind, labelled by model and benchmark or
# method.
from pacs.report import figures as figure_names
from pacs.report import tables as table_names

MANIFEST = f"{RESULTS}/report/manifest.json"
PASS_AT_K = f"{RESULTS}/report/pass_at_k.csv"
PER_PROBLEM = f"{RESULTS}/report/per_problem.csv"


# The report's rules read result files and take seconds: they run where Snakemake runs (with --profile slurm, the
# node that submits), not as SLURM jobs of their own that would each wait in the queue; and wandb's upload needs
# the network, which compute nodes often lack.
localrules:
    collect_pass_at_k,
    make_tables,
    make_figures,
    write_report,
    log_results_to_wandb,


rule collect_pass_at_k:
    input:
        manifest=MANIFEST,
        evaluated=[evaluated(*job) for job in SUITES],
    output:
        pass_at_k=PASS_AT_K,
        per_problem=PER_PROBLEM,
    log:
        f"{LOGS}/collect_pass_at_k.log",
    conda:
        ENV
    shell:
        "pacs report collect --manifest {input.manifest} --out {output.pass_at_k} --per-problem {output.per_problem}"
        " > {log} 2>&1"


rule make_tables:
    input:
        manifest=MANIFEST,
        pass_at_k=PASS_AT_K,
        per_problem=PER_PROBLEM,
        diversity=[d["file"] for d in DIVERSITY],
    output:
        report(
            directory(f"{RESULTS}/tables"),
            patterns=["{table}.html"],
            caption="../report/tables.rst",
            category="Tables",
            labels=lambda w: table_names.describe(w.table, MANIFEST_DATA),
        ),
    log:
        f"{LOGS}/make_tables.log",
    conda:
        ENV
    shell:
        "pacs report tables --manifest {input.manifest} --pass-at-k {input.pass_at_k}"
        " --per-problem {input.per_problem} --out {output} > {log} 2>&1"


rule make_figures:
    input:
        manifest=MANIFEST,
        pass_at_k=PASS_AT_K,
        runs=[trained(m, k) for m, k in RUNS],
        embeddings=[d["embeddings"] for d in DIVERSITY],
    output:
        report(
            directory(f"{RESULTS}/figures"),
            patterns=["{figure}.png"],
            caption="../report/figures.rst",
            category=lambda w: figure_names.describe(w.figure, MANIFEST_DATA)["kind"].capitalize(),
            subcategory=lambda w: figure_names.describe(w.figure, MANIFEST_DATA)["model"],
            labels=lambda w: {k: v for k, v in figure_names.describe(w.figure, MANIFEST_DATA).items() if k != "kind"},
        ),
    log:
        f"{LOGS}/make_figures.log",
    conda:
        ENV
    shell:
        "pacs report figures --manifest {input.manifest} --pass-at-k {input.pass_at_k} --out {output} > {log} 2>&1"


rule write_report:
    input:
        manifest=MANIFEST,
        pass_at_k=PASS_AT_K,
        tables=f"{RESULTS}/tables",
        figures=f"{RESULTS}/figures",
    output:
        f"{RESULTS}/REPORT.md",
    log:
        f"{LOGS}/write_report.log",
    conda:
        ENV
    shell:
        "pacs report summary --manifest {input.manifest} --pass-at-k {input.pass_at_k} --tables {input.tables}"
        " --figures {input.figures} --out {output} > {log} 2>&1"


# The experiment's results as one wandb run (pass@k against step, the tables, the figures), beside the training
# and evaluation runs; `all` asks for it unless train.logging.wandb is disabled
rule log_results_to_wandb:
    input:
        manifest=MANIFEST,
        pass_at_k=PASS_AT_K,
        tables=f"{RESULTS}/tables",
        figures=f"{RESULTS}/figures",
    output:
        f"{RESULTS}/report/wandb.json",
    log:
        f"{LOGS}/log_results_to_wandb.log",
    conda:
        ENV
    params:
        mode=WANDB["mode"],
        project=WANDB["project"],
    shell:
        "pacs report wandb --manifest {input.manifest} --pass-at-k {input.pass_at_k} --tables {input.tables}"
        " --figures {input.figures} --mode {params.mode} --project {params.project:q} --out {output} > {log} 2>&1"
