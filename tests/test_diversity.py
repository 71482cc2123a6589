"""v2's diversity of correct answers (S_div, Table 3; Figure 5b): the math by hand, the tiny embedder, the
measurement from stored responses, `pacs diversity`, and the report's table and figure."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from pacs.cli import main
from pacs.eval.diversity import DiversityConfig, correct_answers, final_answer, measure_diversity, s_div
from pacs.io import atomic_write_parquet
from pacs.models.tiny_embedder import TinyEmbedderConfig, build_tiny_embedder
from pacs.report.diversity import diversity_figures, diversity_tables, pca_2d

# (problem, sample) → (status, response) of two methods; problem 2 has one correct answer under "grpo", none
# under "pacs"; every correct response thinks first, and the thinking differs from the final answer
RESPONSES = {
    "pacs": {
        (0, 0): ("correct", "<think>\n3 + 4 = 7</think>\n\nThe answer is $\\boxed{7}$."),
        (0, 1): ("wrong", "<think>\n3 + 4 = 8</think>\n\nThe answer is $\\boxed{8}$."),
        (0, 2): ("correct", "<think>\nfirst we compute 3 + 4, which gives 7</think>\n\nSo $\\boxed{7}$."),
        (0, 3): ("correct", "<think>\nlet us check: 4 + 3 = 7</think>\n\nhence 7"),
        (1, 0): ("correct", "<think>\n10 + 20 = 30</think>\n\nThe sum is $\\boxed{30}$."),
        (1, 1): ("correct", "<think>\nwait, 20 + 10 = 30</think>\n\n$\\boxed{30}$"),
        (1, 2): ("no_answer", "<think>\n10 + 20"),
        (1, 3): ("correct", "<think>\ntherefore 30</think>\n\nThe answer is 30."),
        (2, 0): ("wrong", "<think>\n5 * 5 = 20</think>\n\n$\\boxed{20}$"),
        (2, 1): ("wrong", "<think>\n5 * 5 = 24</think>\n\n$\\boxed{24}$"),
        (2, 2): ("wrong", "<think>\n5 * 5 = 26</think>\n\n$\\boxed{26}$"),
        (2, 3): ("timeout", "<think>\n5 * 5</think>\n\n$\\boxed{25.0000}$"),
    },
    "grpo": {
        (0, 0): ("correct", "<think>\n3 + 4 = 7</think>\n\nThe answer is $\\boxed{7}$."),
        (0, 1): ("correct", "<think>\n3 + 4 = 7</think>\n\nThe answer is $\\boxed{7}$."),
        (0, 2): ("correct", "<think>\nso 7</think>\n\n$\\boxed{7}$"),
        (0, 3): ("wrong", "<think>\n3 + 4 = 6</think>\n\n$\\boxed{6}$"),
        (1, 0): ("wrong", "<think>\n10 + 20 = 40</think>\n\n$\\boxed{40}$"),
        (1, 1): ("correct", "<think>\n10 + 20 = 30</think>\n\n$\\boxed{30}$"),
        (1, 2): ("correct", "<think>\nwe get 30</think>\n\nThe answer is 30."),
        (1, 3): ("wrong", "<think>\n10 + 20 = 31</think>\n\n$\\boxed{31}$"),
        (2, 0): ("wrong", "<think>\n5 * 5 = 20</think>\n\n$\\boxed{20}$"),
        (2, 1): ("correct", "<think>\n5 * 5 = 25</think>\n\n$\\boxed{25}$"),
        (2, 2): ("wrong", "<think>\n5 * 5 = 26</think>\n\n$\\boxed{26}$"),
        (2, 3): ("wrong", "<think>\n5 * 5 = 27</think>\n\n$\\boxed{27}$"),
    },
}


def write_eval(directory, responses: dict) -> None:
    """An evaluation as `pacs evaluate` leaves it: responses/part_00000.parquet (its columns) and metrics.json."""
    rows = [{"problem": p, "id": f"p{p}", "sample": s, "response": text, "response_tokens": len(text.split()),
             "finish_reason": "stop", "extracted": "", "status": status, "score": float(status == "correct")}
            for (p, s), (status, text) in sorted(responses.items())]  # fmt: skip
    atomic_write_parquet(directory / "responses" / "part_00000.parquet", pd.DataFrame(rows), {"generate_s": 1.0})
    (directory / "metrics.json").write_text(json.dumps({"task": "math", "problems": 3}))


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    return build_tiny_embedder(tmp_path_factory.mktemp("embedder") / "model")


@pytest.fixture(scope="module")
def evals(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("evals")
    for method, responses in RESPONSES.items():
        write_eval(root / method, responses)
    return {method: root / method for method in RESPONSES}


def test_s_div_by_hand_skips_and_counts_problems_with_fewer_than_two_answers():
    # problem A: unit vectors at 0°, 60° and 90°: cosines cos 60° = 1/2, cos 90° = 0, cos 30° = √3/2
    a = np.array([[1.0, 0.0], [0.5, math.sqrt(3) / 2], [0.0, 1.0]])
    one_minus_a = 1 - (0.5 + 0.0 + math.sqrt(3) / 2) / 3  # 0.544658...
    # problem B: two vectors of one direction, not unit: normalized first, cosine 1, diversity 0
    b = np.array([[1.0, 0.0], [2.0, 0.0]])
    # problem C: one answer; problem D: none: both left out of the mean, and counted
    c, d = np.array([[0.0, 1.0]]), np.zeros((0, 2))
    result = s_div([a, b, c, d])
    assert result["per_problem"][0] == pytest.approx(one_minus_a, abs=1e-12)
    assert result["per_problem"][1] == pytest.approx(0.0, abs=1e-12)
    assert result["per_problem"][2:] == [None, None]
    assert result["s_div"] == pytest.approx((one_minus_a + 0.0) / 2, abs=1e-12)
    assert (result["problems_used"], result["problems_skipped"]) == (2, 2)
    assert s_div([c, d]) == {"s_div": None, "problems_used": 0, "problems_skipped": 2, "per_problem": [None, None]}
    with pytest.raises(ValueError, match="zero vector"):
        s_div([np.array([[0.0, 0.0], [1.0, 0.0]])])


def test_final_strips_the_thinking_and_max_answers_takes_the_first_samples():
    assert final_answer("<think>\n3 + 4 = 7</think>\n\nThe answer is 7.") == "The answer is 7."
    assert final_answer("<think>a</think>b</think>\n c") == "c"  # after the last </think>
    assert final_answer("no thinking here") == "no thinking here"
    rows = [{"problem": p, "id": str(p), "sample": s, "response": t, "status": st}
            for (p, s), (st, t) in RESPONSES["pacs"].items()]  # fmt: skip
    responses = pd.DataFrame(rows).sample(frac=1, random_state=0)  # shuffled: the order is the function's
    final = correct_answers(responses, "math", DiversityConfig(embed="final", max_answers=2))
    assert final[["problem", "sample"]].values.tolist() == [[0, 0], [0, 2], [1, 0], [1, 1]]
    assert final["text"].tolist()[:2] == ["The answer is $\\boxed{7}$.", "So $\\boxed{7}$."]
    whole = correct_answers(responses, "math", DiversityConfig())
    assert len(whole) == 6 and all(t.startswith("<think>") for t in whole["text"])


def test_tiny_embedder_loads_offline_and_embeds_unit_vectors_deterministically(embedder, tmp_path, monkeypatch):
    from sentence_transformers import SentenceTransformer

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    texts = ["<think>\n3 + 4 = 7</think>\n\nThe answer is $\\boxed{7}$.", "hello", "x" * 3000]
    model = SentenceTransformer(str(embedder), device="cpu")
    vectors = model.encode(texts)
    assert vectors.shape == (3, TinyEmbedderConfig().hidden_size)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert model.tokenizer("7")["input_ids"][-1] == model.tokenizer.convert_tokens_to_ids("<|endoftext|>")
    again = build_tiny_embedder(tmp_path / "again")  # same seed: the same model
    np.testing.assert_array_equal(SentenceTransformer(str(again), device="cpu").encode(texts), vectors)
    other = build_tiny_embedder(tmp_path / "other", TinyEmbedderConfig(seed=1))
    assert not np.allclose(SentenceTransformer(str(other), device="cpu").encode(texts), vectors)


def expected_s_div(model, responses: dict, embed: str) -> tuple[float, int]:
    """S_div computed here: encode each problem's correct answers, then the mean of 1 − mean pairwise cosine."""
    values = []
    for problem in sorted({p for p, _ in responses}):
        texts = [t for (p, s), (st, t) in sorted(responses.items()) if p == problem and st == "correct"]
        texts = [final_answer(t) for t in texts] if embed == "final" else texts
        if len(texts) < 2:
            continue
        e = model.encode(texts).astype(np.float64)
        cos = [e[i] @ e[j] / np.linalg.norm(e[i]) / np.linalg.norm(e[j]) for i in range(len(e))
               for j in range(i + 1, len(e))]  # fmt: skip
        values.append(1 - np.mean(cos))
    return float(np.mean(values)), len(values)


