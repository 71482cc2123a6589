"""Score a multiple-choice answer the way GLM-4.5's toolkit scores GPQA (zai-org/glm-simple-evals, gpqa_eval.py).

The toolkit keeps the last 1,024 characters of the response and takes the first match of
``(?i)ANSWER\\s*:\\s*([A-D])`` in them; the answer is right when that letter equals the gold one. So:

- the first answer line of the kept tail counts, not the last (an earlier one further back is cut off);
- ``(?i)`` makes the keyword's case free ("answer: B", "Answer : B") and the letter's too, but the letter
  is compared as written: "ANSWER: b" is extracted as "b" and is wrong, as the toolkit scores it;
- nothing checks that a line ends after the letter ("ANSWER: Because" reads "B").

The toolkit reads the chat API's ``content``, which holds no reasoning: here, as for code (``code.py``),
the text after the last ``</think>``, or the whole response when there is none. A response without an
answer line is ``no_answer``, never a silent ``wrong``.
"""

import re

from pacs.verify.scoring import Verdict

CHOICE_STATUSES = ("correct", "wrong", "no_answer")
LETTERS = "ABCD"
ANSWER_PATTERN = re.compile(r"(?i)ANSWER\s*:\s*([A-D])")
TAIL_CHARS = 1024  # the part of a response the toolkit reads


def extract_choice(response: str) -> str | None:
    """The letter the toolkit reads in ``response`` (as written: "b" stays "b"), or None."""
    tail = response.rsplit("</think>", 1)[-1][-TAIL_CHARS:]
    match = ANSWER_PATTERN.search(tail)
    return match.group(1) if match else None


def score_choice(gold: str, response: str) -> Verdict:
    """``correct`` when the extracted letter is ``gold`` ("A" ... "D"), ``wrong`` for another, ``no_answer``
    when there is none. A gold that is no letter is a data error: ``ValueError``."""
    if gold not in tuple(LETTERS):
        raise ValueError(f"multiple-choice gold {gold!r} is not one of {list(LETTERS)}")
    letter = extract_choice(response)
    if letter is None:
        return Verdict("no_answer", 0.0, "")
    return Verdict("correct", 1.0, letter) if letter == gold else Verdict("wrong", 0.0, letter)
