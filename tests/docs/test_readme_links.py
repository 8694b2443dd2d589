"""The README's links resolve: into the docs pages, their headings, and its own headings.

Goal: the README is read on GitHub, where MkDocs' strict build does not look; a renamed page or
heading must not leave it pointing nowhere. Method: every relative link of README.md names an
existing file; a `#anchor` on README.md itself (or alone) is one of its headings as GitHub
spells anchors; a `#anchor` on a docs page is one of that page's headings as MkDocs spells them
(Python-Markdown's toc slugify, which mkdocs.yml's toc uses) or an explicit `{#id}`. The
anchor rules are checked on known headings first, so a wrong slug rule fails rather than passes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
LINK = re.compile(r"(?<!!)\[[^\]]*\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$", re.MULTILINE)
CODE = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)


def _headings(text: str) -> list[str]:
    return [m.group("title") for m in HEADING.finditer(CODE.sub("", text))]


def _unique(base: str, taken: set[str], separator: str) -> str:
    """`base`, or base + separator + 1, 2... when a heading earlier on the page has it."""
    anchor, n = base, 0
    while anchor in taken:
        n += 1
        anchor = f"{base}{separator}{n}"
    return anchor


def github_anchors(text: str) -> set[str]:
    """GitHub's heading ids: lower case, punctuation but '-' and '_' dropped, spaces to '-',
    a repeated id numbered -1, -2..."""
    anchors: set[str] = set()
    for title in _headings(text):
        title = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", title)
        anchors.add(_unique(re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-"), anchors,
                            "-"))
    return anchors


def mkdocs_anchors(text: str) -> set[str]:
    """MkDocs' heading ids (toc's slugify, with `_1` for a repeat) and explicit {#id}s."""
    anchors: set[str] = set()
    for title in _headings(text):
        explicit = re.search(r"\{[^}]*#([\w-]+)[^}]*\}\s*$", title)
        if explicit:
            anchors.add(explicit.group(1))
            continue
        anchors.add(_unique(slugify(re.sub(r"<[^>]+>", "", title.replace("`", "")), "-"),
                            anchors, "_"))
    return anchors


def _links() -> list[str]:
    return [m.group("target") for m in LINK.finditer(CODE.sub("", README.read_text()))]


def test_the_anchor_rules_spell_known_headings() -> None:
    text = "# Quickstart (five minutes)\n## The demo (`python3 build.py demo`) from a checkout\n"
    assert github_anchors(text) == {"quickstart-five-minutes",
                                    "the-demo-python3-buildpy-demo-from-a-checkout"}
    assert mkdocs_anchors(text) == {"quickstart-five-minutes",
                                    "the-demo-python3-buildpy-demo-from-a-checkout"}
    assert github_anchors("## A\n## A\n") == {"a", "a-1"}
    assert mkdocs_anchors("## A\n## A\n## B {#own}\n") == {"a", "a_1", "own"}


def test_the_readme_links_into_the_docs() -> None:
    targets = _links()
    assert sum(t.startswith("docs/") for t in targets) >= 5, targets


@pytest.mark.parametrize("target", sorted(set(_links())))
def test_a_readme_link_resolves(target: str) -> None:
    if re.match(r"[a-z]+:", target):
        return  # an absolute URL: not ours to check offline
    path, _, anchor = target.partition("#")
    page = (ROOT / path) if path else README
    assert page.is_file(), f"README.md links to {path}, which does not exist"
    if anchor:
        text = page.read_text()
        known = github_anchors(text) if page == README else mkdocs_anchors(text)
        assert anchor in known, f"README.md: {target}: no such heading (have {sorted(known)})"
