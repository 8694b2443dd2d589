"""What a user coming from `format("kafka")` does, on a topic that lives on two replica sets.

Goal: the default schema identifies a record by (topic, brokerName, queueId, queueOffset) even
though queue ids and offsets repeat across the two sets (the test checks they do repeat, so
it could fail); the sink takes a Kafka-shaped DataFrame (binary key, string value, Kafka's
headers, partition, and the read-side columns offset/timestamp, which it ignores) and a
non-UTF-8 key fails the write naming the partition; endingTimestamp and
endingOffsetsByTimestamp cut a batch read by store time; maxRecordsPerPartition cuts queue
ranges into more tasks reading the same rows; groupIdPrefix commits a streaming query's
progress under a generated group; a streaming read refuses the ending options.
Method: two real broker processes (broker-a and broker-b, one replica set each) named together
in the `brokers` option, a real local SparkSession (the session fixture), the client library to
produce and to look at group offsets.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from connector import Admin, ClientConfig, Producer
from connector.spark.columns import RECORD_KEY
from tests.integration.broker_process import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOPIC = "kafka_habits"
QUEUES = 2
PER_QUEUE = 15


@pytest.fixture(scope="module")
def two_sets(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """broker-a and broker-b, TOPIC on both; returns (brokers option, store-time mark): rows
    stored before the mark are the first PER_QUEUE // 3 of each queue."""
    brokers = [BrokerProcess(tmp_path_factory.mktemp(name), name=name,
                             flushDiskType="ASYNC_FLUSH").start()
               for name in ("broker-a", "broker-b")]
    try:
        for broker in brokers:
            Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic(TOPIC, queues=QUEUES)
        early = PER_QUEUE // 3
        produce_all(brokers, range(early))
        mark_ms = int(time.time() * 1000) + 1
        while int(time.time() * 1000) <= mark_ms:  # the next stores are at or after the mark
            time.sleep(0.001)
        produce_all(brokers, range(early, PER_QUEUE))
        yield ",".join(broker.endpoint for broker in brokers), mark_ms, brokers
    finally:
        for broker in brokers:
            broker.stop()


def produce_all(brokers: list[BrokerProcess], indices: range) -> None:
    for broker in brokers:
        with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
            rows = [{"body": f"{broker.endpoint}-q{q}-m{i}".encode(), "key": f"k{i}",
                     "queue_id": q} for q in range(QUEUES) for i in indices]
            assert all(result.ok for result in producer.send_batch(TOPIC, rows))


def read(spark, brokers: str, **options: str):  # type: ignore[no-untyped-def]
    return (spark.read.format("rocketha").option("brokers", brokers).options(**options)
            .load())


def test_default_schema_identifies_records_on_two_sets(spark, two_sets) -> None:
    brokers, _, _ = two_sets
    df = read(spark, brokers, subscribe=TOPIC)
    total = 2 * QUEUES * PER_QUEUE
    assert df.count() == total
    # queue ids and offsets restart on each replica set: without brokerName rows collide
    assert df.select("topic", "queueId", "queueOffset").distinct().count() == total // 2
    assert df.select(*RECORD_KEY).distinct().count() == total
    assert {r.brokerName for r in df.select("brokerName").distinct().collect()} == {
        "broker-a", "broker-b"}


def test_offsets_json_keys_match_the_columns(spark, two_sets) -> None:
    """`"<brokerName>:<queueId>"` in offsets JSON names the rows with those two columns."""
    brokers, _, _ = two_sets
    ending = json.dumps({TOPIC: {"broker-b:1": 4, "broker-a:0": 2}})
    df = read(spark, brokers, subscribe=TOPIC, endingOffsets=ending,
              startingOffsets=json.dumps({TOPIC: {"broker-b:1": 1}}))
    got = sorted((r.brokerName, r.queueId, r.queueOffset) for r in df.collect()
                 if (r.brokerName, r.queueId) in (("broker-b", 1), ("broker-a", 0)))
    assert got == [("broker-a", 0, 0), ("broker-a", 0, 1), ("broker-b", 1, 1),
                   ("broker-b", 1, 2), ("broker-b", 1, 3)]


