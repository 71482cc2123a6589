"""A training run on disk and in time: checkpoints (``checkpoint``) and what is kept of them (``retention``), the
run directory's config and metrics (``directory``), segments of a run under a time limit (``segments``), a job
that lives and dies whole (``lifetime``), and the preflight (``preflight``).

Imports ``pacs.ranks`` and the plan, nothing of ``pacs.train``: the trainer and the workflow read the run through
it."""
