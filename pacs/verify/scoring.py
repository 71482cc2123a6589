"""Score one model answer against one gold with math-verify, the paper's way, with a status.

math-verify's own timeouts swallow themselves: a timed-out ``verify`` returns False and a timed-out
``parse`` returns [], indistinguishable from a wrong or missing answer. So its timeouts are turned
off here, and one SIGALRM deadline of ours covers gold parse, answer parse and comparison together.
Our exception derives from BaseException, so math-verify's ``except Exception`` cannot eat it.
Signals only work in a process's main thread: call this in worker processes (see pool.py), never
in threads. Code stuck inside C (a huge integer power) ignores signals; the pool's hard deadline
kills such a worker.
"""

import logging
import signal
from dataclasses import dataclass
from functools import lru_cache
from typing import NamedTuple

STATUSES = ("correct", "wrong", "no_answer", "timeout", "gold_unparseable", "error")
# "error": an unexpected exception or a worker that died; counted, never merged into "wrong".

# math-verify's extraction configs by name; math-verify (and sympy under it, 0.6 s) is imported where an answer is
# scored, not where a config names them: Snakemake's processes read these configs (pacs.experiment)
EXTRACTORS = {"latex": "LatexExtractionConfig", "expr": "ExprExtractionConfig", "string": "StringExtractionConfig"}

# With its timeouts off, math-verify warns once per process that we must time out ourselves: we do.
logging.getLogger("math_verify").setLevel(logging.ERROR)


class Verdict(NamedTuple):
    status: str  # one of STATUSES
    score: float  # 1.0 if correct else 0.0; read the status before trusting a 0
    extracted: str  # the answer as math-verify extracted it ("" when none); for "error", the exception


@dataclass(frozen=True)
class VerifyConfig:
    """How golds and answers are read; defaults are the paper's reward (ritzz-ai/PACS reward_function.py)."""

    gold_extraction: tuple[str, ...] = ("latex",)  # gold is wrapped as \boxed{gold}, then LaTeX-parsed
    answer_extraction: tuple[str, ...] = ("expr", "latex")  # the model's answer: expression + LaTeX
    wrap_gold_in_boxed: bool = True  # wrap the gold in \boxed{} before parsing
    timeout_s: float = 5.0  # deadline for one answer: gold parse + answer parse + comparison
    float_rounding: int = 6  # decimal places numbers are rounded to before comparing (math-verify's default)
    numeric_precision: int = 15  # digits of precision of numeric comparisons (math-verify's default)

    def __post_init__(self):
        for key in ("gold_extraction", "answer_extraction"):
            names = getattr(self, key)
            unknown = [n for n in names if n not in EXTRACTORS]
            if not names or unknown:
                raise ValueError(f"verify.{key} = {names!r}: each must be one of {sorted(EXTRACTORS)}")
        if self.timeout_s <= 0:
            raise ValueError(f"verify.timeout_s must be > 0, got {self.timeout_s}")


class DeadlineExceeded(BaseException):
    """Our per-answer deadline; a BaseException so that library `except Exception` lets it through."""


def _on_alarm(signum, frame):
    raise DeadlineExceeded()


@lru_cache(maxsize=64)
def extraction_configs(names: tuple[str, ...]) -> list:
    """math-verify's extraction configs for ``names`` (keys of ``EXTRACTORS``)."""
    import math_verify

    return [getattr(math_verify, EXTRACTORS[n])() for n in names]


@lru_cache(maxsize=4096)
def _parse_gold(gold: str, config: VerifyConfig) -> list:
    # Cached: the n answers of a group share one gold. A deadline exception is not cached.
    from math_verify import parse

    text = "\\boxed{" + gold + "}" if config.wrap_gold_in_boxed else gold
    return parse(text, extraction_configs(config.gold_extraction), parsing_timeout=None)


@lru_cache(maxsize=1024)
def _parse_answer(answer: str, extraction: tuple[str, ...]) -> list:
    # Cached: sampled answers repeat across groups and steps (short final answers above all). Parsing is
    # pure and its result is not mutated; a deadline exception is not cached.
    from math_verify import parse

    return parse(answer, extraction_configs(extraction), parsing_timeout=None)


def _score(gold: str, answer: str, config: VerifyConfig) -> Verdict:
    from math_verify import verify

    gold_parsed = _parse_gold(gold, config)
    if not gold_parsed:
        return Verdict("gold_unparseable", 0.0, "")
    answer_parsed = _parse_answer(answer, config.answer_extraction)
    if not answer_parsed:
        return Verdict("no_answer", 0.0, "")
    extracted = str(answer_parsed[-1])  # parse() returns [sympy form, source string]
    ok = verify(
        gold_parsed,
        answer_parsed,
        float_rounding=config.float_rounding,
        numeric_precision=config.numeric_precision,
        timeout_seconds=None,
    )
    return Verdict("correct", 1.0, extracted) if ok else Verdict("wrong", 0.0, extracted)


def score_answer(gold: str, answer: str, config: VerifyConfig = VerifyConfig()) -> Verdict:
    """Verdict for one answer, within ``config.timeout_s`` (main thread only)."""
    import math_verify  # noqa: F401 - a process's first answer imports it before its deadline starts

    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, config.timeout_s)
    try:
        return _score(gold, answer, config)
    except DeadlineExceeded:
        return Verdict("timeout", 0.0, "")
    except Exception as e:  # noqa: BLE001 - counted as "error", never as a silent wrong answer
        return Verdict("error", 0.0, f"{type(e).__name__}: {e}"[:200])
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
