# PACS reproduction: data → training → evaluation → tables and figures.
#   snakemake --profile slurm all                      (the paper, config/config.yaml, on a SLURM cluster)
#   snakemake --cores 2 --configfile config/tiny.yaml  (the same DAG on the tiny model, on a CPU)
from snakemake.utils import min_version, validate

min_version("9.0")


# The paper unless config files are given (--configfile): those then replace it rather than merge into it.
if not workflow.overwrite_configfiles:

    configfile: f"{workflow.basedir}/config/config.yaml"


validate(config, f"{workflow.basedir}/workflow/schemas/config.schema.yaml")


# snakemake --report report.zip: this text, then the tables and figures (workflow/rules/report.smk)
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/eval.smk"
include: "workflow/rules/diversity.smk"
include: "workflow/rules/report.smk"


rule all:
    input:
        f"{RESULTS}/REPORT.md",
        [f"{RESULTS}/report/wandb.json"] if WANDB["mode"] != "disabled" else [],


# snakemake --profile slurm preflight: every distinct training job for a few steps at its maximum lengths, on
# its own resources, before `all` (pacs preflight; docs/cluster.md, "6. Preflight")
rule preflight:
    input:
        [preflight_result(shape) for shape in PREFLIGHTS],
