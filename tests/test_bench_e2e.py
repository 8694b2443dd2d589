"""How tests/bench/bench_e2e.py turns Spark's progress reports and the sink's rows into
latencies, on made-up reports (no Spark, no broker)."""

from __future__ import annotations

import datetime
import struct

import pyarrow as pa
import pytest

from tests.bench.bench_e2e import PHASES, _batches, latencies

TOPIC = "e2e"


def _report(batch_id: int, start_s: float, rows: int, ends: dict[str, int],
            durations: dict[str, int]) -> dict[str, object]:
    stamp = datetime.datetime.fromtimestamp(start_s, datetime.UTC).isoformat()
    return {"batchId": batch_id, "timestamp": stamp.replace("+00:00", "Z"),
            "numInputRows": rows, "durationMs": durations,
            "sources": [{"endOffset": {TOPIC: ends}}]}


def _rows(rows: list[tuple[int, int, float]]) -> pa.Table:
    return pa.table({"brokerName": ["b"] * len(rows),
                     "queueId": pa.array([queue for queue, _, _ in rows], pa.int32()),
                     "queueOffset": pa.array([offset for _, offset, _ in rows], pa.int64()),
                     "body": [struct.pack(">d", due) for _, _, due in rows]})


def test_each_row_is_visible_when_the_first_batch_past_its_offset_has_added_it() -> None:
    durations = {"triggerExecution": 600, "commitOffsets": 100, "walCommit": 100,
                 "addBatch": 300, "latestOffset": 10}
    progress = [
        _report(0, 100.0, 0, {"b:0": 1, "b:1": 1}, {"triggerExecution": 50}),  # no rows
        _report(1, 101.0, 3, {"b:0": 3, "b:1": 2}, durations),
        _report(2, 102.0, 2, {"b:0": 4, "b:1": 3}, durations),
    ]
    rows = _rows([(0, 0, 0.0),  # sent before the load (due 0): left out
                  (0, 1, 100.5), (0, 2, 100.75), (1, 1, 100.9),  # batch 1: visible 101.5
                  (0, 3, 101.25), (1, 2, 101.5)])  # batch 2: visible 102.5
    late, waits, phases = latencies(rows, _batches(progress, TOPIC))
    assert sorted(late.round(3)) == [0.6, 0.75, 1.0, 1.0, 1.25]
    assert sorted(waits.round(3)) == [0.1, 0.25, 0.5, 0.5, 0.75]
    assert phases["addBatch"] == pytest.approx(5 * 0.3)
    assert phases["walCommit"] == pytest.approx(5 * 0.1)
    assert set(phases) == set(PHASES)


def test_a_row_no_batch_took_fails_loudly() -> None:
    progress = [_report(1, 101.0, 1, {"b:0": 1}, {"triggerExecution": 100})]
    with pytest.raises(IndexError):  # queue offset 5 is past every batch's end
        latencies(_rows([(0, 5, 100.0)]), _batches(progress, TOPIC))
