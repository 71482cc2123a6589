"""Code as a verifiable task: a program and its tests in LiveCodeBench's form give a verdict.

The tests, ``{"tests": [{"input", "output", "testtype": "stdin" | "functional"}], "fn_name"}``, are a code
row's ``ground_truth`` and the file of ``pacs check-code --tests``. Three grading profiles (``code.grading``)
say how a program is extracted, run and judged:

- ``judge`` (training's default), close to an online judge: the program's last fenced block after the last
  ``</think>``; each test in a fresh process with the real stdin and stdout; a ``stdin`` test's output compared
  line by line after stripping, then as whitespace-separated decimals (LiveCodeBench's comparison); a
  ``functional`` test calls ``Solution().<fn_name>(*args)``, one JSON argument per input line, and compares
  the value as JSON (a tuple counts as a list), so no ``__eq__`` of the program's decides.
- ``livecodebench`` and ``glm45``: LiveCodeBench's runner and GLM-4.5's toolkit (the paper's v2 grader) as
  they are, every test of a program in one process with their stdin and stdout objects, wrapping, guards and
  comparisons (``graders.py``); their extraction and time limits here. A functional test's ``==`` runs in
  the sandbox, so these profiles pass an object that equals everything, as the graders do.

A program passes when every test passes; tests run in order and the first that does not pass ends the run
(as both graders do). Expected outputs of ``stdin`` tests stay in this process: the sandbox (``sandbox.py``)
gets the program and the inputs only, and the comparison happens here, on the output it sends back.
"""

import itertools
import json
import re
import time
from dataclasses import dataclass, replace
from decimal import Decimal, DecimalException
from typing import Literal, NamedTuple

import numpy as np

from pacs.verify.sandbox import STARTUP_GRACE_S, STOP_GRACE_S, Sandbox, package_dirs, resolve_isolation

CODE_STATUSES = ("passed", "failed", "timeout", "runtime_error", "memory", "output_limit", "no_code", "sandbox_error")
# seconds per test: LiveCodeBench's default (the judge keeps it), GLM-4.5's toolkit's
GRADINGS = {"judge": 6.0, "livecodebench": 6.0, "glm45": 30.0}
# what a program may import beyond the standard library (the interpreter's own site-packages are hidden under
# every profile): training's judge nothing, the same on every machine; the graders' profiles what both graders'
# environments install that a solution uses, numpy (GLM-4.5's toolkit's requirements name it, LiveCodeBench's
# come with it through torch and datasets), read-only from the environment pacs runs in
PACKAGES = {"judge": (), "livecodebench": ("numpy",), "glm45": ("numpy",)}
TESTTYPES = ("stdin", "functional")
_FENCE = re.compile(r"```[^\n`]*\n(.*?)```", re.DOTALL)
_TOKEN = re.compile(r"\S+")
_GLM_FENCE = re.compile(r"```(.*?)\n(.*?)```", re.DOTALL)


class CodeVerdict(NamedTuple):
    status: str  # one of CODE_STATUSES
    score: float  # 1.0 if passed else 0.0; read the status before trusting a 0
    extracted: str  # the program that ran ("" when none was found)
    passed: int  # tests passed, in order, before the first that did not
    total: int
    seconds: float  # the sandbox's whole run, its start included
    isolation: str  # the level in force (sandbox.LEVELS), "" when nothing ran
    detail: str = ""  # for sandbox_error: why


