import json

import pandas as pd

from pacs.cli import main
from pacs.verify import STATUSES


def test_bench_verifier_writes_a_report(tmp_path, capsys):
    out = tmp_path / "bench" / "verifier.json"
    assert main(["bench", "verifier", "--answers", "30", "--groups", "5", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    rows = report["results"]
    assert set(rows) == {"in_process", "pool_1_workers", "pool_2_workers", "pool_2_workers_groups_of_8"}
    for row in rows.values():
        assert row["answers_per_s"] > 0
        assert set(row["statuses"]) == set(STATUSES) and sum(row["statuses"].values()) == row["answers"]
    assert rows["pool_2_workers"]["agrees_with_in_process"] is True
    grouped = rows["pool_2_workers_groups_of_8"]
    assert grouped["answers"] == 40 and grouped["unique_pairs"] <= 15
    assert "answers/s" in capsys.readouterr().out
    assert not list(out.parent.glob(".*.tmp"))  # atomic write left no temp file


def test_check_golds_writes_a_row_per_gold_and_fails_on_a_bad_one(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    rows = [
        {"id": 0, "problem": "p1", "answer": 27.0},
        {"id": 1, "problem": "p2", "answer": "\\frac{1}{2}"},
        {"id": 2, "problem": "p3", "answer": "}{"},
    ]
    (data / "amc23.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    out = tmp_path / "golds.csv"
    code = main(["check-golds", "--data-dir", str(data), "--benchmarks", "amc23", "--out", str(out), "--workers", "1"])
    assert code == 1
    table = pd.read_csv(out)
    assert table["gold"].tolist() == ["27", "\\frac{1}{2}", "}{"]
    assert table["ok"].tolist() == [True, True, False]
    assert table["right_status"].tolist()[2] == "gold_unparseable"
    assert "FAIL amc23 row 2" in capsys.readouterr().out


def test_missing_data_is_a_clear_error(tmp_path, capsys):
    code = main(["check-golds", "--data-dir", str(tmp_path), "--benchmarks", "gsm8k", "--out", str(tmp_path / "x.csv")])
    assert code == 2
    assert "gsm8k_test.jsonl: no such file" in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()
