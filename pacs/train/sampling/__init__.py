"""Rollouts: a step's sampling, the weight push and its check (``rollouts``), what the samples show
(``stats``), rollouts k steps off policy (``staleness``), and generator ranks (``generators``) over the process
groups of ``link``.

May import ``settings`` and ``update``."""