@dataclass(frozen=True)
class CodeConfig:
    """How programs are run and judged."""

    # judge, livecodebench or glm45 (module docstring); null: the benchmark's own (an evaluation of
    # LiveCodeBench's rows: livecodebench; anything else, training's rewards included: judge)
    grading: Literal["judge", "livecodebench", "glm45"] | None = None
    timeout_s: float | None = None  # seconds per test; None: the profile's (6, 6, 30)
    budget_s: float | None = None  # seconds for all of a program's tests; None: the profile's (module docstring)
    memory_mb: int = 2048  # address space of each run
    output_mb: int = 16  # what one run may write (stdout, files)
    isolation: Literal["auto", "bubblewrap", "limits"] = "auto"  # auto: bubblewrap where it works
    filters: bool = True  # seccomp (and outside bubblewrap Landlock) in each run; off only to test plain limits

    def __post_init__(self):
        if self.grading is not None and self.grading not in GRADINGS:
            raise ValueError(f"code.grading = {self.grading!r}: one of {sorted(GRADINGS)} or null")
        if self.isolation not in ("auto", "bubblewrap", "limits"):
            raise ValueError(f"code.isolation = {self.isolation!r}: one of auto, bubblewrap, limits")
        for key in ("timeout_s", "budget_s"):
            if getattr(self, key) is not None and getattr(self, key) <= 0:
                raise ValueError(f"code.{key} must be > 0 or null, got {getattr(self, key)}")
        for key in ("memory_mb", "output_mb"):
            if getattr(self, key) < 1:
                raise ValueError(f"code.{key} must be >= 1, got {getattr(self, key)}")

    @property
    def profile(self) -> str:
        return self.grading or "judge"

    def for_source(self, data_source: str) -> "CodeConfig":
        """This config with ``grading`` filled in for a benchmark: its own protocol where it was left null."""
        if self.grading is not None:
            return self
        return replace(self, grading="livecodebench" if data_source == "livecodebench" else "judge")

    @property
    def test_timeout_s(self) -> float:
        return self.timeout_s if self.timeout_s is not None else GRADINGS[self.profile]


class CodeTest(NamedTuple):
    input: str
    output: str
    testtype: str


@dataclass(frozen=True)
class CodeTests:
    tests: tuple[CodeTest, ...]
    fn_name: str | None


