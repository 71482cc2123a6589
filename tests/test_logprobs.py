"""Chunked log-probs against the full logits, their memory, a group's shared prompt against whole rows, and the
token-budget packing of groups."""

import pytest
import torch

from pacs.bench.memory import measure_in_fresh_process, padding
from pacs.tensors.batch import token_logprobs
from pacs.tensors.logprobs import ChunkedLogprobs, PolicyScorer, chunked_entropy
from pacs.train.update.packing import cost, deal, equalize, fixed_plan, pack


def test_chunked_logprobs_and_entropy_equal_the_full_computation():
    torch.manual_seed(0)
    hidden = torch.randn(37, 16, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(50, 16, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 50, (37,))
    upstream = torch.randn(37, dtype=torch.float64)
    full = torch.log_softmax((hidden @ weight.T) / 0.7, -1)
    expected = full.gather(-1, targets[:, None]).squeeze(-1)
    grads = torch.autograd.grad((expected * upstream).sum(), (hidden, weight), retain_graph=True)
    chunked = ChunkedLogprobs.apply(hidden, weight, targets, 0.7, 8)  # 37 rows: a short last chunk
    torch.testing.assert_close(chunked, expected.float(), atol=1e-5, rtol=0)
    for got, want in zip(torch.autograd.grad((chunked * upstream).sum(), (hidden, weight)), grads, strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-4)  # the logits are fp32, as in the full path
    entropy = -(full.exp() * full).sum(-1)
    torch.testing.assert_close(chunked_entropy(hidden, weight, 0.7, 8, grad=False), entropy.float(), atol=1e-5, rtol=0)
    with_grad = chunked_entropy(hidden, weight, 0.7, 8, grad=True)
    want = torch.autograd.grad(entropy.sum(), weight)[0]
    torch.testing.assert_close(torch.autograd.grad(with_grad.sum(), weight)[0], want, atol=1e-5, rtol=1e-4)


def test_the_lm_head_gradient_from_bf16_operands_is_the_fp32_products_sum_on_cpu():
    """``accumulate_head_grad``'s CPU path (the operands upcast, one fp32 GEMM): within ``fp32_sum_bound`` of
    the exact sum, as the GPU suite holds its CUDA GEMM to; a result rounded through bf16 is not."""
    from helpers import fp32_sum_bound

    from pacs.tensors.logprobs import accumulate_head_grad

    g, rows = torch.Generator().manual_seed(0), 1024
    hidden, dlogits = (torch.randn(rows, width, generator=g).bfloat16() for width in (64, 512))
    grad = torch.randn(512, 64, generator=g)
    exact = grad.double() + dlogits.T.double() @ hidden.double()
    bound = fp32_sum_bound(grad.double().abs() + dlogits.T.double().abs() @ hidden.double().abs(), rows + 1)
    accumulate_head_grad(grad, dlogits, hidden)
    assert grad.dtype == torch.float32 and ((grad.double() - exact).abs() <= bound).all()
    assert ((exact.bfloat16().double() - exact).abs() > bound).any()


def test_chunked_logprobs_need_a_fraction_of_the_memory():
    """Peak RSS of fresh processes, above what the inputs alone take: 2 × 1024 positions, a 32,768-token
    vocabulary (256 MB of fp32 logits); measured 793 MB for the full path and 128 MB in chunks of 256."""
    size = dict(rows=2, length=1024, vocab=32768, hidden=256, chunk_size=256)
    base, full, chunked = (measure_in_fresh_process(m, **size)["peak_bytes"] for m in ("inputs", "full", "chunked"))
    assert full - base > 4 * (chunked - base), (base, full, chunked)


def test_token_budget_packs_whole_groups_and_ranks_stay_in_step():
    n = 4
    prompt = torch.full((12 * n,), 10)
    response = torch.tensor([length for length in (5, 40, 12, 3, 30, 8, 20, 2, 50, 6, 9, 1) for _ in range(n)])
    plan = pack(list(range(12)), prompt, response, n, budget=200)
    assert sorted(g for m in plan for g in m.groups) == list(range(12))  # every group once, never split
    assert all(len(m.rows(n)) % n == 0 and m.rows(n).tolist() == [g * n + j for g in m.groups for j in range(n)]
               for m in plan)  # fmt: skip
    assert all(len(m.groups) == 1 or cost(m.groups, prompt, response, n) <= 200 for m in plan)
    assert cost([0, 1], prompt, response, n) == 2 * n * (10 + 40)  # rows × (longest prompt + longest response)
    assert len(plan) < len(fixed_plan(12, 1))
    ranks = deal(12, prompt, response, n, 2)
    assert sorted(ranks[0] + ranks[1]) == list(range(12))
    costs = [n * int(prompt[g * n] + response[g * n]) for g in range(12)]
    loads = [sum(costs[g] for g in r) for r in ranks]
    assert abs(loads[0] - loads[1]) <= max(costs)  # greedy by tokens: within one group of each other
    more = equalize(plan[:2], 5, prompt, response, n)
    assert len(more) == 5 and sorted(g for m in more if m.scale for g in m.groups) == sorted(
        g for m in plan[:2] for g in m.groups
    )  # split, then weight-0 fillers: no group counted twice


def test_padding_report_counts_tokens_both_ways():
    n = 2
    prompt, response = [10] * 8, [100, 100, 5, 5, 100, 100, 5, 5]
    report = padding(prompt, response, n, micro_batch_size=2, budget=230)
    assert report["real_tokens"] == 8 * 10 + 4 * 100 + 4 * 5
    assert report["fixed_tokens"] == 2 * 4 * 110  # each micro-batch of a long and a short group, padded to 110
    # the long groups alone (2 × 220), the two short ones together (60): no padding left
    assert report["budget_tokens"] == 500 and report["budget_micro_batches"] == 3
    assert report["padding_removed_frac"] == 1.0


def _grouped_batch(n: int, seed: int = 0):
    """Groups of n responses to one prompt each, prompts and responses of different lengths (padding both ways)."""
    from pacs.rollout import Completion
    from pacs.tensors.batch import rollout_batch

    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(1, 64, (length,), generator=g).tolist() for length in (5, 9, 3)]
    groups = [[Completion(tuple(torch.randint(1, 64, (int(torch.randint(1, 7, (1,), generator=g)),),
                                              generator=g).tolist()), "", "stop") for _ in range(n)]
              for _ in prompts]  # fmt: skip
    return rollout_batch(prompts, groups, 0)


