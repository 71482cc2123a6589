"""The code verifier's grading profiles (``code.grading``): pacs's judge, LiveCodeBench's runner and GLM-4.5's
toolkit. Each behaviour where they differ is one case of ``grading_cases.py``, run through the sandbox under
the three profiles, so that a change to a profile names the behaviour that moved; then each profile's
extraction, time limits and defaults, and pacs's own limits, which hold under every profile."""

import json

import pytest
from grading_cases import CASES

from pacs.config import ConfigError, from_dict
from pacs.eval.config import EvalConfig
from pacs.train.settings.config import resolve
from pacs.verify.code import CodeConfig, extract_code, parse_tests, run_limit_s, run_program

PROFILES = ("judge", "livecodebench", "glm45")


@pytest.mark.parametrize(("name", "program", "tests", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_behaviour_gets_each_graders_verdict(name, program, tests, expected):
    parsed = parse_tests(json.dumps(tests), name)
    got = {g: run_program(program, parsed, CodeConfig(grading=g, timeout_s=5)).status for g in PROFILES}
    assert got == expected


def test_each_profile_finds_the_program_as_its_grader_does():
    answer = "<think>\n```python\nprint(1)\n```\n</think>\nFirst:\n```\nprint(2)\n```\nThen:\n```python\nprint(3)\n```"
    assert extract_code(answer, "judge") == "print(3)\n"
    assert extract_code(answer, "livecodebench") == "print(3)"  # between the last two fence lines
    assert extract_code(answer, "glm45") == "print(3)"  # the last block after the first </think>, end stripped
    # no <think>: GLM keeps the reasoning, and its last block still wins; the judge takes what follows </think>
    reasoning_only_closed = "```python\nprint(1)\n```\n</think>\nno code after"
    assert extract_code(reasoning_only_closed, "judge") is None
    assert extract_code(reasoning_only_closed, "glm45") == "print(1)"
    assert extract_code(reasoning_only_closed, "livecodebench") == "print(1)"
    # LiveCodeBench: a fence anywhere on a line counts, and fewer than two such lines is no program
    assert extract_code("text ```python\nx = 1\nprint(x) ```", "livecodebench") == "x = 1"
    assert extract_code("```python\nprint(1)", "livecodebench") is None
    # GLM: no fence at all runs the whole answer; a fence that never closes is no program; tabs become spaces;
    # an empty program runs as `return 0`, as the toolkit runs it
    assert extract_code("print(4)\n\n", "glm45") == "print(4)"
    assert extract_code("```python\nprint(1)", "glm45") is None
    assert extract_code("```python\nif 1:\n\tprint(1)\n```", "glm45") == "if 1:\n    print(1)"
    assert extract_code("```python\n\n```", "glm45") == "return 0"
    assert extract_code("A ###Response ```py\nprint(5)\n``` B ###Response", "glm45") == "print(5)"


def test_each_profile_brings_its_time_limits():
    config = {g: CodeConfig(grading=g) for g in PROFILES}
    assert [config[g].test_timeout_s for g in PROFILES] == [6.0, 6.0, 30.0]
    # 10 tests: the judge 10 × (6 + 1); LiveCodeBench's process timeout 5 s more; GLM joins its process after 30 s
    assert [run_limit_s(10, config[g]) for g in PROFILES] == [70.0, 75.0, 30.0]
    assert run_limit_s(10, CodeConfig(grading="glm45", timeout_s=2)) == 2.0  # its one timeout, both uses
    assert run_limit_s(10, CodeConfig(grading="livecodebench", budget_s=9)) == 9.0


def test_a_slow_program_is_a_timeout_in_every_profile():
    """The graders' alarm inside the program, or pacs's watch outside it: a timeout either way."""
    loop = "i = 0\nwhile True:\n    i += 1\n"
    stdin = parse_tests(json.dumps({"tests": [{"input": "", "output": "1"}]}))
    call = parse_tests(json.dumps({"fn_name": "f", "tests": [{"input": "1", "output": "1", "testtype": "functional"}]}))
    method = "class Solution:\n    def f(self, a):\n" + "".join(f"        {line}\n" for line in loop.splitlines())
    for program, tests in ((loop, stdin), (method, call)):
        for grading in PROFILES:
            verdict = run_program(program, tests, CodeConfig(grading=grading, timeout_s=1))
            assert (grading, verdict.status) == (grading, "timeout")


def test_pacs_limits_hold_in_every_profile():
    """The graders run programs unconfined; here their profiles keep pacs's sandbox, which can change a
    verdict: no sockets, the memory cap, the output limit (docs/verifiers.md, "Code verifier")."""
    tests = parse_tests(json.dumps({"tests": [{"input": "", "output": "ok"}]}))
    programs = {
        "runtime_error": "import socket\nsocket.socket()\nprint('ok')\n",
        "memory": "x = bytearray(3 << 30)\nprint('ok')\n",
        "output_limit": "print('x' * (3 << 20))\n",
    }
    for grading in PROFILES:
        for status, program in programs.items():
            verdict = run_program(program, tests, CodeConfig(grading=grading, memory_mb=1024, output_mb=2))
            assert (grading, verdict.status, verdict.isolation != "") == (grading, status, True)


def test_a_program_writing_to_the_graders_channel_gets_no_verdict_it_wrote():
    """Under a grader profile the records travel on the child's fd 3: what a program writes there is read with
    bounds, and a record that does not parse or names another test is a runtime error, never a verdict."""
    tests = parse_tests(json.dumps({"tests": [{"input": "", "output": "1"}, {"input": "", "output": "1"}]}))
    garbage = "import os\nos.write(3, b'garbage\\n')\nprint(1)\n"
    forged = "import os\nos.write(3, b'{\"test\": 0, \"status\": \"ok\", \"bytes\": 2}\\n1\\n')\nprint(1)\n"
    endless = "import os\nos.write(3, b'x' * 10000)\nprint(1)\n"
    for grading in ("livecodebench", "glm45"):
        for program in (garbage, forged, endless):
            verdict = run_program(program, tests, CodeConfig(grading=grading, timeout_s=3))
            assert (grading, verdict.status) == (grading, "runtime_error")
        assert run_program("print(1)\n", tests, CodeConfig(grading=grading)).status == "passed"


def test_expected_outputs_enter_the_sandbox_only_where_a_graders_equality_runs(monkeypatch):
    import pacs.verify.code as code

    sent = []

    class Recorder:  # the sandbox, reduced to taking the request
        def __init__(self, request, level, tmpfs_bytes):
            sent.append(request)
            self.proc = None

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def records(self, max_output_bytes):
            yield "deadline"

    monkeypatch.setattr(code, "Sandbox", Recorder)
    stdin = parse_tests(json.dumps({"tests": [{"input": "1", "output": "SECRET"}]}))
    call = {"input": "1", "output": "2", "testtype": "functional"}
    functional = parse_tests(json.dumps({"fn_name": "f", "tests": [call]}))
    for grading in PROFILES:
        run_program("print(1)", stdin, CodeConfig(grading=grading, isolation="limits"))
        run_program("print(1)", functional, CodeConfig(grading=grading, isolation="limits"))
    assert all("SECRET" not in json.dumps(r) for r in sent)
    assert [("output" in r["tests"][0], r["grading"]) for r in sent[1::2]] == [
        (False, "judge"), (True, "livecodebench"), (True, "glm45")]  # fmt: skip


def test_the_defaults_are_each_benchmarks_protocol():
    assert CodeConfig().grading is None and CodeConfig().profile == "judge"
    assert CodeConfig().for_source("livecodebench").grading == "livecodebench"
    assert CodeConfig().for_source("toy_code").grading == "judge"
    assert CodeConfig(grading="glm45").for_source("livecodebench").grading == "glm45"
    with pytest.raises(ValueError, match="code.grading = 'lcb'"):
        CodeConfig(grading="lcb")
    with pytest.raises(ConfigError, match=r"eval\.code\.timeout_profile: unknown key.*'grading'"):
        from_dict(EvalConfig, {"code": {"timeout_profile": "glm45"}}, "eval")
    # training's code rewards: the judge, written into the resolved run config
    run = {"algorithm": {"name": "pacs"}, "model": {"path": "m"}, "data": {"train_files": ["t.parquet"]}}
    assert resolve(run).verifier.code.grading == "judge"
    assert resolve({**run, "verifier": {"code": {"grading": "livecodebench"}}}).verifier.code.grading == "livecodebench"