def test_measure_diversity_matches_s_div_of_the_encoded_correct_answers(embedder, evals, tmp_path):
    from sentence_transformers import SentenceTransformer

    config = DiversityConfig(model=str(embedder), max_length=16)
    result = measure_diversity(evals, config, tmp_path / "embeddings.npz", log=lambda _: None)
    model = SentenceTransformer(str(embedder), device="cpu")
    model.max_seq_length = 16
    assert result["embedder"] == str(embedder) and result["embed"] == "response" and result["max_length"] == 16
    for method, responses in RESPONSES.items():
        entry = result["methods"][method]
        value, used = expected_s_div(model, responses, "response")
        assert entry["s_div"] == pytest.approx(value, abs=1e-6)
        assert (entry["problems"], entry["problems_used"], entry["problems_skipped"]) == (3, used, 3 - used)
        assert entry["answers"] == sum(st == "correct" for st, _ in responses.values())
        correct = [text for status, text in responses.values() if status == "correct"]
        assert entry["truncated"] == sum(len(model.tokenizer(t)["input_ids"]) > 16 for t in correct)
        assert entry["truncated"] > 0
        assert set(entry["per_problem"]) == {"0", "1", "2"} and entry["per_problem"]["2"] is None
    with np.load(tmp_path / "embeddings.npz") as stored:
        assert stored["embeddings"].dtype == np.float16 and stored["embeddings"].shape == (12, 64)
        assert list(zip(stored["method"], stored["problem"], stored["sample"], strict=True))[:3] == [
            ("pacs", 0, 0), ("pacs", 0, 2), ("pacs", 0, 3)]  # fmt: skip
        assert stored["id"][0] == "p0"
        first = model.encode([RESPONSES["pacs"][(0, 0)][1]])[0]
        np.testing.assert_allclose(stored["embeddings"][0].astype(np.float32), first, atol=2e-3)
    final = measure_diversity(evals, DiversityConfig(model=str(embedder), embed="final"), log=lambda _: None)
    value, _ = expected_s_div(SentenceTransformer(str(embedder), device="cpu"), RESPONSES["pacs"], "final")
    assert final["methods"]["pacs"]["s_div"] == pytest.approx(value, abs=1e-6)
    assert final["methods"]["pacs"]["s_div"] != pytest.approx(result["methods"]["pacs"]["s_div"], abs=1e-6)


