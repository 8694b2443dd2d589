"""Table lag (ha/broker/table_lag.py) and its metrics (ha/broker/table_metrics.py).

Goal: after a pass the table is 0 messages and 0 s behind; messages confirmed since count as
lag, and the seconds are the age of the oldest of them by the thread's clock; a slave shows no
lag and exports no table series. Method: a real store, real Delta tables, a clock given to the
thread (never a sleep); the families are checked as Prometheus' client renders them.
"""

from __future__ import annotations

from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.registry import Collector

from ha.broker.metadata import TopicConfig
from ha.broker.table_metrics import table_families
from storage_engine import MessageStore
from tests.ha.test_topic_table import QUEUES, TOPIC, put, store, tables  # noqa: F401 - fixture


def _store_time_ms(opened: MessageStore, queue_id: int, offset: int) -> int:
    got = opened.get_messages(TOPIC, queue_id, offset, max_count=1, max_bytes=1)
    return got.messages()[0].store_timestamp_ms


def test_lag_is_what_was_confirmed_since_the_last_pass_and_its_age(
        store: MessageStore, tmp_path: Path) -> None:  # noqa: F811
    service = tables(store, tmp_path, [TopicConfig(TOPIC, QUEUES, QUEUES, table="delta")])
    put(store, 6)
    service.run_pass()
    stats = service.stats()["topics"][TOPIC]
    assert (stats["lag_messages"], stats["lag_seconds"]) == (0, 0.0)
    put(store, 4, start=6)  # offsets 2 of queues 0, 1, 2 and 3 of queue 0
    oldest = min(_store_time_ms(store, q, 2) for q in range(QUEUES))
    service._clock_ms = lambda: oldest + 2500
    stats = service.stats()["topics"][TOPIC]
    assert (stats["lag_messages"], stats["lag_seconds"]) == (4, 2.5)
    service.run_pass()
    assert service.stats()["topics"][TOPIC]["lag_messages"] == 0


class _Families(Collector):
    def __init__(self, stats: dict) -> None:  # type: ignore[type-arg]
        self.stats = stats

    def collect(self):  # type: ignore[no-untyped-def]
        return table_families(self.stats, ["cluster", "replica_set", "broker"],
                              ["c", "broker-a", "h:1"])


def _render(stats: dict) -> str:  # type: ignore[type-arg]
    registry = CollectorRegistry()
    registry.register(_Families(stats))
    return generate_latest(registry).decode()


def test_the_master_exports_lag_and_commits_and_a_slave_nothing(
        store: MessageStore, tmp_path: Path) -> None:  # noqa: F811
    service = tables(store, tmp_path, [TopicConfig(TOPIC, QUEUES, QUEUES, table="delta")])
    put(store, 6)
    service.run_pass()
    text = _render(service.stats())
    labels = 'broker="h:1",cluster="c",replica_set="broker-a",topic="orders"'
    assert f"rocketha_topic_table_rows_total{{{labels}}} 6.0" in text
    assert f"rocketha_topic_table_lag_messages{{{labels}}} 0.0" in text
    assert "rocketha_topic_table_last_commit_timestamp_seconds{" in text
    slave = tables(store, tmp_path, [TopicConfig(TOPIC, QUEUES, QUEUES, table="delta")],
                   epoch=None)
    slave.run_pass()
    assert 'topic="orders"' not in _render(slave.stats())
