"""Code verifier throughput: programs per second and seconds per verdict through the pool, by isolation level.

Programs are built here, deterministically from a seed, as a model would answer the toy code task
(``n * a + b``, one problem each, so that none is a duplicate the pool would score once): correct ones,
wrong ones, ones that crash, ``slow`` ones that sleep most of the per-test limit in every test and still
pass, and ones that spin past it (``timeout``). Half are stdin programs, half ``Solution.f`` methods with
functional tests. Each isolation level asked for that runs here is measured with each pool size; one that
cannot run is reported with the reason. The sandbox's start-up is measured apart (a ``pass`` program on one
trivial test through ``run_program``, the median of several runs): what a verdict costs beyond its tests.
"""

import json
import os
import platform
import random
import time
from collections import Counter
from dataclasses import replace
from statistics import median

from pacs.config import to_dict
from pacs.verify import CodeConfig, VerifierPool, status_counts
from pacs.verify.code import parse_tests, run_program
from pacs.verify.sandbox import SandboxUnavailable, resolve_isolation

# one cycle of the mix: half correct, the rest wrong, crashing, slow (passes near the limit) or timing out
MIX = ("correct", "wrong", "runtime_error", "slow", "timeout", "correct", "correct", "wrong", "runtime_error",
       "correct", "correct", "correct", "wrong", "runtime_error", "correct", "correct")  # fmt: skip
EXPECTED = {"correct": "passed", "wrong": "failed", "runtime_error": "runtime_error", "slow": "passed",
            "timeout": "timeout"}  # fmt: skip
TESTS_PER_PROGRAM = 3
SLOW_SHARE = 0.6  # of the per-test limit, slept by a slow program in every test
TRIVIAL_TESTS = '{"tests": [{"input": "", "output": "", "testtype": "stdin"}], "fn_name": null}'


def program_text(kind: str, a: int, b: int, functional: bool, sleep_s: float) -> str:
    """A program of ``kind`` for n * a + b, as stdin code or as ``Solution.f``."""
    value = {"wrong": f"n * {a} + {b + 1}", "runtime_error": f"n * {a} // 0"}.get(kind, f"n * {a} + {b}")
    pause = {"slow": [f"time.sleep({sleep_s})"], "timeout": ["while True:", "    n += 1"]}.get(kind, [])
    if functional:
        lines = ["class Solution:", "    def f(self, n):", *(f"        {p}" for p in pause), f"        return {value}"]
    else:
        lines = ["n = int(input())", *pause, f"print({value})"]
    return "\n".join(["import time", *lines])


def bench_programs(count: int, seed: int, timeout_s: float) -> list[tuple[str, str, str]]:
    """``count`` (kind, tests JSON, model answer) triples in ``MIX``'s order, each with its own (a, b)."""
    rng = random.Random(seed)
    pairs = rng.sample([(a, b) for a in range(10, 100) for b in range(10, 100)], count)
    out = []
    for i, (a, b) in enumerate(pairs):
        kind, functional = MIX[i % len(MIX)], i % 2 == 1
        ns = [rng.randrange(1000) for _ in range(TESTS_PER_PROGRAM)]
        if functional:
            tests = [{"input": json.dumps(n), "output": json.dumps(n * a + b), "testtype": "functional"} for n in ns]
        else:
            tests = [{"input": f"{n}\n", "output": f"{n * a + b}\n", "testtype": "stdin"} for n in ns]
        gold = json.dumps({"tests": tests, "fn_name": "f" if functional else None})
        code = program_text(kind, a, b, functional, round(SLOW_SHARE * timeout_s, 3))
        out.append((kind, gold, f"Here is my solution.\n```python\n{code}\n```"))
    return out


def startup_seconds(config: CodeConfig, runs: int) -> list[float]:
    """Seconds of a ``pass`` program on one trivial test, each in a fresh sandbox."""
    tests = parse_tests(TRIVIAL_TESTS)
    seconds = []
    for _ in range(runs):
        verdict = run_program("pass", tests, config)
        if verdict.status != "passed":
            raise RuntimeError(f"the trivial program did not pass at isolation {config.isolation}: {verdict}")
        seconds.append(verdict.seconds)
    return seconds