def test_diversity_cli_end_to_end_and_its_errors(evals, tmp_path, capsys):
    model = tmp_path / "embedder"
    assert main(["tiny-embedder", "--out", str(model), "--seed", "3"]) == 0
    out, npz = tmp_path / "diversity.json", tmp_path / "embeddings.npz"
    args = ["--eval", f"pacs={evals['pacs']}", "--eval", f"grpo={evals['grpo']}", "--out", str(out),
            "--embeddings", str(npz), "--model", str(model), "--embed", "final", "--max-answers", "2",
            "--batch-size", "3", "--device", "cpu"]  # fmt: skip
    assert main(["diversity", *args]) == 0
    result = json.loads(out.read_text())
    assert list(result["methods"]) == ["pacs", "grpo"] and result["config"]["max_answers"] == 2
    assert result["methods"]["pacs"]["answers"] == 4 and result["methods"]["grpo"]["answers"] == 5
    with np.load(npz) as stored:
        assert len(stored["embeddings"]) == 9
    capsys.readouterr()
    missing = tmp_path / "missing"
    assert main(["diversity", "--eval", f"pacs={missing}", "--out", str(out), "--model", str(model)]) == 2
    assert str(missing) in capsys.readouterr().err
    bare = tmp_path / "bare"
    atomic_write_parquet(bare / "responses" / "part_00000.parquet", pd.DataFrame({"problem": [0], "sample": [0]}))
    assert main(["diversity", "--eval", f"pacs={bare}", "--out", str(out), "--model", str(model)]) == 2
    err = capsys.readouterr().err
    assert str(bare / "responses" / "part_00000.parquet") in err and "response" in err
    with pytest.raises(SystemExit):
        main(["diversity", "--eval", "no-directory", "--out", str(out)])


