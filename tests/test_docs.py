"""The user documentation holds together: README.md is short enough to read (lines, where its first command
stands, how long its sentences are: ``tests/doc_metrics.py``); every relative link and image of the user pages
names a file or directory of the repository, and every ``#fragment`` a heading of its page (anchors computed as
GitHub computes them); no link leaves the repository; every page under docs/ and config/README.md is one click from
README.md; and the repository's top level holds only what a reader expects there. Fast: no Snakemake, no model.

A failing check names every failure at once, one ``file:line: target: why`` a line.
"""

import os
import re
import statistics
import subprocess
import unicodedata
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote

import doc_metrics
import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MAX_README_LINES = 200
FIRST_COMMAND_WITHIN = 30  # lines of README.md
MEDIAN_SENTENCE_UNDER = 25  # words
TOP_LEVEL = {"Snakefile", "pyproject.toml", "README.md", "workflow", "pacs", "config", "results", "tests", "docs",
             "LICENSE", "CITATION.cff"}  # fmt: skip
EXTERNAL = ("http://", "https://", "mailto:")

INLINE_TARGET = re.compile(
    r"\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
)
REFERENCE_TARGET = re.compile(r"^ {0,3}\[[^\]]+\]:[ \t]*(<[^>\n]*>|\S+)", re.MULTILINE)
HTML_TARGET = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*(?:\"([^\"]*)\"|'([^']*)')", re.IGNORECASE)
HTML_ANCHOR = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.IGNORECASE)
ATX_HEADING = re.compile(r"^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


class Problem(NamedTuple):
    path: Path
    line: int
    target: str
    why: str
    leaves: bool  # the target lies outside the repository (a relative path climbing out, or an absolute one)

    def __str__(self) -> str:
        where = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{where}:{self.line}: {self.target}: {self.why}"


def user_pages() -> list[Path]:
    """The user documentation: README.md, docs/**/*.md, config/, workflow/ and tests/README.md (those that exist)."""
    pages = [README, *sorted((ROOT / "docs").glob("**/*.md"))]
    return [p for p in pages + [ROOT / d / "README.md" for d in ("config", "workflow", "tests")] if p.is_file()]


# --- anchors ---------------------------------------------------------------------------------------------------------


def heading_text(markdown: str) -> str:
    """A heading's text as GitHub renders it: code spans keep their content, links and images their text, HTML
    tags and emphasis markers go."""
    parts = re.split(r"(`+)(.*?)\1", markdown)
    out = []
    for i in range(0, len(parts), 3):  # prose, then (fence, code) pairs
        prose = parts[i]
        while doc_metrics.LINK.search(prose):
            prose = doc_metrics.LINK.sub(lambda m: m.group(1), prose)
        prose = re.sub(r"<[^>]+>", "", prose)
        out.append(re.sub(r"\*+|(?<!\w)_+|_+(?!\w)", "", prose))
        if i + 2 < len(parts):
            out.append(parts[i + 2].strip())
    return "".join(out)


def slug(text: str) -> str:
    """GitHub's anchor of a heading's rendered text: lowercased, every character that is not a letter, digit, mark,
    ``-``, ``_`` or space dropped (non-ASCII letters such as β kept), each space a ``-``."""
    kept = "".join(c for c in text.strip().lower()
                   if c.isalnum() or c in "-_ " or unicodedata.category(c).startswith("M"))  # fmt: skip
    return kept.replace(" ", "-")


def headings(text: str) -> list[str]:
    """The page's headings' rendered text, in order (ATX ``#`` headings and setext ones, outside code blocks)."""
    lines = doc_metrics.without_code_and_comments(text)
    found = []
    for i, line in enumerate(lines):
        match = ATX_HEADING.match(line)
        if match:
            found.append(heading_text(match.group(1) or ""))
        elif (i + 1 < len(lines) and re.match(r"^ {0,3}(=+|-+)\s*$", lines[i + 1]) and line.strip()
              and not doc_metrics.LIST_ITEM.match(line) and not line.lstrip().startswith("|")
              and not re.match(r"^ {0,3}(=+|-+)\s*$", line)):  # fmt: skip
            found.append(heading_text(line.strip()))
    return found


def anchors(text: str) -> set[str]:
    """Every fragment a link into the page may name: its headings' anchors (a repeated one gets ``-1``, ``-2``, ...
    as on GitHub) and the ids and names of its HTML elements."""
    seen: dict[str, int] = {}
    found = set()
    for heading in headings(text):
        base = slug(heading)
        anchor = base if base not in seen else f"{base}-{seen[base]}"
        seen[base] = seen.get(base, 0) + 1
        while anchor in found:  # "a" twice, then a heading "a-1": GitHub moves on
            anchor = f"{base}-{seen[base]}"
            seen[base] += 1
        found.add(anchor)
    return found | set(HTML_ANCHOR.findall("\n".join(doc_metrics.without_code_and_comments(text))))


# --- links -----------------------------------------------------------------------------------------------------------


def prose_only(text: str) -> str:
    """The page with fenced blocks, HTML comments and inline code spans blanked, line numbers kept."""
    kept = "\n".join(doc_metrics.without_code_and_comments(text))
    blocks = re.split(r"(\n[ \t]*\n)", kept)  # a code span does not cross a blank line
    return "".join(doc_metrics.CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), b) for b in blocks)


