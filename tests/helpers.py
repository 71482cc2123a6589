"""A fixed rollout batch and one update through the training loop's own functions, for any rank count."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import warm_pacs
from torch.distributed.tensor import DTensor
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForTokenClassification, AutoTokenizer

from pacs.algorithms.objectives import get_objective
from pacs.collector import leave
from pacs.config import from_dict
from pacs.data.schema import prompt_token_ids, read_prepared
from pacs.models.tiny import eos_token_ids
from pacs.ranks.distributed import DistEnv, full_tensors, init_distributed, wrap
from pacs.rollout import Completion, SamplingParams
from pacs.rollout.hf import HFEngine
from pacs.tensors.batch import add_value_states, rollout_batch, token_logprobs, token_values
from pacs.tensors.logprobs import PolicyScorer
from pacs.train.loop import prepare_whole_batch, score_batch, update_models
from pacs.train.sampling.rollouts import hf_engine, rank_share
from pacs.train.settings.config import objective_config, resolve
from pacs.train.update.minibatch import forward_pass, update
from pacs.train.update.models import load_models
from pacs.train.update.packing import fixed_plan
from pacs.train.update.sizes import resolve_sizes

N = 4

# The real benchmarks of ../shared/data: rows per prepared file.
EXPECTED_ROWS = {"math500": 500, "amc23": 40, "aime2024": 30, "aime2025": 30, "gsm8k": 1319, "beyondaime": 100}


def threads() -> str:
    """OMP_NUM_THREADS for a test's training process: the share of the cores conftest gives each pytest-xdist
    worker, else 2 (this machine's and CI's cores)."""
    return os.environ.get("OMP_NUM_THREADS", "2")


def fixed_batch(model_path, data_dir, prompts: int = 8, seed: int = 0):
    """Sampled completions with rewards alternating within groups, so that every group has both classes."""
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    ids = prompt_token_ids(tokenizer, read_prepared(data_dir / "train.parquet")["prompt"][:prompts])
    engine = HFEngine(model, tokenizer, eos_token_ids(tokenizer))
    completions = engine.generate(ids, SamplingParams(n=N, max_tokens=12, seed=seed))
    batch = rollout_batch(ids, completions, engine.pad_token_id)
    rewards = torch.tensor([(i * 7 + i // N) % 3 == 0 for i in range(prompts * N)], dtype=torch.float32)
    rewards.view(-1, N)[:, 0], rewards.view(-1, N)[:, 1] = 1.0, 0.0
    batch["rewards"] = rewards
    return batch


def one_update(model_path, batch, algorithm: str, options: dict, env: DistEnv, micro_prompts: int, mini_prompts: int,
               strategy: str = "ddp", max_tokens: int | None = None, chunk_size: int | None = 1024,
               share_prompt: bool = False):  # fmt: skip
    """Old log-probs, values, prepare and one critic + actor update, as ``train_step`` does (each group's
    prompt shared, or every row whole); returns the full weights of the policy (and critic) after it, and
    the actor's metrics."""
    torch.manual_seed(0)
    objective = get_objective(algorithm)
    config = from_dict(objective.config, options)
    prompts = rank_share(np.arange(batch["rewards"].shape[0] // N), mini_prompts, env)
    rows = torch.from_numpy(prompts[:, None] * N + np.arange(N)).flatten()
    local = {k: v[rows] for k, v in batch.items()}
    policy = AutoModelForCausalLM.from_pretrained(model_path)
    module = wrap(PolicyScorer(policy, chunk_size, share_prompt), env, strategy)
    micro_rows, mini_rows = micro_prompts * N, mini_prompts * N // env.world_size
    plan = fixed_plan(local["rewards"].shape[0] // N, micro_prompts)
    (local["old_logprobs"],) = forward_pass(local, plan, N, lambda m: token_logprobs(module, m, 1.0, None, N)[:1])
    critic = None
    if objective.value_loss is not None:
        cfg = AutoConfig.from_pretrained(model_path, num_labels=1, classifier_dropout=0.0)
        critic = AutoModelForTokenClassification.from_pretrained(model_path, config=cfg)
        critic_module = wrap(critic, env, strategy)
        (local["values"],) = forward_pass(local, plan, N, lambda m: [token_values(critic_module, m)])
    local.update(prepare_whole_batch(objective, local, N, config, env))
    sizes = dict(n=N, mini_rows=mini_rows, micro_rows=micro_rows, epochs=1, grad_clip=1.0, env=env,
                 max_tokens=max_tokens)  # fmt: skip
    if critic is not None:
        optimizer = torch.optim.SGD(critic_module.parameters(), lr=0.5)

        def value_loss(m):
            return objective.value_loss({**m, "new_values": token_values(critic_module, m)}, config)

        update(critic_module, optimizer, value_loss, local, objective.value_reduction(config), **sizes)

    def loss(m):
        return objective.loss({**m, "logprobs": token_logprobs(module, m, 1.0, None, N)[0]}, N, config)

    optimizer = torch.optim.SGD(module.parameters(), lr=0.5)  # SGD: parameters move with the gradient itself
    metrics = update(module, optimizer, loss, local, objective.reduction(config), **sizes)
    full = {"policy": dict(full_tensors(policy)), "critic": dict(full_tensors(critic)) if critic else None}
    return full["policy"], full["critic"], metrics


def join(rank: int, world: int, port: int) -> DistEnv:
    """A spawned rank joins its group as torchrun's would: one node, so its local rank is its rank, and
    ``init_distributed`` puts it on GPU ``LOCAL_RANK`` where there are GPUs (NCCL), else on the CPU (gloo)."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    return init_distributed(rank, world, int(os.environ["LOCAL_RANK"]))


def warm_ranks(argv: list[str], ranks: int, log: Path, patch: str = "", timeout_s: float = 900) -> list[int]:
    """``pacs ARGV`` on ``ranks`` ranks of one node, each with torchrun's environment, forked by the warm server
    (``warm_pacs``) rather than started by torchrun, for a run whose launcher is not what is tested; ``patch`` run
    first, rank r's output in ``log``.rank{r}. Waited for as torchrun waits for its ranks: once one exits with an
    error the others get a SIGTERM, and a SIGKILL 10 s later (a rank blocked in a collective never runs its
    handler). Their exit codes."""
    from pacs.train.launch import free_port

    server, port = warm_pacs.shared(), free_port()
    processes = []
    for rank in range(ranks):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(ranks), "LOCAL_RANK": str(rank),
               "LOCAL_WORLD_SIZE": str(ranks), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
               "OMP_NUM_THREADS": "1", warm_pacs.PATCH: patch}  # fmt: skip
        with open(f"{log}.rank{rank}", "w") as out:
            processes.append(subprocess.Popen([server.pacs, *argv], env=env, stdout=out, stderr=subprocess.STDOUT))
    deadline, stopping = time.monotonic() + timeout_s, None
    while any(p.poll() is None for p in processes):
        failed = any(p.returncode not in (None, 0) for p in processes)
        if (failed or time.monotonic() > deadline) and stopping is None:
            stopping = time.monotonic()
            for p in processes:
                if p.poll() is None:
                    p.terminate()
        if stopping is not None and time.monotonic() > stopping + 10:
            for p in processes:
                if p.poll() is None:
                    p.kill()
        time.sleep(0.1)
    return [p.returncode for p in processes]


PACS = warm_pacs.REAL_PACS  # the `pacs` console script, as a user runs it


def pacs_warm(argv: list[str], patch: str = "", timeout_s: float = 900,
              threads: int = 1) -> subprocess.CompletedProcess:  # fmt: skip
    """``pacs ARGV`` forked by the warm server (``warm_pacs``), ``patch`` run first, for a run whose start is not
    what is tested: as ``subprocess.run`` of the `pacs` command gives it. At ``threads`` intra-op threads
    (OMP_NUM_THREADS), which a process it is compared with bitwise must run at."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), warm_pacs.PATCH: patch}
    return subprocess.run([warm_pacs.shared().pacs, *argv], env=env, capture_output=True, text=True, timeout=timeout_s)


def pacs_fresh(argv: list[str], timeout_s: float = 900, threads: int = 1) -> subprocess.CompletedProcess:
    """``pacs ARGV`` as a user starts it: the venv's `pacs` console script in a process of its own (its imports,
    the environment read as it starts, the verifier's forkserver importing the script again), at ``threads``
    intra-op threads. A test's bitwise partner of a warm run, so that the comparison crosses the two."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    return subprocess.run([PACS, *argv], env=env, capture_output=True, text=True, timeout=timeout_s)



def leave_group() -> None:
    """A spawned rank leaves its group and ends as pacs's ranks end (``pacs.collector.leave``): without the
    interpreter's teardown, where objects that still hold gloo's group can abort a process that has done its work
    (pytorch/pytorch#179291; a two-rank test here once ended with SIGABRT on a CI machine)."""
    torch.distributed.destroy_process_group()
    leave(0)


def on_host(results):
    """``results`` with every tensor on the host: what a rank on a GPU saves for the test to compare."""
    return torch.utils._pytree.tree_map(lambda x: x.cpu() if isinstance(x, torch.Tensor) else x, results)


def ddp_worker(rank: int, world: int, port: int, model_path, batch_file, objectives: dict, out_file) -> None:
    """For each objective (``{algorithm: options}``), both strategies on the same batch, and fsdp with
    token-budget micro-batches, each group's prompt shared (two forwards through every FSDP unit before one
    backward); rank 0 saves them all, ``{algorithm: {strategy: result}}``."""
    env = join(rank, world, port)
    batch = torch.load(batch_file)
    results = {}
    for algorithm, options in objectives.items():
        for name, strategy, max_tokens in (("ddp", "ddp", None), ("fsdp", "fsdp", None), ("fsdp-tokens", "fsdp", 400)):
            policy, critic, metrics = one_update(model_path, batch, algorithm, options, env, micro_prompts=1,
                                                 mini_prompts=4, strategy=strategy, max_tokens=max_tokens,
                                                 share_prompt=True)  # fmt: skip
            results.setdefault(algorithm, {})[name] = {"policy": policy, "critic": critic, "metrics": metrics}
    if rank == 0:
        torch.save(on_host(results), out_file)
    leave_group()


def ragged_batch(model_path, data_dir, lengths: list[int], prompts: int = 8, seed: int = 0):
    """Toy prompts with made-up responses of the given lengths (cycled over the rows; random tokens) and
    rewards of both classes in every group of ``N``: a step's rollouts of chosen shapes."""
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    ids = prompt_token_ids(tokenizer, read_prepared(data_dir / "train.parquet")["prompt"][:prompts])
    generator = torch.Generator().manual_seed(seed)
    completions = [[Completion(tuple(torch.randint(3, len(tokenizer), (lengths[(g * N + j) % len(lengths)],),
                                                   generator=generator).tolist()), "", "stop") for j in range(N)]
                   for g in range(prompts)]  # fmt: skip
    batch = rollout_batch(ids, completions, tokenizer.pad_token_id)
    rewards = torch.tensor([(i * 7 + i // N) % 3 == 0 for i in range(prompts * N)], dtype=torch.float32)
    rewards.view(-1, N)[:, 0], rewards.view(-1, N)[:, 1] = 1.0, 0.0
    batch["rewards"] = rewards
    return batch


def trainer_update(model_path, batch, run: dict, env: DistEnv) -> dict:
    """One step's critic and actor updates through the trainer's own functions (``resolve_sizes``, ``load_models``,
    ``score_batch``, ``prepare_whole_batch``, ``update_models``) on this rank's share of ``batch`` (rollouts with
    rewards), ``run`` the run config's sections: every model's weights before and after, the gradient each optimizer
    step took (after clipping, full tensors), the step's metrics and the sizes resolved from ``auto``."""
    config = resolve({**run, "model": {"path": str(model_path)}, "data": {"train_files": ["unused.parquet"]}})
    objective, options, n = get_objective(config.algorithm.name), objective_config(config), config.rollout.n
    needs = objective.needs(options)
    config, sizes = resolve_sizes(config, env, "ref_logprobs" in needs, objective.value_loss is not None)
    models = load_models(config, objective, needs, None, env)
    prompts = rank_share(np.arange(batch["rewards"].shape[0] // n), config.trainer.mini_batch_size, env)
    local = {k: v[torch.from_numpy(prompts[:, None] * n + np.arange(n)).flatten()] for k, v in batch.items()}
    if "values" in needs:
        add_value_states(local, config.rollout.max_response_length)
    trained = {"policy": (models.policy, models.optimizer), "critic": (models.critic, models.critic_optimizer)}
    trained = {k: v for k, v in trained.items() if v[0] is not None}

    def weights() -> dict:  # copies: one process's full tensors are the parameters themselves
        return {k: {name: v.detach().clone() for name, v in full_tensors(m)} for k, (m, _) in trained.items()}

    out = {"initial": weights(), "grads": {k: [] for k in trained}, "sizes": sizes}

    def recording(name, model, step):
        def recorded(*args, **kwargs):
            out["grads"][name].append({k: (p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad).clone()
                                       for k, p in model.named_parameters()})  # fmt: skip
            return step(*args, **kwargs)

        return recorded

    for name, (model, optimizer) in trained.items():
        optimizer.step = recording(name, model, optimizer.step)
    entropy = score_batch(local, config, models, env)
    local.update(prepare_whole_batch(objective, local, n, options, env))
    out["metrics"] = update_models(local, config, models, env, entropy)
    out["final"] = weights()
    return out


def trainer_update_worker(rank: int, world: int, port: int, model_path, batch_file, runs: dict, out_file) -> None:
    """``trainer_update`` of each of ``runs`` (name -> run config sections) on ``world`` gloo ranks; rank 0 saves
    them by name."""
    env = join(rank, world, port)
    batch = torch.load(batch_file)
    results = {name: trainer_update(model_path, batch, run, env) for name, run in runs.items()}
    if rank == 0:
        torch.save(on_host(results), out_file)
    leave_group()


def fp32_sum_bound(abs_terms: torch.Tensor, terms: int, sigmas: float = 8.0) -> torch.Tensor:
    """How far an fp32 sum of ``terms`` exactly representable terms (products of bf16 numbers are) may lie from
    the exact sum, in whatever order it adds them: λ·√n·u·Σ|x_i| with u = 2⁻²⁴ the unit roundoff and
    ``abs_terms`` = Σ|x_i|. Higham and Mary's probabilistic bound for inner products ("A new approach to
    probabilistic rounding error analysis", SIAM J. Sci. Comput. 41(5), 2019): it holds with probability at least
    1 − 2n·exp(−λ²(1−u)²/2) for rounding errors that are independent and of mean zero, 1 − 5e-11 per element for
    λ = 8 and n = 2,049; the worst case, n·u·Σ|x_i|, is as large as a bf16 rounding of the sum."""
    return sigmas * terms**0.5 * 2.0**-24 * abs_terms


# (prompts, max_tokens) of each generate call on each rank: different lengths, numbers of generate calls inside
# (prompt_batch_size 2) and, in the last, no prompt at all on rank 0
GENERATE_CALLS = {0: [(3, 4), (3, 12), (0, 8)], 1: [(5, 12), (5, 24), (2, 8)]}


def fsdp_generate_worker(rank: int, world: int, port: int, model_path, out_file) -> None:
    """The trainer's transformers engine on an FSDP2-sharded policy (``hf_engine``), each rank sampling its
    own prompts to its own lengths (``GENERATE_CALLS``), against the same engine on the whole model: per call,
    the collectives issued (``c10d::`` operators on the host) and whether the samples are the same; then
    whether every parameter is a shard again. Each rank saves its own."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    env = join(rank, world, port)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    stops = eos_token_ids(tokenizer)
    whole = HFEngine(AutoModelForCausalLM.from_pretrained(model_path).to(env.device), tokenizer, stops,
                     prompt_batch_size=2)  # the reference on the policy's device
    policy = AutoModelForCausalLM.from_pretrained(model_path)
    root = wrap(PolicyScorer(policy, 1024), env, "fsdp")
    engine = hf_engine(policy, tokenizer, stops, 2, root)
    result = {"units": sum(isinstance(m, FSDPModule) for m in root.modules()), "calls": []}
    for prompts, max_tokens in GENERATE_CALLS[rank]:
        ids = [[10 + rank + i, 20 + i, 30] for i in range(prompts)]
        params = SamplingParams(n=2, max_tokens=max_tokens, seed=100 + rank)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            sampled = engine.generate(ids, params)
        collectives = {e.key: e.count for e in prof.key_averages() if e.key.startswith("c10d::")}
        result["calls"].append({"collectives": collectives, "same": sampled == whole.generate(ids, params),
                                "longest": max((len(c.token_ids) for g in sampled for c in g), default=0)})
    result["sharded_after"] = all(isinstance(p, DTensor) for p in root.parameters())
    torch.save(result, f"{out_file}.{rank}")
    leave_group()


def check_gathered_generation(model_path, out: Path) -> None:
    """``fsdp_generate_worker`` on two ranks (gloo on CPUs, NCCL on two GPUs): each generate call all-gathers each
    FSDP unit once and issues no other collective, however many tokens it decodes; ranks sampling different
    prompts to different lengths, one with no prompt at all, neither hang nor sample other tokens than the
    whole model; the policy is sharded again afterwards."""
    import torch.multiprocessing as mp

    from pacs.train.launch import free_port

    mp.spawn(fsdp_generate_worker, args=(2, free_port(), model_path, out), nprocs=2, join=True)
    for rank in (0, 1):
        result = torch.load(f"{out}.{rank}", weights_only=False)
        units = result["units"]
        assert units == 3  # the tiny model's two decoder layers and the root
        for call, (prompts, max_tokens) in zip(result["calls"], GENERATE_CALLS[rank], strict=True):
            assert call["collectives"] == {"c10d::_allgather_base_": units}, (rank, call)
            assert call["same"], (rank, prompts, max_tokens)
            assert call["longest"] <= max_tokens and (call["longest"] > 4 or not prompts or max_tokens == 4)
        assert result["sharded_after"]


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc), whatever session it is in: torchrun starts its ranks in
    sessions of their own, so killing the launcher's process group would leave them running."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found += kids
        todo += kids
    return found


def started_until(command: list[str], env: dict, ready: Callable[[], bool], poll_s: float, then: str
                  ) -> subprocess.Popen:  # fmt: skip
    """``command`` started (its output discarded) and alive when ``ready()`` first holds; fails, saying what was
    to happen ``then``, if it ended on its own first."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while not ready():
        assert proc.poll() is None, f"{command[2:4]} ended before {then}"
        time.sleep(poll_s)
    return proc


def start_paused(command: list[str], env: dict, ready: Callable[[], bool], poll_s: float = 0.02) -> subprocess.Popen:
    """Start ``command`` and pause it (SIGSTOP) as soon as ``ready()``: alive, whatever the machine's speed, until
    the caller sends SIGCONT; fails if it ended on its own first."""
    proc = started_until(command, env, ready, poll_s, "it could be paused")
    os.kill(proc.pid, signal.SIGSTOP)
    return proc


def run_until_killed(command: list[str], env: dict, ready: Callable[[], bool], poll_s: float = 0.02) -> None:
    """Start ``command`` and SIGKILL it, with every process it started (torchrun's ranks), as soon as
    ``ready()``; fails if it ended on its own first, or if anything it started is still alive after."""
    proc = started_until(command, env, ready, poll_s, "it could be killed")
    os.kill(proc.pid, signal.SIGSTOP)  # no new processes while the tree is read
    tree = descendants(proc.pid)
    for pid in [proc.pid, *tree]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL, f"{command[2:4]} ended before it could be killed"
    alive = survivors(tree, within_s=30)
    assert not alive, f"processes {alive} survived the kill"


def signal_alone(command: list[str], env: dict, ready: Callable[[], bool], signum: int,
                 poll_s: float = 0.02) -> tuple[subprocess.Popen, list[int]]:  # fmt: skip
    """Start ``command`` and, as soon as ``ready()``, send ``signum`` to its own process alone (what a user, an
    OOM killer or a closed terminal does to `pacs train`); returns it and the processes it had started then."""
    proc = started_until(command, env, ready, poll_s, "the signal")
    tree = descendants(proc.pid)
    os.kill(proc.pid, signum)
    return proc, tree


def survivors(pids: list[int], within_s: float) -> list[int]:
    """Those of ``pids`` still running after ``within_s`` seconds (zombies are not running)."""
    deadline = time.monotonic() + within_s
    while (alive := [pid for pid in pids if Path(f"/proc/{pid}").exists() and not _zombie(pid)]) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.1)
    return alive


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def vllm_push_check(start: str, trained: str, heldout: str, out: str) -> None:
    """Run in its own process (an in-process vLLM engine binds this process's threads): a vLLM engine
    started from ``start`` gets ``trained``'s weights pushed, then its greedy answers and its log-probs of
    its own samples are compared with transformers running ``trained``. Writes the comparison to ``out``."""
    import json

    from pacs.rollout.base import stop_token_ids
    from pacs.rollout.vllm import VLLMEngine, VLLMOptions
    from pacs.train.sampling.rollouts import logprob_gap, push_weights, sampled_logprobs

    torch.set_num_threads(int(threads()))
    tokenizer = AutoTokenizer.from_pretrained(trained)
    policy = AutoModelForCausalLM.from_pretrained(trained, dtype=torch.float32)
    stops = stop_token_ids(policy.generation_config, tokenizer)
    prompts = prompt_token_ids(tokenizer, read_prepared(heldout)["prompt"][:64])
    options = VLLMOptions(max_model_len=128, enforce_eager=True)
    engine = VLLMEngine(start, stops, 0, "float32", 64 * N, options, in_process=True)

    def gap() -> dict:
        completions = engine.generate(prompts, SamplingParams(n=N, max_tokens=16, seed=1, logprobs=True))
        batch = rollout_batch(prompts, completions, tokenizer.pad_token_id)
        batch["sampler_logprobs"] = sampled_logprobs(completions, batch["response_mask"].shape[1])
        with torch.no_grad():
            batch["old_logprobs"] = token_logprobs(PolicyScorer(policy, 1024), batch, 1.0)[0]
        return logprob_gap(batch, DistEnv())

    greedy = SamplingParams(n=1, temperature=0.0, max_tokens=16)
    result = {"before_push": gap()}
    result["push_check"] = push_weights(1, engine, policy)[0]  # raises if the engine does not hold what was pushed
    result["after_push"] = gap()
    result["vllm_greedy"] = [g[0].text for g in engine.generate(prompts, greedy)]
    result["hf_greedy"] = [g[0].text for g in HFEngine(policy, tokenizer, stops).generate(prompts, greedy)]
    from torch._dynamo.utils import counters

    result["frames_compiled"] = counters["frames"]["ok"]  # enforce_eager on a CPU: vLLM's sampler too
    engine.close()
    with open(out, "w") as f:
        json.dump(result, f)


def qwen3_like(model_path, out: Path) -> Path:
    """A Qwen3 of ``model_path``'s shape (its q_norm and k_norm in every attention) with random weights and
    ``model_path``'s tokenizer, saved to ``out``."""
    from transformers import Qwen3Config

    shape = AutoConfig.from_pretrained(model_path).to_dict()
    keep = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "bos_token_id", "eos_token_id")  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(Qwen3Config(**{k: shape[k] for k in keep})).save_pretrained(out)
    AutoTokenizer.from_pretrained(model_path).save_pretrained(out)
    return out


def transformers_modules_kept(patch) -> None:
    """What Liger replaces process-wide in transformers' Qwen2 and Qwen3 modules, put back when ``patch`` undoes."""
    from transformers.models.qwen2 import modeling_qwen2
    from transformers.models.qwen3 import modeling_qwen3

    for module, prefix in ((modeling_qwen2, "Qwen2"), (modeling_qwen3, "Qwen3")):
        for name in ("apply_rotary_pos_emb", f"{prefix}RMSNorm", f"{prefix}MLP"):
            patch.setattr(module, name, getattr(module, name))


def wandb_runs(directory: Path) -> list[Path]:
    """The wandb run directories under ``directory`` (``.../wandb/offline-run-*``), in path order."""
    return sorted(p.parent for p in Path(directory).rglob("run-*.wandb"))


def read_wandb_run(run_dir: Path) -> dict:
    """An offline run as wandb's own reader returns it (``wandb leet inspect`` on its .wandb transaction log):
    the summary view (``config``, ``summary``, ``name``, ``project``, ``run_id``, ``state``), with ``group`` and
    ``job_type`` from the run's record, ``plots`` (each custom chart's key and its fields: x, y, stroke) and
    ``dir``."""

    def inspect(*flags: str) -> str:
        command = [str(Path(sys.executable).with_name("wandb")), "leet", "inspect", *flags, str(run_dir)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
        return done.stdout

    view = json.loads(inspect("--summary", "--json"))
    records = [json.loads(line) for line in inspect("--json").splitlines() if line.strip()]
    run = next(r["run"] for r in records if r["type"] == "run")
    charts = [(key, value) for r in records if r["type"] == "config" for key, value in r["config"]["update"].items()]
    plots = {key.removeprefix("_wandb.visualize."): value["panel_config"]["fieldSettings"] for key, value in charts
             if key.startswith("_wandb.visualize.")}  # fmt: skip
    return {**view, "group": run.get("run_group"), "job_type": run.get("job_type"), "plots": plots,
            "dir": Path(run_dir)}  # fmt: skip


def wandb_table(run: dict, key: str) -> list[dict]:
    """The rows of the table a run logged under ``key`` (its file, as the summary names it)."""
    entry = run["summary"][key]
    assert entry["_type"] == "table-file", entry
    table = json.loads((run["dir"] / "files" / entry["path"]).read_text())
    return [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]
