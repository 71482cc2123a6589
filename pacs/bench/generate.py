"""`pacs bench generate`: transformers' generation from a policy spread as the trainer spreads it (``rollout.engine:
hf``), for a model built from a shape with random weights: seconds and tokens/s of one ``generate`` call per rank,
and the collectives it issues.

Under ``trainer.strategy: fsdp`` the trainer gathers the policy once per call (``once``: ``pacs.ranks.distributed
.gathered``); ``per-token`` is the call without it, FSDP2 gathering every layer around each forward, so once per
decoded token, and transformers keeping the ranks in step with an all-reduce per token (``synced_gpus``). Every
rank samples ``prompts`` random prompts, ``n`` samples each, exactly ``new_tokens`` tokens (stop tokens ignored).
Collectives are the ``c10d::`` operators ``torch.profiler`` records on the host during one call (one rank does
none: FSDP2 then gathers by copying).
"""

import os
import sys
import time


def generate_worker(shape: str, overrides: dict, trainer: dict, prompts: int, n: int, prompt_length: int,
                    new_tokens: int, variants: list[str]) -> dict | None:  # fmt: skip
    """One rank's measurement of each variant (inside torchrun, or alone); rank 0 returns every rank's."""
    import torch
    from transformers import AutoModelForCausalLM

    from pacs.config import from_dict
    from pacs.models.shapes import model_config
    from pacs.ranks.distributed import gather_objects, init_distributed
    from pacs.rollout import SamplingParams
    from pacs.rollout.hf import HFEngine
    from pacs.train.sampling.rollouts import hf_engine
    from pacs.train.settings.config import TrainerConfig
    from pacs.train.update.models import scorer_of, spread

    t = from_dict(TrainerConfig, trainer)
    env = init_distributed(int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1)),
                           int(os.environ.get("LOCAL_RANK", 0)), fsdp=t.strategy == "fsdp")  # fmt: skip
    config = model_config(shape, **overrides)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation="sdpa")
    root = spread(scorer_of(model, t), t, env, trained=False)

    class Tokenizer:  # random tokens: nothing to decode
        pad_token_id = 0

        def decode(self, ids, skip_special_tokens=True) -> str:
            return ""

    engines = {"once": hf_engine(model, Tokenizer(), [0], prompts, root),
               "per-token": HFEngine(model, Tokenizer(), [0], prompts,
                                     lambda **kwargs: root(generate=kwargs))}  # fmt: skip
    g = torch.Generator().manual_seed(env.rank)
    ids = [torch.randint(1, config.vocab_size, (prompt_length,), generator=g).tolist() for _ in range(prompts)]
    params = SamplingParams(n=n, max_tokens=new_tokens, seed=env.rank, ignore_eos=True)
    results = {}
    for name in variants:
        engine = engines[name]
        engine.generate(ids, SamplingParams(n=n, max_tokens=min(8, new_tokens), seed=0, ignore_eos=True))  # warm-up
        start = time.perf_counter()
        out = engine.generate(ids, params)
        seconds = time.perf_counter() - start
        assert all(len(c.token_ids) == new_tokens for group in out for c in group)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            engine.generate(ids, params)
        collectives = {e.key: e.count for e in prof.key_averages() if e.key.startswith("c10d::")}
        results[name] = {"seconds": seconds, "tokens_per_s": prompts * n * new_tokens / seconds,
                         "collectives": sum(collectives.values()), "collective_ops": collectives}  # fmt: skip
    ranks = gather_objects(results, env)
    if not env.main:
        return None
    return {"shape": shape, "overrides": overrides, "trainer": trainer, "world_size": env.world_size,
            "device": env.device, "layers": config.num_hidden_layers, "prompts_per_rank": prompts, "n": n,
            "prompt_length": prompt_length, "new_tokens": new_tokens, "ranks": ranks}  # fmt: skip


def run_generate_bench(shape: str, overrides: dict, nproc: int, trainer: dict, prompts: int, n: int,
                       prompt_length: int, new_tokens: int, variants: list[str]) -> dict:  # fmt: skip
    """Each variant on ``nproc`` ranks of one ``torchrun`` (``pacs.bench.ranks.run_ranks``)."""
    from pacs.bench.ranks import run_ranks

    spec = {"shape": shape, "overrides": overrides, "trainer": trainer, "prompts": prompts, "n": n,
            "prompt_length": prompt_length, "new_tokens": new_tokens, "variants": variants}  # fmt: skip
    return run_ranks("pacs.bench.generate", nproc, spec)


if __name__ == "__main__":
    from pacs.bench.ranks import rank_main

    sys.exit(rank_main(generate_worker, None))
