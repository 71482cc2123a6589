"""`pacs prepare-data`: hub and local sources to one schema, bad rows, duplicates, length filter, repeat."""

import json
import shutil

import pandas as pd
from helpers import EXPECTED_ROWS

from pacs.cli import main
from pacs.data.prepare import prepared_info
from pacs.data.schema import COLUMNS, INSTRUCTION, read_prepared

SHA256 = {"math500": "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132"}  # ../shared/data/SOURCES.md


def prepare(*args) -> int:
    return main(["prepare-data", *map(str, args)])


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_real_benchmarks_prepare_to_the_schema(prepared):
    for name, rows in EXPECTED_ROWS.items():
        frame = read_prepared(prepared / f"{name}.parquet")
        assert list(frame.columns) == list(COLUMNS)
        assert len(frame) == rows, name
        assert (frame["data_source"] == name).all()
        assert frame["index"].tolist() == list(range(rows))
        assert frame["id"].is_unique, name
        message = frame["prompt"].iloc[0]
        assert len(message) == 1 and message[0]["role"] == "user" and message[0]["content"].endswith(" " + INSTRUCTION)
        info = prepared_info(prepared / f"{name}.parquet")
        assert info["source"]["kind"] == "local" and info["rows_read"] == info["rows_written"] == rows
        assert info["bad_rows"] == 0 and info["too_long_dropped"] == 0
    assert prepared_info(prepared / "math500.parquet")["source"]["sha256"] == SHA256["math500"]
    golds = {n: read_prepared(prepared / f"{n}.parquet")["ground_truth"].tolist() for n in EXPECTED_ROWS}
    assert golds["aime2024"][7] == "25" and golds["amc23"][0] == "27"  # "025" and 27.0 in the files
    assert golds["aime2025"][:3] == ["70", "588", "16"]
    assert all(g.lstrip("-").isdigit() for g in golds["gsm8k"])  # "#### 1,450,000" → "1450000"
    assert golds["beyondaime"][:3] == ["3", "4", "9"] and golds["beyondaime"][-1] == "33124147"  # ints in the file


def test_a_hub_source_is_read_with_datasets_and_recorded(shared_data, tmp_path, monkeypatch):
    """The hub path through `datasets.load_dataset`, offline: a dataset directory stands in for the hub id."""
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "cache")
    hub = tmp_path / "zwhe99-amc23"
    hub.mkdir()
    shutil.copy(shared_data / "amc23.jsonl", hub / "test.jsonl")  # the hub copy's layout: split "test"
    (tmp_path / "spec.yaml").write_text(f"path: {hub}\nid_field: id\n")
    out = tmp_path / "amc23.parquet"
    assert prepare("--dataset", "amc23", "--spec", tmp_path / "spec.yaml", "--out", out) == 0
    local = tmp_path / "local.parquet"
    assert prepare("--dataset", "amc23", "--source", "local", "--data-dir", shared_data, "--out", local) == 0
    hub_frame, local_frame = read_prepared(out), read_prepared(local)
    assert len(hub_frame) == 40
    # the hub preset reads `question`, the local one `problem`: the same text in this copy
    assert hub_frame["ground_truth"].tolist() == local_frame["ground_truth"].tolist()
    assert hub_frame["prompt"].tolist() == local_frame["prompt"].tolist()
    source = prepared_info(out)["source"]
    assert source["kind"] == "hub" and source["hub_id"] == str(hub) and source["problem_field"] == "question"
    assert source["fingerprint"]


