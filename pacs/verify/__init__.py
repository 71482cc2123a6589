"""The verifiable rewards: math-verify equivalence of a model's answer to the gold (the paper's), and
code run in a sandbox against its tests (``code.py``)."""

from pacs.verify.code import CODE_STATUSES, CodeConfig, CodeVerdict, score_code
from pacs.verify.pool import PASSING, TASK_STATUSES, TASKS, VerifierPool, status_counts
from pacs.verify.scoring import STATUSES, Verdict, VerifyConfig, score_answer

__all__ = [
    "CODE_STATUSES", "PASSING", "STATUSES", "TASKS", "TASK_STATUSES", "CodeConfig", "CodeVerdict", "Verdict",
    "VerifierPool", "VerifyConfig", "score_answer", "score_code", "status_counts",
]  # fmt: skip
