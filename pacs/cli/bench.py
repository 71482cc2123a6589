"""`pacs bench ...`: speed measurements, written under results/bench/ (pacs.bench does the measuring).

Past 400 lines and kept whole: one command's nine sub-commands, each its parser and one short function that calls
``pacs.bench`` and prints, as every other command of the CLI is one module (``pacs.cli.main``)."""

import argparse
from pathlib import Path

from pacs.cli.common import eval_arguments, eval_config_from, shape_overrides, verify_config
from pacs.io import atomic_write_json


def _add_verifier(what) -> None:
    bv = what.add_parser("verifier", help="verifier answers/s: in process, pools of workers, groups of n")
    bv.add_argument(
        "--workers-counts",
        type=int,
        nargs="+",
        default=[1, 2],
        help="pool sizes measured (a GPU node's cores: 1 2 4 8 16)",
    )
    bv.add_argument("--answers", type=int, default=2000, help="distinct answers to score")
    bv.add_argument("--groups", type=int, default=250, help="prompts in the grouped measurement")
    bv.add_argument("--n", type=int, default=8, help="answers per prompt in the grouped measurement")
    bv.add_argument("--distinct-per-group", type=int, default=3, help="distinct answer texts per group")
    bv.add_argument("--seed", type=int, default=0)
    bv.add_argument("--timeout-s", type=float, default=5.0, help="per-answer verifier deadline")
    bv.add_argument("--real-golds", metavar="BENCHMARK", help="also its golds answered in groups of --n (math500)")
    bv.add_argument("--data-dir", type=Path, default=Path("../shared/data"), help="where --real-golds are read")
    bv.add_argument("--rounds", type=int, default=3, help="--real-golds: rounds of new answers (medians reported)")
    bv.add_argument("--out", type=Path, default=Path("results/bench/verifier.json"))
    bv.set_defaults(func=cmd_bench_verifier)


def cmd_bench_verifier(args: argparse.Namespace) -> int:
    from pacs.bench.verifier import run_verifier_bench

    real = None
    if args.real_golds:
        from pacs.data.sources import load_gold_rows

        real = [r.gold for r in load_gold_rows(args.data_dir, args.real_golds)]
    report = run_verifier_bench(
        args.answers,
        args.groups,
        args.n,
        args.distinct_per_group,
        args.seed,
        verify_config(args),
        real,
        args.rounds,
        tuple(args.workers_counts),
    )
    atomic_write_json(args.out, report)
    print(f"{'measurement':32s} {'answers':>8s} {'answers/s':>10s} {'x 1 worker':>10s} {'bound/s (share)':>16s}")
    for name, row in report["results"].items():
        speedup = f"{row['speedup_over_1_worker']:10.2f}" if row.get("speedup_over_1_worker") else f"{'':10s}"
        bound = ""
        if "bound_answers_per_s" in row:
            bound = f"{row['bound_answers_per_s']:9.1f} ({row['share_of_bound']:.0%})"
        print(f"{name:32s} {row['answers']:8d} {row['answers_per_s']:10.1f} {speedup} {bound:>16s}")
    print("bound: the answers' seconds in the workers over the workers, or the longest answer, whichever is longer")
    print(f"wrote {args.out}")
    return 0


def _add_code(what) -> None:
    bc = what.add_parser("code", help="code verifier programs/s and seconds per verdict, by isolation level")
    bc.add_argument("--workers-counts", type=int, nargs="+", default=[1, 2], help="pool sizes measured")
    levels = ["auto", "bubblewrap", "limits"]
    bc.add_argument("--isolation", nargs="+", default=levels, choices=levels,
                    help="levels measured; one that cannot run here is reported, with the reason")  # fmt: skip
    bc.add_argument("--programs", type=int, default=32, help="programs per measurement (pacs.bench.code.MIX's order)")
    bc.add_argument("--timeout-s", type=float, default=1.0, help="seconds per test (slow programs sleep 0.6 of it)")
    bc.add_argument("--startup-runs", type=int, default=10, help="trivial programs timed for the start-up's median")
    bc.add_argument("--seed", type=int, default=0)
    bc.add_argument("--out", type=Path, default=Path("results/bench/code.json"), help="and a .md beside it")
    bc.set_defaults(func=cmd_bench_code)


