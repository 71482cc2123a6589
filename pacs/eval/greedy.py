"""Quick evaluation: one greedy completion per problem, the fraction the verifier accepts.

`pacs train` calls it on held-out prompts every ``eval.every`` steps; `pacs evaluate --greedy` is the
same protocol through the full evaluator.
"""

from collections.abc import Callable, Sequence

from pacs.rollout import Completion, RolloutEngine, SamplingParams
from pacs.verify import CodeVerdict, Verdict, status_counts

# (golds, answers, task) → verdicts: VerifierPool.score. A code row's gold is its tests JSON
ScoreFn = Callable[[Sequence[str], Sequence[str], str], list[Verdict | CodeVerdict]]


def score_completions(golds: Sequence[str], completions: list[list[Completion]], score: ScoreFn,
                      task: str = "math") -> list[Verdict | CodeVerdict]:  # fmt: skip
    """One verdict per completion, flat, prompt by prompt; each prompt's gold serves all its completions."""
    pairs = [(g, c.text) for g, group in zip(golds, completions, strict=True) for c in group]
    return score([g for g, _ in pairs], [a for _, a in pairs], task)


def greedy_accuracy(engine: RolloutEngine, prompts: list[list[int]], golds: Sequence[str], score: ScoreFn,
                    max_tokens: int, task: str = "math") -> dict:  # fmt: skip
    """``{"accuracy", "correct", "total", "statuses"}`` of greedy decoding on ``prompts``."""
    completions = engine.generate(prompts, SamplingParams(n=1, temperature=0.0, max_tokens=max_tokens))
    verdicts = score_completions(golds, completions, score, task)
    correct = sum(v.score for v in verdicts)
    return {
        "accuracy": correct / max(len(verdicts), 1),
        "correct": int(correct),
        "total": len(verdicts),
        "statuses": status_counts(verdicts, task),
    }
