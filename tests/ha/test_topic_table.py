"""Topic tables on a real store and real Delta tables in a tmp dir (no broker process):
ha/broker/topic_table.py (one topic's commits) and ha/broker/topic_tables.py (the thread's
passes). The real-process and failover tests are tests/integration/test_topic_tables.py."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.exceptions import CommitFailedError

from ha.broker import topic_tables as topic_tables_module
from ha.broker.config import BrokerConfig
from ha.broker.metadata import TopicConfig
from ha.broker.table_plan import fence_app_id, fence_version, queue_app_id, split_fence
from ha.broker.topic_table import TABLE_SCHEMA, TableLimits, TopicTableWriter, table_uri
from ha.broker.topic_tables import TopicTables
from storage_engine import MessageBatch, MessageStore, PutStatus, StoreConfig

ROOT = Path(__file__).resolve().parents[2]

TOPIC = "orders"
QUEUES = 3
WIDE = TableLimits(rows_max=1_000_000, bytes_max=64 << 20)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    with MessageStore(tmp_path / "store", StoreConfig()) as opened:
        yield opened


def put(store: MessageStore, count: int, *, topic: str = TOPIC, start: int = 0) -> None:
    """`count` messages spread over QUEUES queues, body b"m<n>", key k<n>, a property."""
    numbers = range(start, start + count)
    result = store.put_messages(MessageBatch(
        topic, [b"m%d" % n for n in numbers], [n % QUEUES for n in numbers],
        tags=["t"] * count, keys=[f"k{n}" for n in numbers],
        properties=[{"p": str(n)} for n in numbers], born_timestamp_ms=1_700_000_000_000))
    assert result.status is PutStatus.PUT_OK


def writer(store: MessageStore, uri: str, *, broker: str = "broker-a",
           limits: TableLimits = WIDE) -> TopicTableWriter:
    return TopicTableWriter(store, topic=TOPIC, broker_name=broker, uri=uri,
                            storage_options=None, limits=limits)


def rows(uri: str) -> pa.Table:
    return DeltaTable(uri).to_pyarrow_table().sort_by([("brokerName", "ascending"),
                                                       ("queueId", "ascending"),
                                                       ("queueOffset", "ascending")])


def assert_exactly_once(table: pa.Table, store: MessageStore, *, broker: str = "broker-a"
                        ) -> None:
    """Every confirmed message of the store is in `table` once, offsets contiguous from 0."""
    mine = table.filter(pc.equal(table["brokerName"], broker))
    for queue_id in range(QUEUES):
        offsets = mine.filter(pc.equal(mine["queueId"], queue_id))["queueOffset"]
        assert offsets.to_pylist() == list(range(store.max_queue_offset(TOPIC, queue_id)))


def test_a_pass_copies_every_confirmed_message_once_with_the_connector_columns(
        store: MessageStore, tmp_path: Path) -> None:
    uri = str(tmp_path / "tier" / "tables" / TOPIC)
    put(store, 30)
    result = writer(store, uri).run_pass(1, range(QUEUES))
    assert (result.outcome, result.rows, result.table_version) == ("committed", 30, 0)
    table = rows(uri)
    assert table.schema.names == TABLE_SCHEMA.names
    assert_exactly_once(table, store)
    first = table.slice(0, 1).to_pylist()[0]
    assert (first["topic"], first["brokerName"], first["key"], first["tags"], first["body"],
            dict(first["properties"])["p"]) == (TOPIC, "broker-a", "k0", "t", b"m0", "0")
    assert first["bornTimestamp"].timestamp() == 1_700_000_000.0
    assert first["storeDate"] == first["storeTimestamp"].date()
    assert first["msgId"] and len(first["msgId"]) == 32
    snapshot = DeltaTable(uri)
    assert [snapshot.transaction_version(queue_app_id("broker-a", q))
            for q in range(QUEUES)] == [10, 10, 10]
    assert split_fence(snapshot.transaction_version(fence_app_id("broker-a"))) == (1, 1)
    assert snapshot.metadata().partition_columns == ["storeDate"]
    # nothing new: no commit; new messages: only they are committed
    assert writer(store, uri).run_pass(1, range(QUEUES)).outcome == "idle"
    put(store, 7, start=30)
    again = writer(store, uri).run_pass(1, range(QUEUES))
    assert (again.outcome, again.rows, again.table_version) == ("committed", 7, 1)
    assert_exactly_once(rows(uri), store)
    assert split_fence(DeltaTable(uri).transaction_version(fence_app_id("broker-a"))) == (1, 2)


def test_parquet_files_are_zstd(store: MessageStore, tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    put(store, 5)
    writer(store, uri).run_pass(1, range(QUEUES))
    path = next(Path(uri).glob("storeDate=*/*.parquet"))
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"


def test_the_row_limit_spreads_over_queues_and_asks_for_more(store: MessageStore,
                                                              tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    put(store, 30)
    small = writer(store, uri, limits=TableLimits(rows_max=6, bytes_max=64 << 20))
    first = small.run_pass(1, range(QUEUES))
    assert (first.rows, first.pending_count, first.more) == (6, 24, True)
    assert sorted(rows(uri)["queueId"].to_pylist()) == [0, 0, 1, 1, 2, 2]
    passes = 1
    while True:
        passes += 1
        if not small.run_pass(1, range(QUEUES)).more:
            break
    assert passes == 5  # 30 rows, 6 a commit
    assert_exactly_once(rows(uri), store)


def test_the_byte_limit_ends_a_commit_early_and_the_next_continues(store: MessageStore,
                                                                   tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    put(store, 300)
    tight = writer(store, uri, limits=TableLimits(rows_max=1_000_000, bytes_max=3000))
    first = tight.run_pass(1, range(QUEUES))
    assert 0 < first.rows < 300 and first.more
    while tight.run_pass(1, range(QUEUES)).outcome == "committed":
        pass
    assert_exactly_once(rows(uri), store)


def test_a_deposed_master_cannot_commit_once_the_new_one_has(store: MessageStore,
                                                              tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    put(store, 9)
    assert writer(store, uri).run_pass(1, range(QUEUES)).rows == 9
    # the new master (epoch 2) commits its fence even with nothing new to copy
    fence = writer(store, uri).run_pass(2, range(QUEUES))
    assert (fence.outcome, fence.rows) == ("committed", 0)
    put(store, 3, start=9)
    deposed = writer(store, uri).run_pass(1, range(QUEUES))
    assert (deposed.outcome, deposed.table_epoch) == ("fenced", 2)
    assert rows(uri).num_rows == 9
    assert writer(store, uri).run_pass(2, range(QUEUES)).rows == 3
    assert_exactly_once(rows(uri), store)


def test_a_commit_on_a_stale_snapshot_fails_and_the_replan_holds_no_duplicate(
        store: MessageStore, tmp_path: Path) -> None:
    """Two masters of different epochs race on one snapshot (the deposed one has not seen
    the new fence): the first commit wins, the second fails whole; planning again on the
    new snapshot continues after what the winner committed."""
    uri = str(tmp_path / "t")
    put(store, 6)
    writer(store, uri).run_pass(1, range(QUEUES))
    put(store, 6, start=6)
    old, new = writer(store, uri), writer(store, uri)
    stale = new.load()
    new.load = lambda: stale  # type: ignore[method-assign]  # loaded before old's commit
    assert old.run_pass(1, range(QUEUES)).rows == 6
    with pytest.raises(CommitFailedError):
        new.run_pass(2, range(QUEUES))
    del new.load
    again = new.run_pass(2, range(QUEUES))
    assert (again.outcome, again.rows) == ("committed", 0)  # only the fence was left to do
    assert_exactly_once(rows(uri), store)
    assert split_fence(DeltaTable(uri).transaction_version(fence_app_id("broker-a")))[0] == 2


def test_two_replica_sets_share_one_table(tmp_path: Path) -> None:
    uri = str(tmp_path / "t")
    with MessageStore(tmp_path / "a", StoreConfig()) as a, \
            MessageStore(tmp_path / "b", StoreConfig()) as b:
        put(a, 12)
        put(b, 5)
        writer(a, uri, broker="broker-a").run_pass(1, range(QUEUES))
        writer(b, uri, broker="broker-b").run_pass(7, range(QUEUES))
        put(a, 3, start=12)
        writer(a, uri, broker="broker-a").run_pass(1, range(QUEUES))
        table = rows(uri)
        assert table.num_rows == 20
        assert_exactly_once(table, a, broker="broker-a")
        assert_exactly_once(table, b, broker="broker-b")
        snapshot = DeltaTable(uri)
        assert snapshot.transaction_version(fence_app_id("broker-a")) == fence_version(1, 2)
        assert snapshot.transaction_version(fence_app_id("broker-b")) == fence_version(7, 1)


def test_an_unreferenced_data_file_left_by_a_crash_is_not_read(store: MessageStore,
                                                              tmp_path: Path) -> None:
    """A writer killed between its data files and its log entry leaves files the log does
    not list: readers of the table never see them."""
    uri = str(tmp_path / "t")
    put(store, 6)
    writer(store, uri).run_pass(1, range(QUEUES))
    partition = next(Path(uri).glob("storeDate=*"))
    pq.write_table(rows(uri), partition / "part-00000-crashed-c000.zstd.parquet")
    assert_exactly_once(rows(uri), store)


def test_table_uri_layout() -> None:
    assert table_uri("file:///data/tier", "t1") == "/data/tier/tables/t1"
    assert table_uri("s3a://bucket/p/", "a%b|c") == "s3://bucket/p/tables/a%25b%7Cc"


# -- the thread's passes ----------------------------------------------------------------------
@dataclasses.dataclass
class Topics:
    topics: list[TopicConfig]

    def all(self) -> list[TopicConfig]:
        return self.topics

    def get(self, name: str) -> TopicConfig | None:
        return next((topic for topic in self.topics if topic.name == name), None)


def tables(store: MessageStore, tmp_path: Path, topics: list[TopicConfig], *,
           epoch: int | None = 1, **settings: str) -> TopicTables:
    properties = {"storePathRootDir": str(tmp_path / "store"),
                  "tieredStoreUrl": f"file://{tmp_path / 'tier'}", **settings}
    config = BrokerConfig.from_properties(properties)
    return TopicTables(config, store, Topics(topics),  # type: ignore[arg-type]
                       master_epoch=lambda: epoch)


def test_only_opted_in_topics_are_materialized_and_only_on_the_master(
        store: MessageStore, tmp_path: Path) -> None:
    put(store, 4)
    put(store, 4, topic="plain")
    topics = [TopicConfig(TOPIC, QUEUES, QUEUES, table="delta"), TopicConfig("plain", 4, 4)]
    assert tables(store, tmp_path, topics, epoch=None).run_pass() is False
    assert not (tmp_path / "tier" / "tables").exists()  # a slave writes nothing
    service = tables(store, tmp_path, topics)
    service.run_pass()
    assert sorted(p.name for p in (tmp_path / "tier" / "tables").iterdir()) == [TOPIC]
    assert DeltaTable(str(tmp_path / "tier" / "tables" / TOPIC)).to_pyarrow_table().num_rows == 4
    stats = service.stats()
    assert stats["role"] == "master"
    assert (stats["topics"][TOPIC]["rows"], stats["topics"][TOPIC]["pending_messages"]) == (4, 0)
    # topicTableDefault=delta takes every topic that does not say "none"
    everything = tables(store, tmp_path, [TopicConfig("plain", 4, 4),
                                          TopicConfig(TOPIC, 3, 3, table="none")],
                        topicTableDefault="delta")
    everything.run_pass()
    assert sorted(everything.stats()["topics"]) == ["plain"]


def test_an_object_store_failure_is_counted_and_backed_off_never_raised(
        store: MessageStore, tmp_path: Path) -> None:
    put(store, 4)
    (tmp_path / "tier").write_text("a file where the tier's directory should be")
    service = tables(store, tmp_path, [TopicConfig(TOPIC, QUEUES, QUEUES, table="delta")])
    assert service.run_pass() is False
    state = service.stats()["topics"][TOPIC]
    assert state["failures_in_a_row"] == 1 and state["last_error"] is not None
    service.run_pass()  # within the backoff: not tried again
    assert service.stats()["topics"][TOPIC]["failures_in_a_row"] == 1


def test_without_deltalake_a_table_topic_reports_it_and_the_broker_goes_on(
        store: MessageStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(topic_tables_module, "table_io", None)
    monkeypatch.setattr(topic_tables_module, "_TABLE_IO_MISSING", "topic tables need deltalake")
    put(store, 4)
    service = tables(store, tmp_path, [TopicConfig(TOPIC, QUEUES, QUEUES, table="delta")])
    assert service.run_pass() is False
    state = service.stats()["topics"][TOPIC]
    assert state["last_error"]["message"] == "topic tables need deltalake"
    assert state["uri"] is None


def test_a_broker_imports_the_table_io_only_at_its_first_table_topic() -> None:
    # issue 42: deltalake (a 128 MB native library) and pyarrow.parquet cost every broker start
    # 0.2 to 0.6 s at load, and after a large write evicted the page cache they are read from
    # disk again; a broker without a table topic never needs them
    code = ("import sys, ha.broker.main, ha.broker.topic_tables as t\n"
            "print(sorted(m for m in ('deltalake', 'pyarrow.parquet', 'ha.broker.topic_table')"
            " if m in sys.modules))\n"
            "t._table_io()\n"
            "print('deltalake' in sys.modules and t.table_io is not None)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300, check=True, cwd=ROOT)
    assert done.stdout.split("\n")[:2] == ["[]", "True"], done.stdout
