"""Run `grading_cases.py`'s programs through unmodified copies of LiveCodeBench's runner and GLM-4.5's toolkit,
outside pacs, and compare their verdicts with the cases' (not a test: neither grader is a dependency).

    git -C LCB checkout 28fef95ea8c9f7a547c8329f2cd3d32b92c1fa24    # LiveCodeBench/LiveCodeBench
    git -C GLM checkout db7fdc8d52b840ff724cbb9f8dfb8e8592a5f4ea    # zai-org/glm-simple-evals
    pip download pyext==0.7 --no-deps --no-build-isolation  # or its sdist unpacked: the toolkit imports it
    python tests/cross_check_graders.py lcb LCB
    python tests/cross_check_graders.py glm GLM PYEXT_DIR

One grader per process: LiveCodeBench's metrics module raises the interpreter's digit limit on import. The
programs are this project's own cases and run unconfined, as the graders run them; GLM's toolkit gets the
multiprocessing wrapper of its `evals/livecodebench_eval.py` (30 s there, 3 s here, as pacs's cases use
shorter limits), whose imports need API clients. Exit status 1 when a verdict differs.
"""

import inspect
import json
import multiprocessing
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from grading_cases import CASES  # noqa: E402

TIMEOUT = 3
LCB_CODES = {False: "failed", -2: "failed", -3: "timeout", -4: "runtime_error", -1: "timeout"}
GLM_CODES = {False: "failed", -1: "runtime_error", -2: "runtime_error"}  # it calls a time limit -1 too


def status(results: list, codes: dict) -> str:
    bad = [r for r in results if r is not True]
    return "passed" if results and not bad else codes.get(bad[0], f"unknown {bad[0]!r}")


def glm_check(run_test, sample: dict, program: str) -> list:
    def target(result):
        result.append(run_test(sample, test=program, debug=False, timeout=TIMEOUT))

    result = multiprocessing.Manager().list()
    process = multiprocessing.Process(target=target, args=(result,))
    process.start()
    process.join(timeout=TIMEOUT)
    if process.is_alive():
        process.kill()
    return list(result[0]) if result else [-1]


def main(which: str, checkout: str, pyext: str | None = None) -> int:
    sys.path[:0] = [checkout] + ([pyext] if pyext else [])
    if which == "lcb":
        from lcb_runner.evaluation.compute_code_generation_metrics import check_correctness
    else:
        inspect.getargspec = inspect.getfullargspec  # pyext 0.7 predates Python 3.11
        from utils.testing_utils import run_test
    differ = 0
    for name, program, tests, want in CASES:
        sample = {"input_output": json.dumps({"inputs": [t["input"] for t in tests["tests"]],
                                              "outputs": [t["output"] for t in tests["tests"]],
                                              "fn_name": tests.get("fn_name")})}  # fmt: skip
        if which == "lcb":
            profile = "livecodebench"
            got = status(check_correctness(sample, program, TIMEOUT, debug=False)[0], LCB_CODES)
        else:  # the toolkit's postprocess_generation ends with these two
            profile = "glm45"
            got = status(glm_check(run_test, sample, program.replace("\t", "    ").rstrip()), GLM_CODES)
        differ += got != want[profile]
        mark = "" if got == want[profile] else "  DIFFERS"
        print(f"{name:32s} {got:14s} pacs: {want[profile]}{mark}", file=sys.stderr)
    print(f"{which}: {len(CASES)} cases, {differ} differ", file=sys.stderr)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
