"""The verifiable rewards: math-verify equivalence of a model's answer to the gold (the paper's), code run
in a sandbox against its tests (``code.py``), and a multiple-choice letter read as GPQA's toolkit reads it
(``choice.py``)."""

from pacs.verify.choice import CHOICE_STATUSES, extract_choice, score_choice
from pacs.verify.code import CODE_STATUSES, CodeConfig, CodeVerdict, score_code
from pacs.verify.pool import PASSING, TASK_STATUSES, TASKS, VerifierPool, status_counts
from pacs.verify.scoring import STATUSES, Verdict, VerifyConfig, score_answer

__all__ = [
    "CHOICE_STATUSES", "CODE_STATUSES", "PASSING", "STATUSES", "TASKS", "TASK_STATUSES", "CodeConfig", "CodeVerdict",
    "Verdict", "VerifierPool", "VerifyConfig", "extract_choice", "score_answer", "score_choice", "score_code",
    "status_counts",
]  # fmt: skip
