"""Multiple choice as GLM-4.5's toolkit scores GPQA: the answer line read, the choices shuffled, GPQA Diamond
prepared (hub or local CSV), the toy choice task, and an evaluation's numbers on choice rows.

No real GPQA question appears here (its authors ask that none be put online): the rows are made up in its
CSV format. The toolkit's permutations are computed here from ``random.Random`` as its gpqa_eval.py draws them.
"""

import random

import pandas as pd
import pytest

from pacs.cli import main
from pacs.data.gpqa import HUB_CONFIG, HUB_ID, HUB_SPLIT, LOCAL_FILE
from pacs.data.prepare import prepared_info
from pacs.data.schema import COLUMNS, read_prepared
from pacs.data.toy_choice import TOY_INSTRUCTION, toy_choice, toy_choice_solution
from pacs.eval.greedy import score_completions
from pacs.eval.metrics import eval_metrics
from pacs.eval.run import response_frame
from pacs.rollout import Completion
from pacs.verify import CHOICE_STATUSES, VerifierPool, extract_choice, score_choice, status_counts

# the toolkit's query (evals/gpqa_eval.py, QUERY_TEMPLATE), written out here to check ours against
INSTRUCTION = (
    "Answer the following multiple choice question. The last line of your response should be of the following "
    "format: 'ANSWER: $LETTER' (without quotes) where LETTER is one of ABCD. Think step by step before answering."
)
CHOICES = ("Correct Answer", "Incorrect Answer 1", "Incorrect Answer 2", "Incorrect Answer 3")


def toolkit_permutations(rows: int, copies: int = 1, seed: int = 0) -> list[list[int]]:
    """gpqa_eval.py: ``examples * n_repeats``, then one ``rng.sample(range(4), 4)`` per example in order."""
    rng = random.Random(seed)
    return [rng.sample(range(4), 4) for _ in range(rows * copies)]


def question(i: int) -> dict:
    """A made-up row in GPQA's CSV format: commas, quotes, a line break and a brace in the texts."""
    return {
        "Pre-Revision Question": "unused",
        "Question": f'Question {i}: which value, "exactly", holds?\nGiven {{x}} = {i}.',
        "Correct Answer": f"right {i}",
        "Incorrect Answer 1": f"wrong {i}.1",
        "Incorrect Answer 2": f"wrong {i}.2, with a comma",
        "Incorrect Answer 3": f" wrong {i}.3",
        "Record ID": f"rec{i:03d}",
        "High-level domain": "Physics" if i % 2 else "Chemistry",
    }


def shown(prompt: str) -> dict[str, str]:
    """The choices as the prompt shows them: {"A": text, ...}, from its last four lines."""
    return {line[0]: line[3:] for line in prompt.split("\n")[-4:]}


@pytest.fixture
def gpqa_dir(tmp_path):
    root = tmp_path / "gpqa"
    root.mkdir()
    pd.DataFrame([question(i) for i in range(6)]).to_csv(root / LOCAL_FILE, index=False)
    return root


def prepare(*args) -> int:
    return main(["prepare-data", "--dataset", "gpqa", *map(str, args)])


def test_the_answer_line_is_read_as_the_toolkit_reads_it():
    assert extract_choice("Reasoning...\nANSWER: B") == "B"
    assert extract_choice("answer: C") == "C" and extract_choice("Answer :\n D.") == "D"  # keyword case, spaces
    assert extract_choice("ANSWER: b") == "b"  # (?i) admits it; compared as written, so wrong
    assert extract_choice("ANSWER: Because A is right") == "B"  # no end of line is asked for
    assert extract_choice("The answer is B.") is None and extract_choice("ANSWER: E") is None
    assert extract_choice("ANSWER: A\nno, wait.\nANSWER: C") == "A"  # the first match in the kept tail (re.search)
    assert extract_choice("ANSWER: A\n" + "x" * 2000 + "\nANSWER: C") == "C"  # an earlier one is cut off
    line = "ANSWER: D"
    assert extract_choice(line + "x" * (1024 - len(line))) == "D"  # the last 1,024 characters, exactly
    assert extract_choice(line + "x" * (1025 - len(line))) is None
    assert extract_choice("<think>ANSWER: A</think>So:\nANSWER: B") == "B"  # the reasoning is not the content
    assert extract_choice("<think>ANSWER: A</think>I cannot tell.") is None


