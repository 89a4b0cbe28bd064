"""The docs the code cites exist: every ``docs/<page>.md#<section>`` named in the source tree is a page
with that heading, and the pages' own links resolve, so citations cannot rot.

Anchors are computed as MkDocs computes them (Python-Markdown's ``toc`` slugify), so what passes here
also resolves on the docs site built with ``--strict``.
"""

from __future__ import annotations

import os
import re
import unicodedata
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
# Where citations may appear: every folder of code, and the files at the root that name docs pages.
CITING_DIRS = ("trainer", "webapp", "tasks_lib", "bench", "tests", "templates", "static", ".ci")
CITING_FILES = (
    "README.md",
    "Makefile",
    "pyproject.toml",
    "docker-compose.yml",
    "Dockerfile",
    "Dockerfile.gpu",
)
CITING_SUFFIXES = {".py", ".html", ".md", ".sh", ".txt", ".toml", ".yml", ".yaml", ".js", ".css", ""}
# Caches, and vendored code that is not ours to cite anything.
SKIPPED_DIRS = {"__pycache__", "vendor", "fixtures"}

CITATION = re.compile(r"docs/([\w.-]+\.md)(?:#([\w-]+))?")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# Markup that Markdown drops from a heading's text before the anchor is made from it.
INLINE_MARKUP = re.compile(r"`|\*\*?|\[([^\]]*)\]\([^)]*\)")


def slugify(text: str) -> str:
    """Python-Markdown's toc slugify (MkDocs' default): ASCII, no punctuation, lower case, hyphens."""
    text = INLINE_MARKUP.sub(lambda m: m.group(1) or "", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def outside_fences(text: str) -> list[str]:
    """The page's lines that are not inside fenced code blocks."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def headings(page: Path) -> list[tuple[int, str]]:
    """(level, anchor) of every heading of a docs page."""
    found = []
    for line in outside_fences(page.read_text(encoding="utf-8")):
        match = HEADING.match(line)
        if match:
            found.append((len(match.group(1)), slugify(match.group(2))))
    return found


@cache
def anchors(page_name: str) -> frozenset[str]:
    return frozenset(anchor for _, anchor in headings(DOCS / page_name))


def pages() -> list[Path]:
    return sorted(DOCS.glob("*.md"))


@cache
def source_texts() -> tuple[tuple[Path, str], ...]:
    """(path, text) of every file a citation may appear in, read once for all the tests here."""
    paths = [ROOT / name for name in CITING_FILES if (ROOT / name).is_file()]
    for folder in CITING_DIRS:
        for directory, subdirectories, names in os.walk(ROOT / folder):
            subdirectories[:] = [name for name in subdirectories if name not in SKIPPED_DIRS]
            paths += [Path(directory) / name for name in names if Path(name).suffix in CITING_SUFFIXES]
    texts = []
    for path in sorted(paths):
        try:
            texts.append((path, path.read_text(encoding="utf-8")))
        except UnicodeDecodeError:
            continue  # a binary asset
    return tuple(texts)


def citations() -> list[tuple[str, str, str | None]]:
    """(where, page, anchor or None) of every docs citation in the source tree."""
    found = []
    for path, text in source_texts():
        for number, line in enumerate(text.splitlines(), start=1):
            for match in CITATION.finditer(line):
                found.append((f"{path.relative_to(ROOT)}:{number}", match.group(1), match.group(2)))
    return found


def broken_citations() -> list[str]:
    problems = []
    for where, page, anchor in citations():
        if not (DOCS / page).is_file():
            problems.append(f"{where}: docs/{page} does not exist")
        elif anchor is not None and anchor not in anchors(page):
            problems.append(f"{where}: docs/{page} has no section #{anchor}")
    return problems


def test_every_docs_section_the_code_cites_exists() -> None:
    assert citations(), "found no docs citations at all: the scan itself is broken"
    assert broken_citations() == []


# Notes kept outside the repository must not be cited: a maintainer of it cannot open them. They were
# cited by section sign ("<name> §3") or by file name.
OUTSIDE_MARKS = ("§", "DESIGN.md", "STYLE.md")


def test_no_comment_cites_a_file_outside_the_repository() -> None:
    outside = [
        f"{path.relative_to(ROOT)}:{number}"
        for path, text in source_texts()
        if path != Path(__file__).resolve()  # this file names the marks it looks for
        for number, line in enumerate(text.splitlines(), start=1)
        if any(mark in line for mark in OUTSIDE_MARKS)
    ]
    assert outside == []


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.name)
def test_each_page_has_one_title_and_unique_section_anchors(page: Path) -> None:
    found = headings(page)
    titles = [anchor for level, anchor in found if level == 1]
    assert len(titles) == 1, f"{page.name} has {len(titles)} level-1 headings; MkDocs wants one title"
    assert found[0][0] == 1, f"{page.name} must start with its title"
    section_anchors = [anchor for _, anchor in found]
    repeated = sorted({anchor for anchor in section_anchors if section_anchors.count(anchor) > 1})
    assert repeated == [], f"{page.name}: headings with the same anchor get unstable suffixes: {repeated}"


@pytest.mark.parametrize("page", pages(), ids=lambda page: page.name)
def test_each_relative_link_of_a_page_resolves(page: Path) -> None:
    problems = []
    for line in outside_fences(page.read_text(encoding="utf-8")):
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto: — not ours to check offline
            file_part, _, anchor = target.partition("#")
            linked = (page.parent / file_part).resolve() if file_part else page
            if linked.parent != DOCS or linked.suffix != ".md" or not linked.is_file():
                problems.append(f"{target}: not a page of docs/ (MkDocs --strict refuses it)")
            elif anchor and anchor not in anchors(linked.name):
                problems.append(f"{target}: {linked.name} has no section #{anchor}")
    assert problems == []


def test_the_anchor_rule_is_python_markdowns() -> None:
    assert slugify("The verl alias table") == "the-verl-alias-table"
    assert slugify("reinforce (loss)") == "reinforce-loss"
    assert slugify("`token_gae`") == "token_gae"
    assert slugify("Rows as Agent-R1 writes them") == "rows-as-agent-r1-writes-them"
    assert slugify("Ray's jobs — stop") == "rays-jobs-stop"
