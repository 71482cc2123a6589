"""Verifier throughput on synthetic model answers (no data or network needed), and on real golds.

Answers look like a model's: a few hundred characters of reasoning with inline math, then a boxed
final answer that is the gold, an equivalent form of it, a wrong value, or missing. Measured:
in-process scoring, the pool with 1 and 2 workers on distinct answers, and the pool on groups of
n answers per prompt that repeat (as sampled answers do), where duplicates are scored once. With a
benchmark's real golds (MATH-500 from the data directory), the same grouped case on them, against plain
math-verify in one process, verdict for verdict.
"""

import os
import platform
import random
import time
from dataclasses import dataclass
from importlib.metadata import version

from pacs.verify import VerifierPool, VerifyConfig, score_answer, status_counts


@dataclass(frozen=True)
class Problem:
    gold: str
    equivalents: tuple[str, ...]  # answers a model may write that equal the gold
    wrongs: tuple[str, ...]


def make_problem(rng: random.Random) -> Problem:
    kind = rng.choice(["int", "frac", "sqrt", "pair", "poly"])
    if kind == "int":
        v = rng.randint(0, 999)
        return Problem(str(v), (str(v), f"{v}.0", f"{v:03d}"), (str(v + 1), str(v * 2 + 3)))
    if kind == "frac":
        a, b = rng.randint(1, 20), rng.choice([2, 4, 5, 8])
        return Problem(
            f"\\frac{{{a}}}{{{b}}}",
            (f"\\frac{{{a}}}{{{b}}}", f"{a / b:g}", f"{2 * a}/{2 * b}"),
            (f"\\frac{{{a + 1}}}{{{b}}}", f"{a / b + 1:g}"),
        )
    if kind == "sqrt":
        a, b = rng.randint(2, 9), rng.choice([2, 3, 5, 7])
        return Problem(
            f"{a}\\sqrt{{{b}}}",
            (f"{a}\\sqrt{{{b}}}", f"\\sqrt{{{a * a * b}}}"),
            (f"{a + 1}\\sqrt{{{b}}}", f"\\sqrt{{{b}}}"),
        )
    if kind == "pair":
        a, b = rng.randint(-9, 9), rng.randint(-9, 9)
        return Problem(f"({a}, {b})", (f"({a},{b})", f"\\left({a}, {b}\\right)"), (f"({b + 1}, {a})",))
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return Problem(f"x^2+{a + b}x+{a * b}", (f"(x+{a})(x+{b})", f"x^2 + {a + b}x + {a * b}"), (f"(x+{a})(x-{b})",))


def reasoning(rng: random.Random) -> str:
    steps = []
    for _ in range(rng.randint(4, 10)):
        x, y = rng.randint(2, 99), rng.randint(2, 99)
        steps.append(
            rng.choice(
                [
                    f"First we compute ${x} \\times {y} = {x * y}$.",
                    f"Adding, ${x} + {y} = {x + y}$, which we keep for later.",
                    f"Let $a = {x}$ and $b = {y}$; then $a - b = {x - y}$.",
                    "We check the constraint again to be sure nothing was missed.",
                    f"Since $\\frac{{{x}}}{{{y}}}$ is not an integer, we try the other case.",
                ]
            )
        )
    return " ".join(steps)


