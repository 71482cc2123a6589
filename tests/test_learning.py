"""RL raises held-out greedy accuracy of the warm-started tiny model, for every objective.

Measured with ``pacs bench train --seeds 0 1 2 3`` (2 CPU cores; 40 steps of 32 prompts × 8 samples
at lr 1e-4; held-out accuracy 0.40 at the start): over the 16 runs of PACS, PACS without weights,
GRPO and PPO, gains of 0.170 to 0.285, mean 0.235, standard deviation 0.034. The margin of 0.10 is
about 4 standard deviations below that mean; 200 held-out problems put the sampling noise of one
accuracy near 0.035. Runs are deterministic for a seed on a given machine; this test uses seed 0.

Since GRPO and PPO step as the paper's verl fork (issue 45: its loss scale, PPO's critic), measured again with
``pacs bench train --variants ppo grpo --seeds 0 1 2 3`` (held-out accuracy 0.38 at the start): GRPO gains 0.195
to 0.290 (mean 0.254), PPO 0.185 to 0.260 (mean 0.216); over the 8, standard deviation 0.041, the margin about 3
standard deviations below their mean. PACS steps as before.

With vLLM rollouts (``pacs bench train --engines vllm --variants pacs grpo --seeds 0 1 2 3``, eager
engine, a model build whose held-out accuracy starts at 0.475): over the 8 runs, gains of 0.155 to
0.235, mean 0.196, standard deviation 0.030; the same margin is about 3 standard deviations below.

The three runs this test makes, measured again on 2026-12-03 (seeds 0 to 3, one thread, two runs at a time; the
configs of ``pacs bench train`` with a held-out evaluation every 10 steps; held-out accuracy 0.38 at the start for
both engines): PPO with transformers gains 0.185 to 0.26 (mean 0.212, standard deviation 0.034), PACS with vLLM
0.27 to 0.335 (mean 0.295, 0.029), GRPO with vLLM 0.255 to 0.285 (mean 0.272, 0.013). They are not shorter
because PPO's seed 0 had gained 0.095 after 10 steps and 0.01 after 20.
"""

import json

import pytest
import yaml
from helpers import pacs_warm

from pacs.bench.train import VARIANTS, bench_config

MARGIN = 0.10


def read_metrics(out) -> list[dict]:
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


# PPO with transformers rollouts, PACS and GRPO with vLLM's (in the trainer's process): every objective and
# both rollout engines learn in CI. PACS with transformers, PACS without weights and GRPO with transformers are
# in the measured spread above but not rerun here: the same objective code, a rollout engine already covered
# (CI time); the tiny workflow trains PACS with transformers rollouts too (its sweep and w/o-weight runs)
RUNS = [("ppo", "hf"), ("pacs", "vllm"), ("grpo", "vllm")]
# PACS learns at two intra-op threads, as `pacs train` runs on two cores by default; the others at one: beside the
# other test worker, two threads oversubscribe the cores (ppo-hf 171 s at two against about 35 s at one)
THREADS = {"pacs": 2}


@pytest.mark.slow
@pytest.mark.parametrize(("run", "engine"), RUNS, ids=[f"{v}-{e}" for v, e in RUNS])
def test_rl_raises_heldout_accuracy(run, engine, tiny_model, toy_data, tmp_path, request):
    if engine == "vllm":
        request.getfixturevalue("vllm_installed")
    config = tmp_path / "run.yaml"  # the run `pacs bench train` measures
    config.write_text(
        yaml.safe_dump(bench_config(VARIANTS[run], tiny_model, toy_data, steps=40, seed=0, engine=engine))
    )
    out = tmp_path / run
    result = pacs_warm(["train", "--config", str(config), "--out", str(out)], threads=THREADS.get(run, 1))
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_metrics(out)
    accuracy = {r["step"]: r["eval/accuracy"] for r in records if "eval/accuracy" in r}
    seconds = sum(r.get("time/step", 0.0) for r in records) / 40
    print(f"{run}: held-out greedy accuracy {accuracy[0]:.3f} -> {accuracy[40]:.3f}, {seconds:.2f} s/step")
    assert accuracy[40] >= accuracy[0] + MARGIN, accuracy