def cmd_bench_code(args: argparse.Namespace) -> int:
    from pacs.bench.code import code_bench_markdown, run_code_bench
    from pacs.io import atomic_write_text
    from pacs.verify import CodeConfig

    config = CodeConfig(timeout_s=args.timeout_s)
    report = run_code_bench(args.programs, args.seed, config, tuple(args.isolation), tuple(args.workers_counts),
                            args.startup_runs)  # fmt: skip
    atomic_write_json(args.out, report)
    markdown = code_bench_markdown(report)
    atomic_write_text(args.out.with_suffix(".md"), markdown)
    print(markdown, end="")
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}")
    return 0


def _add_train(what) -> None:
    bt = what.add_parser("train", help="seconds per step and accuracy gain of each algorithm on the tiny model")
    bt.add_argument("--model", type=Path, default=Path("results/tiny/model"), help="from `pacs tiny-model`")
    bt.add_argument("--data", type=Path, default=Path("results/tiny/data"), help="from `pacs toy-data`")
    bt.add_argument("--steps", type=int, default=40)
    bt.add_argument("--seeds", type=int, nargs="+", default=[0])
    bt.add_argument("--variants", nargs="+", default=["pacs", "pacs-no-weights", "grpo", "ppo"])
    bt.add_argument("--engines", nargs="+", default=["hf"], choices=["hf", "vllm"], help="rollout engines")
    bt.add_argument("--strategies", nargs="+", default=["single"], choices=["single", "ddp", "fsdp"],
                    help="one process, or two ranks (fsdp needs --engines vllm)")  # fmt: skip
    bt.add_argument("--logprob-chunk-sizes", nargs="+", default=["1024"], help="positions per chunk; none: full logits")
    bt.add_argument(
        "--trainer", nargs="*", default=[], metavar="KEY=VALUE", help="trainer keys for every run: pack_sequences=false"
    )
    bt.add_argument("--train-file", type=Path, help="prepared prompts instead of the toy task (no held-out accuracy)")
    bt.add_argument("--max-response-length", type=int, default=16, help="new tokens per sample")
    bt.add_argument("--compile", action="store_true", help="vllm: compile (CUDA graphs / torch.compile), not eager")
    bt.add_argument("--threads", type=int, default=2)
    bt.add_argument("--out", type=Path, default=Path("results/bench/train.json"))
    bt.set_defaults(func=cmd_bench_train)


def cmd_bench_train(args: argparse.Namespace) -> int:
    from pacs.bench.train import run_train_bench

    options = {"max_response_length": args.max_response_length, "eager": not args.compile}
    if args.train_file is not None:
        options["train_file"] = args.train_file
    chunks = tuple(None if c == "none" else int(c) for c in args.logprob_chunk_sizes)
    report = run_train_bench(args.model, args.data, args.steps, args.seeds, args.variants, args.engines,
                             args.threads, tuple(args.strategies), chunks, shape_overrides(args.trainer),
                             **options)  # fmt: skip
    atomic_write_json(args.out, report)
    phases = ("generate", "weight_push", "score", "old_logprobs", "update", "step")
    print(f"{'run':36s} {'before':>6s} {'after':>6s} " + " ".join(f"{p[:8]:>8s}" for p in phases)
          + " rollout tok/s  peak GB")  # fmt: skip
    for name, r in report["results"].items():
        before, after = r.get("heldout_accuracy_before", float("nan")), r.get("heldout_accuracy_after", float("nan"))
        accuracy = f"{before:6.3f} {after:6.3f}"
        seconds = " ".join(f"{r[f'seconds_{p}']:8.3f}" for p in phases)
        print(f"{name:36s} {accuracy} {seconds} {r['rollout_tokens_per_s']:13.0f} {r.get('peak_rss_gb', 0):8.2f}")
    print(f"wrote {args.out} (seconds per step, means over steps after the first)")
    return 0


def _add_memory(what) -> None:
    bm = what.add_parser("memory", help="log-prob peak memory, full logits vs chunks; padding of token budgets")
    bm.add_argument("--sizes", nargs="+", default=["2x1024x32768x256", "8x2048x32768x256"], help="ROWSxTxVOCABxHIDDEN")
    bm.add_argument("--chunk-size", type=int, default=1024)
    bm.add_argument("--problems", type=Path, help="JSON list of {problem, solution}: padding on their token lengths")
    bm.add_argument("--tokenizer", type=Path, default=Path("results/tiny/model"))
    bm.add_argument("--n", type=int, default=8)
    bm.add_argument("--micro-batch-size", type=int, default=4, help="prompts per fixed micro-batch")
    bm.add_argument("--budget", type=int, help="tokens per micro-batch (default: micro-batch-size groups of the mean)")
    bm.add_argument("--out", type=Path, default=Path("results/bench/memory.json"))
    bm.set_defaults(func=cmd_bench_memory)


