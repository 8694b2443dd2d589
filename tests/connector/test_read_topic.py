"""read_topic: one read of a whole topic, its table's rows plus the tail the table lacks.

Goal: with a topic whose first messages are in its Delta table and the rest only in the log,
`connector.spark.read_topic` returns every message once, each queue's offsets contiguous from
0, the bodies produced, storeDate the UTC day of storeTimestamp on both parts; the table part
is read by Spark's Parquet reader with only the asked columns; `table_starting_offsets` is
where the table ends, and a stream started there reads exactly the tail. Method: a real
broker process (standalone master) with a file:// tier and topicTableIntervalMs=200; the
table is turned off (`table=none`) once it caught up, so what is produced after stays in the
tail; the session SparkSession; the stream runs with Trigger.AvailableNow into a memory sink.
The tail's plan itself (gaps, a recreated topic) is tests/connector/test_read_topic_plan.py.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import Row, SparkSession

from connector import Admin, ClientConfig, Producer
from connector.errors import OptionError
from connector.protocol.table_ids import queue_app_id
from connector.spark.offsets import QueueRef
from connector.spark.read_topic import read_topic, table_part, table_starting_offsets
from connector.spark.table_files import choose_reader
from tests.ha.replica_set import wait_for
from tests.integration.broker_process import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOPIC = "history"
QUEUES = 3
IN_TABLE = 600  # produced while the table is on
IN_TAIL = 90  # produced after it is turned off
CATCH_UP_S = 60.0
STREAM_DEADLINE_S = 600  # an AvailableNow query on 2 shared, busy cores


def _produce(config: ClientConfig, first: int, count: int) -> None:
    with Producer(config) as producer:
        rows = [{"body": b"m%06d" % n, "key": f"k{n}"} for n in range(first, first + count)]
        assert all(result.ok for result in producer.send_batch(TOPIC, rows))


def _table_ends(uri: str) -> list[int | None]:
    try:
        table = DeltaTable(uri)
    except Exception:  # noqa: BLE001 - not created yet
        return [None] * QUEUES
    return [table.transaction_version(queue_app_id("broker-a", q)) for q in range(QUEUES)]


@pytest.fixture(scope="module")
def half_table(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, str]]:
    root = tmp_path_factory.mktemp("read-topic")
    broker = BrokerProcess(root / "b", tieredStoreUrl=f"file://{root / 'tier'}",
                           topicTableIntervalMs="200").start()
    try:
        config = ClientConfig(brokers=(broker.endpoint,))
        admin = Admin(config)
        admin.create_topic(TOPIC, queues=QUEUES, table="delta")
        _produce(config, 0, IN_TABLE)
        uri = str(root / "tier" / "tables" / TOPIC)
        ends = [q["max_queue_offset"] for q in sorted(admin.queue_offsets(TOPIC),
                                                      key=lambda q: q["queue_id"])]
        wait_for(lambda: _table_ends(uri) == ends, CATCH_UP_S,
                 f"the table at {ends} ({broker.action('broker_info').get('topic_tables')})")
        admin.update_topic(TOPIC, table="none")
        _produce(config, IN_TABLE, IN_TAIL)
        yield broker, uri
    finally:
        broker.stop()


def test_read_topic_is_the_table_and_the_tail_each_message_once(
        spark: SparkSession, half_table: tuple[BrokerProcess, str]) -> None:
    broker, uri = half_table
    refs = [QueueRef(TOPIC, "broker-a", q) for q in range(QUEUES)]
    part = table_part(uri, refs)
    assert part.files and sum(part.ends.values()) == IN_TABLE  # type: ignore[arg-type]
    frame = read_topic(spark, TOPIC, table=uri, brokers=broker.endpoint)
    rows = frame.collect()
    assert len(rows) == IN_TABLE + IN_TAIL
    places = [(row.brokerName, row.queueId, row.queueOffset) for row in rows]
    assert len(set(places)) == len(places), "a message is read twice"
    for queue_id in range(QUEUES):
        offsets = sorted(o for _, q, o in places if q == queue_id)
        assert offsets == list(range(len(offsets))), f"queue {queue_id}: not contiguous"
    assert sorted(row.body for row in rows) == [b"m%06d" % n for n in range(IN_TABLE + IN_TAIL)]
    for row in rows:
        assert row.storeDate == row.storeTimestamp.astimezone(datetime.UTC).date()
    # the tail is exactly what the table lacks: past each queue's table end
    tail = [p for p in places if p[2] >= part.ends[QueueRef(TOPIC, "broker-a", p[1])]]
    assert len(tail) == IN_TAIL


def test_the_table_part_reads_only_the_asked_columns(
        spark: SparkSession, half_table: tuple[BrokerProcess, str]) -> None:
    broker, uri = half_table
    frame = read_topic(spark, TOPIC, table=uri, columns=["queueId", "body"],
                       brokers=broker.endpoint)
    assert frame.columns == ["queueId", "body", "storeDate"]
    plan = frame._jdf.queryExecution().executedPlan().toString()
    assert "ReadSchema: struct<queueId:int,body:binary>" in plan, plan
    totals = frame.groupBy("queueId").count().collect()
    assert sum(row["count"] for row in totals) == IN_TABLE + IN_TAIL


def test_the_pyarrow_reader_and_a_cached_tail_give_the_same_rows_as_spark_s(
        spark: SparkSession, half_table: tuple[BrokerProcess, str]) -> None:
    """The fallback for a table Spark cannot open (s3:// without the S3A connector) is pyarrow
    on the executors; on a local table both readers run, so their results are compared. With
    cache_tail, the same rows, and later queries read the tail from Spark's cache."""
    broker, uri = half_table
    assert choose_reader(spark, uri, "auto") == "spark"
    assert choose_reader(spark, "s3://tier/tables/t", "auto") == "arrow"  # no hadoop-aws here
    with pytest.raises(OptionError, match="table_reader='parquet' is not one of"):
        read_topic(spark, TOPIC, table=uri, brokers=broker.endpoint, table_reader="parquet")
    columns = ["queueId", "queueOffset", "body", "storeTimestamp", "properties"]
    by_arrow = read_topic(spark, TOPIC, table=uri, columns=columns, brokers=broker.endpoint,
                          table_reader="arrow")
    by_spark = read_topic(spark, TOPIC, table=uri, columns=columns, brokers=broker.endpoint,
                          table_reader="spark")
    plan = by_arrow._jdf.queryExecution().executedPlan().toString()
    assert "rocketha_table_files" in plan, plan
    assert by_arrow.schema == by_spark.schema
    arrow_rows = sorted(by_arrow.collect(), key=lambda row: (row.queueId, row.queueOffset))
    spark_rows = sorted(by_spark.collect(), key=lambda row: (row.queueId, row.queueOffset))
    assert len(arrow_rows) == IN_TABLE + IN_TAIL
    assert arrow_rows == spark_rows

    cached = read_topic(spark, TOPIC, table=uri, columns=columns, brokers=broker.endpoint,
                        cache_tail=True)
    try:
        first = sorted(cached.collect(), key=lambda row: (row.queueId, row.queueOffset))
        assert first == spark_rows
        plan = cached._jdf.queryExecution().executedPlan().toString()
        assert "InMemoryTableScan" in plan, plan  # the second query reads the cached tail
        assert cached.count() == IN_TABLE + IN_TAIL
    finally:
        cached.unpersist()


def _place(row: Row) -> tuple[int, int]:
    return row.queueId, row.queueOffset


def test_the_tail_copied_to_parquet_is_the_tail_the_connector_reads(
        spark: SparkSession, half_table: tuple[BrokerProcess, str], tmp_path: Path) -> None:
    """A short tail is copied once to Parquet (here under tail_dir), in storeDate directories
    as the table's files are, and each query reads the copy with Spark's Parquet reader; with
    tail_file_rows_max=0 it is read through the Python data source on each action: the same
    rows either way."""
    broker, uri = half_table
    columns = ["queueId", "queueOffset", "body", "storeTimestamp"]
    copied = read_topic(spark, TOPIC, table=uri, columns=columns, brokers=broker.endpoint,
                        tail_dir=str(tmp_path / "tails"))
    direct = read_topic(spark, TOPIC, table=uri, columns=columns, brokers=broker.endpoint,
                        tail_file_rows_max=0)
    copied_plan = copied._jdf.queryExecution().executedPlan().toString()
    direct_plan = direct._jdf.queryExecution().executedPlan().toString()
    assert "(Python)" not in copied_plan and copied_plan.count("FileScan parquet") == 2, \
        copied_plan
    assert "BatchScan rocketha" in direct_plan and "(Python)" in direct_plan, direct_plan
    assert copied.columns == direct.columns == [*columns, "storeDate"]
    copied_rows = sorted(copied.collect(), key=_place)
    assert copied_rows == sorted(direct.collect(), key=_place)
    assert len(copied_rows) == IN_TABLE + IN_TAIL
    assert len(list((tmp_path / "tails").glob("rocketha-tail-*/storeDate=*/*.parquet"))) >= 1
    # the copy is laid out as the table is: both scans take storeDate from their directories,
    # so a filter on the day prunes files on both sides
    day = copied_rows[-1].storeDate
    pruned = copied.where(copied.storeDate == day)._jdf.queryExecution().executedPlan().toString()
    assert pruned.count("PartitionFilters: [isnotnull(storeDate") == 2, pruned
    assert sorted(copied.where(copied.storeDate == day).collect(), key=_place) == \
        [row for row in copied_rows if row.storeDate == day]


def test_a_stream_started_where_the_table_ends_reads_exactly_the_tail(
        spark: SparkSession, half_table: tuple[BrokerProcess, str], tmp_path: Path) -> None:
    broker, uri = half_table
    starting = table_starting_offsets(TOPIC, table=uri, brokers=broker.endpoint)
    ends = _table_ends(uri)
    assert json.loads(starting) == {TOPIC: {f"broker-a:{q}": ends[q] for q in range(QUEUES)}}
    query = (spark.readStream.format("rocketha").option("brokers", broker.endpoint)
             .option("subscribe", TOPIC).option("startingOffsets", starting).load()
             .select("body").writeStream.format("memory").queryName("after_the_table")
             .option("checkpointLocation", str(tmp_path / "checkpoint"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(STREAM_DEADLINE_S) and query.exception() is None
    bodies = sorted(row.body for row in spark.sql("SELECT body FROM after_the_table").collect())
    assert bodies == [b"m%06d" % n for n in range(IN_TABLE, IN_TABLE + IN_TAIL)]
