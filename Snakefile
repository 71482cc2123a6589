# The PACS reproduction workflow. Rules (data, train, eval, report) arrive with the workflow
# issue; until then the package's commands run directly (see README.md).
from snakemake.utils import min_version

min_version("9.0")
