import json

import pytest

from pacs.data.golds import GoldError, gsm8k_gold, normalize_gold
from pacs.data.sources import load_gold_rows


@pytest.mark.parametrize(
    "raw, gold",
    [
        ("025", "25"),  # AIME zero padding
        ("000", "0"),
        (27.0, "27"),  # AMC23 floats
        (-1.0, "-1"),
        (0.5, "0.5"),
        (70, "70"),  # AIME 2025 ints
        ("  \\frac{14}{3} ", "\\frac{14}{3}"),  # LaTeX kept as written
        ("1,-2", "1,-2"),  # a MATH-500 list, not a thousands separator
        ("3.0", "3"),
    ],
)
def test_normalize_gold(raw, gold):
    assert normalize_gold(raw) == gold


@pytest.mark.parametrize("raw", ["", "   ", None, True, float("nan"), [1]])
def test_bad_golds_are_errors(raw):
    with pytest.raises(GoldError):
        normalize_gold(raw)


def test_gsm8k_final_answer():
    assert gsm8k_gold("She pays 2 * 3 = <<2*3=6>>6 dollars.\n#### 6") == "6"
    assert gsm8k_gold("...\n#### 1,450,000") == "1450000"
    assert gsm8k_gold("#### -3") == "-3"
    with pytest.raises(GoldError, match="####"):
        gsm8k_gold("no marker here")


def test_loading_errors_name_file_row_and_field(tmp_path):
    (tmp_path / "amc23.jsonl").write_text(
        json.dumps({"id": 0, "problem": "p", "answer": 3.0}) + "\n" + json.dumps({"id": 1, "problem": "q"})
    )
    with pytest.raises(ValueError, match=r"amc23.jsonl: row 1: no field 'answer'"):
        load_gold_rows(tmp_path, "amc23")
    (tmp_path / "amc23.jsonl").write_text(json.dumps({"id": 0, "problem": "p", "answer": ""}))
    with pytest.raises(ValueError, match=r"amc23.jsonl: row 0: gold is empty"):
        load_gold_rows(tmp_path, "amc23")
    with pytest.raises(FileNotFoundError, match="math500.jsonl"):
        load_gold_rows(tmp_path, "math500")
