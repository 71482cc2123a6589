"""Memory of the log-prob computation and the padding token budgets remove, measured where they happen.

``logprob_peak`` runs in a fresh process (``python -m pacs.bench.memory``): the peak RSS of a process that
did nothing else is what the computation needed, on CPU what a GPU would run out of. It computes the
response log-probs of random hidden states and LM head, forward and backward, either from the full
(rows, T, vocab) fp32 logits (``log_softmax`` and ``gather``, as before) or in chunks of positions
(``pacs.tensors.logprobs.ChunkedLogprobs``). Needs torch only, so it runs on a bare GPU machine too.

``padding`` packs real prompt and response lengths both ways (micro_batch_size prompts, or whole groups
up to a token budget) and counts the tokens each computes.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path


def logprob_peak(mode: str, rows: int, length: int, vocab: int, hidden: int, chunk_size: int, device: str) -> dict:
    import torch

    from pacs.ranks.memory import resident_peak
    from pacs.tensors.logprobs import ChunkedLogprobs

    torch.manual_seed(0)
    h = torch.randn(rows * length, hidden, device=device, requires_grad=True)
    weight = (torch.randn(vocab, hidden, device=device) / hidden**0.5).requires_grad_()
    targets = torch.randint(0, vocab, (rows * length,), device=device)
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    if mode == "full":
        logprobs = torch.log_softmax((h @ weight.T).float(), -1).gather(-1, targets[:, None]).squeeze(-1)
    elif mode == "chunked":
        logprobs = ChunkedLogprobs.apply(h, weight, targets, 1.0, chunk_size)
    else:  # "inputs": what the process holds before any log-prob, to subtract
        logprobs = (h.sum(-1) + weight.sum()) * 0
    logprobs.sum().backward()
    seconds = time.perf_counter() - start
    # on CPU this process's own high-water mark (VmHWM): getrusage's ru_maxrss also holds the resident memory of the
    # parent that started it, where that was larger (Linux keeps it across exec)
    peak = torch.cuda.max_memory_allocated() if device.startswith("cuda") else resident_peak()
    return {"mode": mode, "rows": rows, "length": length, "vocab": vocab, "hidden": hidden, "chunk_size": chunk_size,
            "device": device, "peak_bytes": int(peak), "seconds": seconds,
            "logits_bytes": rows * length * vocab * 4}  # fmt: skip


def measure_in_fresh_process(mode: str, rows: int, length: int, vocab: int, hidden: int, chunk_size: int = 1024,
                             device: str = "cpu") -> dict:  # fmt: skip
    args = [mode, str(rows), str(length), str(vocab), str(hidden), str(chunk_size), device]
    done = subprocess.run([sys.executable, "-m", "pacs.bench.memory", *args], capture_output=True, text=True,
                          check=False)  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"pacs.bench.memory {' '.join(args)} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def padding(prompt_lengths, response_lengths, n: int, micro_batch_size: int, budget: int) -> dict:
    """Tokens computed (padding included) over the groups, fixed micro-batches against a token budget."""
    import torch

    from pacs.train.update.packing import fixed_plan, pack, padded_tokens

    prompt, response = torch.as_tensor(prompt_lengths), torch.as_tensor(response_lengths)
    groups = len(prompt) // n
    fixed = padded_tokens(fixed_plan(groups, micro_batch_size), prompt, response, n)
    packed_plan = pack(list(range(groups)), prompt, response, n, budget)
    packed = padded_tokens(packed_plan, prompt, response, n)
    real = int((prompt + response)[: groups * n].sum())
    return {
        "groups": groups, "n": n, "micro_batch_size": micro_batch_size, "budget": budget, "real_tokens": real,
        "fixed_tokens": fixed, "budget_tokens": packed, "fixed_micro_batches": -(-groups // micro_batch_size),
        "budget_micro_batches": len(packed_plan), "fixed_padding_frac": 1 - real / fixed,
        "budget_padding_frac": 1 - real / packed,
        "padding_removed_frac": 1 - (packed - real) / (fixed - real) if fixed > real else 0.0,
    }  # fmt: skip


def run_memory_bench(sizes: list[tuple[int, int, int, int]], chunk_size: int, problems_file: Path | None,
                     tokenizer_path: Path | None, n: int, micro_batch_size: int, budget: int) -> dict:  # fmt: skip
    """Peak memory above the inputs, full against chunked, at each (rows, length, vocab, hidden); and the
    padding of both micro-batchings on a problems file's prompts and reference solutions."""
    report: dict = {"logprobs": [], "padding": None}
    for rows, length, vocab, hidden in sizes:
        size = dict(rows=rows, length=length, vocab=vocab, hidden=hidden, chunk_size=chunk_size)
        base = measure_in_fresh_process("inputs", **size)["peak_bytes"]
        for mode in ("full", "chunked"):
            r = measure_in_fresh_process(mode, **size)
            report["logprobs"].append({**r, "peak_above_inputs_bytes": r["peak_bytes"] - base})
    if problems_file is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
        rows = json.loads(Path(problems_file).read_text())
        prompt = [len(tokenizer(r["problem"]).input_ids) for r in rows for _ in range(n)]
        response = [len(tokenizer(r["solution"]).input_ids) for r in rows for _ in range(n)]
        budget = budget or max(n * (a + b) for a, b in zip(prompt, response, strict=True))  # one longest group
        report["padding"] = {"source": str(problems_file), "tokenizer": str(tokenizer_path),
                             **padding(prompt, response, n, micro_batch_size, budget)}  # fmt: skip
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="one log-prob memory measurement; prints JSON")
    for name in ("mode", "rows", "length", "vocab", "hidden", "chunk_size", "device"):
        p.add_argument(name)
    a = p.parse_args(argv)
    print(json.dumps(logprob_peak(a.mode, int(a.rows), int(a.length), int(a.vocab), int(a.hidden), int(a.chunk_size),
                                  a.device)))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