def parse_tests(text: str, where: str = "tests") -> CodeTests:
    """The tests JSON, checked; a bad one is a ValueError naming ``where`` and the test."""
    try:
        data = json.loads(text)
    except ValueError as e:
        raise ValueError(f"{where}: not JSON ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("tests"), list) or not data["tests"]:
        raise ValueError(f'{where}: expected {{"tests": [...], "fn_name": ...}} with at least one test')
    fn_name = data.get("fn_name")
    if fn_name is not None and not (isinstance(fn_name, str) and fn_name.isidentifier()):
        raise ValueError(f"{where}: fn_name {fn_name!r} is not a Python name")
    tests = []
    for i, t in enumerate(data["tests"]):
        if not isinstance(t, dict) or not all(isinstance(t.get(k), str) for k in ("input", "output")):
            raise ValueError(f"{where}: test {i} needs string 'input' and 'output'")
        kind = t.get("testtype", "stdin")
        if kind not in TESTTYPES:
            raise ValueError(f"{where}: test {i} has testtype {kind!r}, not one of {TESTTYPES}")
        if kind == "functional":
            if fn_name is None:
                raise ValueError(f"{where}: test {i} is functional but the tests give no fn_name")
            try:
                json.loads(t["output"])
                [json.loads(line) for line in t["input"].split("\n")]
            except ValueError as e:
                raise ValueError(f"{where}: functional test {i}: input lines and output must be JSON ({e})") from None
        tests.append(CodeTest(t["input"], t["output"], kind))
    return CodeTests(tuple(tests), fn_name)


def extract_code(response: str, grading: str = "judge") -> str | None:
    """The program in a model's answer, as the profile's grader finds it; None when there is none.

    - judge: the last fenced block after the last ``</think>``;
    - livecodebench: the lines between the last two lines holding a fence (LiveCodeBench's
      ``extract_code``), None where fewer than two lines do;
    - glm45: the toolkit's ``postprocess_generation``: after a first ``###Response``, the text between the
      first and second ``</think>`` where ``<think>`` appears too, then where a fence appears the last
      ```` ```lang\n...``` ```` block (None where none closes), tabs made four spaces, the end stripped; an
      empty program becomes ``return 0``, as the toolkit runs it."""
    if grading == "livecodebench":
        lines = response.split("\n")
        fences = [i for i, line in enumerate(lines) if "```" in line]
        return "\n".join(lines[fences[-2] + 1 : fences[-1]]) if len(fences) >= 2 else None
    if grading == "glm45":
        if "###Response" in response:
            response = response.split("###Response")[1]
        if "<think>" in response and "</think>" in response:
            response = response.split("</think>")[1]
        if "```" in response:
            blocks = _GLM_FENCE.findall(response)
            if not blocks:
                return None
            response = blocks[-1][1]
        return response.replace("\t", "    ").rstrip() or "return 0"
    blocks = _FENCE.findall(response.rsplit("</think>", 1)[-1])
    return blocks[-1] if blocks else None


def _decimals_equal(a: str, b: str) -> bool:
    """Token by token as decimals, stopping at the first difference (a line of millions of tokens costs no
    memory); a token that is no number, or NaN, is a difference."""
    pairs = itertools.zip_longest(_TOKEN.finditer(a), _TOKEN.finditer(b))
    try:
        for x, y in pairs:
            if x is None or y is None or not Decimal(x.group()) == Decimal(y.group()):
                return False
    except (DecimalException, ValueError):
        return False
    return True


def stdout_matches(output: str, expected: str) -> bool:
    """LiveCodeBench's ``grade_stdio``: the stripped lines equal, or as whitespace-separated decimals."""
    got, want = output.strip(), expected.strip()
    if got.count("\n") != want.count("\n"):  # before any split of a program's output
        return False
    for a, b in zip(got.split("\n"), want.split("\n"), strict=True):
        a, b = a.strip(), b.strip()
        if a != b and not _decimals_equal(a, b):
            return False
    return True


def value_matches(output: str, expected: str) -> bool:
    try:
        return json.loads(output) == json.loads(expected)
    except (ValueError, RecursionError):
        return False


def glm_stdout_matches(output: str, expected: str) -> bool:
    """GLM-4.5's toolkit's comparison of printed lines (its ``run_test``, the checks that can pass in order):
    the lines joined, or each stripped and joined, equal to the expected text with its ends stripped; one
    line equal to the whole expected text; the lines, or the non-empty ones, equal to the expected text's
    non-empty lines stripped; or, unless every pair of lines is digits, as many lines as expected, each
    one number, all close (``np.allclose``)."""
    lines = output.splitlines()
    want = expected.strip()
    if "\n".join(lines).strip() == want or "\n".join(line.strip() for line in lines).strip() == want:
        return True
    expected_lines = [line.strip() for line in expected.split("\n") if line]
    if lines == [expected] or lines == expected_lines:
        return True
    lines = [line for line in lines if line]
    if lines == expected_lines:
        return True
    try:
        if all(a.isdigit() and b.isdigit() for a, b in zip(lines, expected_lines, strict=False)):
            return False
        got, wanted = [float(a) for a in lines], [float(b) for b in expected_lines]
        return len(got) == len(wanted) and bool(np.allclose(got, wanted))
    except (ValueError, OverflowError):
        return False


def test_passes(test: CodeTest, output: object, grading: str = "judge", record: dict | None = None) -> bool:
    """Whether a test passed: in the graders' profiles a functional test's verdict came from the sandbox."""
    if grading != "judge" and test.testtype == "functional":
        return record is not None and record.get("passed") is True
    if not isinstance(output, str):
        return False
    if test.testtype == "functional":
        return value_matches(output, test.output)
    return glm_stdout_matches(output, test.output) if grading == "glm45" else stdout_matches(output, test.output)


HARNESS_STATUSES = {"timeout": "timeout", "memory": "memory", "output_limit": "output_limit"}


def run_limit_s(tests: int, config: CodeConfig) -> float:
    """How long a program's tests may run in all: ``code.budget_s``, else the profile's: each test's limit
    and a second (judge), that and 5 s more (LiveCodeBench's process timeout), the test limit alone (GLM's
    toolkit joins its process after 30 s, whatever the number of tests)."""
    if config.budget_s is not None:
        return config.budget_s
    per_test = tests * (config.test_timeout_s + 1.0)
    return {"judge": per_test, "livecodebench": per_test + 5.0, "glm45": config.test_timeout_s}[config.profile]


def code_deadline_s(tests: str, config: CodeConfig) -> float:
    """The longest a verdict can take: the sandbox's start, the run limit (a bad tests JSON: none) and its
    stop."""
    try:
        count = len(json.loads(tests)["tests"])
    except (ValueError, KeyError, TypeError):
        count = 0
    return STARTUP_GRACE_S + run_limit_s(count, config) + STOP_GRACE_S


def run_program(program: str, tests: CodeTests, config: CodeConfig = CodeConfig()) -> CodeVerdict:
    """Run ``program`` on ``tests`` in a fresh sandbox and judge its outputs here."""
    if not tests.tests:
        raise ValueError("a program needs at least one test")
    level = resolve_isolation(config.isolation)
    grading = config.profile
    if grading != "judge":  # both graders: every test is functional when the problem names a function
        kind = "functional" if tests.fn_name is not None else "stdin"
        tests = CodeTests(tuple(t._replace(testtype=kind) for t in tests.tests), tests.fn_name)
    total = len(tests.tests)
    timeout = config.test_timeout_s
    output_bytes = config.output_mb << 20
    # the expected values of functional tests go in only where the graders' `==` runs there
    shown = ("input", "testtype") if grading == "judge" else ("input", "testtype", "output")
    request = {
        "code": program, "fn_name": tests.fn_name, "timeout_s": timeout, "cpu_s": int(timeout) + 1,
        "memory_bytes": config.memory_mb << 20, "output_bytes": output_bytes,
        "filters": config.filters, "grading": grading, "packages": package_dirs(PACKAGES[grading]),
        "tests": [{k: getattr(t, k) for k in shown if k != "output" or t.testtype == "functional"}
                  for t in tests.tests],
    }  # fmt: skip
    largest_input = max(len(t.input.encode()) for t in tests.tests)
    run_limit = run_limit_s(total, config)
    start = time.monotonic()
    status, passed, isolation, detail = "runtime_error", 0, "", ""
    with Sandbox(request, level, (64 << 20) + 2 * (largest_input + output_bytes)) as box:
        for record in box.records(output_bytes):
            if not isolation:  # the harness's first line, written before any program ran
                if record == "deadline" or not (isinstance(record, dict) and record.get("ready") is True):
                    status, detail = "sandbox_error", f"the sandbox did not start: {record!r}"
                    break
                filters = [f for f in ("seccomp", "landlock") if record.get(f)]
                isolation = "+".join([level, *filters])
                box.deadline = time.monotonic() + run_limit  # the budget counts from here
                continue
            if record == "deadline":
                status = "timeout"
            elif record == "too_long":
                status = "output_limit"
            elif isinstance(record, str) or record.get("test") != passed:
                status = "runtime_error"  # the harness's report was garbled: only a program can do that
            elif record.get("status") != "ok":
                status = HARNESS_STATUSES.get(record.get("status"), "runtime_error")
            elif not test_passes(tests.tests[passed], record.get("output"), grading, record):
                status = "failed"
            else:
                passed += 1
                if passed < total:
                    continue
                status = "passed"
            break
        else:
            if not isolation:
                status = "sandbox_error"
                detail = f"the sandbox ended before starting: {box.proc.poll()} {box.errors.decode(errors='replace')}"
        if status == "sandbox_error" and not detail:
            detail = box.errors.decode(errors="replace")[:500]
    seconds = time.monotonic() - start
    return CodeVerdict(status, float(status == "passed"), program, passed, total, seconds, isolation, detail[:500])


def score_code(tests: str | CodeTests, response: str, config: CodeConfig = CodeConfig()) -> CodeVerdict:
    """A model's whole answer judged: its code extracted, run and compared (``no_code`` when there is none)."""
    if isinstance(tests, str):
        try:
            tests = parse_tests(tests)
        except ValueError as e:  # a bad row's tests: counted, never a crash of the worker
            return CodeVerdict("sandbox_error", 0.0, "", 0, 0, 0.0, "", f"bad tests: {e}"[:500])
    program = extract_code(response, config.profile)
    if program is None:
        return CodeVerdict("no_code", 0.0, "", 0, len(tests.tests), 0.0, "")
    return run_program(program, tests, config)