def test_pca_2d_keeps_a_plane_whole():
    rng = np.random.default_rng(0)
    plane = rng.normal(size=(20, 2)) * [3.0, 1.0]
    x = plane @ np.linalg.qr(rng.normal(size=(5, 5)))[0][:2] + 7.0  # the plane in 5-D, off the origin
    coords, share = pca_2d(x)
    assert share.sum() == pytest.approx(1.0) and share[0] > share[1] > 0
    distances = np.linalg.norm(x[:, None] - x[None], axis=-1)
    np.testing.assert_allclose(np.linalg.norm(coords[:, None] - coords[None], axis=-1), distances, atol=1e-9)
    np.testing.assert_allclose(coords.mean(axis=0), 0.0, atol=1e-9)


def test_report_table_and_figure_from_a_manifest(embedder, evals, tmp_path):
    file, npz = tmp_path / "q4" / "aime2024" / "diversity.json", tmp_path / "q4" / "aime2024" / "embeddings.npz"
    result = measure_diversity({"grpo": evals["grpo"], "pacs": evals["pacs"]}, DiversityConfig(model=str(embedder)),
                               npz, log=lambda _: None)  # fmt: skip
    file.write_text(json.dumps(result))
    labels = {"base": ("Base", "Base"), "grpo": ("GRPO", "GRPO"), "pacs": ("PACS", "PACS")}
    manifest = {
        "name": "t",
        "models": {"q4": {"label": "Qwen3 4B", "published_as": "Qwen3-4B"}},
        "methods": {m: {"label": label, "published_as": paper} for m, (label, paper) in labels.items()},
        "benchmarks": {
            "aime2024": {"label": "AIME 2024", "published_as": "AIME24", "ks": [1]},
            "toy": {"label": "Toy", "published_as": None, "ks": [1]},
        },
        "evaluations": [],
        "runs": [],
        "diversity": [{"model": "q4", "benchmark": "aime2024", "file": str(file), "embeddings": str(npz)}],
    }
    written = diversity_tables(manifest, tmp_path / "tables")
    assert {p.name for p in written} == {"diversity_q4.csv", "diversity_q4.md", "diversity_q4.html"}
    table = pd.read_csv(tmp_path / "tables" / "diversity_q4.csv", index_col="method")
    assert list(table.index) == ["GRPO", "PACS"]  # the manifest's order, not the file's
    for method, label in (("grpo", "GRPO"), ("pacs", "PACS")):
        entry = result["methods"][method]
        assert table.loc[label, "AIME 2024 s_div"] == pytest.approx(entry["s_div"], abs=1e-12)
        assert table.loc[label, "AIME 2024 problems_used"] == entry["problems_used"]
        assert table.loc[label, "AIME 2024 problems_skipped"] == entry["problems_skipped"]
    assert table.loc["PACS", "AIME 2024 published"] == 0.0278  # v2's Table 3, Qwen3-4B PACS AIME24
    assert table.loc["GRPO", "AIME 2024 published"] == 0.0260
    assert table.loc["PACS", "AIME 2024 delta"] == pytest.approx(result["methods"]["pacs"]["s_div"] - 0.0278)
    markdown = (tmp_path / "tables" / "diversity_q4.md").read_text()
    assert f"{result['methods']['pacs']['s_div']:.4f}" in markdown and "0.0278" in markdown
    assert "0.0278" in (tmp_path / "tables" / "diversity_q4.html").read_text()
    figures = diversity_figures(manifest, tmp_path / "figures")
    assert sorted(p.name for p in figures) == ["diversity_q4_aime2024.pdf", "diversity_q4_aime2024.png"]
    assert all(p.stat().st_size > 1000 for p in figures)
    manifest["diversity"][0]["file"] = str(tmp_path / "gone.json")
    with pytest.raises(FileNotFoundError, match="gone.json"):
        diversity_tables(manifest, tmp_path / "tables")