def link_targets(text: str) -> list[tuple[int, str]]:
    """``(line, target)`` of every link and image: inline ``[text](target)``, reference definitions
    ``[ref]: target``, ``<a href>`` and ``<img src>``; none inside code."""
    prose = prose_only(text)
    found = [(m.start(1), m.group(1)) for m in INLINE_TARGET.finditer(prose)]
    found += [(m.start(1), m.group(1)) for m in REFERENCE_TARGET.finditer(prose)]
    found += [(m.start(), m.group(1) if m.group(1) is not None else m.group(2)) for m in HTML_TARGET.finditer(prose)]
    targets = [(prose.count("\n", 0, at) + 1, t[1:-1] if t.startswith("<") and t.endswith(">") else t)
               for at, t in found]  # fmt: skip
    return sorted(targets)


def check_target(path: Path, text: str, line: int, target: str, root: Path = ROOT) -> Problem | None:
    """What is wrong with one link of the page ``path`` (whose text is ``text``), or None."""
    problem = lambda why, leaves=False: Problem(path, line, target, why, leaves)  # noqa: E731
    if target.lower().startswith(EXTERNAL):
        return None
    if target.lower().startswith("file:") or target.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", target):
        return problem("an absolute local path: link within the repository, relatively", leaves=True)
    if SCHEME.match(target):
        return problem("neither http(s), mailto nor a relative path")
    location, _, fragment = target.partition("#")
    location = unquote(location.split("?")[0])
    fragment = unquote(fragment)
    if not location:
        if fragment and fragment not in anchors(text):
            return problem(f"no heading of {path.name} has the anchor #{fragment}")
        return None
    if location.startswith("~"):
        return problem("a path in a home directory: link within the repository, relatively", leaves=True)
    resolved = Path(os.path.normpath(path.parent / location))
    if not resolved.is_relative_to(root):
        return problem("leaves the repository", leaves=True)
    if not resolved.exists():
        return problem("no such file or directory")
    if fragment and resolved.is_file() and resolved.suffix.lower() in (".md", ".markdown"):
        if fragment not in anchors(resolved.read_text(encoding="utf-8")):
            return problem(f"no heading of {resolved.relative_to(root)} has the anchor #{fragment}")
    return None


def check_links(path: Path, text: str, root: Path = ROOT) -> list[Problem]:
    """Every broken link and image of the page ``path`` whose text is ``text``."""
    found = (check_target(path, text, line, target, root) for line, target in link_targets(text))
    return [p for p in found if p is not None]


