"""Batch reads through `spark.read.format("rocketha")` (found by the pyspark_rocketha shim).

Goal: a batch read returns exactly the stored messages with the promised schema and values;
startingOffsets/endingOffsets JSON select [start, end) per queue; tagFilter, minPartitions and
startingTimestamp work; small queue ranges share a read task (minRowsPerPartition) and read
the same rows as one task per queue; bad options fail with errors naming the option. A declared
schema (`.schema(...)`, any subset of the columns in any order) returns exactly those columns of the
full read — also cut by endingOffsets or tagFilter when the broker is not asked for queue
offsets — and an unknown column or a wrong type fails naming the column. Method: a real broker
process, messages written with the client library, a real local SparkSession, chispa for
DataFrame equality.
"""

from __future__ import annotations

import json
import time

import pytest
from chispa import assert_df_equality
from pyspark.sql import functions as F

from connector import Admin, ClientConfig, Producer

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOPIC = "batch_orders"
QUEUES = 3
PER_QUEUE = 20


@pytest.fixture(scope="module")
def loaded(broker) -> dict[str, int]:  # type: ignore[no-untyped-def]
    config = ClientConfig(brokers=(broker.endpoint,))
    Admin(config).create_topic(TOPIC, queues=QUEUES)
    before_ms = int(time.time() * 1000)
    with Producer(config) as producer:
        for queue_id in range(QUEUES):
            rows = [{"body": f"q{queue_id}-m{index}".encode(), "key": f"k{index}",
                     "tags": "TagA" if index % 2 == 0 else "TagB",
                     "properties": {"n": str(index)}, "queue_id": queue_id}
                    for index in range(PER_QUEUE)]
            results = producer.send_batch(TOPIC, rows)
            assert all(r.ok for r in results)
    return {"before_ms": before_ms, "after_ms": int(time.time() * 1000)}


def read(spark, broker, schema: str | None = None,  # type: ignore[no-untyped-def]
         **options: str):
    reader = spark.read.format("rocketha").option("brokers", broker.endpoint)
    if schema is not None:
        reader = reader.schema(schema)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def expected_rows(queue_ids: range, start: int, end: int, tags: tuple[str, ...] = ("TagA",
                                                                                   "TagB")):
    return [(TOPIC, "broker-a", q, i, f"k{i}", "TagA" if i % 2 == 0 else "TagB",
             f"q{q}-m{i}".encode(), json.dumps({"n": str(i)}, separators=(",", ":")))
            for q in queue_ids for i in range(start, end)
            if ("TagA" if i % 2 == 0 else "TagB") in tags]


def test_default_schema_is_lean(spark, broker, loaded) -> None:
    """Like Spark's Kafka source: what most jobs read; the rest on request."""
    df = read(spark, broker, subscribe=TOPIC)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("topic", "string"), ("brokerName", "string"), ("queueId", "int"),
        ("queueOffset", "bigint"), ("key", "string"),
        ("tags", "string"), ("body", "binary"), ("storeTimestamp", "timestamp")]
    full = read(spark, broker, subscribe=TOPIC, includeProperties="true",
                includeMetadata="true")
    assert_df_equality(df, full.select(*df.columns), ignore_row_order=True)
    with_properties = read(spark, broker, subscribe=TOPIC, includeProperties="true")
    assert with_properties.columns == [*df.columns[:-1], "properties", "storeTimestamp"]
    picked = read(spark, broker, subscribe=TOPIC, columns="msgId, body")
    assert picked.columns == ["msgId", "body"]
    assert picked.select("msgId").distinct().count() == QUEUES * PER_QUEUE


