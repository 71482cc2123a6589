"""`pacs check-code`: one program on its tests in the code verifier's sandbox."""

import argparse
import json
from pathlib import Path


def add_parser(verbs) -> None:
    cc = verbs.add_parser(
        "check-code", help="run one program on its tests in the code verifier's sandbox; the verdict as one JSON line"
    )
    source = cc.add_mutually_exclusive_group(required=True)
    source.add_argument("--program", type=Path, help="a Python program")
    source.add_argument("--response", type=Path, help="a model's whole answer, its code extracted as evaluation does")
    cc.add_argument("--tests", type=Path, required=True,
                    help='{"tests": [{"input", "output", "testtype": "stdin"|"functional"}], "fn_name"}')  # fmt: skip
    cc.add_argument("--grading", default="judge", choices=["judge", "livecodebench", "glm45"],
                    help="whose grader: pacs's judge (6 s a test), LiveCodeBench's runner (6 s) or GLM-4.5's "
                         "toolkit (30 s for all); the last two pass an object equal to everything")  # fmt: skip
    cc.add_argument("--timeout", type=float, help="seconds per test, instead of the profile's")
    cc.add_argument("--budget", type=float, help="seconds for all the tests together, instead of the profile's")
    cc.add_argument("--memory-mb", type=int, default=2048, help="address space of each run")
    cc.add_argument("--isolation", default="auto", choices=["auto", "bubblewrap", "limits"],
                    help="auto: bubblewrap where it works; bubblewrap: required")  # fmt: skip
    cc.set_defaults(func=cmd_check_code)


def cmd_check_code(args: argparse.Namespace) -> int:
    from pacs.verify.code import CodeConfig, CodeVerdict, extract_code, parse_tests, run_program
    from pacs.verify.sandbox import reaping

    tests = parse_tests(args.tests.read_text(), str(args.tests))
    source = args.program or args.response
    text = source.read_text()
    program = text if args.program else extract_code(text, args.grading)
    config = CodeConfig(grading=args.grading, timeout_s=args.timeout, budget_s=args.budget,
                        memory_mb=args.memory_mb, isolation=args.isolation)  # fmt: skip
    if program is None:
        verdict = CodeVerdict("no_code", 0.0, "", 0, len(tests.tests), 0.0, "")
    else:
        with reaping():
            verdict = run_program(program, tests, config)
    fields = ("status", "passed", "total", "seconds", "isolation", "detail")
    print(json.dumps({**{k: getattr(verdict, k) for k in fields}, "grading": config.profile,
                      "timeout_s": config.test_timeout_s}))
    return 0 if verdict.status == "passed" else 1