def test_a_field_mapping_reads_another_copy(shared_data, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("path: aime2024_maxwelljia.parquet\nproblem_field: Problem\nanswer_field: Answer\nid_field: ID\n")
    out = tmp_path / "aime.parquet"
    args = ["--dataset", "aime2024", "--source", "local", "--data-dir", shared_data, "--spec", spec, "--out", out]
    assert prepare(*args) == 0
    jsonl = tmp_path / "jsonl.parquet"
    assert prepare("--dataset", "aime2024", "--source", "local", "--data-dir", shared_data, "--out", jsonl) == 0
    assert sorted(read_prepared(out)["ground_truth"]) == sorted(read_prepared(jsonl)["ground_truth"])
    assert read_prepared(out)["id"].str.startswith("2024-").all()
    spec.write_text("path: aime2024.jsonl\nproblem_fild: problem\n")
    assert prepare(*args) == 2  # unknown key: an error, nothing written
    assert not (tmp_path / "other.parquet").exists()


def test_bad_rows_are_errors_naming_file_and_row_or_dropped_and_counted(tmp_path, capsys):
    src = write_jsonl(
        tmp_path / "bench.jsonl",
        [
            {"problem": "1 + 1?", "answer": "2"},
            {"problem": "   ", "answer": "3"},  # empty problem
            {"problem": "2 + 2?"},  # no answer field
            {"problem": "3 + 3?", "answer": ""},  # gold that cannot be normalised
            {"problem": "4 + 4?", "answer": 8.0},
        ],
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"kind: local\npath: {src}\nproblem_field: problem\nanswer_field: answer\n")
    out = tmp_path / "out.parquet"
    assert prepare("--dataset", "mine", "--spec", spec, "--out", out) == 2
    assert f"{src}: row 1: empty or non-text problem" in capsys.readouterr().err
    assert not out.exists() and not list(tmp_path.glob(".out.parquet*"))
    assert prepare("--dataset", "mine", "--spec", spec, "--out", out, "--bad-rows", "drop") == 0
    frame, info = read_prepared(out), prepared_info(out)
    assert frame["ground_truth"].tolist() == ["2", "8"] and frame["id"].tolist() == ["0", "4"]
    assert info["bad_rows"] == 3
    reasons = {b["row"]: b["reason"] for b in info["bad_rows_listed"]}
    assert "no field 'answer'" in reasons[2] and "gold is empty" in reasons[3]
    assert prepare("--dataset", "mine", "--source", "local", "--spec", tmp_path / "nope.yaml", "--out", out) == 2
    spec.write_text(f"kind: local\npath: {tmp_path / 'missing.jsonl'}\nproblem_field: p\nanswer_field: a\n")
    assert prepare("--dataset", "mine", "--spec", spec, "--out", out) == 2
    assert "missing.jsonl: no such file" in capsys.readouterr().err


def test_duplicates_are_reported_and_optionally_dropped(tmp_path, capsys):
    src = write_jsonl(
        tmp_path / "bench.jsonl",
        [
            {"q": "What is 1+1?", "a": 2},
            {"q": "Other", "a": 5},
            {"q": "What is  1+1? ", "a": 3},
            {"q": "Other", "a": 5},
        ],
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"kind: local\npath: {src}\nproblem_field: q\nanswer_field: a\n")
    out = tmp_path / "out.parquet"
    assert prepare("--dataset", "mine", "--spec", spec, "--out", out) == 0
    assert "2 duplicate problems kept (row 2 = row 0, row 3 = row 1)" in capsys.readouterr().out
    info = prepared_info(out)
    assert len(read_prepared(out)) == 4 and info["duplicates"] == 2
    assert [d["same_gold"] for d in info["duplicates_listed"]] == [False, True]  # a conflicting gold is visible
    assert prepare("--dataset", "mine", "--spec", spec, "--out", out, "--duplicates", "drop") == 0
    assert read_prepared(out)["id"].tolist() == ["0", "1"] and prepared_info(out)["duplicates_dropped"] == 2


def test_long_prompts_are_dropped_with_the_tokenizer_and_rows_repeated(raw_tiny_model, tmp_path):
    from transformers import AutoTokenizer

    from pacs.data.schema import prompt_token_ids

    rows = [{"q": f"What is {k} + {k}?" + " Think." * k, "a": 2 * k} for k in range(10)]
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"kind: local\npath: {write_jsonl(tmp_path / 'b.jsonl', rows)}\nproblem_field: q\nanswer_field: a\n"
    )
    out = tmp_path / "out.parquet"
    assert prepare("--dataset", "mine", "--spec", spec, "--out", out) == 0
    tokenizer = AutoTokenizer.from_pretrained(raw_tiny_model)
    lengths = [len(p) for p in prompt_token_ids(tokenizer, read_prepared(out)["prompt"])]
    limit = sorted(lengths)[len(lengths) // 2]
    args = ["--tokenizer", raw_tiny_model, "--max-prompt-length", limit, "--repeat", 3]
    assert prepare("--dataset", "mine", "--spec", spec, *args, "--out", out) == 0
    frame, info = read_prepared(out), prepared_info(out)
    kept = [str(i) for i, n in enumerate(lengths) if n <= limit]
    assert 0 < len(kept) < len(lengths) and info["too_long_dropped"] == len(lengths) - len(kept)
    assert frame["id"].tolist() == kept * 3 and frame["index"].tolist() == list(range(3 * len(kept)))
    assert prepare("--dataset", "mine", "--spec", spec, "--max-prompt-length", 10, "--out", out) == 2  # no tokenizer


# Qwen3's switch, as its template writes it: thinking unless enable_thinking is false
THINKING_SWITCH = (
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
)


def test_a_system_prompt_and_the_chat_templates_variables(raw_tiny_model, tmp_path):
    """PACS v2's prompt: a system message before the problem; the chat template's variables (Qwen3's
    enable_thinking) reach the prompt text wherever it is built: the length filter, training, evaluation."""
    from transformers import AutoTokenizer

    from pacs.data.schema import prompt_texts
    from pacs.eval.config import EvalConfig
    from pacs.train.loop import load_prompts

    rows = [{"q": f"What is {k} + {k}?" + " Think." * k, "a": 2 * k} for k in range(6)]
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"kind: local\npath: {write_jsonl(tmp_path / 'b.jsonl', rows)}\nproblem_field: q\nanswer_field: a\n"
    )
    system = ["--system-prompt", "You are a helpful assistant."]
    out = tmp_path / "out.parquet"
    assert prepare("--dataset", "mine", "--spec", spec, *system, "--out", out) == 0
    messages = read_prepared(out)["prompt"].iloc[2]
    assert [m["role"] for m in messages] == ["system", "user"] and messages[0]["content"] == system[1]
    assert messages[1]["content"] == f"What is 2 + 2? Think. Think. {INSTRUCTION}"
    assert prepared_info(out)["options"]["system_prompt"] == system[1]

    switched = tmp_path / "switched"
    tokenizer = AutoTokenizer.from_pretrained(raw_tiny_model)
    tokenizer.chat_template += THINKING_SWITCH
    tokenizer.save_pretrained(switched)
    thinking, plain = (
        prompt_texts(tokenizer, read_prepared(out)["prompt"], kw) for kw in ({}, {"enable_thinking": False})
    )
    assert thinking[2].startswith(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2"
    )
    assert thinking[2].endswith("<|im_start|>assistant\n") and plain[2] == thinking[2] + "<think>\n\n</think>\n\n"
    on = [len(p) for p in load_prompts([str(out)], tokenizer, 10_000, {"enable_thinking": True}).token_ids]
    off = [len(p) for p in load_prompts([str(out)], tokenizer, 10_000, {"enable_thinking": False}).token_ids]
    assert len({b - a for a, b in zip(on, off, strict=True)}) == 1 and off[0] > on[0]  # the same block on each
    limit = sorted(off)[2]  # measured with the block: half the prompts are too long; without it fewer are
    args = [*system, "--tokenizer", switched, "--max-prompt-length", limit]
    for kwargs, lengths in (([], on), (["--chat-template-kwargs", '{"enable_thinking": false}'], off)):
        assert prepare("--dataset", "mine", "--spec", spec, *args, *kwargs, "--out", out) == 0
        assert prepared_info(out)["too_long_dropped"] == sum(n > limit for n in lengths)
    assert sum(n > limit for n in off) > sum(n > limit for n in on)
    assert EvalConfig(chat_template_kwargs={"enable_thinking": True}).chat_template_kwargs == {"enable_thinking": True}


def test_toy_task_through_prepare_data_equals_toy_data(toy_data, tmp_path):
    for split in ("train", "heldout"):
        out = tmp_path / f"{split}.parquet"
        assert prepare("--dataset", f"toy_{split}", "--out", out) == 0
        pd.testing.assert_frame_equal(read_prepared(out), read_prepared(toy_data / f"{split}.parquet"))
        assert prepared_info(out)["source"] == {"kind": "toy", "seed": 0, "train_size": 4000, "heldout_size": 200,
                                                 "split": split}  # fmt: skip
