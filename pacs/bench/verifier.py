"""Verifier throughput on synthetic model answers (no data or network needed), and on real golds.

Answers look like a model's: a few hundred characters of reasoning with inline math, then a boxed
final answer that is the gold, an equivalent form of it, a wrong value, or missing. Measured:
in-process scoring, the pool with 1 and 2 workers on distinct answers, and the pool on groups of
n answers per prompt that repeat (as sampled answers do), where duplicates are scored once. With a
benchmark's real golds (MATH-500 from the data directory), the same grouped case on them, against plain
math-verify in one process (``plain_math_verify``: parse both, verify, for every answer), verdict for
verdict, and against this package's scoring in one process (its caches, no pool).
"""

import os
import platform
import random
import time
from dataclasses import dataclass
from importlib.metadata import version
from statistics import median

from math_verify import parse, verify

from pacs.bench.code import with_speedups, work_bound_s
from pacs.verify import VerifierPool, VerifyConfig, score_answer, status_counts
from pacs.verify.scoring import extraction_configs


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


def plain_math_verify(gold: str, answer: str, config: VerifyConfig) -> bool:
    """What a reward function does with math-verify alone: parse the gold and the answer, verify, answer by
    answer, with ``config``'s extraction and comparison settings and math-verify's own timeouts."""
    gold_text = "\\boxed{" + gold + "}" if config.wrap_gold_in_boxed else gold
    gold_parsed = parse(gold_text, extraction_configs(config.gold_extraction))
    answer_parsed = parse(answer, extraction_configs(config.answer_extraction))
    if not (gold_parsed and answer_parsed):
        return False
    return verify(gold_parsed, answer_parsed, float_rounding=config.float_rounding,
                  numeric_precision=config.numeric_precision)  # fmt: skip


def _rate(num: int, seconds: float) -> float:
    return round(num / seconds, 1)


def real_golds_rounds(golds: list[str], n: int, distinct_per_group: int, seed: int, config: VerifyConfig,
                      rounds: int, warm: tuple[list[str], list[str]]) -> dict:  # fmt: skip
    """``golds`` answered in groups of n, ``rounds`` times, each with new answer texts and a new pool (no
    verdict cached from an earlier round): plain math-verify in this process, this package's scorer in this
    process, and the pool of 2 workers; each rate is the median over rounds, the speedups the medians of
    the rounds' ratios (this machine's speed drifts between runs)."""
    rates: dict[str, list[float]] = {"plain": [], "own": [], "pool": []}
    agrees_plain = agrees_own = True
    for r in range(rounds):
        r_golds, r_texts = real_grouped_batch(golds, n, distinct_per_group, seed + r)
        pairs = list(zip(r_golds, r_texts, strict=True))
        t = time.perf_counter()
        plain = [plain_math_verify(g, a, config) for g, a in pairs]
        rates["plain"].append(len(pairs) / (time.perf_counter() - t))
        t = time.perf_counter()
        own = [score_answer(g, a, config) for g, a in pairs]
        rates["own"].append(len(pairs) / (time.perf_counter() - t))
        with VerifierPool(config, workers=2) as pool:
            pool.score(*warm)  # workers are up and warm, with none of this round's answers
            t = time.perf_counter()
            verdicts = pool.score(r_golds, r_texts)
            rates["pool"].append(len(pairs) / (time.perf_counter() - t))
        agrees_plain &= [v.score for v in verdicts] == [float(p) for p in plain]
        agrees_own &= verdicts == own
    ratio = {k: [p / b for p, b in zip(rates["pool"], rates[k], strict=True)] for k in ("plain", "own")}

    def row(name: str, **more) -> dict:
        return {"answers": len(pairs), "answers_per_s": round(median(rates[name]), 1),
                "rounds": [round(x, 1) for x in rates[name]], **more}  # fmt: skip

    return {
        f"real_groups_of_{n}_plain_math_verify": row("plain"),
        f"real_groups_of_{n}_in_process": row("own"),
        f"real_groups_of_{n}_pool_2_workers": row(
            "pool",
            unique_pairs=len(set(pairs)),
            speedup_over_plain_math_verify=round(median(ratio["plain"]), 2),
            speedup_over_plain_math_verify_rounds=[round(x, 2) for x in ratio["plain"]],
            speedup_over_in_process=round(median(ratio["own"]), 2),
            statuses=status_counts(verdicts),
            agrees_with_plain_math_verify=agrees_plain,
            agrees_with_in_process=agrees_own,
        ),
    }


def run_verifier_bench(
    answers: int, groups: int, n: int, distinct_per_group: int, seed: int, config: VerifyConfig,
    real_golds: list[str] | None = None, rounds: int = 3, workers_counts: tuple[int, ...] = (1, 2),
) -> dict:  # fmt: skip
    """Synthetic answers: in process, the pool with each of ``workers_counts`` workers (on a GPU node's cores:
    1 2 4 8 16) with its speed-up over one worker and the bound the work allows it (the answers' seconds in the
    workers over the workers, or the longest answer, whichever is longer), and groups of n; with
    ``real_golds``, also those golds answered in groups of n (``real_golds_rounds``)."""
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
    pools = {}
    for workers in workers_counts:
        with VerifierPool(config, workers=workers) as pool:
            pool.score(warm_golds, warm_texts)  # workers are up and warm
            t = time.perf_counter()
            verdicts = pool.score(golds, texts)
            wall = time.perf_counter() - t
            seconds = pool.item_seconds  # each answer's in its worker
            bound = work_bound_s(seconds, workers)
            pools[f"pool_{workers}_workers"] = {
                "workers": workers,
                "answers": answers,
                "answers_per_s": _rate(answers, wall),
                "worker_seconds": round(sum(seconds), 3),
                "longest_answer_s": round(max(seconds), 4),
                "bound_answers_per_s": _rate(answers, bound),
                "statuses": status_counts(verdicts),
                "agrees_with_in_process": [v.status for v in verdicts] == [v.status for v in in_process],
            }
    rows.update(with_speedups(pools, "answers_per_s"))
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
        rows.update(
            real_golds_rounds(real_golds, n, distinct_per_group, seed + 2, config, rounds, (warm_golds, warm_texts))
        )
    return {
        "bench": "verifier",
        "math_verify": version("math-verify"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "timeout_s": config.timeout_s,
        "seed": seed,
        "results": rows,
    }
