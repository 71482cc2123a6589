"""Does the verifier accept every real gold? Each gold, written as a model would write it, must
score correct, and a wrong number must score wrong. Failures are listed with their status."""

import random
import re
from dataclasses import dataclass

from pacs.data.sources import GoldRow
from pacs.verify.pool import VerifierPool

_NUMBER = re.compile(r"[+-]?\d+")


def as_model_answer(answer: str) -> str:
    return f"Let me work through this step by step. Putting it together, so the answer is \\boxed{{{answer}}}."


def wrong_number(gold: str, rng: random.Random) -> str:
    """A number that is not the gold: gold + a small offset for integer golds, else a large one."""
    if _NUMBER.fullmatch(gold):
        return str(int(gold) + rng.randint(1, 9))
    return str(1_000_003 + rng.randint(0, 999))


@dataclass(frozen=True)
class GoldCheck:
    row: GoldRow
    right_status: str  # status of the gold written as a model answer: must be "correct"
    wrong_answer: str
    wrong_status: str  # status of a wrong number: must be "wrong"

    @property
    def ok(self) -> bool:
        return self.right_status == "correct" and self.wrong_status == "wrong"


def check_golds(rows: list[GoldRow], pool: VerifierPool, seed: int = 0) -> list[GoldCheck]:
    rng = random.Random(seed)
    wrongs = [wrong_number(r.gold, rng) for r in rows]
    golds = [r.gold for r in rows]
    verdicts = pool.score(golds + golds, [as_model_answer(r.gold) for r in rows] + [as_model_answer(w) for w in wrongs])
    right, wrong = verdicts[: len(rows)], verdicts[len(rows) :]
    return [GoldCheck(r, v.status, w, u.status) for r, w, v, u in zip(rows, wrongs, right, wrong, strict=True)]