def test_scores_through_the_pool_with_statuses():
    golds = ["A", "B", "C", "D", "A"]
    answers = ["ANSWER: A", "ANSWER: C", "no idea", "answer: D", "ANSWER: a"]
    with VerifierPool(workers=1) as pool:
        verdicts = pool.score(golds, answers, "choice")
        with pytest.raises(ValueError, match=r"multiple-choice gold 'E' is not one of"):
            pool.score(["E"], ["ANSWER: A"], "choice")
    assert [v.status for v in verdicts] == ["correct", "wrong", "no_answer", "correct", "wrong"]
    assert [v.score for v in verdicts] == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert [v.extracted for v in verdicts] == ["A", "C", "", "D", "a"]
    assert status_counts(verdicts, "choice") == {"correct": 2, "wrong": 2, "no_answer": 1}
    assert score_choice("B", "ANSWER: B") == verdicts[0]._replace(extracted="B")
    assert CHOICE_STATUSES == ("correct", "wrong", "no_answer")


def test_gpqa_csv_becomes_choice_rows_shuffled_as_the_toolkit_does(gpqa_dir, tmp_path):
    out = tmp_path / "gpqa.parquet"
    system = "You are a helpful assistant."
    assert prepare("--source", "local", "--data-dir", gpqa_dir, "--system-prompt", system, "--out", out) == 0
    frame = read_prepared(out)
    assert list(frame.columns) == [*COLUMNS, "permutation", "shuffle", "domain"]
    assert (frame["task"] == "choice").all() and (frame["data_source"] == "gpqa").all()
    assert frame["id"].tolist() == [f"rec{i:03d}" for i in range(6)] and (frame["shuffle"] == 0).all()
    assert frame["domain"].tolist() == ["Chemistry", "Physics"] * 3
    expected = toolkit_permutations(6)
    assert [list(p) for p in frame["permutation"]] == expected
    for i, row in frame.iterrows():
        messages = row["prompt"]
        assert [m["role"] for m in messages] == ["system", "user"] and messages[0]["content"] == system
        source = question(i)
        texts = [source[f] for f in CHOICES]
        order = [texts[j] for j in expected[i]]
        assert messages[1]["content"] == (
            f"{INSTRUCTION}\n\n{source['Question']}\n\n"
            + "\n".join(f"{letter}) {text}" for letter, text in zip("ABCD", order, strict=True))
        )
        assert shown(messages[1]["content"])[row["ground_truth"]] == source["Correct Answer"]
    assert len(set(frame["ground_truth"])) > 1
    info = prepared_info(out)
    assert info["task"] == "choice" and info["rows_written"] == 6
    source = info["source"]
    assert source["kind"] == "local" and source["file"] == str((gpqa_dir / LOCAL_FILE).resolve())
    assert len(source["sha256"]) == 64 and source["seed"] == 0 and source["shuffles"] == 1

    parquet = tmp_path / "rows.parquet"  # a .parquet or .csv file given itself
    pd.read_csv(gpqa_dir / LOCAL_FILE, dtype=str, keep_default_na=False).to_parquet(parquet)
    again = tmp_path / "again.parquet"
    assert prepare("--source", "local", "--data-dir", parquet, "--system-prompt", system, "--out", again) == 0
    pd.testing.assert_frame_equal(frame, read_prepared(again))


def test_shuffles_are_the_toolkits_repeats_each_with_its_own_permutation(gpqa_dir, tmp_path):
    out = tmp_path / "gpqa.parquet"
    assert prepare("--source", "local", "--data-dir", gpqa_dir, "--shuffles", "3", "--out", out) == 0
    frame = read_prepared(out)
    assert len(frame) == 18 and frame["shuffle"].tolist() == [c for c in range(3) for _ in range(6)]
    assert frame["id"].tolist() == [f"rec{i:03d}" for i in range(6)] * 3
    assert [list(p) for p in frame["permutation"]] == toolkit_permutations(6, 3)
    for _, row in frame.iterrows():
        assert shown(row["prompt"][0]["content"])[row["ground_truth"]] == question(int(row["id"][3:]))["Correct Answer"]
    seeded = tmp_path / "seeded.parquet"
    assert prepare("--source", "local", "--data-dir", gpqa_dir, "--seed", "5", "--out", seeded) == 0
    assert [list(p) for p in read_prepared(seeded)["permutation"]] == toolkit_permutations(6, seed=5)


