"""The run on disk and in time: checkpoints (``checkpoint``) and what is kept of them (``retention``), metrics
and the run directory (``records``), segments of a run under a time limit (``segments``), a job that lives and
dies whole (``lifetime``), and the preflight (``preflight``).

May import ``settings``."""
