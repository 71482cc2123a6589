"""`pacs evaluate`: N samples per problem from one model on one prepared benchmark, scored and saved.

The output directory:
- ``config.yaml``: model, data, engine and the resolved ``EvalConfig``; a resumed evaluation must match it.
- ``responses/part_NNNNN.parquet``: every sample of chunk NNNNN's problems with its extracted answer,
  score and verifier status, written whole or not at all. ``pd.read_parquet(out / "responses")`` reads
  them all. A code dataset's rows add ``tests_passed``, ``tests_total``, ``isolation`` and ``verify_s``.
- ``metrics.json``: pass@k and the rest (``pacs.eval.metrics``), recomputed from responses/ on every run.

The dataset's ``task`` column says how answers are scored: math-verify against the gold (``eval.verifier``),
the program run on the row's tests in the sandbox (``eval.code``), or the letter of a multiple-choice answer
line against the gold letter (``pacs.verify.choice``; ``extracted`` holds the letter); one task per file.

Chunks are generated in order and each is written as soon as it is scored: a killed evaluation, run
again, generates only the missing chunks; a finished one only recomputes its metrics. With a ``Deadline``
(pacs.eval.deadline), the evaluation stops between chunks before its job's time limit, on a stop asked, or on a
signal, and the next job samples what is missing.

Several evaluations of one model in one process (``pacs evaluate --suite``, pacs.eval.suite) share a ``Kept``:
the engine while the next evaluation would build the same one, and a verifier pool per distinct setting.
"""

import dataclasses
import json
import shutil
import time
from collections.abc import Callable
from contextlib import closing, nullcontext
from pathlib import Path

import pandas as pd

from pacs import collector
from pacs.config import config_changes, pin_config, to_dict
from pacs.data.schema import frame_task, prompt_token_ids, read_prepared
from pacs.eval.config import RESUMABLE_KEYS, EvalConfig
from pacs.eval.deadline import Deadline
from pacs.eval.greedy import score_completions
from pacs.eval.metrics import eval_metrics
from pacs.io import atomic_write_json, atomic_write_parquet, parquet_metadata
from pacs.rollout import RolloutEngine, SamplingParams
from pacs.rollout.base import eval_seed, stop_token_ids
from pacs.rollout.vllm import vllm_available
from pacs.verify import VerifierPool
from pacs.writer_lock import sole_writer

PART = "part_{:05d}.parquet"


def resolve_engine(name: str) -> str:
    return ("vllm" if vllm_available() else "hf") if name == "auto" else name


def response_frame(problems: pd.DataFrame, completions, verdicts, task: str = "math") -> pd.DataFrame:
    """One row per sample; ``problem`` is the problem's ``index`` in the prepared file."""
    n = len(completions[0]) if completions else 0
    flat = [c for group in completions for c in group]
    code = {}
    if task == "code":
        code = {
            "tests_passed": [v.passed for v in verdicts],  # in order, before the first that did not pass
            "tests_total": [v.total for v in verdicts],
            "isolation": [v.isolation for v in verdicts],  # "" when nothing ran
            "verify_s": [v.seconds for v in verdicts],  # the sandbox's whole run, its start included
        }
    return pd.DataFrame(
        {
            "problem": problems["index"].repeat(n).to_numpy(),
            "id": problems["id"].astype(str).repeat(n).to_numpy(),
            "sample": [j for _ in completions for j in range(n)],
            "response": [c.text for c in flat],
            "response_tokens": [len(c.token_ids) for c in flat],
            "finish_reason": [c.finish_reason for c in flat],
            "extracted": [v.extracted for v in verdicts],
            "status": [v.status for v in verdicts],
            "score": [v.score for v in verdicts],
            **code,
        }
    )


def checkpoint_dtype(model: str, dtype: str) -> str:
    """``dtype``, or for "auto" the checkpoint's own: vLLM's "auto" would run a float32 checkpoint in
    16-bit, and the two engines would no longer compute the same thing."""
    if dtype != "auto":
        return dtype
    from transformers import AutoConfig

    stored = getattr(AutoConfig.from_pretrained(model), "dtype", None)
    return str(stored).removeprefix("torch.") if stored is not None else "float32"


def engine_key(kind: str, model: str, config: EvalConfig, longest_prompt: int) -> str:
    """Everything ``build_engine`` builds from: two evaluations with one key can share an engine (the sampling
    settings, n and max_tokens aside, travel with each generate call)."""
    built = {"kind": kind, "model": model, "chat_template": config.chat_template, "dtype": config.dtype}
    if kind == "vllm":
        built.update(seed=config.seed, sequences=config.chunk_problems * config.n, vllm=to_dict(config.vllm),
                     max_model_len=config.vllm.max_model_len or longest_prompt + config.max_tokens)  # fmt: skip
    else:
        built["prompt_batch_size"] = config.prompt_batch_size
    return json.dumps(built, sort_keys=True)