def test_ending_timestamp_cuts_by_store_time(spark, two_sets) -> None:
    brokers, mark_ms, _ = two_sets
    early = PER_QUEUE // 3
    before = read(spark, brokers, subscribe=TOPIC, endingTimestamp=str(mark_ms))
    assert before.count() == 2 * QUEUES * early
    assert before.agg(F.max("queueOffset")).collect()[0][0] == early - 1
    per_queue = json.dumps({TOPIC: {"broker-a:0": mark_ms}})
    cut = read(spark, brokers, subscribe=TOPIC, endingOffsetsByTimestamp=per_queue)
    counts = {(r.brokerName, r.queueId): r["count"]
              for r in cut.groupBy("brokerName", "queueId").count().collect()}
    assert counts == {("broker-a", 0): early, ("broker-a", 1): PER_QUEUE,
                      ("broker-b", 0): PER_QUEUE, ("broker-b", 1): PER_QUEUE}
    after = read(spark, brokers, subscribe=TOPIC, startingTimestamp=str(mark_ms),
                 endingTimestamp=str(mark_ms + 3_600_000))
    assert after.count() == 2 * QUEUES * (PER_QUEUE - early)


def test_max_records_per_partition_cuts_ranges(spark, two_sets) -> None:
    brokers, _, _ = two_sets
    whole = read(spark, brokers, subscribe=TOPIC)
    cut = read(spark, brokers, subscribe=TOPIC, maxRecordsPerPartition="4")
    assert cut.rdd.getNumPartitions() == 2 * QUEUES * math.ceil(PER_QUEUE / 4)
    assert sorted(cut.select(*RECORD_KEY).collect()) == sorted(
        whole.select(*RECORD_KEY).collect())


def test_stream_refuses_ending_options(spark, two_sets, tmp_path: Path) -> None:
    brokers, mark_ms, _ = two_sets
    with pytest.raises(Exception, match="option endingTimestamp is for batch reads"):
        query = (spark.readStream.format("rocketha").option("brokers", brokers)
                 .option("subscribe", TOPIC).option("endingTimestamp", str(mark_ms)).load()
                 .writeStream.format("noop").option("checkpointLocation", str(tmp_path))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)  # raises the query's error


def test_group_id_prefix_commits_under_a_generated_group(spark, two_sets,
                                                         tmp_path: Path) -> None:
    brokers, _, processes = two_sets
    query = (spark.readStream.format("rocketha").option("brokers", brokers)
             .option("subscribe", TOPIC).option("startingOffsets", "earliest")
             .option("groupIdPrefix", "habits").load()
             .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "ck"))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(120) and query.exception() is None
    for broker in processes:  # each replica set holds the group's offsets of its queues
        admin = Admin(ClientConfig(brokers=(broker.endpoint,)))
        groups = [g for g in admin.action("consumer_groups")["groups"]
                  if g.startswith("habits-")]
        assert len(groups) == 1, groups
        assert admin.query_offsets(groups[0], TOPIC) == dict.fromkeys(range(QUEUES), PER_QUEUE)


def test_sink_takes_a_kafka_shaped_dataframe(spark, two_sets) -> None:
    brokers, _, processes = two_sets
    for broker in processes:
        Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("kafka_out", queues=2)
    df = spark.createDataFrame(
        [(f"k{i}".encode(), f"v{i}", "kafka_out", i % 2, 1000 + i,
          [("trace", b"t1"), ("trace", f"t{i}".encode()), ("empty", None)]) for i in range(20)],
        "key BINARY, value STRING, topic STRING, partition INT, offset BIGINT, "
        "headers ARRAY<STRUCT<key: STRING, value: BINARY>>")
    df.write.format("rocketha").option("brokers", brokers).mode("append").save()
    back = read(spark, brokers, subscribe="kafka_out", includeProperties="true").collect()
    assert sorted((r.key, r.body.decode(), r.queueId, r.properties) for r in back) == sorted(
        (f"k{i}", f"v{i}", i % 2, {"trace": f"t{i}"}) for i in range(20))


def test_sink_names_the_partition_of_a_key_that_is_not_utf8(spark, two_sets) -> None:
    brokers, _, _ = two_sets
    df = spark.createDataFrame([(b"\xff\xfe", "v")], "key BINARY, value STRING").coalesce(1)
    with pytest.raises(Exception, match=r"partition 0: column 'key', row 0: .* is not UTF-8"):
        (df.write.format("rocketha").option("brokers", brokers).option("topic", TOPIC)
         .mode("append").save())
