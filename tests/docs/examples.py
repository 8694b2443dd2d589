"""The fenced ```python and ```bash blocks of README.md and docs/**/*.md, with their opt-outs.

Every such block is run by tests/docs/test_examples_run.py. A block that cannot run on one
machine in a test (it needs several machines, installs from PyPI, starts a server in the
foreground, runs the whole suite) says so in the page's source on the line right above its
fence, with the reason:

    <!-- not run: needs three machines; tests/integration/test_cluster_plan.py runs plan -->

A block that runs but takes long (a failover, a long poll) says `<!-- slow: reason -->` instead:
its page then runs in the slow lane. A marker without a reason is refused, so an opt-out is
always explained where it is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(?P<lang>\w*)[^\n]*\n(?P<body>.*?)^```$", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"<!--\s*(?P<kind>not run|slow):(?P<reason>.*?)-->\s*\Z", re.DOTALL)
RUN_LANGS = ("python", "bash")


@dataclass(frozen=True)
class Example:
    page: str            # path relative to the repository root
    line: int            # 1-based line of the opening fence
    lang: str            # python or bash
    body: str
    not_run: str | None  # the reason given by a <!-- not run: ... --> marker, if any
    slow: str | None     # <!-- slow: reason -->: runs in the slow lane only

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]


def examples(page: Path) -> list[Example]:
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        if match.group("lang") not in RUN_LANGS:
            continue
        before = text[:match.start()].rstrip("\n")
        marker = MARKER.search(before.rsplit("\n", 1)[-1] + "\n" if before else "")
        marks: dict[str, str | None] = {"not run": None, "slow": None}
        if marker is not None:
            marks[marker.group("kind")] = marker.group("reason").strip()
            if not marker.group("reason").strip():
                raise ValueError(f"{page.name}: a '{marker.group('kind')}' marker needs a reason")
        found.append(Example(_name(page), text.count("\n", 0, match.start()) + 1,
                             match.group("lang"), match.group("body"), marks["not run"],
                             marks["slow"]))
    return found


def _name(page: Path) -> str:
    """The page's path from the repository root (or as given, for a page elsewhere)."""
    return str(page.relative_to(ROOT)) if page.is_relative_to(ROOT) else str(page)


def all_examples() -> list[Example]:
    return [example for page in pages() for example in examples(page)]
