"""Every gold of the real benchmarks in ../shared/data, as `pacs prepare-data` writes it, verifies as
correct when written as a model would, and a wrong number as wrong."""

import pytest
from helpers import EXPECTED_ROWS

from pacs.data.schema import read_prepared
from pacs.data.sources import BENCHMARKS, GoldRow
from pacs.verify import VerifierPool
from pacs.verify.gold_check import check_golds

# Golds the verifier cannot accept even after normalisation, with the reason: (benchmark, row) -> why.
# Empty since math-verify 0.9.0 with the normalisation in pacs.data.golds; a new failure must be fixed or listed.
KNOWN_FAILURES: dict[tuple[str, int], str] = {}


@pytest.fixture(scope="module")
def checks(prepared):
    rows = []
    for name in BENCHMARKS:
        frame = read_prepared(prepared / f"{name}.parquet")
        problems = [m[0]["content"] for m in frame["prompt"]]
        rows += [
            GoldRow(name, i, p, g) for i, p, g in zip(frame["index"], problems, frame["ground_truth"], strict=True)
        ]
    with VerifierPool(workers=2) as pool:
        return check_golds(rows, pool)


def test_row_counts(checks):
    counts = {b: sum(c.row.benchmark == b for c in checks) for b in EXPECTED_ROWS}
    assert counts == EXPECTED_ROWS


def test_every_gold_verifies_against_itself_and_rejects_a_wrong_number(checks):
    failures = {
        (c.row.benchmark, c.row.row): f"gold {c.row.gold!r}: right→{c.right_status}, wrong→{c.wrong_status}"
        for c in checks
        if not c.ok
    }
    assert failures.keys() == KNOWN_FAILURES.keys(), failures


def test_normalisation_removed_source_quirks(checks):
    golds = {(c.row.benchmark, c.row.row): c.row.gold for c in checks}
    assert golds[("aime2024", 7)] == "25"  # "025" in the file
    assert golds[("amc23", 0)] == "27"  # 27.0 in the file
    assert all("," not in g and "#" not in g for (b, _), g in golds.items() if b == "gsm8k")


def test_the_pool_gives_plain_math_verify_verdicts_on_the_real_bench_set(shared_data):
    """The `pacs bench verifier --real-golds math500` answers (every MATH-500 gold, in groups of 8 drawn
    from 3 texts each): the pool's verdict on every answer is math-verify's own (parse both, verify) in this
    process, with none of the pool's de-duplication or the scorer's caches."""
    from pacs.bench.verifier import plain_math_verify, real_grouped_batch
    from pacs.data.sources import load_gold_rows
    from pacs.verify import VerifyConfig

    golds, answers = real_grouped_batch([r.gold for r in load_gold_rows(shared_data, "math500")], 8, 3, seed=0)
    assert len(answers) == 4000 and len(set(zip(golds, answers, strict=True))) < 1500  # answers repeat
    config = VerifyConfig()
    plain = [plain_math_verify(g, a, config) for g, a in zip(golds, answers, strict=True)]
    with VerifierPool(config, workers=2, chunk_size=16) as pool:
        pooled = pool.score(golds, answers)
    assert [v.score for v in pooled] == [float(p) for p in plain]
    assert {v.status for v in pooled} >= {"correct", "wrong"}
    assert all(v.status in ("wrong", "no_answer") for v, p in zip(pooled, plain, strict=True) if not p)
