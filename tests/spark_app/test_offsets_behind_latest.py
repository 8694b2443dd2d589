"""Kafka-style offsets-behind-latest from a progress's endOffset and latestOffset (pure):
per queue latest - end, a queue missing from endOffset counted from 0, None when the source
reported no latest offset, strings as Spark's Kafka source reports them."""

from __future__ import annotations

from spark_app.progress import offsets_behind_latest


def test_min_max_avg_over_queues() -> None:
    end = '{"t": {"broker-a:0": 10, "broker-a:1": 4}}'
    latest = '{"t": {"broker-a:0": 10, "broker-a:1": 9, "broker-b:0": 3}}'
    assert offsets_behind_latest(end, latest) == {
        "minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "5",
        "avgOffsetsBehindLatest": str(8 / 3)}


def test_unknown_latest_gives_none() -> None:
    assert offsets_behind_latest('{"t": {"a:0": 1}}', None) is None
    assert offsets_behind_latest('{"t": {"a:0": 1}}', "{}") is None