def cmd_bench_memory(args: argparse.Namespace) -> int:
    from pacs.bench.memory import run_memory_bench

    sizes = [tuple(int(x) for x in s.split("x")) for s in args.sizes]
    report = run_memory_bench(sizes, args.chunk_size, args.problems, args.tokenizer, args.n, args.micro_batch_size,
                              args.budget)  # fmt: skip
    atomic_write_json(args.out, report)
    print(f"{'rows x T x vocab x hidden':28s} {'mode':8s} {'peak MB above inputs':>20s} {'seconds':>8s}")
    for r in report["logprobs"]:
        size = f"{r['rows']}x{r['length']}x{r['vocab']}x{r['hidden']}"
        print(f"{size:28s} {r['mode']:8s} {r['peak_above_inputs_bytes'] / 1e6:20.0f} {r['seconds']:8.2f}")
    if report["padding"]:
        pad = report["padding"]
        fixed, budget, removed = pad["fixed_padding_frac"], pad["budget_padding_frac"], pad["padding_removed_frac"]
        print(f"padding: fixed {fixed:.1%} of computed tokens, token budget {budget:.1%}; {removed:.1%} removed")
    print(f"wrote {args.out}")
    return 0


UPDATE_VARIANTS = {  # pacs bench update --variants: trainer options over the command's own
    # Liger off but where a variant names it (its default, null, is on for Qwen2 and Qwen3 on CUDA)
    "padded": {"pack_sequences": False, "liger_kernels": False},
    "packed": {"pack_sequences": True, "liger_kernels": False},
    "padded-unshared": {"pack_sequences": False, "share_prompt": False, "liger_kernels": False},
    "packed-unshared": {"pack_sequences": True, "share_prompt": False, "liger_kernels": False},
    "packed-compiled": {"pack_sequences": True, "compile": True, "liger_kernels": False},
    # CUDA only (pacs.tensors.kernels); AdamW is fused on CUDA unless a variant says otherwise
    "packed-liger": {"pack_sequences": True, "liger_kernels": True},
    "packed-autotune": {"pack_sequences": True, "attention_autotune": True, "liger_kernels": False},
    "packed-liger-autotune": {"pack_sequences": True, "liger_kernels": True, "attention_autotune": True},
    "packed-unfused-adamw": {"pack_sequences": True, "optim": {"fused": False}, "liger_kernels": False},
}


def _add_update(what) -> None:
    bu = what.add_parser("update", help="memory and speed of the training update per rank: one process, ddp, fsdp")
    bu.add_argument("--shape", default="qwen2.5-0.5b", help="a model of pacs.models.shapes, random weights")
    bu.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override the shape: num_hidden_layers=4")
    bu.add_argument("--strategies", nargs="+", default=["ddp", "fsdp"], choices=["single", "ddp", "fsdp"])
    bu.add_argument("--nproc", type=int, default=2, help="ranks for ddp and fsdp (torchrun --standalone)")
    bu.add_argument("--rows", type=int, default=1, help="sequences per rank per update (its mini-batch: the paper's "
                    "256 prompts x 8 over 64 GPUs is 32)")  # fmt: skip
    bu.add_argument("--max-tokens", default=None, help="trainer.max_tokens_per_micro_batch: a number or auto (the "
                    "memory plan's for this device); default: every row in one micro-batch")  # fmt: skip
    bu.add_argument("--prompt-length", type=int, default=64)
    bu.add_argument("--response-length", type=int, default=256)
    bu.add_argument("--steps", type=int, default=3)
    bu.add_argument("--compute-dtype", choices=["float32", "bfloat16"], help="fsdp only (trainer.compute_dtype)")
    bu.add_argument("--gradient-checkpointing", action="store_true")
    bu.add_argument("--checkpoint-layers", help="with checkpointing, only the first K layers recompute; auto: the "
                    "fewest the memory plan needs")  # fmt: skip
    bu.add_argument("--logprob-chunk-size", default="1024", help="positions per chunk; none: full logits")
    bu.add_argument("--peak-flops", type=float, help="per device, for MFU (H100 bf16 dense: 989e12)")
    bu.add_argument("--group-size", type=int, default=1, help="rows per prompt (rollout.n); --rows a multiple")
    bu.add_argument(
        "--lengths",
        default="fixed",
        choices=["fixed", "deepscaler"],
        help="response lengths: all the maximum, or DeepScaleR's (pacs.plan.lengths)",
    )
    bu.add_argument("--variants", nargs="*", choices=sorted(UPDATE_VARIANTS), help="trainer options compared")
    bu.add_argument("--profile", action="store_true", help="one more step under torch.profiler, by kernel family")
    bu.add_argument("--out", type=Path, default=Path("results/bench/update.json"))
    bu.set_defaults(func=cmd_bench_update)