class Kept:
    """The engine and verifier pools of one process that evaluates one model on several benchmarks (pacs.eval.suite):
    the engine is kept while the next evaluation would build the same one (``engine_key``), and closed before
    another is built (one engine at a time on the device); a verifier pool is kept per distinct verifier setting.
    ``close`` ends them all."""

    def __init__(self):
        self._engine: RolloutEngine | None = None
        self._engine_key: str | None = None
        self._pools: dict[str, VerifierPool] = {}

    def engine(self, key: str, build: Callable[[], RolloutEngine]) -> tuple[RolloutEngine, float]:
        """The engine for ``key`` and the seconds its start took now (0 when kept)."""
        if key != self._engine_key:
            self._close_engine()
            start = time.perf_counter()
            self._engine, self._engine_key = build(), key
            collector.working()  # the model is loaded (pacs.collector)
            return self._engine, time.perf_counter() - start
        return self._engine, 0.0

    def pool(self, config: EvalConfig) -> VerifierPool:
        key = json.dumps(to_dict([config.verifier, config.verifier_workers, config.code]), sort_keys=True)
        if key not in self._pools:
            self._pools[key] = VerifierPool(config.verifier, workers=config.verifier_workers, code=config.code)
        return self._pools[key]

    def _close_engine(self) -> None:
        if self._engine is not None:
            engine, self._engine, self._engine_key = self._engine, None, None
            engine.close()

    def close(self) -> None:
        self._close_engine()
        pools, self._pools = self._pools, {}
        for pool in pools.values():
            pool.close()


def build_engine(kind: str, model: str, tokenizer, config: EvalConfig, longest_prompt: int) -> RolloutEngine:
    from transformers import GenerationConfig

    try:
        generation_config = GenerationConfig.from_pretrained(model)
    except OSError:  # a model without generation_config.json stops on the tokenizer's eos alone
        generation_config = None
    stops = stop_token_ids(generation_config, tokenizer)
    dtype = checkpoint_dtype(model, config.dtype)
    if kind == "vllm":
        from dataclasses import replace

        from pacs.rollout.vllm import VLLMEngine

        options = config.vllm
        if options.max_model_len is None:
            options = replace(options, max_model_len=longest_prompt + config.max_tokens)
        return VLLMEngine(model, stops, config.seed, dtype, config.chunk_problems * config.n, options)
    import torch
    from transformers import AutoModelForCausalLM

    from pacs.rollout.hf import HFEngine

    policy = AutoModelForCausalLM.from_pretrained(model, dtype=getattr(torch, dtype))
    policy.to("cuda" if torch.cuda.is_available() else "cpu")
    return HFEngine(policy, tokenizer, stops, config.prompt_batch_size)