def model_answer(problem: Problem, rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.1:
        return reasoning(rng) + " I am not sure how to finish."
    final = rng.choice(problem.equivalents if roll < 0.55 else problem.wrongs)
    return f"{reasoning(rng)} Therefore the answer is $\\boxed{{{final}}}$."


def distinct_batch(num: int, seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    problems = [make_problem(rng) for _ in range(num)]
    return [p.gold for p in problems], [model_answer(p, rng) for p in problems]


def grouped_batch(groups: int, n: int, distinct_per_group: int, seed: int) -> tuple[list[str], list[str]]:
    """n answers per problem drawn from a few distinct texts: what sampling a policy gives."""
    rng = random.Random(seed)
    golds, answers = [], []
    for _ in range(groups):
        p = make_problem(rng)
        texts = [model_answer(p, rng) for _ in range(distinct_per_group)]
        golds += [p.gold] * n
        answers += [rng.choice(texts) for _ in range(n)]
    return golds, answers


def real_grouped_batch(golds: list[str], n: int, distinct_per_group: int, seed: int) -> tuple[list[str], list[str]]:
    """Real golds (MATH-500's, say) each answered n times, drawn from a few distinct texts: the gold written
    as a model answer after some reasoning, a wrong number, and an answer with no final value."""
    from pacs.verify.gold_check import wrong_number

    rng = random.Random(seed)
    out_golds, answers = [], []
    for gold in golds:
        wrong = wrong_number(gold, rng)
        finals = [f"Therefore the answer is $\\boxed{{{gold}}}$.", f"So the answer is $\\boxed{{{wrong}}}$.",
                  "I am not sure how to finish."]  # fmt: skip
        texts = [f"{reasoning(rng)} {finals[i % len(finals)]}" for i in range(distinct_per_group)]
        out_golds += [gold] * n
        answers += [rng.choice(texts) for _ in range(n)]
    return out_golds, answers


def _rate(num: int, seconds: float) -> float:
    return round(num / seconds, 1)


def run_verifier_bench(
    answers: int, groups: int, n: int, distinct_per_group: int, seed: int, config: VerifyConfig,
    real_golds: list[str] | None = None,
) -> dict:  # fmt: skip
    """Synthetic answers: in process, the pool with 1 and 2 workers, and groups of n; with ``real_golds``,
    also those golds answered in groups of n, plain in-process math-verify against the pool of 2 workers."""
    golds, texts = distinct_batch(answers, seed)
    warm_golds, warm_texts = distinct_batch(200, seed + 1000)  # ANTLR's parser caches warm up over ~100s of parses
    for g, a in zip(warm_golds, warm_texts, strict=True):
        score_answer(g, a, config)
    t = time.perf_counter()
    in_process = [score_answer(g, a, config) for g, a in zip(golds, texts, strict=True)]
    rows = {
        "in_process": {
            "answers": answers,
            "answers_per_s": _rate(answers, time.perf_counter() - t),
            "statuses": status_counts(in_process),
        }
    }
    for workers in (1, 2):
        with VerifierPool(config, workers=workers) as pool:
            pool.score(warm_golds, warm_texts)  # workers are up and warm
            t = time.perf_counter()
            verdicts = pool.score(golds, texts)
            rows[f"pool_{workers}_workers"] = {
                "answers": answers,
                "answers_per_s": _rate(answers, time.perf_counter() - t),
                "statuses": status_counts(verdicts),
                "agrees_with_in_process": [v.status for v in verdicts] == [v.status for v in in_process],
            }
    g_golds, g_texts = grouped_batch(groups, n, distinct_per_group, seed + 1)
    with VerifierPool(config, workers=2) as pool:
        pool.score(warm_golds, warm_texts)
        t = time.perf_counter()
        verdicts = pool.score(g_golds, g_texts)
        rows[f"pool_2_workers_groups_of_{n}"] = {
            "answers": len(g_texts),
            "unique_pairs": len(set(zip(g_golds, g_texts, strict=True))),
            "answers_per_s": _rate(len(g_texts), time.perf_counter() - t),
            "statuses": status_counts(verdicts),
        }
    if real_golds:
        r_golds, r_texts = real_grouped_batch(real_golds, n, distinct_per_group, seed + 2)
        t = time.perf_counter()
        plain = [score_answer(g, a, config) for g, a in zip(r_golds, r_texts, strict=True)]
        plain_rate = _rate(len(r_texts), time.perf_counter() - t)
        rows[f"real_groups_of_{n}_in_process"] = {"answers": len(r_texts), "answers_per_s": plain_rate,
                                                  "statuses": status_counts(plain)}  # fmt: skip
        with VerifierPool(config, workers=2) as pool:
            pool.score(warm_golds, warm_texts)
            t = time.perf_counter()
            verdicts = pool.score(r_golds, r_texts)
            rate = _rate(len(r_texts), time.perf_counter() - t)
        rows[f"real_groups_of_{n}_pool_2_workers"] = {
            "answers": len(r_texts),
            "unique_pairs": len(set(zip(r_golds, r_texts, strict=True))),
            "answers_per_s": rate,
            "speedup_over_in_process": round(rate / plain_rate, 2),
            "statuses": status_counts(verdicts),
            "agrees_with_in_process": [(v.status, v.score) for v in verdicts] == [(v.status, v.score) for v in plain],
        }
    return {
        "bench": "verifier",
        "math_verify": version("math-verify"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "timeout_s": config.timeout_s,
        "seed": seed,
        "results": rows,
    }