def cmd_bench_update(args: argparse.Namespace) -> int:
    from pacs.bench.profile import format_families
    from pacs.bench.update import ANCHORS, run_update_bench

    overrides = shape_overrides(args.set)
    def size(value: str | None):
        return value if value in (None, "auto") else int(value)

    trainer = {
        "compute_dtype": args.compute_dtype,
        "gradient_checkpointing": args.gradient_checkpointing,
        "checkpoint_layers": size(args.checkpoint_layers),
        "max_tokens_per_micro_batch": size(args.max_tokens),
        "logprob_chunk_size": None if args.logprob_chunk_size == "none" else int(args.logprob_chunk_size),
    }
    variants = {v: UPDATE_VARIANTS[v] for v in args.variants} if args.variants else None
    report = run_update_bench(args.shape, overrides, args.strategies, args.nproc, trainer, args.rows,
                              args.prompt_length, args.response_length, args.steps, args.peak_flops, variants,
                              group_size=args.group_size, lengths=args.lengths, profile=args.profile)  # fmt: skip
    atomic_write_json(args.out, report)
    first = report["results"][0]
    print(
        f"{first['shape']} {first['overrides']}: {first['parameters'] / 1e6:.1f} M parameters; per rank "
        f"{first['rows_per_rank']} rows in groups of {first['group_size']}, prompt {first['prompt_length']}, "
        f"responses {first['lengths']} up to {first['response_length']} tokens"
    )
    header = f"{'variant':21s} {'strategy':8s} {'ranks':>5s} {'AdamW':>7s} {'state GB/rank':>13s}"
    header += f" {'peak GB (max rank)':>18s}"
    print(f"{header} {'s/step':>7s} {'micro':>5s} {'tok/s/GPU':>9s} {'padding':>7s}"
          + (" MFU (attn) busy" if args.peak_flops else ""))  # fmt: skip
    for r in report["results"]:
        peak = max(x["peak_bytes"] for x in r["ranks"])
        mfu = f" {r['mfu']:.3f} ({r['mfu_attention']:.3f})" if "mfu" in r else ""
        busy = r.get("profile", {}).get("busy_share")
        mfu += f" {busy:.2f}" if busy is not None else ""
        print(f"{r['variant']:21s} {r['strategy']:8s} {r['world_size']:5d} {r['optimizer']:>7s} "
              f"{r['state_bytes_per_rank'] / 1e9:13.2f} {peak / 1e9:18.2f} {r['step_s']:7.2f} {r['micro_batches']:5d} "
              f"{r['tokens_per_s'] / r['world_size']:9.0f} {r['padding_share']:7.1%}{mfu}")  # fmt: skip
        if r["sizes"]:
            z = r["sizes"]
            print(f"sized for {z['memory_bytes'] / 1e9:.1f} GB: max_tokens_per_micro_batch "
                  f"{z['max_tokens_per_micro_batch']}, checkpoint_layers {z['checkpoint_layers']} (planned "
                  f"{z['planned_bytes'] / 1e9:.1f} GB)")  # fmt: skip
        if "profile" in r:
            print(format_families(r["profile"]))
            print(f"attention calls per layer (forward and recompute): {r['profile']['attention_calls_per_layer']:.0f}")
        print(f"host s per micro-batch (its forward and backward, issued): {r['host_s_per_micro_batch']:.3f}")
    print("busy: the GPU's compute over the profiled step's span (--profile); below 1 it waited for the host or NCCL")
    print(f"anchors: {ANCHORS}")
    print(f"wrote {args.out} (peak while updating; on CPU resident memory above the process before the model)")
    return 0


