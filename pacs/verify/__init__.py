"""The paper's verifiable reward: math-verify equivalence of a model's answer to the gold."""

from pacs.verify.pool import VerifierPool, status_counts
from pacs.verify.scoring import STATUSES, Verdict, VerifyConfig, score_answer

__all__ = ["STATUSES", "Verdict", "VerifierPool", "VerifyConfig", "score_answer", "status_counts"]