def _small_qwen2(**overrides):
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    size = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    return Qwen2ForCausalLM(Qwen2Config(**{**size, **overrides}, num_key_value_heads=2, tie_word_embeddings=False))


@pytest.mark.parametrize("chunk_size", [4, None])
def test_shared_prompts_and_packed_rows_give_what_whole_padded_rows_give(chunk_size):
    """Each group's prompt through the decoder once (keys and values read by its n responses), and the rows
    packed into one sequence without padding (each row whole, or each group's prompt once), against every
    row whole and padded: the same log-probs, entropy and gradients, with and without activation
    checkpointing."""
    n, batch = 4, _grouped_batch(4)
    model = _small_qwen2()
    upstream = torch.randn(batch["response_mask"].shape, generator=torch.Generator().manual_seed(1))

    def run(share: bool, pack: bool = False, checkpointing: bool = False):
        model.zero_grad()
        if checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        scorer = PolicyScorer(model, chunk_size, share_prompt=share, pack=pack)
        logprobs, entropy = token_logprobs(scorer, batch, 0.7, "grad", n)
        ((logprobs + 0.1 * entropy) * upstream).sum().backward()
        if checkpointing:
            model.gradient_checkpointing_disable()
        return logprobs.detach(), entropy.detach(), {k: p.grad.clone() for k, p in model.named_parameters()}

    whole = run(share=False)
    others = {"shared": run(share=True), "shared, checkpointed": run(share=True, checkpointing=True),
              "packed": run(share=False, pack=True), "packed shared": run(share=True, pack=True),
              "packed shared, checkpointed": run(share=True, pack=True, checkpointing=True)}  # fmt: skip
    assert model.config._attn_implementation == "pacs_varlen"
    for layout, other in others.items():
        torch.testing.assert_close(other[0], whole[0], atol=1e-5, rtol=0, msg=layout)
        torch.testing.assert_close(other[1], whole[1], atol=1e-5, rtol=0, msg=layout)
        for name, grad in whole[2].items():
            torch.testing.assert_close(other[2][name], grad, atol=1e-5, rtol=1e-4, msg=f"{layout}: {name}")
    assert (whole[0] != 0).sum() == batch["response_mask"].sum()  # every response token scored


