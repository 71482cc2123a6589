# PACS reproduction: data → training → evaluation → tables and figures (docs/cluster.md; README's commands).
# The workflow is workflow/Snakefile, where Snakemake's workflow catalog expects it; `snakemake` here runs it, its
# rule `all` the default target as when Snakemake loads it itself (an `include:` would keep the default target of
# the including file, which has none)
workflow.include("workflow/Snakefile", overwrite_default_target=True)
