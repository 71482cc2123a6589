"""How readable a Markdown page is, measured the same way every time: its length in lines, the line of its first
command, and the length of its prose sentences.

The prose is what is left of the page once fenced code blocks, HTML comments, table rows, headings, blank lines and
lines holding nothing but links or images are taken out. The remaining lines of each paragraph are joined (a list
item is a paragraph of its own), an inline code span becomes the one word ``CODE`` and a link ``[text](url)`` its
text; the paragraph is then cut into sentences after ``.``, ``!``, ``?`` or ``:`` where whitespace and then an
uppercase letter, a backtick or the paragraph's end follow, but not after an abbreviation ("e.g.", "i.e.", "vs.",
"Fig.", ...) or a section number ("§ 3."). A sentence's length is its count of whitespace-separated words.

The first command is the first non-blank line inside the page's first fenced block whose info string is ``sh``,
``bash``, ``console`` or ``shell`` (1-based line number).

Stdlib only. ``tests/test_docs.py`` imports it; as a script, ``python tests/doc_metrics.py README.md`` prints the
figures and the five longest sentences.
"""

import re
import statistics
import sys
from pathlib import Path

COMMAND_LANGUAGES = {"sh", "bash", "console", "shell"}
LONG_SENTENCE = 40  # words: the script reports the share of sentences longer than this

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
HEADING = re.compile(r"^ {0,3}#{1,6}(\s|$)")
SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)\s*$")
LINK_OR_IMAGE = r"!?\[(?:[^\[\]]|\[[^\]]*\]\([^)]*\))*\]\([^)]*\)"
ONLY_LINKS = re.compile(rf"^\s*(?:(?:{LINK_OR_IMAGE}|<(?:img|a)\b[^>]*>(?:[^<]*</a>)?)\s*)+$")
LIST_ITEM = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")
QUOTE = re.compile(r"^\s*(?:>\s?)+")
CODE_SPAN = re.compile(r"(`+)(?!`).*?(?<!`)\1(?!`)", re.DOTALL)
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\([^)]*\)")
BOUNDARY = re.compile(r"[.!?:](?=\s+(?:[*_\"“‘'(\[]*[A-Z`]|$))")
ABBREVIATIONS = {"e.g.", "i.e.", "vs.", "cf.", "fig.", "figs.", "eq.", "eqs.", "sec.", "tab.", "no.", "al.",
                 "approx.", "resp.", "ch.", "p.", "pp.", "vol.", "dr.", "mr.", "ms.", "st."}  # fmt: skip
SECTION_NUMBER = re.compile(r"§\s*[\d.]*$")


def fenced_blocks(lines: list[str]) -> list[tuple[int, int, str]]:
    """Each fenced code block as (index of its opening fence, index past its closing fence, info string); a block
    left open runs to the page's end."""
    blocks, i = [], 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        fence, end = match.group(1), i + 1
        while end < len(lines) and not (lines[end].strip().startswith(fence) and set(lines[end].strip()) == {fence[0]}):
            end += 1
        blocks.append((i, min(end + 1, len(lines)), match.group(2).lower()))
        i = end + 1
    return blocks


def fenced_lines(lines: list[str]) -> list[bool]:
    """For each line, whether it belongs to a fenced code block (its fences included)."""
    flags = [False] * len(lines)
    for start, end, _ in fenced_blocks(lines):
        flags[start:end] = [True] * (end - start)
    return flags


def without_code_and_comments(markdown_text: str) -> list[str]:
    """The page's lines, fenced blocks and HTML comments blanked (so line numbers and paragraph breaks stay)."""
    lines = markdown_text.splitlines()
    kept = "\n".join("" if fenced else line for line, fenced in zip(lines, fenced_lines(lines), strict=True))
    return COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), kept).split("\n")


