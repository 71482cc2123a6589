"""Response lengths from a documented distribution: the update benchmarks draw ragged batches from them
(``pacs.bench.update``). (The plan prices decoding with a tail that reaches the cap: ``pacs.plan.decode.spread``.)

``DEEPSCALER_QUANTILES`` are the 0, 5, …, 100 % quantiles of the DeepScaleR reference solutions' lengths
(characters, ``solution`` of the 803 rows of ``deepscaler_subset803.json``, see ``../shared/data/SOURCES.md``)
divided by the longest: the shape of a training set's answer lengths, scaled so that the longest response
reaches ``rollout.max_response_length``. Their mean is 0.42 of the maximum, the median 0.41, the shortest
0.115. ``quantiles_of`` recomputes them from the file (a test checks the table against it).
"""

import json
from pathlib import Path

import numpy as np

DEEPSCALER_QUANTILES = (0.115, 0.2, 0.243, 0.271, 0.293, 0.312, 0.333, 0.353, 0.373, 0.395, 0.415, 0.438, 0.454,
                        0.472, 0.489, 0.514, 0.54, 0.565, 0.606, 0.659, 1.0)  # fmt: skip


def quantiles_of(path: Path, count: int = len(DEEPSCALER_QUANTILES)) -> tuple[float, ...]:
    """The table above, from a DeepScaleR JSON file (a list of rows with ``solution``)."""
    lengths = np.array([len(row["solution"]) for row in json.loads(Path(path).read_text())], dtype=float)
    return tuple(round(float(x), 3) for x in np.quantile(lengths / lengths.max(), np.linspace(0, 1, count)))


def response_lengths(count: int, maximum: int, distribution: str, seed: int) -> list[int]:
    """``count`` lengths in [1, maximum]: ``fixed`` (all the maximum) or ``deepscaler`` (inverse CDF of the
    quantile table, linearly interpolated, at seeded uniform draws)."""
    if distribution == "fixed":
        return [maximum] * count
    if distribution != "deepscaler":
        raise ValueError(f"response length distribution {distribution!r}: expected fixed or deepscaler")
    u = np.random.default_rng(seed).random(count)
    shares = np.interp(u, np.linspace(0, 1, len(DEEPSCALER_QUANTILES)), DEEPSCALER_QUANTILES)
    return [max(1, round(float(s) * maximum)) for s in shares]
