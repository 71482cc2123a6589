import os
import threading
import time

import pytest

from pacs.verify import STATUSES, VerifierPool, VerifyConfig, score_answer, status_counts

NESTED_POWER = "So the answer is \\boxed{9^{9^{9^{9}}}}."


@pytest.mark.parametrize(
    "gold, answer, status",
    [
        ("25", "Thus the answer is \\boxed{25}.", "correct"),
        ("25", "\\boxed{025}", "correct"),  # AIME padding on the model side
        ("\\frac{1}{2}", "so it is \\boxed{0.5}", "correct"),
        ("\\left( 3, \\frac{\\pi}{2} \\right)", "\\boxed{(3, \\pi/2)}", "correct"),
        ("25", "\\boxed{26}", "wrong"),
        ("25", "I could not solve it.", "no_answer"),
        ("25", "", "no_answer"),
        ("}{", "\\boxed{1}", "gold_unparseable"),
        ("", "\\boxed{1}", "gold_unparseable"),
    ],
)
def test_statuses(gold, answer, status):
    verdict = score_answer(gold, answer)
    assert verdict.status == status
    assert verdict.score == (1.0 if status == "correct" else 0.0)


def test_default_is_the_papers_expression_plus_latex_extraction():
    # the paper's reward credits an unboxed final number (ExprExtractionConfig) ...
    assert score_answer("96", "The answer is 96").status == "correct"
    # ... which LaTeX-only extraction of the answer does not
    assert score_answer("96", "The answer is 96", VerifyConfig(answer_extraction=("latex",))).status == "no_answer"
    assert score_answer("96", "The answer is $96$", VerifyConfig(answer_extraction=("latex",))).status == "correct"


def test_timeout_is_a_status_not_a_wrong_answer():
    start = time.monotonic()
    verdict = score_answer("25", NESTED_POWER, VerifyConfig(timeout_s=0.5))
    assert verdict.status == "timeout"
    assert time.monotonic() - start < 5  # math-verify's own 5 s timeout is off; ours fired


def test_config_errors_name_the_key():
    with pytest.raises(ValueError, match="verify.answer_extraction"):
        VerifyConfig(answer_extraction=("regex",))
    with pytest.raises(ValueError, match="verify.timeout_s"):
        VerifyConfig(timeout_s=0)


def test_scoring_in_a_thread_is_refused_loudly():
    errors = []

    def run():
        try:
            score_answer("1", "\\boxed{1}")
        except ValueError as e:
            errors.append(e)

    t = threading.Thread(target=run)
    t.start()
    t.join()
    assert errors and "main thread" in str(errors[0])


ADVERSARIAL = [
    (NESTED_POWER, "timeout"),
    ("x" * 100_000, "no_answer"),  # 100 KB of text
    ("The answer is \\boxed{\\frac{1}{2" + "{" * 500, "wrong"),  # unbalanced: a fragment is salvaged, not 7
    ("}}}}\\boxed{{{7", "no_answer"),
    ("\\boxed{7}}}}}}}}}", "correct"),
    ("", "no_answer"),
    ("\\boxed{" * 2000 + "7", "no_answer"),
    ("Finally \\boxed{7}.", "correct"),
]


def test_adversarial_answers_end_within_the_deadline_with_the_right_status():
    config = VerifyConfig(timeout_s=1.0)
    with VerifierPool(config, workers=2) as pool:
        start = time.monotonic()
        verdicts = pool.score(["7"] * len(ADVERSARIAL), [a for a, _ in ADVERSARIAL])
        elapsed = time.monotonic() - start
    assert [v.status for v in verdicts] == [s for _, s in ADVERSARIAL]
    assert elapsed < len(ADVERSARIAL) * pool.hard_deadline_s  # each answer is bounded by the hard deadline


def test_a_stuck_worker_is_killed_replaced_and_its_chunk_requeued():
    # the worker's own deadline (30 s) is set past the pool's hard deadline (1 s): the parent must kill it
    with VerifierPool(VerifyConfig(timeout_s=30), workers=1, chunk_size=8, hard_timeout_s=1.0) as pool:
        verdicts = pool.score(["3"] * 4, ["\\boxed{3}", NESTED_POWER, "\\boxed{3.0}", "\\boxed{4}"])
        assert [v.status for v in verdicts] == ["correct", "timeout", "correct", "wrong"]
        assert pool.restarts == 1
        assert pool.score(["5"], ["\\boxed{5}"])[0].status == "correct"  # the replacement works


def test_a_worker_that_died_while_idle_is_replaced():
    with VerifierPool(workers=1) as pool:
        assert pool.score(["1"], ["\\boxed{1}"])[0].status == "correct"
        os.kill(pool._workers[0].proc.pid, 9)
        pool._workers[0].proc.join()
        assert [v.status for v in pool.score(["1", "2"], ["\\boxed{1}", "\\boxed{1}"])] == ["correct", "wrong"]
        assert pool.restarts == 1


def test_pool_deduplicates_and_agrees_with_in_process_scoring():
    golds = ["4", "\\frac{1}{3}", "x^2", "10"] * 6
    answers = ["\\boxed{4}", "\\boxed{1/3}", "\\boxed{x \\cdot x}", "nope", "\\boxed{0.333}", "\\boxed{x^3}"] * 4
    with VerifierPool(workers=2, chunk_size=3) as pool:
        verdicts = pool.score(golds, answers)
        assert pool.unique_scored == len(set(zip(golds, answers, strict=True))) < len(golds)
    assert verdicts == [score_answer(g, a) for g, a in zip(golds, answers, strict=True)]
    counts = status_counts(verdicts)
    assert set(counts) == set(STATUSES) and sum(counts.values()) == len(golds)


def test_a_pool_starts_its_workers_at_the_first_call_that_needs_them():
    """A pool that scores nothing, or only multiple choice (scored in the caller), starts no process: a trainer
    rank beside generator ranks holds one that it never uses. The first math call starts its workers."""
    from helpers import descendants

    before = set(descendants(os.getpid()))  # an earlier test's forkserver may be running: it is process-wide
    with VerifierPool(workers=2) as pool:
        assert [v.status for v in pool.score(["A", "B"], ["ANSWER: A", "ANSWER: C"], task="choice")] == [
            "correct", "wrong"]
        assert pool.score([], []) == []
        assert set(descendants(os.getpid())) == before
        assert pool.score(["1"], ["\\boxed{1}"])[0].status == "correct"
        workers = [w.proc.pid for w in pool._workers]
        assert len(workers) == 2 and set(workers) <= set(descendants(os.getpid())) - before
    assert not set(workers) & set(descendants(os.getpid()))  # closed with the pool


def test_the_trainers_verifier_workers_follow_the_node():
    """verifier.workers null: each rank takes its share of the cores it may run on, less one for itself."""
    from pacs.train.settings.config import VerifierConfig
    from pacs.verify.pool import node_workers

    assert VerifierConfig().workers is None
    assert (node_workers(1, cores=16), node_workers(8, cores=64), node_workers(8, cores=16)) == (15, 7, 1)
    assert node_workers(1, cores=1) == node_workers(2, cores=2) == 1  # never none
    assert node_workers() == max(1, len(os.sched_getaffinity(0)) - 1)


def test_mismatched_lengths_are_an_error():
    with VerifierPool(workers=1) as pool, pytest.raises(ValueError, match="2 golds but 1 answers"):
        pool.score(["1", "2"], ["1"])
