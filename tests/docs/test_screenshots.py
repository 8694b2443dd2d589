"""The docs' pictures are made by the tools, kept small, and each one is shown by a page.

Goal: `python3 build.py screenshots` remakes every picture in docs/images/ from the code and
the kept results, none grows past IMAGE_BYTES_MAX, and no picture is committed that no page
shows (nor a page shows one that is missing: the strict docs build fails on that). Method: run
the chart and chaos makers into a temporary directory and open what they wrote with Pillow;
the console maker (a cluster and Chromium) runs in the slow lane.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from PIL import Image

from tests.docs import screenshots

ROOT = Path(__file__).resolve().parents[2]


def _check(paths: list[Path]) -> None:
    assert paths
    for path in paths:
        assert 2_000 < path.stat().st_size <= screenshots.IMAGE_BYTES_MAX, path
        with Image.open(path) as image:
            assert image.format == "PNG" and image.width >= 600, (path, image.size)


def test_the_charts_and_the_timeline_are_made_small(tmp_path: Path) -> None:
    _check(screenshots.MAKERS["bench"](tmp_path) + screenshots.MAKERS["chaos"](tmp_path))
    assert {p.name for p in tmp_path.iterdir()} == {
        "bench-peers.png", "bench-recut.png", "chaos-timeline.png"}


def test_a_large_picture_is_reduced_until_it_fits(tmp_path: Path) -> None:
    import io
    import random

    noise = Image.new("RGB", (900, 700))
    rng = random.Random(7)
    noise.putdata([(rng.randrange(256), rng.randrange(256), rng.randrange(256))
                   for _ in range(900 * 700)])
    raw = io.BytesIO()
    noise.save(raw, format="PNG")
    assert raw.tell() > screenshots.IMAGE_BYTES_MAX
    small = screenshots.save_small(raw.getvalue(), tmp_path / "noise.png")
    with Image.open(small) as image:
        assert image.mode == "P" and image.size == (900, 700)


def test_every_committed_picture_is_shown_and_small() -> None:
    images = sorted((ROOT / "docs" / "images").glob("*.png"))
    assert {p.stem for p in images} >= {"console", "chaos-timeline", "bench-peers"}
    _check(images)
    pages = "".join(p.read_text() for p in (ROOT / "docs").glob("**/*.md"))
    shown = set(re.findall(r"images/([\w.-]+\.png)\)", pages))
    assert {p.name for p in images} <= shown, {p.name for p in images} - shown


@pytest.mark.slow
@pytest.mark.integration
def test_the_console_screenshot_shows_the_cluster(tmp_path: Path) -> None:
    _check(screenshots.MAKERS["console"](tmp_path))