def every_problem() -> list[Problem]:
    return [p for page in user_pages() for p in check_links(page, page.read_text(encoding="utf-8"))]


def listed(problems: list[Problem]) -> str:
    return "\n".join(map(str, problems))


# --- README.md -------------------------------------------------------------------------------------------------------


def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_the_readme_is_at_most_200_lines():
    lines = len(readme().splitlines())
    assert lines <= MAX_README_LINES, f"README.md is {lines} lines, at most {MAX_README_LINES}"


def test_the_readme_s_first_command_comes_within_its_first_30_lines():
    line = doc_metrics.first_command_line(readme())
    assert line is not None, "README.md has no sh/bash/console/shell code block"
    assert line <= FIRST_COMMAND_WITHIN, (
        f"README.md's first command is on line {line}, past line {FIRST_COMMAND_WITHIN}"
    )


def test_the_readme_s_median_sentence_is_under_25_words():
    median = doc_metrics.median_sentence_words(readme())
    longest = "\n".join(f"  {doc_metrics.words(s)} words: {s[:160]}{'...' if len(s) > 160 else ''}"
                        for s in doc_metrics.longest_sentences(readme()))  # fmt: skip
    assert median < MEDIAN_SENTENCE_UNDER, (
        f"README.md's median sentence is {median} words, not under {MEDIAN_SENTENCE_UNDER}; the longest:\n{longest}"
    )


# --- links -----------------------------------------------------------------------------------------------------------


def test_every_relative_link_of_the_user_docs_resolves():
    broken = [p for p in every_problem() if not p.leaves]
    assert broken == [], f"{len(broken)} broken links:\n{listed(broken)}"


def test_no_link_of_the_user_docs_leaves_the_repository():
    """A link must work for whoever reads the repository on its own: no ``../shared/...`` or absolute local path."""
    leaving = [p for p in every_problem() if p.leaves]
    assert leaving == [], f"{len(leaving)} links leave the repository:\n{listed(leaving)}"


def test_no_default_of_the_workflow_config_points_outside_the_repository():
    """A default a user never set must not name a place beside their checkout (``data.local_dir`` once defaulted
    to ``../shared/data``, this project's own test data)."""
    import yaml

    def defaults(node):
        if isinstance(node, dict):
            if isinstance(node.get("default"), str):
                yield node["default"]
            for value in node.values():
                yield from defaults(value)

    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    outside = [d for d in defaults(schema) if d.startswith(("../", "/"))]
    assert outside == [], outside


def test_readme_s_pass_at_k_ranges_are_the_configs():
    """README's v1/v2 table says up to which k each paper config reports pass@k: the largest `ks` of the benchmarks
    it names (v1 once claimed pass@1…256 on MATH-500, whose ks stop at 32)."""
    import yaml

    row = next(line for line in readme().splitlines() if line.startswith("| evaluation |"))
    v1, v2 = (cell.strip() for cell in row.strip("|").split("|")[1:3])
    for cell, config in ((v1, "config/config.yaml"), (v2, "config/paper_v2.yaml")):
        ks = {b: max(spec["ks"]) for b, spec in yaml.safe_load((ROOT / config).read_text())["data"]["benchmarks"]
              .items()}  # fmt: skip
        claims = re.findall(r"pass@1…(\d+)(?: on ([^(;]+?))?(?: \(|$|,)", cell)
        assert claims, cell
        for top, where in claims:
            named = [b for b, label in (("math500", "MATH-500"), ("amc23", "AMC23"), ("aime2024", "AIME 2024"))
                     if label in (where or "")] or [b for b in ks if b in ("amc23", "aime2024", "aime2025")]
            assert all(ks[b] == int(top) for b in named), (cell, top, named, ks)
        for label, bench in (("MATH-500: pass@1…", "math500"),):
            if label in cell:
                assert f"{label}{ks[bench]}" in cell, (cell, ks[bench])


