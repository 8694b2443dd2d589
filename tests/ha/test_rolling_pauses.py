"""Which step of a rolling restart a write pause falls in (ha/cluster/rolling.py).

Goal: each step gets the longest probe gap whose middle is in its span and when it began; the
report names the step of the longest pause, or none when it fell between steps; steps without
any gap (ties at 0) do not break it. Method: the pure function on hand-made windows and gaps.
"""

from __future__ import annotations

from typing import Any

from ha.cluster.rolling import _attribute_pauses


def _steps(*windows: tuple[float, float]) -> list[dict[str, Any]]:
    return [{"process": f"p{index}", "_window": window} for index, window in enumerate(windows)]


def test_each_step_gets_the_longest_gap_over_its_span_and_the_worst_is_named() -> None:
    steps = _steps((10.0, 20.0), (20.0, 30.0), (30.0, 40.0))
    report = {"longest_write_pause_s": 0.8,
              "sets": {"a": {"gaps": [(19.99, 20.5), (25.0, 25.1), (12.0, 12.05)]},
                       "b": {"gaps": [(31.0, 31.8)]}}}
    _attribute_pauses(steps, report)
    # a gap that starts with the last ack before a step's cause belongs to that step
    assert [(s["write_pause_s"], s["write_pause_from_s"], s["write_pause_set"])
            for s in steps] == [(0.05, 2.0, "a"), (0.51, -0.01, "a"), (0.8, 1.0, "b")]
    assert report["longest_write_pause_step"] == "p2"
    assert "gaps" not in report["sets"]["a"] and all("_window" not in s for s in steps)


def test_no_gap_and_a_pause_between_steps() -> None:
    quiet = _steps((0.0, 1.0), (1.0, 2.0))
    report: dict[str, Any] = {"longest_write_pause_s": 0.0, "sets": {"a": {"gaps": []}}}
    _attribute_pauses(quiet, report)
    assert [(s["write_pause_s"], s["write_pause_set"]) for s in quiet] == [(0.0, None)] * 2
    outside = _steps((0.0, 1.0))
    report = {"longest_write_pause_s": 0.5, "sets": {"a": {"gaps": [(5.0, 5.5)]}}}
    _attribute_pauses(outside, report)
    assert report["longest_write_pause_step"] is None