def load_tokenizer(model: str, chat_template: str | None = None):
    """The model's tokenizer; with ``chat_template`` (a tokenizer's hub id or directory), that tokenizer's chat
    template renders the prompts instead of the model's own (a released model evaluated in v2's template)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    if chat_template:
        borrowed = AutoTokenizer.from_pretrained(chat_template).chat_template
        if not borrowed:
            raise ValueError(f"eval.chat_template {chat_template}: that tokenizer has no chat template")
        tokenizer.chat_template = borrowed
    if not tokenizer.chat_template:
        raise ValueError(f"{model}: the tokenizer has no chat template, and prompts are chat messages")
    return tokenizer


def evaluate(model: str, data: Path, out: Path, config: EvalConfig, log: Callable[[str], None] = print,
             restart: bool = False, kept: Kept | None = None, deadline: Deadline | None = None) -> dict:  # fmt: skip
    """Generate what ``out`` is missing, then write and return ``metrics.json``'s content. With ``restart``,
    an ``out`` holding an evaluation under another config is emptied first instead of refused. ``kept``: the
    engine and pools of earlier evaluations in this process, kept for later ones (else this call's own). ``out``
    has one writer at a time (pacs.writer_lock): another process evaluating into it is refused at once. ``deadline``:
    when to stop between chunks (``pacs.eval.deadline.Stopped``, the chunks so far kept)."""
    with sole_writer(out, "pacs evaluate"):
        return _evaluate(model, data, Path(out), config, log, restart, kept, deadline)


def _evaluate(model: str, data: Path, out: Path, config: EvalConfig, log: Callable[[str], None], restart: bool,
              kept: Kept | None, deadline: Deadline | None) -> dict:  # fmt: skip
    problems = read_prepared(data)
    task = frame_task(problems, str(data))
    if config.limit is not None:
        problems = problems.head(config.limit)
    if problems.empty:
        raise ValueError(f"{data}: no problems to evaluate")
    # code.grading null: the benchmark's own grader (LiveCodeBench's rows: LiveCodeBench's runner)
    config = dataclasses.replace(config, code=config.code.for_source(str(problems["data_source"].iloc[0])))
    engine_kind = resolve_engine(config.engine)
    model_id = str(Path(model).resolve()) if Path(model).exists() else str(model)
    identity = {"model": model_id, "data": str(Path(data).resolve()), "engine": engine_kind, "eval": to_dict(config)}
    # the verifier settings no score of the task depends on
    resumable = RESUMABLE_KEYS + {"math": ("eval.code",), "choice": ("eval.code", "eval.verifier")}.get(task, ())
    out.mkdir(parents=True, exist_ok=True)
    if restart and config_changes(out / "config.yaml", identity, resumable):
        shutil.rmtree(out / "responses", ignore_errors=True)
        for name in ("metrics.json", "config.yaml"):
            (out / name).unlink(missing_ok=True)
    pin_config(out / "config.yaml", identity, "an evaluation", ignore=resumable)

    size = config.chunk_problems
    chunks = [problems.iloc[i : i + size] for i in range(0, len(problems), size)]
    todo = [c for c in range(len(chunks)) if not (out / "responses" / PART.format(c)).exists()]
    log(f"{len(chunks)} chunks of up to {size} problems × {config.n} samples; {len(chunks) - len(todo)} done")
    run_info = {"parts_generated": len(todo), "parts_reused": len(chunks) - len(todo), "engine_start_s": 0.0}
    if todo:
        deadline = deadline or Deadline()
        for c in set(range(len(chunks))) - set(todo):  # what the chunks written before took
            info = parquet_metadata(out / "responses" / PART.format(c))
            deadline.measured(info.get("chunk_s", info.get("generate_s", 0.0)))
        with closing(Kept()) if kept is None else nullcontext(kept) as engines:
            run_info["engine_start_s"] = generate_missing(model, chunks, todo, out, config, engine_kind, task, engines,
                                                          log, deadline)  # fmt: skip
    responses, infos = read_responses(out, [len(c) for c in chunks], config.n)
    metrics = {
        "model": model_id,
        "data": str(data),
        "data_source": str(problems["data_source"].iloc[0]),
        "engine": engine_kind,
        "dtype": checkpoint_dtype(model, config.dtype),  # what every sample was generated in
        **eval_metrics(responses, config.confidence, config.bootstrap_resamples, task, config.code),
        "throughput": {**throughput(infos, len(responses)), **run_info},
        "config": to_dict(config),
    }
    atomic_write_json(out / "metrics.json", metrics)
    return metrics


def generate_missing(model: str, chunks: list[pd.DataFrame], todo: list[int], out: Path, config: EvalConfig,
                     engine_kind: str, task: str, kept: Kept, log: Callable[[str], None],
                     deadline: Deadline) -> float:  # fmt: skip
    """Sample, score and write the chunks in ``todo``, each once ``deadline`` lets it start; returns the engine's
    start-up seconds (0 if kept)."""
    tokenizer = load_tokenizer(model, config.chat_template)
    prompts = [prompt_token_ids(tokenizer, chunk["prompt"], config.chat_template_kwargs) for chunk in chunks]
    # the pool first: a required isolation (eval.code.isolation) that this machine lacks fails before the model loads
    pool = kept.pool(config)
    longest = max(len(p) for c in prompts for p in c)
    engine, engine_start_s = kept.engine(
        engine_key(engine_kind, model, config, longest),
        lambda: build_engine(engine_kind, model, tokenizer, config, longest),
    )
    for c in todo:
        deadline.check()
        params = SamplingParams(config.n, config.temperature, config.top_p, config.max_tokens,
                                seed=eval_seed(config.seed, c))  # fmt: skip
        start = time.perf_counter()
        completions = engine.generate(prompts[c], params)
        seconds = time.perf_counter() - start
        golds = [str(g) for g in chunks[c]["ground_truth"]]
        verdicts = score_completions(golds, completions, pool.score, task)
        frame = response_frame(chunks[c], completions, verdicts, task)
        info = {"generate_s": seconds, "engine": engine_kind, "tokens": int(frame["response_tokens"].sum()),
                "chunk_s": time.perf_counter() - start}  # fmt: skip
        atomic_write_parquet(out / "responses" / PART.format(c), frame, info)
        log(f"chunk {c + 1}/{len(chunks)}: {len(frame)} samples in {seconds:.1f} s")
        deadline.chunk_done(info["chunk_s"])
    return engine_start_s


def read_responses(out: Path, chunk_sizes: list[int], n: int) -> tuple[pd.DataFrame, list[dict]]:
    """All parts, each checked for its expected number of rows; with each part's stored metadata."""
    frames, infos = [], []
    for c, size in enumerate(chunk_sizes):
        path = Path(out) / "responses" / PART.format(c)
        frame = pd.read_parquet(path)
        if len(frame) != size * n:
            raise ValueError(f"{path}: {len(frame)} responses, expected {size} problems × {n}")
        frames.append(frame)
        infos.append(parquet_metadata(path))
    return pd.concat(frames, ignore_index=True), infos


def throughput(infos: list[dict], samples: int) -> dict:
    """Generation speed over every part, whichever run generated it (scoring and engine start excluded)."""
    seconds = sum(i["generate_s"] for i in infos)
    tokens = sum(i["tokens"] for i in infos)
    return {
        "generate_s": seconds,
        "samples_per_s": samples / seconds if seconds else None,
        "tokens_per_s": tokens / seconds if seconds else None,
    }
