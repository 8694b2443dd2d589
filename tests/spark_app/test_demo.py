"""The demo's pipeline end to end at small scale.

Goal: with a master SIGKILLed mid-stream, every acknowledged order lands in the Delta table
exactly once through ingest_to_table under real spark-submit, sealed segments reach the tier,
a rerun from the checkpoint adds nothing, and every process the demo started is gone after.
Method: `spark_app.demo.main` with a few thousand orders in tmp_path; its JSON summary line.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spark_app import demo

pytestmark = [pytest.mark.integration, pytest.mark.spark]


def test_demo_small_scale(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    directory = tmp_path / "demo"
    code = demo.main(["--dir", str(directory), "--orders", "4000", "--batch", "100",
                      "--ingest-idle-s", "8"])
    out = capsys.readouterr().out
    summary = json.loads(out.strip().splitlines()[-1])
    assert code == 0, out
    assert summary["produced_acked"] == summary["table_rows"] == 4000
    assert summary["table_distinct_orders"] == 4000
    assert summary["rerun_rows"] == 0
    assert summary["tiered_segments"] >= 1
    assert 0 < summary["failover_s"] < 30
    assert not list((directory / "run").glob("*.pid")), "a process outlived the demo"