def test_bad_gpqa_rows_name_the_row_or_are_dropped_and_counted(gpqa_dir, tmp_path, capsys):
    rows = [question(i) for i in range(6)]
    rows[2]["Incorrect Answer 2"] = ""
    rows[4]["Question"] = "  "
    pd.DataFrame(rows).to_csv(gpqa_dir / LOCAL_FILE, index=False)
    out = tmp_path / "gpqa.parquet"
    assert prepare("--source", "local", "--data-dir", gpqa_dir, "--out", out) == 2
    assert f"{gpqa_dir / LOCAL_FILE}: row 2: empty or non-text 'Incorrect Answer 2'" in capsys.readouterr().err
    assert not out.exists()
    assert prepare("--source", "local", "--data-dir", gpqa_dir, "--bad-rows", "drop", "--out", out) == 0
    frame, info = read_prepared(out), prepared_info(out)
    assert frame["id"].tolist() == ["rec000", "rec001", "rec003", "rec005"]
    assert info["bad_rows"] == 2 and [b["row"] for b in info["bad_rows_listed"]] == [2, 4]
    assert "empty or non-text 'Question'" in info["bad_rows_listed"][1]["reason"]
    expected = toolkit_permutations(6)  # a dropped row still drew its permutation
    assert [list(p) for p in frame["permutation"]] == [expected[i] for i in (0, 1, 3, 5)]


def test_gpqa_from_the_hub_and_its_gated_error(gpqa_dir, tmp_path, monkeypatch, capsys):
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    asked = []

    def load(path, name=None, split=None, revision=None):
        asked.append((path, name, split, revision))
        return datasets.Dataset.from_list([question(i) for i in range(3)])

    monkeypatch.setattr(datasets, "load_dataset", load)
    out = tmp_path / "gpqa.parquet"
    assert prepare("--out", out) == 0
    assert asked == [(HUB_ID, HUB_CONFIG, HUB_SPLIT, None)] and HUB_CONFIG == "gpqa_diamond" and HUB_SPLIT == "train"
    assert [list(p) for p in read_prepared(out)["permutation"]] == toolkit_permutations(3)
    source = prepared_info(out)["source"]
    assert source["kind"] == "hub" and source["hub_id"] == "Idavidrein/gpqa" and source["fingerprint"]

    def refused(*args, **kwargs):
        raise DatasetNotFoundError(f"Dataset '{HUB_ID}' is a gated dataset on the Hub. You must be authenticated.")

    monkeypatch.setattr(datasets, "load_dataset", refused)
    out.unlink()
    assert prepare("--out", out) == 2
    err = capsys.readouterr().err
    assert f"{HUB_ID} is a gated dataset" in err and f"https://huggingface.co/datasets/{HUB_ID}" in err
    assert "HF_TOKEN" in err and "huggingface-cli login" in err and "You must be authenticated" in err
    assert "--source local" in err and not out.exists()

    def forbidden(*args, **kwargs):  # the hub's own error, as a data file's download raises it
        import httpx
        from huggingface_hub.errors import GatedRepoError

        response = httpx.Response(403, request=httpx.Request("GET", f"https://huggingface.co/datasets/{HUB_ID}"))
        raise GatedRepoError("Access to this dataset is restricted.", response=response)

    monkeypatch.setattr(datasets, "load_dataset", forbidden)
    assert prepare("--out", out) == 2
    err = capsys.readouterr().err
    assert f"{HUB_ID} is a gated dataset" in err and "Access to this dataset is restricted." in err

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach the Hub")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(ConnectionError, match="Couldn't reach"):  # not an access problem: not called one
        prepare("--out", out)


def test_dataset_options_are_errors_elsewhere(gpqa_dir, tmp_path, capsys):
    out = tmp_path / "x.parquet"
    assert main(["prepare-data", "--dataset", "math500", "--shuffles", "8", "--out", str(out)]) == 2
    assert "--shuffles: for --dataset gpqa only, not 'math500'" in capsys.readouterr().err
    assert prepare("--source", "local", "--data-dir", gpqa_dir, "--prompt-style", "glm_cot", "--out", out) == 2
    assert "--prompt-style: for --dataset livecodebench only, not 'gpqa'" in capsys.readouterr().err
    assert prepare("--source", "local", "--data-dir", gpqa_dir, "--shuffles", "0", "--out", out) == 2
    assert "shuffles must be >= 1" in capsys.readouterr().err
    assert prepare("--source", "local", "--out", out) == 2
    assert "gpqa --source local needs --data-dir" in capsys.readouterr().err
    assert prepare("--source", "local", "--data-dir", tmp_path, "--out", out) == 2
    assert f"{tmp_path / LOCAL_FILE}: no such file" in capsys.readouterr().err
    assert not out.exists()


