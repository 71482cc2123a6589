"""Rollouts: a step's sampling, the weight push and its check (``rollouts``), rollouts k steps off policy
(``staleness``), and generator ranks (``generators``) over the process groups of ``link``.

May import every other room of ``pacs.train``."""
