"""The code verifier's judging, outside any sandbox detail: LiveCodeBench's comparisons, the code a model's
answer holds, the tests file's checks, a program's time budget and parallel verdicts in the pool."""

import json
import time

import pytest

from pacs.verify import CodeConfig, VerifierPool, status_counts
from pacs.verify.code import CodeTest, CodeTests, extract_code, parse_tests, run_program, stdout_matches, value_matches


def test_stdout_compares_stripped_lines_then_decimals():
    assert stdout_matches("3\n", "3")
    assert stdout_matches("  1 2 \n3\n\n", "1 2\n3")
    assert stdout_matches("1.0 2.50\n", "1 2.5")  # LiveCodeBench's Decimal fallback
    assert stdout_matches("1e3", "1000")
    assert not stdout_matches("3\n4", "3")  # a line more
    assert not stdout_matches("yes", "Yes")
    assert not stdout_matches("1 2", "1 2 0")
    assert not stdout_matches("", "0")


def test_values_compare_as_json():
    assert value_matches("[1, 2]", "[1,2]")
    assert value_matches("1", "1.0")
    assert value_matches('{"a": [true, null]}', '{"a":[true,null]}')
    assert not value_matches('"1"', "1")
    assert not value_matches("[" * 100_000, "[]")  # too deep to parse: a failure, not a crash
    assert not value_matches("not json", "1")


def test_code_is_the_last_block_after_the_thinking():
    answer = (
        "<think>\n```python\nprint(1)\n```\n</think>\nFirst:\n```\nprint(2)\n```\nBetter:\n```python\nprint(3)\n```"
    )
    assert extract_code(answer) == "print(3)\n"
    assert extract_code("<think>```python\nprint(1)\n```</think> no code after") is None
    assert extract_code("```python\nprint(1)") is None  # never closed
    assert extract_code("plain text") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[]", "at least one test"),
        (json.dumps({"tests": [{"input": "1"}]}), "test 0 needs string 'input' and 'output'"),
        (json.dumps({"tests": [{"input": "1", "output": "1", "testtype": "exec"}]}), "testtype 'exec'"),
        (json.dumps({"tests": [{"input": "x", "output": "1", "testtype": "functional"}], "fn_name": "f"}), "JSON"),
        (json.dumps({"tests": [{"input": "1", "output": "1"}], "fn_name": "not a name"}), "not a Python name"),
    ],
)
def test_bad_tests_are_named(text, message):
    with pytest.raises(ValueError, match="row 7") as e:
        parse_tests(text, "row 7")
    assert message in str(e.value)


def test_a_program_budget_ends_its_tests():
    tests = CodeTests(tuple(CodeTest("", "1", "stdin") for _ in range(3)), None)
    slow = "import time\ntime.sleep(0.4)\nprint(1)"
    verdict = run_program(slow, tests, CodeConfig(timeout_s=2, budget_s=0.6))
    assert (verdict.status, verdict.passed, verdict.total) == ("timeout", 1, 3)
    assert run_program(slow, tests, CodeConfig(timeout_s=2)).status == "passed"


def test_the_pool_judges_programs_in_parallel_and_counts_every_status():
    tests = json.dumps({"tests": [{"input": "2 3", "output": "5", "testtype": "stdin"}], "fn_name": None})
    answers = {
        "passed": "```python\na, b = map(int, input().split())\nprint(a + b)\n```",
        "failed": "```python\nprint(6)\n```",
        "runtime_error": "```python\nraise SystemError\n```",
        "timeout": "```python\nwhile True:\n    pass\n```",
        "no_code": "The answer is 5.",
    }
    with VerifierPool(workers=2, code=CodeConfig(timeout_s=1)) as pool:
        verdicts = pool.score([tests] * 5 + ["{not json"], [*answers.values(), answers["passed"]], task="code")
    assert [v.status for v in verdicts] == [*answers, "sandbox_error"]
    assert [v.score for v in verdicts] == [1.0, 0, 0, 0, 0, 0]
    assert "bad tests" in verdicts[-1].detail
    counts = status_counts(verdicts, "code")
    assert sum(counts.values()) == 6 and counts["sandbox_error"] == 1 and counts["memory"] == 0
    assert all(v.isolation for v in verdicts[:4])
    with pytest.raises(ValueError, match="not math verdicts"):
        status_counts(verdicts, "math")


def test_odd_outputs_are_judged_not_crashed_on():
    assert not stdout_matches("sNaN", "5")  # a signalling NaN raises in Decimal's comparison
    assert not stdout_matches("1 " * 1_000_000, "5")  # compared token by token, stopping at the first
    tests = CodeTests((CodeTest("", "é" * 300_000, "stdin"),), None)  # 600 kB of UTF-8 back through the pipe
    assert run_program("print('é' * 300_000)", tests, CodeConfig(output_mb=1)).status == "passed"
    assert run_program("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe')", tests).status == "failed"


def test_no_program_waits_behind_a_long_one_while_a_worker_is_idle():
    """Two programs that sleep LONG s and ten that sleep 0.05 s (sleeping takes no CPU, so two cores serve three
    workers), the two long ones first, where a pool dealing chunks ahead hands both to one worker (2 × LONG).
    Handed out as workers free up, the two long ones run side by side and the third worker takes the short ones:
    the whole takes about the longest program, every verdict in its place."""
    long_s = 4.0
    tests = json.dumps({"tests": [{"input": "", "output": "1", "testtype": "stdin"}], "fn_name": None})
    sleeps = [long_s, long_s] + [0.05] * 10
    answers = [f"```python\nimport time\ntime.sleep({s})\nprint(1)  # {i}\n```" for i, s in enumerate(sleeps)]
    with VerifierPool(workers=3, code=CodeConfig(timeout_s=long_s + 5)) as pool:
        pool.score([tests] * 3, [f"```python\nprint(1)  # warm {i}\n```" for i in range(3)], "code")
        start = time.monotonic()
        verdicts = pool.score([tests] * len(answers), answers, "code")
        wall = time.monotonic() - start
    assert [v.status for v in verdicts] == ["passed"] * len(answers)
    assert [v.seconds >= s for v, s in zip(verdicts, sleeps, strict=True)] == [True] * len(answers)
    print(f"\n{wall:.2f} s for programs of {long_s} s at most")
    assert wall < long_s + 2.0 < 2 * long_s  # a worker idle while another held the second long one: 2 × long_s