def _add_generate(what) -> None:
    bn = what.add_parser("generate", help="transformers generation from a policy spread as the trainer spreads it")
    bn.add_argument("--shape", default="qwen2.5-0.5b", help="a model of pacs.models.shapes, random weights")
    bn.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override the shape: num_hidden_layers=4")
    bn.add_argument("--strategy", default="fsdp", choices=["ddp", "fsdp"], help="trainer.strategy")
    bn.add_argument("--compute-dtype", choices=["float32", "bfloat16"], help="fsdp only (trainer.compute_dtype)")
    bn.add_argument("--nproc", type=int, default=1, help="ranks (torchrun --standalone)")
    bn.add_argument("--prompts", type=int, default=8, help="prompts per rank, in one generate call")
    bn.add_argument("--n", type=int, default=4, help="samples per prompt")
    bn.add_argument("--prompt-length", type=int, default=64)
    bn.add_argument("--new-tokens", type=int, default=256, help="tokens sampled per sequence (stop tokens ignored)")
    bn.add_argument(
        "--variants",
        nargs="+",
        default=["per-token", "once"],
        choices=["per-token", "once"],
        help="fsdp: gather the policy for each decoded token, or once per call (the trainer's)",
    )
    bn.add_argument("--out", type=Path, default=Path("results/bench/generate.json"))
    bn.set_defaults(func=cmd_bench_generate)


def cmd_bench_generate(args: argparse.Namespace) -> int:
    from pacs.bench.generate import run_generate_bench

    trainer = {"strategy": args.strategy, "compute_dtype": args.compute_dtype}
    report = run_generate_bench(args.shape, shape_overrides(args.set), args.nproc, trainer, args.prompts, args.n,
                                args.prompt_length, args.new_tokens, args.variants)  # fmt: skip
    atomic_write_json(args.out, report)
    print(f"{report['shape']} {report['overrides']}, {report['world_size']} rank(s), {args.strategy}: per rank "
          f"{args.prompts} prompts x {args.n} samples x {args.new_tokens} tokens")  # fmt: skip
    print(f"{'variant':10s} {'rank':>4s} {'s/call':>7s} {'tokens/s':>9s} {'collectives':>11s}")
    for rank, variants in enumerate(report["ranks"]):
        for name, r in variants.items():
            print(f"{name:10s} {rank:4d} {r['seconds']:7.3f} {r['tokens_per_s']:9.0f} {r['collectives']:11d}")
    print(f"wrote {args.out}")
    return 0


def _add_gpu(what) -> None:
    bg = what.add_parser("gpu", help="calibrate the plan on this GPU in one sitting: update MFU per model width, "
                         "memory bandwidth")  # fmt: skip
    bg.add_argument("--shapes", nargs="+", default=["qwen2.5-0.5b", "qwen2.5-1.5b"], help="of pacs.models.shapes")
    bg.add_argument("--slice", default="qwen2.5-7b", help="a shape measured at its width with as many layers as fit "
                    "this GPU; none: no slice")  # fmt: skip
    bg.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE", help="override the shapes")
    bg.add_argument("--rows", type=int, default=32, help="rows per GPU per optimizer step (the paper's 256 x 8 / 64)")
    bg.add_argument("--group-size", type=int, default=8, help="responses per prompt (rollout.n)")
    bg.add_argument("--prompt-length", type=int, default=512)
    bg.add_argument("--response-length", type=int, default=4096)
    bg.add_argument("--steps", type=int, default=3, help="updates; the first (optimizer state created) is not timed")
    bg.add_argument("--part-timeout-s", type=float, default=70.0, help="each part's time limit (6 parts by "
                    "default), counted from when its model is built")  # fmt: skip
    bg.add_argument("--build-timeout-s", type=float, default=300.0, help="each part's time limit for its process's "
                    "start and its model's build")  # fmt: skip
    bg.add_argument("--generate-batch", type=int, default=0, help="also transformers' generation: sequences at once")
    bg.add_argument("--new-tokens", type=int, default=512, help="tokens sampled per sequence")
    bg.add_argument("--peak-flops", type=float, help="dense bf16 FLOP/s of the GPU; default: by its name")
    bg.add_argument("--allow-cpu", action="store_true", help="run on the CPU (a test of the code, not of a GPU)")
    bg.add_argument("--out", type=Path, default=Path("results/bench/gpu.json"), help="and a .md table beside it")
    bg.set_defaults(func=cmd_bench_gpu)


