"""Reports: read the workflow's result files only, write tables, figures and REPORT.md."""
