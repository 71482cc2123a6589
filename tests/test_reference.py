"""The configuration reference (docs/configuration.md) is what ``pacs.config_reference`` builds from the schema and
the config dataclasses, every key has a meaning, and every config key the user docs name in backticks exists."""

import copy
import re

import pytest

from pacs import config_reference as reference
from pacs.train.settings.config import RolloutConfig

ROOT = reference.ROOT
DOCS = sorted([ROOT / "README.md", ROOT / "config" / "README.md", ROOT / "workflow" / "README.md",
               *(ROOT / "docs").glob("*.md")])  # fmt: skip
SEGMENT = r"(?:[a-z_][a-z0-9_]*|<[^<>`\s]+>|\{[a-z_][a-z0-9_]*(?:,[a-z_][a-z0-9_]*)+\})"
KEYLIKE = re.compile(rf"{SEGMENT}(?:(?:\.{SEGMENT})+(?:\.\*)?|\.\*)")
EXTENSIONS = "yaml yml json jsonl md py csv parquet png pdf npz html tex zip txt log smk sh toml gz safetensors bin pt"
FILE = re.compile(rf"\.({'|'.join(EXTENSIONS.split())})$")
# tokens that are not keys on purpose: docs/run-config.md's example of the error an unknown key gives
NOT_KEYS = {"optim.lrr"}
SCHEMA_WORDS = {"$schema", "$defs", "$ref", "type", "description", "default", "enum", "const", "properties",
                "additionalProperties", "required", "items", "anyOf", "minimum", "maximum", "minItems",
                "minProperties", "pattern"}  # fmt: skip


def sections() -> set[str]:
    """First segments a config key can have: the workflow's top-level keys, the run config's sections and the
    evaluation config's nested sections."""
    from pacs.eval.config import EvalConfig
    from pacs.train.settings.config import RunConfig

    schema = reference.read_schema()
    evaluation = {r.key for r in reference.dataclass_rows(EvalConfig, "", []) if r.default == "(section)"}
    return set(schema["properties"]) | {r.key for r in reference.dataclass_rows(RunConfig, "", []) if "." not in r.key
                                        } | evaluation  # fmt: skip


def expand(token: str) -> list[str]:
    """``a.{b,c}.d`` as ``a.b.d`` and ``a.c.d``."""
    brace = re.search(r"\{([^{}]*)\}", token)
    if not brace:
        return [token]
    return [k for part in brace[1].split(",") for k in expand(token[: brace.start()] + part + token[brace.end() :])]


def doc_keys(text: str, firsts: set[str]) -> list[tuple[int, str]]:
    """``(line, token)`` of every backticked token outside fenced blocks that looks like a config key."""
    out, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            continue
        for token in re.findall(r"`([^`\n]+)`", line):
            token = token.split(": ", 1)[0].strip()
            if "/" in token or FILE.search(token) or not KEYLIKE.fullmatch(token):
                continue
            if token.split(".", 1)[0] in firsts and token not in NOT_KEYS:
                out.append((number, token))
    return out


def test_the_committed_page_is_what_the_generator_builds():
    assert reference.PAGE.is_file(), "docs/configuration.md is missing: run python -m pacs.config_reference"
    assert reference.PAGE.read_text(encoding="utf-8") == reference.build(), (
        "docs/configuration.md is out of date: run python -m pacs.config_reference")  # fmt: skip
    assert reference.main(["--check"]) == 0


def test_every_key_has_a_meaning():
    reference.sections()  # raises UndescribedKeys naming every key without one
    for rows in (r for groups in reference.sections().values() for r in groups.values()):
        assert all(r.meaning.strip() for r in rows)


def test_a_field_without_its_comment_fails_the_generator_naming_it(monkeypatch):
    source = reference.class_source
    comment = "  # samples per prompt: one group"
    assert comment in source(RolloutConfig)
    without = lambda cls: source(cls).replace(comment, "") if cls is RolloutConfig else source(cls)  # noqa: E731
    monkeypatch.setattr(reference, "class_source", without)
    with pytest.raises(reference.UndescribedKeys, match=r"\brollout\.n\b"):
        reference.build()