def test_a_diversity_figure_whose_answers_lie_on_one_point_says_so(tmp_path, monkeypatch):
    """Every correct answer of a problem with the same embedding (the toy task's one correct string): each panel and
    the figure say there is no spread to see, and REPORT.md's note is the same sentence; answers that differ on
    one problem and the figure draws them without a note."""
    from pacs.report import diversity

    rng = np.random.default_rng(0)
    points = {0: rng.normal(size=8), 1: rng.normal(size=8)}
    npz = tmp_path / "embeddings.npz"

    def store(embeddings):
        np.savez(npz, embeddings=np.array(embeddings), method=np.array(["grpo", "pacs"] * 3),
                 problem=np.array([0, 0, 0, 1, 1, 1]), id=np.array(["a", "a", "a", "b", "b", "b"]),
                 sample=np.arange(6))  # fmt: skip

    store([points[p] for p in (0, 0, 0, 1, 1, 1)])
    manifest = {
        "models": {"q4": {"label": "Qwen3 4B"}},
        "methods": {"grpo": {"label": "GRPO"}, "pacs": {"label": "PACS"}},
        "benchmarks": {"toy": {"label": "Toy"}},
        "diversity": [{"model": "q4", "benchmark": "toy", "file": str(tmp_path / "d.json"), "embeddings": str(npz)}],
    }
    entry = manifest["diversity"][0]
    why = diversity.diversity_blank(manifest, entry)
    assert why == ("On each of the 2 problems drawn, every correct answer of every method has the same embedding "
                   "(6 answers, one point per problem), so the principal components explain nothing (0 %) and "
                   "there is no spread to see.")  # fmt: skip
    drawn = {}
    monkeypatch.setattr(diversity, "save_figure", lambda fig, stem: drawn.update(
        {"panels": [" ".join(t.get_text() for t in ax.texts) for ax in fig.axes],
         "figure": " ".join(t.get_text() for t in fig.texts).replace("\n", " ")}) or [])  # fmt: skip
    diversity.diversity_figures(manifest, tmp_path)
    title = "Qwen3 4B, Toy: correct answers' embeddings (PCA)"
    assert drawn["panels"] == ["all 3 answers: one embedding"] * 2 and drawn["figure"] == f"{title} {why}"
    store([points[p] for p in (0, 0, 0, 1, 1)] + [points[0]])  # problem b: one answer elsewhere
    assert diversity.diversity_blank(manifest, entry) is None
    diversity.diversity_figures(manifest, tmp_path)
    assert drawn["panels"] == ["all 3 answers: one embedding", ""] and drawn["figure"] == title