def cmd_bench_gpu(args: argparse.Namespace) -> int:
    from pacs.bench.gpu import format_calibration, run_gpu_bench
    from pacs.io import atomic_write_text

    def say(line: str) -> None:
        print(line, flush=True)

    calibration = run_gpu_bench(args.shapes, shape_overrides(args.set), None if args.slice == "none" else args.slice,
                                args.rows, args.group_size, args.prompt_length, args.response_length, args.steps,
                                args.part_timeout_s, args.generate_batch, args.new_tokens, args.peak_flops,
                                args.allow_cpu, lambda c: atomic_write_json(args.out, c), say,
                                args.build_timeout_s)  # fmt: skip
    table = format_calibration(calibration)
    atomic_write_text(args.out.with_suffix(".md"), f"{calibration['source']}\n\n{table}\n")
    print(table)
    print(f"wrote {args.out} (after each part) and {args.out.with_suffix('.md')}: set plan.calibration to the json")
    return 0


def _add_eval(what) -> None:
    be = what.add_parser("eval", help="evaluation samples/s and tokens/s of each engine")
    be.add_argument("--model", default="results/tiny/model")
    be.add_argument("--data", type=Path, default=Path("results/tiny/data/heldout.parquet"))
    be.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"])
    eval_arguments(be)
    be.set_defaults(config=Path("config/eval_tiny.yaml"))
    be.add_argument("--out", type=Path, default=Path("results/bench/eval.json"))
    be.set_defaults(func=cmd_bench_eval)


def cmd_bench_eval(args: argparse.Namespace) -> int:
    from pacs.bench.eval import run_eval_bench

    report = run_eval_bench(args.model, args.data, args.engines, eval_config_from(args))
    atomic_write_json(args.out, report)
    print(f"{'engine':8s} {'samples':>8s} {'samples/s':>10s} {'tokens/s':>9s} {'start s':>8s} {'tokens/sample':>14s}")
    for name, r in report["results"].items():
        print(
            f"{name:8s} {r['samples']:8d} {r['samples_per_s']:10.1f} {r['tokens_per_s']:9.0f} "
            f"{r['engine_start_s']:8.1f} {r['mean_response_tokens']:14.1f}"
        )
    print(f"wrote {args.out}")
    return 0


def _add_overlap(what) -> None:
    bo = what.add_parser("overlap", help="one step off: a generator rank beside a trainer rank, seconds per part")
    bo.add_argument("--model", type=Path, default=Path("results/tiny/model"), help="from `pacs tiny-model`")
    bo.add_argument("--data", type=Path, default=Path("results/tiny/data"), help="from `pacs toy-data`")
    bo.add_argument("--steps", type=int, default=8)
    bo.add_argument("--engines", nargs="+", default=["hf", "vllm"], choices=["hf", "vllm"], help="the generator's")
    bo.add_argument("--staleness", type=int, default=1)
    bo.add_argument("--max-response-length", type=int, default=64, help="new tokens per sample")
    bo.add_argument("--out", type=Path, default=Path("results/bench/overlap.json"))
    bo.set_defaults(func=cmd_bench_overlap)


def cmd_bench_overlap(args: argparse.Namespace) -> int:
    from pacs.bench.overlap import PARTS, run_overlap_bench

    report = run_overlap_bench(args.model, args.data, args.steps, args.engines, args.staleness,
                               args.max_response_length)  # fmt: skip
    atomic_write_json(args.out, report)
    print("| engine | " + " | ".join(PARTS) + " |")
    print("|---" * (len(PARTS) + 1) + "|")
    for engine, r in report["results"].items():
        print(f"| {engine} | " + " | ".join(f"{r['mean'][p]:.3f}" for p in PARTS) + " |")
    print("seconds per step, means over the steps after the first; model: max(generate + verify, old_logprobs + "
          f"update) + push\nwrote {args.out}")  # fmt: skip
    return 0


def add_parser(verbs) -> None:
    bench = verbs.add_parser("bench", help="speed measurements, written under results/bench/")
    what = bench.add_subparsers(dest="what", required=True)
    for add in (_add_verifier, _add_code, _add_train, _add_memory, _add_update, _add_generate, _add_gpu,
                _add_eval, _add_overlap):  # fmt: skip
        add(what)
