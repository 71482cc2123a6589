"""Quick evaluation: one greedy completion per problem, the fraction the verifier accepts."""

from collections.abc import Callable, Sequence

from pacs.rollout import RolloutEngine, SamplingParams
from pacs.verify import Verdict, status_counts

ScoreFn = Callable[[Sequence[str], Sequence[str]], list[Verdict]]  # (golds, answers) → verdicts


def greedy_accuracy(
    engine: RolloutEngine, prompts: list[list[int]], golds: Sequence[str], score: ScoreFn, max_tokens: int
) -> dict:
    """``{"accuracy", "correct", "total", "statuses"}`` of greedy decoding on ``prompts``."""
    completions = engine.generate(prompts, SamplingParams(n=1, temperature=0.0, max_tokens=max_tokens))
    verdicts = score(list(golds), [c[0].text for c in completions])
    correct = sum(v.score for v in verdicts)
    return {
        "accuracy": correct / max(len(verdicts), 1),
        "correct": int(correct),
        "total": len(verdicts),
        "statuses": status_counts(verdicts),
    }
