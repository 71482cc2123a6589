"""The configuration reference page (docs/configuration.md), drawn from the workflow schema and the config
dataclasses: every key with its default and its meaning, a schema property's ``description`` or a dataclass
field's source comment (the one on its line and the full-line ones just above it). A key without one is an error
naming it. ``resolve`` says whether a dotted key path names a real key. ``python -m pacs.config_reference``
writes the page; ``--check`` exits 1 when the page on disk differs from what it would write."""

import ast
import dataclasses
import functools
import inspect
import io
import re
import sys
import tokenize
import types
import typing
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SCHEMA = ROOT / "workflow" / "schemas" / "config.schema.yaml"
PAGE = ROOT / "docs" / "configuration.md"
# the placeholder segment of an object of named entries (additionalProperties, or properties sharing one $ref)
PLACEHOLDERS = {"data.prepare": "<dataset>", "data.benchmarks": "<dataset>", "models": "<model>",
                "methods": "<method>", "released": "<model>", "resources": "<kind>"}  # fmt: skip
# schema values that hold the keys of another section of this page, linked instead of expanded
LINKS = {"train": "run", "models.<model>.train": "run", "methods.<method>.train": "run", "eval.settings": "eval",
         "data.benchmarks.<dataset>.settings": "eval", "methods.<method>.algorithm.options": "objective"}  # fmt: skip
TITLES = {"workflow": "Workflow config", "run": "Run config", "objective": "Objective options",
          "eval": "Evaluation config", "diversity": "Diversity", "tiny": "Tiny model"}  # fmt: skip
INTRO = {
    "workflow": "`snakemake --configfile CONFIG.yaml`, checked against `workflow/schemas/config.schema.yaml`.",
    "run": "`pacs train --config RUN.yaml` (`pacs/train/settings/config.py`); the workflow's `train` sections.",
    "objective": "`algorithm.options` of a run, or of a workflow method, by `algorithm.name`.",
    "eval": "`pacs evaluate --config EVAL.yaml` (`pacs/eval/config.py`); the workflow's `eval.settings`.",
    "diversity": "`pacs diversity`'s options (`pacs/eval/diversity.py`); the workflow's `diversity` section.",
    "tiny": "`pacs tiny-model`'s options (`pacs/models/tiny.py`).",
}
ANY = None  # a pattern segment any name matches
REST = ...  # a pattern's last segment: a free mapping, any keys below it (chat template variables)


def anchor(section: str) -> str:
    return TITLES[section].lower().replace(" ", "-")


class UndescribedKeys(ValueError):
    """Keys with neither a description in the schema nor a comment in the source."""


@dataclass(frozen=True)
class Row:
    key: str  # dotted, placeholders as <name>
    default: str
    meaning: str
    pattern: tuple  # per segment: a name, a frozenset of names, ANY, or last REST
    link: str | None = None  # a section whose keys continue this one