def paragraphs(markdown_text: str) -> list[str]:
    """The prose paragraphs, each one string (a list item starts a paragraph of its own)."""
    found: list[list[str]] = []
    current: list[str] = []

    def close() -> None:
        nonlocal current
        if current:
            found.append(current)
        current = []

    lines = without_code_and_comments(markdown_text)
    for i, line in enumerate(lines):
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if (not line.strip() or line.lstrip().startswith("|") or HEADING.match(line) or ONLY_LINKS.match(line)
                or SETEXT_UNDERLINE.match(line)):  # fmt: skip
            close()
            continue
        if SETEXT_UNDERLINE.match(following) and not LIST_ITEM.match(line):
            close()  # a setext heading's text
            continue
        line = QUOTE.sub("", line)
        if LIST_ITEM.match(line):
            close()
            line = LIST_ITEM.sub("", line)
        current.append(line.strip())
    close()
    return [" ".join(p) for p in found]


def plain(paragraph: str) -> str:
    """A paragraph with each inline code span the word ``CODE`` and each link its text."""
    text = CODE_SPAN.sub("CODE", paragraph)
    while LINK.search(text):
        text = LINK.sub(lambda m: m.group(1), text)
    return " ".join(text.split())


def is_abbreviation(before: str) -> bool:
    """Whether the text up to a full stop ends on an abbreviation or a section number, not a sentence."""
    tokens = before.split()
    last = tokens[-1].lstrip("(\"'*_") if tokens else ""
    initial = re.fullmatch(r"[A-Z]\.", last) is not None  # "J. Smith"
    return last.lower() in ABBREVIATIONS or initial or SECTION_NUMBER.search(before) is not None


def split_sentences(text: str) -> list[str]:
    sentences, start = [], 0
    for match in BOUNDARY.finditer(text):
        end = match.end()
        if match.group(0) == "." and is_abbreviation(text[start:end]):
            continue
        sentences.append(text[start:end].strip())
        start = end
    sentences.append(text[start:].strip())
    return [s for s in sentences if s]


def prose_sentences(markdown_text: str) -> list[str]:
    """The page's prose sentences, in order (see the module's docstring)."""
    return [s for p in paragraphs(markdown_text) for s in split_sentences(plain(p))]


def words(sentence: str) -> int:
    return len(sentence.split())


def median_sentence_words(markdown_text: str) -> float:
    """The median length of the page's prose sentences in words (0 where it has none)."""
    counts = [words(s) for s in prose_sentences(markdown_text)]
    return statistics.median(counts) if counts else 0


def first_command_line(markdown_text: str) -> int | None:
    """The 1-based line of the first command: the first non-blank line in the first ``sh``/``bash``/``console``/
    ``shell`` fenced block (None where there is no such block, or it is empty)."""
    lines = markdown_text.splitlines()
    for start, end, info in fenced_blocks(lines):
        if info in COMMAND_LANGUAGES:
            inside = [i for i in range(start + 1, end) if lines[i].strip() and not FENCE.match(lines[i])]
            return inside[0] + 1 if inside else None
    return None


def longest_sentences(markdown_text: str, count: int = 5) -> list[str]:
    return sorted(prose_sentences(markdown_text), key=words, reverse=True)[:count]


def report(markdown_text: str) -> str:
    sentences = prose_sentences(markdown_text)
    counts = [words(s) for s in sentences]
    long = sum(c > LONG_SENTENCE for c in counts)
    lines = [
        f"lines: {len(markdown_text.splitlines())}",
        f"first command line: {first_command_line(markdown_text)}",
        f"sentences: {len(sentences)}",
        f"median words per sentence: {median_sentence_words(markdown_text)}",
        f"over {LONG_SENTENCE} words: {long} ({100 * long / len(counts) if counts else 0:.0f} %)",
        "longest sentences:",
    ]
    lines += [f"  {words(s)} words: {s}" for s in longest_sentences(markdown_text)]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(f"usage: {argv[0]} PAGE.md", file=sys.stderr)
        return 2
    print(report(Path(argv[1]).read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