def test_every_user_page_is_one_click_from_the_readme():
    linked = set()
    for _, target in link_targets(readme()):
        location = unquote(target.partition("#")[0])
        if location and not SCHEME.match(location) and not location.startswith("/"):
            linked.add(Path(os.path.normpath(ROOT / location)))
    pages = sorted((ROOT / "docs").glob("*.md")) + [p for p in [ROOT / "config" / "README.md"] if p.is_file()]
    unlinked = [str(p.relative_to(ROOT)) for p in pages if p not in linked]
    assert unlinked == [], f"not linked from README.md: {unlinked}"


def test_the_link_checker_reports_what_is_broken():
    page = ROOT / "docs" / "example.md"
    text = "\n".join([
        "# Example",
        "## Results in wandb",
        "### Before submitting: `pacs plan`",
        "## β sweep",
        "## Results in wandb",
        "[ok](#results-in-wandb) [ok](#results-in-wandb-1) [ok](#before-submitting-pacs-plan) [ok](#β-sweep)",
        "[ok](../README.md) [ok](../pacs) [ok](https://example.org/x) [ok](mailto:a@b.c)",
        "[missing](no_such_file.md)",
        "[bad fragment](#no-such-heading)",
        "[outside](../../outside.md)",
        "![image](../no_such_image.png) <a href=\"/work/elsewhere.md\">abs</a> [file](file:///tmp/x.md)",
        "`[in code](no_such_file.md)`",
        "```sh",
        "[in a block](no_such_file.md)",
        "```",
        "[shared](../../shared/paper/README.md)",
    ])  # fmt: skip
    found = {(p.line, p.target, p.leaves) for p in check_links(page, text)}
    assert found == {
        (8, "no_such_file.md", False),
        (9, "#no-such-heading", False),
        (10, "../../outside.md", True),
        (11, "../no_such_image.png", False),
        (11, "/work/elsewhere.md", True),
        (11, "file:///tmp/x.md", True),
        (16, "../../shared/paper/README.md", True),
    }
    assert "no heading of example.md" in str(check_links(page, "[x](#nope)")[0])
    readme_fragment = check_links(ROOT / "README.md", "[x](README.md#no-such-heading-anywhere)")
    assert len(readme_fragment) == 1 and "no heading of README.md" in readme_fragment[0].why


def test_anchors_are_github_s():
    assert slug("Before submitting: pacs plan") == "before-submitting-pacs-plan"
    assert slug("PACS v2 (β = 1), 8 × H200!") == "pacs-v2-β--1-8--h200"
    assert slug("snake_case & dashes - here") == "snake_case--dashes---here"
    assert anchors('# A\n## A\n## A\ntext\nSetext\n---\n<a id="x"></a>') == {"a", "a-1", "a-2", "setext", "x"}
    assert headings("```\n# not a heading\n```\n# [Linked](x.md) `code_x` **bold**") == ["Linked code_x bold"]


def test_the_prose_metrics_split_sentences_as_a_reader_would():
    text = "\n".join([
        "# Title", "", "One two three, e.g. four vs. five (Fig. 3) and 0.6 of § 3. Still one.", "",
        "- A list item: Its own paragraph. And `code here` [a link](x.md).", "| a | table |", "```sh", "pacs run",
        "```", "[only a link](x.md)", "<!-- a comment. Not prose. -->",
    ])  # fmt: skip
    assert doc_metrics.prose_sentences(text) == [
        "One two three, e.g. four vs. five (Fig. 3) and 0.6 of § 3. Still one.",
        "A list item:", "Its own paragraph.", "And CODE a link.",
    ]  # fmt: skip
    assert doc_metrics.first_command_line(text) == 8
    assert doc_metrics.median_sentence_words(text) == statistics.median([16, 3, 3, 4])


# --- the top level ---------------------------------------------------------------------------------------------------