def test_batch_read_equals_the_stored_messages(spark, broker, loaded) -> None:
    df = read(spark, broker, subscribe=TOPIC, includeProperties="true", includeMetadata="true")
    assert [f.name for f in df.schema.fields] == [
        "topic", "brokerName", "queueId", "queueOffset", "msgId", "key", "tags", "body",
        "properties", "bornTimestamp", "storeTimestamp"]
    columns = ["topic", "brokerName", "queueId", "queueOffset", "key", "tags", "body"]
    got = df.select(*columns, F.to_json("properties").alias("properties"))  # maps don't sort
    expected = spark.createDataFrame(expected_rows(range(QUEUES), 0, PER_QUEUE), got.schema)
    assert_df_equality(got, expected, ignore_row_order=True, ignore_nullable=True)
    stats = df.agg(F.countDistinct("msgId").alias("ids"),
                   F.min("storeTimestamp").alias("first"),
                   F.max("storeTimestamp").alias("last")).collect()[0]
    assert stats.ids == QUEUES * PER_QUEUE
    assert loaded["before_ms"] - 1000 <= stats.first.timestamp() * 1000
    assert stats.last.timestamp() * 1000 <= loaded["after_ms"] + 1000


def test_offset_ranges_tag_filter_and_min_partitions(spark, broker, loaded) -> None:
    starting = json.dumps({TOPIC: {"broker-a:0": 5, "broker-a:1": -1}})
    ending = json.dumps({TOPIC: {"broker-a:0": 12, "broker-a:2": 3}})
    df = read(spark, broker, subscribe=TOPIC, startingOffsets=starting, endingOffsets=ending)
    got = sorted((r.queueId, r.queueOffset) for r in df.select("queueId", "queueOffset")
                 .collect())
    assert got == [(0, i) for i in range(5, 12)] + [(2, i) for i in range(3)]

    tagged = read(spark, broker, subscribe=TOPIC, tagFilter="TagA", minPartitions="7")
    assert tagged.rdd.getNumPartitions() >= 7
    rows = tagged.select("queueId", "queueOffset", "tags").collect()
    assert sorted((r.queueId, r.queueOffset) for r in rows) == \
        [(q, i) for q in range(QUEUES) for i in range(0, PER_QUEUE, 2)]