def yamlish(value) -> str:
    if value is None or isinstance(value, bool):  # YAML's spelling: null, true, false
        return str(value).lower().replace("none", "null")
    if isinstance(value, float):
        return re.sub(r"e([+-])0*(\d)", lambda m: "e" + m[1].replace("+", "") + m[2], repr(value))
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(yamlish(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {yamlish(v)}" for k, v in value.items()) + "}"
    return str(value) if value != "" else '""'


def with_choices(meaning: str, choices) -> str:
    """The meaning, with the choices of an enum where it does not already name them all."""
    names = [yamlish(c) for c in choices]
    if not names or all(re.search(rf"(?<![\w-]){re.escape(n)}(?![\w-])", meaning) for n in names):
        return meaning
    return f"{meaning}; one of {', '.join(f'`{n}`' for n in names)}"


def schema_rows(node: dict, prefix: str, pattern: tuple, defs: dict, missing: list) -> list[Row]:
    """Rows of the properties of schema object ``node``, depth first, in the schema's order."""
    rows = []
    for name, child in node.get("properties", {}).items():
        child = defs.get(child.get("$ref", ""), child)
        key, pat = f"{prefix}{name}", (*pattern, name)
        meaning = child.get("description")
        if not meaning:
            missing.append(key)
            meaning = ""
        default = yamlish(child["default"]) if "default" in child else (
            "required" if name in node.get("required", ()) else "unset")  # fmt: skip
        props = child.get("properties", {})
        refs = {p.get("$ref") for p in props.values()}
        if key in LINKS:
            rows.append(Row(key, default, f"{meaning}: [{TITLES[LINKS[key]]}](#{anchor(LINKS[key])})", pat, LINKS[key]))
        elif len(props) > 1 and len(refs) == 1 and None not in refs:  # named entries of one kind: a placeholder
            rows.append(Row(key, default, f"{meaning}; {PLACEHOLDERS[key]}: {', '.join(props)}", pat))
            entry = defs[refs.pop()]
            rows += schema_rows(entry, f"{key}.{PLACEHOLDERS[key]}.", (*pat, frozenset(props)), defs, missing)
        elif isinstance(child.get("additionalProperties"), dict):
            rows.append(Row(key, default, meaning, pat))
            entry = child["additionalProperties"]
            rows += schema_rows(entry, f"{key}.{PLACEHOLDERS[key]}.", (*pat, ANY), defs, missing)
        else:
            free = "object" in child.get("type", ()) and not props and child.get("additionalProperties") is not False
            rows.append(Row(key, default, with_choices(meaning, child.get("enum", ())), (*pat, REST) if free else pat))
            rows += schema_rows(child, f"{key}.", pat, defs, missing)
    return rows


def read_schema() -> dict:
    return yaml.safe_load(SCHEMA.read_text(encoding="utf-8"))


def class_source(cls: type) -> str:
    """The source of class ``cls`` (tests hand the generator another)."""
    return "".join(inspect.getsourcelines(cls)[0])


def field_comments(cls: type) -> dict[str, str]:
    """``{field: comment}`` of the fields written in ``cls``'s own body: the comment on the field's lines, the
    full-line comments right above it, and after it, those that continue its own comment (indented further, or
    before no other field)."""
    source = class_source(cls)
    body = ast.parse(source).body[0].body
    comments = {}  # row: (text, full line)
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and not re.match(r"#\s*(fmt:|noqa|type:)", tok.string):
            comments[tok.start[0]] = (tok.string, not tok.line[: tok.start[1]].strip())
    starts = {s.lineno for s in body if isinstance(s, ast.AnnAssign)}
    out = {}
    for s in body:
        if not (isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)):
            continue
        above, row = [], s.lineno - 1
        while row in comments and comments[row][1] and not comments[row][0].startswith("#  "):
            above.insert(0, comments[row][0])
            row -= 1
        inline = [comments[r][0] for r in range(s.lineno, s.end_lineno + 1) if r in comments and not comments[r][1]]
        after, row = [], s.end_lineno + 1
        while inline and row in comments and comments[row][1]:
            after.append(comments[row][0])
            row += 1
        if after and row in starts and not all(c.startswith("#  ") for c in after):
            after = [c for c in after if c.startswith("#  ")]  # the rest is the next field's
        text = " ".join(c.lstrip("#").strip() for c in above + inline + after)
        out[s.target.id] = text
    return out