def test_packed_rows_hold_the_real_tokens_only():
    from pacs.tensors.varlen import PackedRows

    n, batch = 4, _grouped_batch(4)
    prompt = batch["attention_mask"].sum(-1) - batch["response_mask"].sum(-1)
    response = batch["response_mask"].sum(-1)
    layouts = [PackedRows.of(batch["input_ids"], batch["attention_mask"], batch["response_mask"], g) for g in (1, n)]
    whole, shared = ({**p.inputs(batch["input_ids"], batch["position_ids"]), "layout": p} for p in layouts)
    assert whole["input_ids"].shape[1] == int((prompt + response).sum())  # no padding
    assert len(layouts[0].sizes) == len(prompt) and layouts[0].context == [None] * len(prompt)
    assert shared["input_ids"].shape[1] == int(prompt[::n].sum() + response.sum())  # each prompt once
    sizes, context = layouts[1].sizes, layouts[1].context
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    for start, c in zip(starts, context, strict=True):  # responses start where their prompt ends
        if c is not None:
            assert shared["position_ids"][0, start] == shared["position_ids"][0, starts[c] + sizes[c] - 1] + 1
    # every response token is predicted from the position before it: its row's, or its group's prompt's last
    width_t = batch["response_mask"].shape[1]
    targets = batch["input_ids"][:, -width_t:][batch["response_mask"]]
    target_positions = batch["position_ids"][:, -width_t:][batch["response_mask"]]
    assert (whole["input_ids"][0, layouts[0].hidden_index + 1] == targets).all()
    for packed in (whole, shared):
        layout = packed["layout"]
        assert (packed["position_ids"][0, layout.hidden_index] + 1 == target_positions).all()
        assert (batch["input_ids"].reshape(-1)[layout.target_index] == targets).all()
        assert (batch["response_mask"].reshape(-1)[layout.response_index]).all()
        assert len(layout.response_index) == int(response.sum())
    with pytest.raises(ValueError, match="groups of 3"):  # 12 rows as groups of 3 mix two prompts
        PackedRows.of(batch["input_ids"], batch["attention_mask"], batch["response_mask"], 3)


def _random_layouts(count: int, seed: int = 0):
    """Segment layouts as packing makes them: whole rows, or groups of a prompt and its responses."""
    import random

    rng = random.Random(seed)
    for _ in range(count):
        n, sizes, context = rng.choice([1, 2, 4]), [], []
        for _ in range(rng.randint(1, 4)):
            prompt = len(sizes)
            sizes.append(rng.randint(1, 400 if n == 1 else 300))
            context.append(None)
            for _ in range(n if n > 1 else 0):
                sizes.append(rng.randint(1, 300))
                context.append(prompt)
        yield sizes, context


def test_the_block_mask_of_a_layout_is_torchs_without_evaluating_every_pair():
    """``segment_block_mask`` reads the segments' intervals on the host: the same partial and full blocks as
    torch's create_block_mask, which evaluates the mask at every (query, key) pair, on random layouts."""
    from torch.nn.attention.flex_attention import create_block_mask

    from pacs.tensors.varlen import segment_block_mask, segment_mask_mod

    for sizes, context in _random_layouts(60):
        length = sum(sizes)
        segment = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))
        ctx = torch.tensor([-1 if c is None else c for c in context])
        want = create_block_mask(segment_mask_mod(segment, ctx), 1, 1, length, length, device="cpu")
        got = segment_block_mask(sizes, context, "cpu")
        for counts, indices in (("kv_num_blocks", "kv_indices"), ("full_kv_num_blocks", "full_kv_indices")):
            assert torch.equal(getattr(got, counts), getattr(want, counts)), (sizes, context, counts)
            for q, c in enumerate(getattr(want, counts)[0, 0].tolist()):
                blocks = [set(getattr(x, indices)[0, 0, q, :c].tolist()) for x in (got, want)]
                assert blocks[0] == blocks[1], (sizes, context, indices, q)
        assert torch.equal(got.to_dense(), want.to_dense())


def test_one_flex_attention_call_equals_the_per_segment_calls():
    """The CUDA kernel's path (FlexAttention over the layout's block mask, one call, GQA unexpanded) against
    one SDPA call per segment, here in FlexAttention's eager reference (no backward on CPU)."""
    from pacs.tensors.varlen import PackedRows, varlen_attention

    g = torch.Generator().manual_seed(0)
    response = [7, 0, 30, 140, 3, 60, 1, 200]  # an empty response too
    for n, prompt in ((1, [5, 9] * 4), (4, [5] * 4 + [9] * 4)):
        layouts = [PackedRows(prompt, response, 9, 200, n, kernel) for kernel in ("segments", "flex")]
        q, k, v = (torch.randn(1, heads, layouts[0].length, 16, generator=g) for heads in (4, 2, 2))
        with torch.no_grad():
            per_segment, flex = (varlen_attention(None, q, k, v, None, 0.25, packed=p)[0] for p in layouts)
        torch.testing.assert_close(flex, per_segment, atol=1e-5, rtol=1e-5)


