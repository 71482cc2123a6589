import json

import pandas as pd
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from pacs.data.schema import COLUMNS, INSTRUCTION, prompt_texts, read_prepared
from pacs.data.toy import toy_addition
from pacs.models.tiny import train_tokenizer


def test_toy_task_is_deterministic_disjoint_and_in_the_schema(toy_data):
    a, b = ({s: f for s, (f, _) in toy_addition(7, 300, 50).items()} for _ in range(2))
    pd.testing.assert_frame_equal(a["train"], b["train"])
    assert not toy_addition(8, 300, 50)["train"][0]["id"].equals(a["train"]["id"])
    assert not set(a["train"]["id"]) & set(a["heldout"]["id"])
    frame = read_prepared(toy_data / "train.parquet")
    assert tuple(frame.columns) == COLUMNS and len(frame) == 4000
    row = frame.iloc[0]
    x, y = map(int, row["id"].split("+"))
    assert row["ground_truth"] == str(x + y)
    assert list(row["prompt"][0].keys()) == ["role", "content"] and row["prompt"][0]["content"].endswith(INSTRUCTION)


def test_tokenizer_reloads_identically_and_isolates_digits(raw_tiny_model, toy_data, tmp_path):
    frame = read_prepared(toy_data / "train.parquet")
    trained = train_tokenizer([m[0]["content"] for m in frame["prompt"][:500]] + ["user\nassistant\n"], 512)
    trained.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    samples = [*prompt_texts(trained, frame["prompt"][:20]), "\\boxed{1234}<|im_end|>", "What is 98 + 7?  \n x"]
    for text in samples:
        assert reloaded(text)["input_ids"] == trained(text)["input_ids"], text

    tokenizer = AutoTokenizer.from_pretrained(raw_tiny_model)
    text = prompt_texts(tokenizer, read_prepared(toy_data / "heldout.parquet")["prompt"][:1])[0]
    assert text.startswith("<|im_start|>user\nWhat is") and text.endswith("<|im_start|>assistant\n")
    ids = tokenizer(text + "\\boxed{123}<|im_end|>", add_special_tokens=False)["input_ids"]
    tokens = tokenizer.convert_ids_to_tokens(ids)
    assert tokens[0] == "<|im_start|>" and tokens[-1] == "<|im_end|>"
    assert ["1", "2", "3"] == tokens[-5:-2]  # every digit its own token
    assert tokenizer.decode(ids) == text + "\\boxed{123}<|im_end|>"
    assert tokenizer.decode(ids, skip_special_tokens=True).endswith("\\boxed{123}")


def test_tiny_model_is_vllm_servable_and_warm_started_into_the_rl_range(tiny_model):
    config = AutoConfig.from_pretrained(tiny_model)
    assert config.model_type == "qwen2" and config.hidden_size // config.num_attention_heads == 64
    history = json.loads((tiny_model / "warm_start.json").read_text())["heldout_accuracy"]
    assert history[0][1] < 0.1  # it learned the task in the warm start, it did not start there
    assert 0.2 <= history[-1][1] <= 0.7
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    assert model.generation_config.eos_token_id == [
        AutoTokenizer.from_pretrained(tiny_model).convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")
    ]
    assert sum(p.numel() for p in model.parameters()) < 1_000_000
    assert all(torch.isfinite(p).all() for p in model.parameters())