def choices_of(hint) -> tuple:
    """The values of a ``Literal`` type (``null`` too where it is optional); () for any other type."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    args = [a for a in typing.get_args(hint) if a is not type(None)] if union else [hint]
    if len(args) != 1 or typing.get_origin(args[0]) is not typing.Literal:
        return ()
    return (*typing.get_args(args[0]), *([None] if args[0] is not hint else []))


def dataclass_rows(cls: type, prefix: str, missing: list, links: dict | None = None) -> list[Row]:
    """Rows of dataclass ``cls``'s fields, nested dataclasses walked in place; ``links``: fields (dotted) whose
    keys are another section's."""
    hints, comments = typing.get_type_hints(cls), {}
    for klass in reversed(cls.__mro__):
        if dataclasses.is_dataclass(klass) and "__annotations__" in klass.__dict__:
            comments.update(field_comments(klass))
    rows = []
    for f in (f for f in dataclasses.fields(cls) if f.init):
        key, hint = f"{prefix}{f.name}", hints[f.name]
        meaning = comments.get(f.name, "")
        if not meaning:
            missing.append(key)
        if dataclasses.is_dataclass(hint):
            rows.append(Row(key, "(section)", meaning, tuple(key.split("."))))
            rows += dataclass_rows(hint, f"{key}.", missing, links)
            continue
        if f.default is not dataclasses.MISSING:
            default = yamlish(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = yamlish(f.default_factory())
        else:
            default = "required"
        link = (links or {}).get(key)
        if link:
            meaning = f"{meaning}: [{TITLES[link]}](#{anchor(link)})"
        free = not link and (hint is dict or typing.get_origin(hint) is dict)
        pattern = (*key.split("."), *([REST] if free else []))
        rows.append(Row(key, default, with_choices(meaning, choices_of(hint)), pattern, link))
    return rows


def objective_rows(missing: list) -> dict[str, list[Row]]:
    """``{heading: rows}``: the options of ``algorithm.options``, grouped by the class that declares them."""
    from pacs.algorithms.options import ALGORITHMS

    owners: dict[type, list[str]] = {}
    for name, algorithm in ALGORITHMS.items():
        for klass in reversed(algorithm.options.__mro__):  # bases first
            if dataclasses.is_dataclass(klass):
                owners.setdefault(klass, []).append(name)
    out = {}
    for klass, names in owners.items():
        inherited = [base for base in klass.__mro__[1:] if dataclasses.is_dataclass(base)]
        own = {f.name for f in dataclasses.fields(klass)} - {f.name for b in inherited for f in dataclasses.fields(b)}
        rows = [r for r in dataclass_rows(klass, "", missing) if r.key in own]
        out[f"{', '.join(f'`{n}`' for n in names)} (`{klass.__name__}`)"] = rows
    return out


def sections(schema: dict | None = None) -> dict[str, dict[str, list[Row]]]:
    """``{section: {subheading or "": rows}}`` of the page; raises ``UndescribedKeys`` naming every key without
    a meaning."""
    from pacs.eval.config import EvalConfig
    from pacs.eval.diversity import DiversityConfig
    from pacs.models.tiny import TinyModelConfig
    from pacs.train.settings.config import RunConfig

    schema, missing = schema or read_schema(), []
    defs = {f"#/$defs/{k}": v for k, v in schema.get("$defs", {}).items()}
    out = {
        "workflow": {"": schema_rows(schema, "", (), defs, missing)},
        "run": {"": dataclass_rows(RunConfig, "", missing, {"algorithm.options": "objective"})},
        "objective": objective_rows(missing),
        "eval": {"": dataclass_rows(EvalConfig, "", missing)},
        "diversity": {"": dataclass_rows(DiversityConfig, "", missing)},
        "tiny": {"": dataclass_rows(TinyModelConfig, "", missing)},
    }
    if missing:
        raise UndescribedKeys(f"keys without a description or comment: {', '.join(missing)}")
    return out


def cell(text: str) -> str:
    """A table cell: ``|`` escaped, and outside code spans ``<`` and ``>`` (which markdown would read as HTML)."""
    parts = text.replace("|", "\\|").replace("\n", " ").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;").replace(">", "&gt;") for i, p in enumerate(parts))


def build(schema: dict | None = None) -> str:
    lines = ["# Configuration reference", "",
             "Generated by `python -m pacs.config_reference` from the workflow schema and the config dataclasses' "
             "comments: do not edit by hand. What the keys do: [how it works](how-it-works.md)."]  # fmt: skip
    for section, groups in sections(schema).items():
        lines += ["", f"## {TITLES[section]}", "", INTRO[section]]
        for heading, rows in groups.items():
            lines += (
                [""] + ([f"### {heading}", ""] if heading else []) + ["| key | default | meaning |", "|---|---|---|"]
            )
            for r in rows:
                default = r.default if r.default in ("required", "unset", "(section)") else f"`{r.default}`"
                lines.append(f"| {cell(f'`{r.key}`')} | {cell(default)} | {cell(r.meaning)} |")
    return "\n".join(lines) + "\n"


@functools.cache
def patterns() -> tuple[tuple, ...]:
    """Every key's pattern, the linked sections' keys continued under the keys that link them."""
    rows = {s: [r for group in groups.values() for r in group] for s, groups in sections().items()}
    train = set(read_schema()["properties"]["train"]["properties"])
    out = []
    for section in ("workflow", "run", "eval"):
        for r in rows[section]:
            out.append(r.pattern)
            for t in rows.get(r.link, []):
                if r.link != "run" or section != "workflow" or t.pattern[0] in train:
                    out.append(r.pattern + t.pattern)
                    out += [r.pattern + t.pattern + u.pattern for u in rows.get(t.link, [])]
    return tuple(out)


def matches(segments: list[str], pattern: tuple) -> bool:
    """``segments`` name ``pattern``'s key or a section above it; ``<x>`` matches a placeholder only."""
    if pattern and pattern[-1] is REST:
        pattern = pattern[:-1] + (ANY,) * max(0, len(segments) - len(pattern) + 1)
    if len(segments) > len(pattern):
        return False
    for s, p in zip(segments, pattern, strict=False):
        placeholder = s.startswith("<") and s.endswith(">")
        if isinstance(p, str) and s != p or isinstance(p, frozenset) and not (placeholder or s in p):
            return False
    return True


def resolve(key: str) -> bool:
    """Whether dotted ``key`` names a key (or a section) of the workflow schema, the run config (also under the
    workflow's train sections), an objective's options or the evaluation config. Placeholder segments (``<x>``)
    match named entries (``data.benchmarks.<dataset>.n``), as concrete names do."""
    segments = key.split(".")
    return any(matches(segments, p) for p in patterns())


def main(argv: list[str]) -> int:
    text = build()
    if "--check" in argv:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE.relative_to(ROOT)} is out of date: run python -m pacs.config_reference")
            return 1
        return 0
    from pacs.io import atomic_write_text

    atomic_write_text(PAGE, text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
