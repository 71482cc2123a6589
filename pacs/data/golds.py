"""Ground-truth answers as one canonical string, whatever type and padding the source file used."""

import math
import re

_INT = re.compile(r"[+-]?\d+")
_INTEGRAL_DECIMAL = re.compile(r"([+-]?\d+)\.0*")
_THOUSANDS = re.compile(r"[+-]?\d{1,3}(,\d{3})+")


class GoldError(ValueError):
    """A gold answer that cannot be normalised."""


def normalize_gold(value: object) -> str:
    """Canonical gold string.

    - ints, and floats or strings with an integral value, become plain integers:
      AMC23's 27.0 → "27", AIME's zero-padded "025" → "25", "-0" → "0";
    - other strings are stripped and kept as written (LaTeX such as ``\\frac{14}{3}``).
    """
    if isinstance(value, bool) or value is None:
        raise GoldError(f"gold {value!r} is not a number or a string")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise GoldError(f"gold {value!r} is not finite")
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(value, str):
        raise GoldError(f"gold {value!r} has type {type(value).__name__}, expected str, int or float")
    text = value.strip()
    if not text:
        raise GoldError("gold is empty")
    if _INT.fullmatch(text):
        return str(int(text))
    if m := _INTEGRAL_DECIMAL.fullmatch(text):
        return str(int(m.group(1)))
    return text


def gsm8k_gold(solution: str) -> str:
    """The number after GSM8K's ``#### `` marker, thousands separators removed ("2,125" → "2125")."""
    if not isinstance(solution, str) or "####" not in solution:
        raise GoldError("GSM8K answer has no '####' final-answer marker")
    final = solution.rsplit("####", 1)[1].strip()
    if _THOUSANDS.fullmatch(final):
        final = final.replace(",", "")
    return normalize_gold(final)