def test_a_schema_property_without_its_description_fails_the_generator_naming_it():
    schema = copy.deepcopy(reference.read_schema())
    del schema["properties"]["plan"]["properties"]["disk_quota"]["description"]
    del schema["$defs"]["resources"]["properties"]["mem_mb"]["description"]
    with pytest.raises(reference.UndescribedKeys, match=r"plan\.disk_quota, resources\.<kind>\.mem_mb"):
        reference.build(schema)


def test_comments_are_read_from_above_the_field_from_its_line_and_from_their_continuations():
    from pacs.algorithms.options import PacsConfig
    from pacs.rollout.vllm import VLLMRolloutOptions

    pacs = reference.field_comments(PacsConfig)
    assert pacs["reward_proxy"].endswith("reference: β Σ (log π_θ − log π_ref)")  # continued below its line
    assert pacs["score"].startswith("group score ψ")  # not the line above it, which continues reward_proxy's
    assert pacs["tis_cap"].startswith("rollout correction")  # the comments above it
    assert reference.field_comments(VLLMRolloutOptions)["sleep_level"].endswith("where vLLM cannot sleep.")
    rollout = reference.field_comments(RolloutConfig)
    assert rollout["vllm"] == 'engine options (docs/rollouts.md, "vLLM rollouts")'  # comments above a field
    assert rollout["max_logprob_gap"].startswith("stop when the mean")


def test_the_schema_uses_only_json_schema_keywords():
    """An unquoted comma in a flow mapping (``{description: a, b}``) makes ``b`` a keyword of its own."""
    odd = []

    def walk(node, path: str, named: bool):
        if isinstance(node, list):
            for item in node:
                walk(item, path, False)
        elif isinstance(node, dict):
            for key, value in node.items():
                if not named and key not in SCHEMA_WORDS:
                    odd.append(f"{path}.{key}")
                walk(value, f"{path}.{key}", key in ("properties", "$defs") and not named)

    walk(reference.read_schema(), "", False)
    assert odd == []


REAL = """resources.train.runtime plan.gpu data.benchmarks.<dataset>.n data.benchmarks.math500.n
train.trainer.total_steps methods.pacs.train.rollout.n trainer.max_tokens_per_micro_batch rollout.vllm.sleep_level
algorithm.options.beta eval.settings.code.grading verifier.options.timeout_s code.grading rollout.vllm plan
resources.train models.<key>.train methods.<m>.algorithm.options.tis_cap data.benchmarks.gpqa.settings.vllm
data.chat_template_kwargs.enable_thinking chat_template_kwargs.x""".split()
UNREAL = """resources.trainer.runtime plan.gpus train.algorithm.name trainer.foo code.grading.judge
algorithm.options.gama rollout.vllm.sleep resources.<kind>.memory data.shuffle.x plan.gpu.h100""".split()


@pytest.mark.parametrize("key", REAL)
def test_real_keys_resolve(key):
    assert reference.resolve(key)


@pytest.mark.parametrize("key", UNREAL)
def test_other_keys_do_not(key):
    assert not reference.resolve(key)


def test_the_doc_key_finder():
    firsts = {"data", "eval", "resources", "plan", "trainer", "code", "rollout"}
    text = ("`data.benchmarks.<dataset>.n`, `trainer.compile: true`, `resources.{default,train}`, `plan.*`,\n"
            "```yaml\n`plan.fenced`\n```\n`eval_tiny.yaml`, `config.yaml`, `eval/metrics.json`, `pacs.train.loop`, "
            "`torch.compile`, `metrics.json`, `rollout`, `code.grading` `Code.X`")  # fmt: skip
    assert doc_keys(text, firsts) == [(1, "data.benchmarks.<dataset>.n"), (1, "trainer.compile"),
                                      (1, "resources.{default,train}"), (1, "plan.*"), (5, "code.grading")]  # fmt: skip
    assert expand("resources.{default,train}.gpu") == ["resources.default.gpu", "resources.train.gpu"]


def test_every_config_key_the_docs_name_exists():
    firsts, failures = sections(), []
    for path in DOCS:
        if not path.is_file():
            continue
        for line, token in doc_keys(path.read_text(encoding="utf-8"), firsts):
            failures += [f"{path.relative_to(ROOT)}:{line}: {k}" for k in expand(token.removesuffix(".*"))
                         if not reference.resolve(k)]  # fmt: skip
    assert failures == [], "keys the docs name that no config has:\n" + "\n".join(failures)