def test_prompt_sharing_refuses_what_it_cannot_share():
    model = _small_qwen2()
    batch = _grouped_batch(4)
    scorer = PolicyScorer(model, 4, share_prompt=True)
    with pytest.raises(ValueError, match="groups of 3"):  # 12 rows as groups of 3 mix two prompts
        token_logprobs(scorer, batch, 1.0, None, 3)
    with pytest.raises(ValueError, match="trainer.share_prompt"):
        PolicyScorer(_small_qwen2(attn_implementation="eager"), 4, share_prompt=True)


def test_packed_critic_values_and_gradients_equal_the_padded_ones():
    from transformers import Qwen2Config, Qwen2ForTokenClassification

    from pacs.tensors.batch import token_values
    from pacs.tensors.varlen import use_varlen_attention

    n, batch = 4, _grouped_batch(4, seed=3)
    torch.manual_seed(0)
    size = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
    config = Qwen2Config(**size, num_key_value_heads=2, num_labels=1, classifier_dropout=0.0)
    critic = Qwen2ForTokenClassification(config)
    mask = batch["response_mask"]
    upstream = torch.randn(mask.shape, generator=torch.Generator().manual_seed(2))

    def run(pack: bool, group_size: int = 1):
        critic.zero_grad()
        values = token_values(critic, batch, pack, group_size)
        (torch.where(mask, values, 0.0) * upstream).sum().backward()
        return torch.where(mask, values, 0.0).detach(), {k: p.grad.clone() for k, p in critic.named_parameters()}

    padded = run(False)
    use_varlen_attention(critic)
    for group_size in (1, n):
        values, grads = run(True, group_size)
        torch.testing.assert_close(values, padded[0], atol=1e-5, rtol=0)
        for name, grad in padded[1].items():
            torch.testing.assert_close(grads[name], grad, atol=1e-5, rtol=1e-4, msg=f"groups of {group_size}: {name}")


@pytest.mark.slow
def test_compiled_decoder_layers_give_the_eager_log_probs_and_gradients():
    """trainer.compile (``pacs.train.update.models.spread``: each decoder layer compiled with dynamic shapes, the
    packed attention left eager) under activation checkpointing: the eager log-probs and gradients, on two
    micro-batches of different lengths, and a 12-layer model compiled once: Dynamo's graphs are as many after
    the first micro-batch as after the last, and fewer than the layers (no layer compiles anew)."""
    from torch._dynamo.utils import counters

    from pacs.ranks.distributed import DistEnv
    from pacs.train.settings.config import TrainerConfig
    from pacs.train.update.models import scorer_of, spread

    n, model = 4, _small_qwen2(num_hidden_layers=12)
    eager, compiled = (TrainerConfig(gradient_checkpointing=True, compile=c) for c in (False, True))

    def run(scorer, batch):
        scorer.zero_grad()
        logprobs, _ = token_logprobs(scorer, batch, 1.0, None, n)
        logprobs.sum().backward()
        return logprobs.detach(), {k: p.grad.clone() for k, p in scorer.named_parameters()}

    batches = [_grouped_batch(n, seed) for seed in (0, 5)]
    want = [run(spread(scorer_of(model, eager), eager, DistEnv()), b) for b in batches]
    torch._dynamo.reset()
    counters.clear()
    scorer = spread(scorer_of(model, compiled), compiled, DistEnv())
    assert all(layer._compiled_call_impl is not None for layer in model.model.layers)
    graphs = []
    for batch, (logprobs, grads) in zip(batches, want, strict=True):
        got = run(scorer, batch)
        graphs.append(counters["stats"]["unique_graphs"])
        torch.testing.assert_close(got[0], logprobs, atol=1e-5, rtol=0)
        for name, grad in grads.items():
            torch.testing.assert_close(got[1][name], grad, atol=1e-5, rtol=1e-4, msg=name)
    assert 0 < graphs[0] == graphs[-1] < len(model.model.layers), graphs
