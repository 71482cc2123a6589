# Tables, figures and REPORT.md, from result files only (`pacs report`).

MANIFEST = f"{RESULTS}/report/manifest.json"
PASS_AT_K = f"{RESULTS}/report/pass_at_k.csv"
PER_PROBLEM = f"{RESULTS}/report/per_problem.csv"


rule collect_pass_at_k:
    input:
        manifest=MANIFEST,
        metrics=[e["metrics"] for e in EVALUATIONS],
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
    output:
        directory(f"{RESULTS}/tables"),
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
        runs=[checkpoint(m, k, total_steps(m, k)) for m, k in RUNS],
    output:
        directory(f"{RESULTS}/figures"),
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