def test_small_ranges_share_a_task_and_read_the_same_rows(spark, broker, loaded) -> None:
    """Every task of a Python source costs Spark ~0.1 s to start: 3 small queues read as one
    task by default, as one task each with minRowsPerPartition=0, the same rows either way."""
    packed = read(spark, broker, subscribe=TOPIC, includeMetadata="true")
    assert packed.rdd.getNumPartitions() == 1
    per_queue = read(spark, broker, subscribe=TOPIC, includeMetadata="true",
                     minRowsPerPartition="0")
    assert per_queue.rdd.getNumPartitions() == QUEUES
    two = read(spark, broker, subscribe=TOPIC, includeMetadata="true",
               minRowsPerPartition=str(PER_QUEUE * QUEUES // 2))  # 60 // 30: two tasks
    assert two.rdd.getNumPartitions() == 2
    assert_df_equality(packed, per_queue, ignore_row_order=True)
    assert_df_equality(two, per_queue, ignore_row_order=True)
    assert per_queue.count() == QUEUES * PER_QUEUE


def test_assign_and_starting_timestamp(spark, broker, loaded) -> None:
    df = read(spark, broker, assign=json.dumps({TOPIC: ["broker-a:1"]}))
    assert {r.queueId for r in df.select("queueId").collect()} == {1}
    after_all = str(loaded["after_ms"] + 60_000)
    late = read(spark, broker, subscribe=TOPIC, startingTimestamp=after_all,
                startingOffsetsByTimestampStrategy="latest")
    assert late.count() == 0
    with pytest.raises(Exception, match=r"option startingTimestamp: batch_orders/broker-a:\d "
                       r"has no message stored at or after .*Strategy=latest"):
        read(spark, broker, subscribe=TOPIC, startingTimestamp=after_all).count()
    early = read(spark, broker, subscribe=TOPIC, startingTimestamp=str(loaded["before_ms"] - 1))
    assert early.count() == QUEUES * PER_QUEUE


def test_empty_topic_reads_no_rows(spark, broker, loaded) -> None:
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("batch_empty", queues=2)
    assert read(spark, broker, subscribe="batch_empty").count() == 0


@pytest.mark.parametrize("options, named", [
    ({"subscribe": TOPIC, "colour": "red"}, "colour"),
    ({"subscribe": TOPIC, "assign": json.dumps({TOPIC: ["broker-a:0"]})}, "assign"),
    ({"subscribe": TOPIC, "startingOffsets": "{broken"}, "startingOffsets"),
    ({"subscribe": "no_such_topic"}, "subscribe"),
])
def test_bad_options_name_the_option(spark, broker, loaded, options, named) -> None:
    with pytest.raises(Exception, match=named):
        read(spark, broker, **options).collect()


def test_declared_schema_projects_the_columns(spark, broker, loaded) -> None:
    projected = read(spark, broker, "queueId INT, body BINARY", subscribe=TOPIC)
    assert [(f.name, f.dataType.simpleString()) for f in projected.schema.fields] == [
        ("queueId", "int"), ("body", "binary")]
    full = read(spark, broker, subscribe=TOPIC)
    assert "msgId" not in full.columns
    assert projected.count() == QUEUES * PER_QUEUE
    assert_df_equality(projected, full.select("queueId", "body"), ignore_row_order=True)


def test_declared_schema_in_another_order(spark, broker, loaded) -> None:
    ddl = ("storeTimestamp TIMESTAMP, properties MAP<STRING,STRING>, queueOffset BIGINT NOT NULL, "
           "tags STRING, brokerName STRING, msgId STRING, topic STRING")
    columns = [part.split()[0] for part in ddl.split(", ")]
    projected = read(spark, broker, ddl, subscribe=TOPIC, startingOffsets=json.dumps(
        {TOPIC: {"broker-a:1": 4}}), endingOffsets=json.dumps({TOPIC: {"broker-a:0": 0}}))
    assert projected.columns == columns
    full = read(spark, broker, subscribe=TOPIC, columns="*", startingOffsets=json.dumps(
        {TOPIC: {"broker-a:1": 4}}), endingOffsets=json.dumps({TOPIC: {"broker-a:0": 0}}))
    as_json = F.to_json("properties").alias("properties")  # maps don't sort
    got = projected.select(*[as_json if c == "properties" else c for c in columns])
    want = full.select(*[as_json if c == "properties" else c for c in columns])
    assert got.count() == (PER_QUEUE - 4) + PER_QUEUE  # queue 0 empty, 1 from 4, 2 whole
    assert_df_equality(got, want, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("ddl, options", [
    ("queueId INT, body BINARY", {"endingOffsets": json.dumps(
        {TOPIC: {"broker-a:0": 12, "broker-a:2": 3}}), "fetchMaxMessages": "5"}),
    ("body BINARY, queueId INT", {"tagFilter": "TagB", "endingOffsets": json.dumps(
        {TOPIC: {"broker-a:1": 9}}), "fetchMaxMessages": "3"}),
    ("topic STRING, queueId INT", {"startingOffsets": json.dumps({TOPIC: {"broker-a:2": 7}})}),
])
def test_projection_cut_at_the_range_end(spark, broker, loaded, ddl, options) -> None:
    """The broker sends only what the projection needs (here no queue offsets without a
    tag filter); rows past endingOffsets are still cut, ranges still end exactly."""
    columns = [part.split()[0] for part in ddl.split(", ")]
    projected = read(spark, broker, ddl, subscribe=TOPIC, **options)
    full = read(spark, broker, subscribe=TOPIC, **options).select(*columns)
    assert projected.count() == full.count() > 0
    assert_df_equality(projected, full, ignore_row_order=True, ignore_nullable=True)


@pytest.mark.parametrize("ddl, named", [
    ("queueId INT, colour STRING", "unknown column 'colour'"),
    ("body BINARY, queueId STRING", "column 'queueId' is declared STRING; expected INT"),
    ("bornTimestamp BIGINT", "column 'bornTimestamp' is declared BIGINT; expected TIMESTAMP"),
    ("key STRING NOT NULL", "column 'key' is declared NOT NULL"),
])
def test_bad_declared_schema_names_the_column(spark, broker, loaded, ddl, named) -> None:
    with pytest.raises(Exception, match=named):
        read(spark, broker, ddl, subscribe=TOPIC).collect()