def pool_row(programs: list[tuple[str, str, str]], config: CodeConfig, workers: int, startup_s: float) -> dict:
    """The programs through a fresh pool of ``workers`` (warmed on one trivial program first)."""
    kinds = [k for k, _, _ in programs]
    with VerifierPool(workers=workers, code=config) as pool:
        pool.score([TRIVIAL_TESTS] * workers, [f"```python\npass # {i}\n```" for i in range(workers)], "code")
        start = time.perf_counter()
        verdicts = pool.score([g for _, g, _ in programs], [r for _, _, r in programs], "code")
        wall = time.perf_counter() - start
    by_kind = {}
    for kind in dict.fromkeys(kinds):
        mine = [v for k, v in zip(kinds, verdicts, strict=True) if k == kind]
        by_kind[kind] = {
            "programs": len(mine),
            "seconds_per_verdict": round(sum(v.seconds for v in mine) / len(mine), 4),
            "in_tests_s": round(sum(max(0.0, v.seconds - startup_s) for v in mine) / len(mine), 4),
            "statuses": dict(Counter(v.status for v in mine)),
        }
    bound = work_bound_s([v.seconds for v in verdicts], workers)
    return {
        "workers": workers,
        "programs": len(programs),
        "wall_s": round(wall, 3),
        "programs_per_s": round(len(programs) / wall, 2),
        "bound_wall_s": round(bound, 3),  # the programs' seconds in sandboxes over the workers, or the longest
        "bound_programs_per_s": round(len(programs) / bound, 2),
        "seconds_per_verdict": round(sum(v.seconds for v in verdicts) / len(verdicts), 4),  # one sandbox's run
        "in_tests_s": round(sum(max(0.0, v.seconds - startup_s) for v in verdicts) / len(verdicts), 4),
        "isolation": dict(Counter(v.isolation for v in verdicts)),
        "statuses": status_counts(verdicts, "code"),
        "as_expected": sum(v.status == EXPECTED[k] for k, v in zip(kinds, verdicts, strict=True)),
        "by_kind": by_kind,
    }


def work_bound_s(seconds: list[float], workers: int) -> float:
    """The shortest wall time ``workers`` can take for items of these ``seconds``: their sum spread over the
    workers, or the longest item, whichever is longer."""
    return max(sum(seconds) / workers, max(seconds))


def with_speedups(pools: dict[str, dict], rate: str) -> dict[str, dict]:
    """Each pool's ``rate`` over the one-worker pool's (where there is one), and over its own bound's."""
    one = next((p[rate] for p in pools.values() if p["workers"] == 1), None)
    for p in pools.values():
        p["speedup_over_1_worker"] = round(p[rate] / one, 2) if one else None
        p["share_of_bound"] = round(p[rate] / p[f"bound_{rate}"], 2)
    return pools


def run_code_bench(programs: int, seed: int, config: CodeConfig, isolations: tuple[str, ...] = ("auto",),
                   workers_counts: tuple[int, ...] = (1, 2), startup_runs: int = 10) -> dict:  # fmt: skip
    """Each isolation level of ``isolations`` that runs here, with each pool size of ``workers_counts``."""
    batch = bench_programs(programs, seed, config.test_timeout_s)
    results = {}
    for isolation in isolations:
        level_config = replace(config, isolation=isolation)
        try:
            resolved = resolve_isolation(isolation)
        except SandboxUnavailable as e:  # a required level this machine lacks
            results[isolation] = {"run": False, "reason": str(e)}
            continue
        startup = startup_seconds(level_config, startup_runs)
        startup_s = median(startup)
        pools = {f"{w}_workers": pool_row(batch, level_config, w, startup_s) for w in workers_counts}
        results[isolation] = {
            "run": True,
            "resolved": resolved,
            "startup_s": round(startup_s, 4),
            "startup_runs_s": [round(s, 4) for s in startup],
            "pools": with_speedups(pools, "programs_per_s"),
        }
    return {
        "bench": "code",
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "seed": seed,
        "programs": programs,
        "tests_per_program": TESTS_PER_PROGRAM,
        "mix": dict(Counter(k for k, _, _ in batch)),
        "test_timeout_s": config.test_timeout_s,
        "slow_sleep_s": round(SLOW_SHARE * config.test_timeout_s, 3),
        "code": to_dict(config),
        "results": results,
    }


def code_bench_markdown(report: dict) -> str:
    """The report as a short table, one row per isolation level and pool size."""
    lines = [
        f"# pacs bench code: {report['programs']} programs ({', '.join(f'{n} {k}' for k, n in report['mix'].items())}),"
        f" {report['tests_per_program']} tests each, {report['test_timeout_s']} s per test, {report['cpus']} CPUs",
        "",
        "| isolation | in force | workers | programs/s | × 1 worker | bound programs/s (share) | s per verdict "
        "| start-up s | in tests s | as expected |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for isolation, level in report["results"].items():
        if not level["run"]:
            lines.append(f"| {isolation} | not run: {level['reason']} | | | | | | | | |")
            continue
        for row in level["pools"].values():
            in_force = ", ".join(row["isolation"])
            speedup = "–" if row["speedup_over_1_worker"] is None else f"{row['speedup_over_1_worker']:.2f}"
            lines.append(
                f"| {isolation} | {in_force} | {row['workers']} | {row['programs_per_s']:.2f} | {speedup} | "
                f"{row['bound_programs_per_s']:.2f} ({row['share_of_bound']:.0%}) | {row['seconds_per_verdict']:.3f} | "
                f"{level['startup_s']:.3f} | {row['in_tests_s']:.3f} | {row['as_expected']}/{row['programs']} |"
            )
    lines += ["", "Bound: what the work allows a pool, the programs' seconds in sandboxes over its workers or its "
                  "longest program, whichever is longer; × 1 worker: the speed-up over one worker."]  # fmt: skip
    return "\n".join(lines) + "\n"
