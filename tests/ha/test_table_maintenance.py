"""Topic tables' upkeep (ha/broker/table_maintenance.py) on a real store and real Delta tables.

Goal: compaction packs the small files of many commits into one per day, vacuum removes the
files no version needs (compacted ones and a crashed commit's), the table's retention drops
whole days older than topicTableRetentionHours; none of them moves a queue's end or the fence,
and the next commit continues after them with each message once. The thread runs upkeep when
it is due and reports it. Method: a clock given to the code (`now_ms`), never a sleep.
"""

from __future__ import annotations

import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from deltalake import DeltaTable

from ha.broker.metadata import TopicConfig
from ha.broker.table_maintenance import (
    MaintenanceSettings,
    retention_cutoff_day,
    run_maintenance,
)
from ha.broker.table_plan import fence_app_id, queue_app_id
from storage_engine import MessageStore
from tests.ha.test_topic_table import (  # noqa: F401 - store is a fixture
    QUEUES,
    TOPIC,
    assert_exactly_once,
    put,
    rows,
    store,
    tables,
    writer,
)

HOUR_MS = 3_600_000
KEEP = MaintenanceSettings(target_file_bytes=64 << 20, vacuum_hours=0, retention_hours=0)


def _txns(uri: str) -> list[int | None]:
    table = DeltaTable(uri)
    return [table.transaction_version(fence_app_id("broker-a"))] + [
        table.transaction_version(queue_app_id("broker-a", q)) for q in range(QUEUES)]


def _now_ms() -> int:
    return int(datetime.datetime.now(datetime.UTC).timestamp() * 1000)


def test_the_cutoff_is_the_utc_day_of_now_less_the_retention() -> None:
    noon = int(datetime.datetime(2026, 12, 2, 12, tzinfo=datetime.UTC).timestamp() * 1000)
    assert retention_cutoff_day(noon, 0) is None
    assert retention_cutoff_day(noon, 1) == datetime.date(2026, 12, 2)
    assert retention_cutoff_day(noon, 13) == datetime.date(2026, 12, 1)  # 23:00 the day before
    assert retention_cutoff_day(noon, 24 * 30) == datetime.date(2026, 11, 2)


def test_compaction_and_vacuum_keep_the_rows_and_every_app_transaction(
        store: MessageStore, tmp_path: Path) -> None:  # noqa: F811
    uri = str(tmp_path / "tables" / TOPIC)
    table_writer = writer(store, uri)
    for first in range(0, 60, 6):  # ten commits: ten small files
        put(store, 6, start=first)
        assert table_writer.run_pass(1, range(QUEUES)).rows == 6
    before = rows(uri)
    files_before = len(DeltaTable(uri).file_uris())
    assert files_before == 10
    txns = _txns(uri)
    orphan = Path(uri) / "storeDate=2026-01-01" / "crashed-before-its-log-entry.parquet"
    orphan.parent.mkdir()
    pq.write_table(pa.table({"x": [1]}), orphan)

    done = run_maintenance(uri, None, KEEP, _now_ms())
    assert done is not None
    assert done.files_compacted == files_before
    days = len({path.split("storeDate=")[1][:10] for path in DeltaTable(uri).file_uris()})
    assert done.files_written == days == len(DeltaTable(uri).file_uris())
    assert done.files_vacuumed == files_before + 1  # the compacted files and the orphan
    assert not orphan.exists()
    assert rows(uri).equals(before)
    assert _txns(uri) == txns

    put(store, 9, start=60)  # the next commit continues after what the upkeep left
    assert table_writer.run_pass(1, range(QUEUES)).rows == 9
    assert_exactly_once(rows(uri), store)


def test_retention_drops_whole_days_older_than_it_and_keeps_the_ends(
        store: MessageStore, tmp_path: Path) -> None:  # noqa: F811
    uri = str(tmp_path / "tables" / TOPIC)
    put(store, 12)
    writer(store, uri).run_pass(1, range(QUEUES))
    txns = _txns(uri)
    a_day = MaintenanceSettings(64 << 20, vacuum_hours=0, retention_hours=24)
    kept = run_maintenance(uri, None, a_day, _now_ms())
    assert kept is not None and kept.rows_deleted == 0  # today's rows are younger than a day
    later = _now_ms() + 3 * 24 * HOUR_MS  # three days on: today's day is past the retention
    dropped = run_maintenance(uri, None, a_day, later)
    assert dropped is not None and dropped.rows_deleted == 12
    assert DeltaTable(uri).to_pyarrow_table().num_rows == 0
    assert _txns(uri) == txns  # the table still says where each queue ends: no re-copy
    put(store, 3, start=12)
    result = writer(store, uri).run_pass(1, range(QUEUES))
    assert result.rows == 3
    assert sorted(rows(uri)["queueOffset"].to_pylist()) == [4, 4, 4]


def test_the_thread_runs_upkeep_when_it_is_due_and_reports_it(
        store: MessageStore, tmp_path: Path) -> None:  # noqa: F811
    clock = [1_000_000]
    service = tables(store, tmp_path, [TopicConfig(TOPIC, QUEUES, QUEUES, table="delta")],
                     topicTableMaintenanceIntervalMs="60000", topicTableVacuumHours="0")
    service._clock_ms = lambda: clock[0]
    for first in range(0, 12, 3):
        put(store, 3, start=first)
        service.run_pass()
        clock[0] += 1000
    state = service.stats()["topics"][TOPIC]
    assert state["commits"] == 4 and state["last_maintenance"] is None  # not due yet
    clock[0] += 60_000
    put(store, 3, start=12)
    service.run_pass()
    state = service.stats()["topics"][TOPIC]
    assert state["last_maintenance"]["files_compacted"] == 5
    assert state["last_maintenance"]["at_ms"] == clock[0]
    assert state["maintenance_error"] is None
    assert_exactly_once(rows(str(tmp_path / "tier" / "tables" / TOPIC)), store)
