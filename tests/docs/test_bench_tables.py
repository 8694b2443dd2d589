"""The benchmark pages' tables come from the kept JSON results, and cite nothing else.

Goal: a figure on a benchmark page is one a benchmark wrote down (tests/bench/results/*.json),
shown with the command, date and machine of its run; a page citing a key the file does not
have fails the build. Method: drive docs/hooks/bench_tables.py on the real pages and on
markers that cite a missing key, section or file, or leave the machine unknown.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests.docs.hooks import load_hook

ROOT = Path(__file__).resolve().parents[2]
KEPT = "bench-all-20261125T130828Z.json"


def _hook() -> Any:
    return load_hook("bench_tables")


def test_every_benchmark_page_with_kept_json_shows_it() -> None:
    hook = _hook()
    pages = sorted((ROOT / "docs" / "benchmarks").glob("*.md"))
    rendered = {page.name: hook.replace_markers(page.read_text(), page.name) for page in pages}
    for name in ("storage.md", "broker.md", "ha.md", "controller.md", "failover.md",
                 "tier.md", "spark.md", "latency.md", "peers.md", "all.md"):
        assert "<!-- bench-table" not in rendered[name], name
        assert "figures from `tests/bench/results/" in rendered[name], name
    kept = json.loads((ROOT / "tests" / "bench" / "results" / KEPT).read_text())
    assert "2026-11-25 13:08 UTC" in rendered["failover.md"]
    assert f"| {kept['failover']['lost_acked']} | `lost_acked` |" in rendered["failover.md"]


def test_a_figure_the_json_does_not_have_fails() -> None:
    hook = _hook()
    page = f"<!-- bench-table {KEPT} broker\nmachine: m\ncommand: c\nno_such_p50_ms | x | ms\n-->\n"
    with pytest.raises(hook.BenchTableError, match=r"x\.md.*'no_such_p50_ms'"):
        hook.replace_markers(page, "x.md")
    with pytest.raises(hook.BenchTableError, match="no 'nothere'"):
        hook.replace_markers(page.replace(" broker\n", " nothere\n"), "x.md")
    with pytest.raises(hook.BenchTableError, match="not in tests/bench/results"):
        hook.replace_markers(page.replace(KEPT, "gone.json"), "x.md")


def test_a_run_without_command_date_or_machine_fails() -> None:
    hook = _hook()
    page = f"<!-- bench-table {KEPT} broker\nproduce_single_p50_ms | p50 | ms\n-->\n"
    with pytest.raises(hook.BenchTableError, match="says no command, machine"):
        hook.replace_markers(page, "x.md")
    shown = hook.replace_markers(page.replace("\nproduce", "\nmachine: M1\ncommand: C1\nproduce"))
    assert re.search(r"`C1` on 2026-11-25 13:08 UTC; M1", shown)
    assert "| p50 | 0.286 ms | `produce_single_p50_ms` |" in shown


def test_figures_read_as_a_reader_scans_them() -> None:
    hook = _hook()
    assert [hook.figure(v) for v in (318125.1171, 0.28651, 20, 1.7897, 0.0, "x")] == [
        "318,125", "0.287", "20", "1.79", "0", "x"]
