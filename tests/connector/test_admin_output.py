"""rocketha-admin's output helpers (pure): aligned tables with numbers right-aligned, JSON
modes that print data only, and a progress line that appears on a terminal and never
elsewhere."""

from __future__ import annotations

import io
import json

import pytest

from connector.admin.output import Output, Progress, progress_line


def test_table_aligns_columns(capsys: pytest.CaptureFixture[str]) -> None:
    Output("table").rows(["name", "count"], [{"name": "orders", "count": 7},
                                             {"name": "a", "count": 1234}])
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["NAME    COUNT", "orders      7", "a        1234"]


def test_json_modes(capsys: pytest.CaptureFixture[str]) -> None:
    rows = [{"a": 1}, {"a": 2}]
    Output("json").rows(["a"], rows)
    assert json.loads(capsys.readouterr().out) == rows
    Output("json-lines").rows(["a"], rows)
    Output("json-lines").note("summary")
    captured = capsys.readouterr()
    assert [json.loads(line) for line in captured.out.splitlines()] == rows
    assert captured.err == "summary\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_only_on_a_terminal() -> None:
    terminal, pipe = _Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        progress = Progress("produced", 10, stream=stream)
        progress.add(4)
        progress.close()
    assert terminal.getvalue().startswith("\rproduced [#########---------------] 4/10 40% ")
    assert terminal.getvalue()[-1] == "\n"
    assert pipe.getvalue() == ""


def test_progress_line_is_a_bar_with_a_total_and_a_counter_without() -> None:
    assert progress_line("produced", 1200, 4800, 2400.4) == \
        "produced [######------------------] 1,200/4,800 25% 2,400/s"
    assert progress_line("consumed", 1200, None, 10.0) == "consumed 1,200 (10/s)"
    assert progress_line("x", 7, 5, 1.0).startswith("x [########################] 7/5 100%")


def test_progress_total_grows_when_more_arrives_than_was_there() -> None:
    terminal = _Terminal()
    progress = Progress("consumed", 4, stream=terminal)
    progress.add(6)
    progress.close()
    assert " 6/6 100% " in terminal.getvalue()