def repository_files() -> list[str]:
    """The repository's files as git lists them (tracked, and untracked ones not ignored): venvs, egg-info and
    results of runs do not count."""
    try:
        listing = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                 capture_output=True, text=True, check=True).stdout  # fmt: skip
    except (OSError, subprocess.CalledProcessError) as error:
        pytest.skip(f"no git listing of the repository: {error}")
    return [line for line in listing.splitlines() if line]


def test_the_top_level_holds_only_what_a_reader_expects():
    """Dot-files and dot-directories are allowed."""
    names = {name.split("/")[0] for name in repository_files()}
    extra = sorted(n for n in names if not n.startswith(".") and n not in TOP_LEVEL)
    assert extra == [], f"unexpected at the top level: {extra} (allowed: {sorted(TOP_LEVEL)})"


# --- sections cited in the code and configs --------------------------------------------------------------------------

CITED = re.compile(
    r"(?P<file>\b(?:docs/[\w.-]+?|tests/README|config/README|workflow/README|README)(?:\.md)?)`?"
    r"(?:,\s*\(?|\s+\()\\?[\"'](?P<section>[A-Za-z0-9][^\"'\\]*?)\\?[\"']"
)
WRAP = re.compile(r"\n[ \t]*(?:#|//|\*)?[ \t]*")  # a comment's line break and marker, read as one space


def cited_sections(text: str) -> list[tuple[int, str, str]]:
    """(line, file, section) of every ``FILE.md, "Section"`` (or ``README ("Section")``) citation, a comment's
    line breaks and markers read as spaces."""
    flat, where, last = [], [], 0  # the text with wraps as spaces, and each flat character's line
    line = 1
    for m in WRAP.finditer(text):
        flat.append(text[last : m.start()])
        where += [line] * (m.start() - last)
        flat.append(" ")
        where.append(line)
        line += 1
        last = m.end()
    flat.append(text[last:])
    where += [line] * (len(text) - last)
    flat = "".join(flat)
    found = []
    for m in CITED.finditer(flat):
        name = m.group("file") if m.group("file").endswith(".md") else m.group("file") + ".md"
        found.append((where[m.start()], name, " ".join(m.group("section").split())))
    return found


def section_exists(page: Path, section: str) -> bool:
    """A heading that is the section, or begins with it before a parenthesis, colon or comma: ``Plan (`pacs plan`)``."""
    return any(h == section or re.match(re.escape(section) + r"\s*[(:,]", h) for h in headings(page.read_text()))


def test_every_section_a_file_cites_exists():
    """Code comments, configs, help texts and pages cite sections of the docs as ``docs/x.md, "Section"``: each
    such page has that heading, so a moved or renamed section is found where it is cited."""
    listing = repository_files()
    suffixes = (".py", ".yaml", ".yml", ".toml", ".smk", ".md", ".rst", ".cff")
    missing = []
    for name in listing:
        path = ROOT / name
        snakemake = name.endswith("Snakefile")  # the top-level one and workflow/Snakefile
        if not (name.endswith(suffixes) or snakemake) or not path.is_file() or name == "tests/test_docs.py":
            continue
        for line, cited, section in cited_sections(path.read_text(encoding="utf-8")):
            page = ROOT / cited
            if not page.is_file() or not section_exists(page, section):
                missing.append(f"{name}:{line}: {cited}, \"{section}\"")
    assert missing == [], "sections cited that their page does not have:\n" + "\n".join(missing)


def test_citations_are_read_across_a_comment_s_line_breaks():
    text = 'x = 1\n# as it says (docs/cluster.md,\n#   "2. Install") and README ("Test it"); README\'s own\n'
    assert cited_sections(text) == [(2, "docs/cluster.md", "2. Install"), (3, "README.md", "Test it")]
    assert section_exists(ROOT / "docs" / "cluster.md", "2. Install")
    assert not section_exists(ROOT / "docs" / "cluster.md", "2. Ins")