def test_toy_choice_splits_are_deterministic_disjoint_and_shuffled_gpqas_way(tmp_path):
    a, b = ({s: f for s, (f, _) in toy_choice(7, 300, 50).items()} for _ in range(2))
    pd.testing.assert_frame_equal(a["train"], b["train"])
    pd.testing.assert_frame_equal(a["heldout"], b["heldout"])
    assert not toy_choice(8, 300, 50)["train"][0]["id"].equals(a["train"]["id"])
    assert not set(a["train"]["id"]) & set(a["heldout"]["id"]) and a["train"]["id"].is_unique
    frames = pd.concat([a["train"], a["heldout"]], ignore_index=True)
    assert tuple(frames.columns) == COLUMNS and (frames["task"] == "choice").all()
    assert set(frames["ground_truth"]) == set("ABCD")
    rng = random.Random(7)  # one shuffle over the train rows, then the held-out ones
    for _, row in frames.iterrows():
        x, y = map(int, row["id"].split("+"))
        text = row["prompt"][0]["content"]
        assert text.startswith(TOY_INSTRUCTION + f"\n\nWhat is {x} + {y}?\n\n")
        choices = shown(text)
        assert choices[row["ground_truth"]] == str(x + y) and len(set(choices.values())) == 4
        assert all(abs(int(v) - (x + y)) in (1, 2, 9, 10, 11) for k, v in choices.items() if k != row["ground_truth"])
        assert "ABCD"[rng.sample(range(4), 4).index(0)] == row["ground_truth"]
        assert score_choice(row["ground_truth"], toy_choice_solution(row)).status == "correct"

    assert main(["toy-data", "--task", "choice", "--train-size", "40", "--heldout-size", "10", "--out",
                 str(tmp_path)]) == 0  # fmt: skip
    train, heldout = read_prepared(tmp_path / "train.parquet"), read_prepared(tmp_path / "heldout.parquet")
    assert len(train) == 40 and len(heldout) == 10 and not set(train["id"]) & set(heldout["id"])
    out = tmp_path / "toy.parquet"
    args = ["--train-size", "40", "--heldout-size", "10", "--out", str(out)]
    assert main(["prepare-data", "--dataset", "toy_choice_heldout", *args]) == 0
    pd.testing.assert_frame_equal(read_prepared(out), heldout)


def test_toy_choice_prompts_fit_a_tiny_models_context():
    """Under 120 tokens with the tokenizer of the addition model (tiny.yaml evaluates it on them), which never
    saw the instruction's words: the toolkit's whole instruction would take about 220."""
    from pacs.data.schema import prompt_token_ids
    from pacs.data.toy import toy_addition, toy_solution
    from pacs.models.tiny import CHAT_TEMPLATE, TinyModelConfig, train_tokenizer

    addition = toy_addition(0, 300, 10)["train"][0]
    corpus = [m[0]["content"] for m in addition["prompt"]] + [toy_solution(g) for g in addition["ground_truth"]]
    tokenizer = train_tokenizer([*corpus, "user\nassistant\n"], TinyModelConfig().vocab_size)
    tokenizer.chat_template = CHAT_TEMPLATE
    lengths = [len(ids) for ids in prompt_token_ids(tokenizer, toy_choice(0, 10, 200)["heldout"][0]["prompt"])]
    assert max(lengths) <= 120


def test_an_evaluations_numbers_on_choice_rows():
    problems = toy_choice(0, 10, 3)["heldout"][0]
    golds = problems["ground_truth"].tolist()
    other = {g: "ABCD"[("ABCD".index(g) + 1) % 4] for g in "ABCD"}
    texts = [[f"ANSWER: {g}", f"ANSWER: {other[g]}", "I think it is the first."] for g in golds]
    completions = [[Completion((1, 2, 3), t, "stop") for t in group] for group in texts]
    with VerifierPool(workers=1) as pool:
        verdicts = score_completions(golds, completions, pool.score, "choice")
    responses = response_frame(problems, completions, verdicts, "choice")
    assert responses["extracted"].tolist() == [x for g in golds for x in (g, other[g], "")]
    metrics = eval_metrics(responses, 0.95, 50, "choice")
    assert metrics["statuses"] == {"correct": 3, "wrong": 3, "no_answer": 3} and metrics["verifier_failures"] == 0
    passk = {k: v["mean"] for k, v in metrics["pass_at_k"].items()}
    assert passk == pytest.approx({"1": 1 / 3, "2": 2 / 3})  # one right answer in three: 1 - C(2, 2) / C(3, 2)
