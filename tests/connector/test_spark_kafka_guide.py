"""The everyday examples of Spark's Kafka integration guide, on a topic spread over two replica
sets, changed only in the format name and the options that say where the data is.

Goal: each example's query text is Kafka's: subscribe and `CAST(key AS STRING)`,
`CAST(value AS STRING)`; a watermarked sliding-window count on `timestamp`; a stream-static
join on the key; a batch read that resumes from a streaming query's `endOffset`;
`startingTimestamp`; a rate source written into a topic and restarted from its checkpoint;
and a Kafka-shaped read (headers included) written back into a topic as it is. What changes
is `format("rocketha")` and WHERE (the `brokers` of both sets, and `columns=kafka`, which
gives Kafka's column names). Each asserts the rows, so a lost, repeated or misnamed row fails
it. Runs on the project's pyspark and in the 4.0 lane (build.py SPARK_SMOKE_TESTS): these
examples need nothing 4.0 lacks (Trigger.AvailableNow runs through Spark's own wrapper there).
Method: two real broker processes (broker-a, broker-b: one replica set each), the session's
real SparkSession, short streams stopped by Trigger.AvailableNow, the client library to
produce.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from pyspark.sql import functions as F

from connector import Admin, ClientConfig, Producer
from tests.integration.broker_process import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]

TOPIC = "guide"
QUEUES = 2
PER_QUEUE = 12  # rows per queue: the first EARLY are stored before the fixture's time mark
EARLY = 4
WORDS = ("apple", "pear", "plum")
TOTAL = 2 * QUEUES * PER_QUEUE  # two replica sets


def row(broker: str, queue_id: int, index: int) -> dict[str, object]:
    return {"body": WORDS[index % len(WORDS)].encode(), "key": f"k{index % 4}",
            "queue_id": queue_id, "properties": {"trace": f"{broker}-{queue_id}-{index}"}}


def produce(endpoint: str, topic: str, indices: range) -> None:
    with Producer(ClientConfig(brokers=(endpoint,))) as producer:
        rows = [row(endpoint, q, i) for q in range(QUEUES) for i in indices]
        assert all(result.ok for result in producer.send_batch(topic, rows))


def create(endpoints: list[str], topic: str) -> None:
    for endpoint in endpoints:
        Admin(ClientConfig(brokers=(endpoint,))).create_topic(topic, queues=QUEUES)


@pytest.fixture(scope="module")
def guide(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    """broker-a and broker-b with TOPIC on both; yields (WHERE options, endpoints, time mark):
    rows stored before the mark are the first EARLY of each queue."""
    brokers = [BrokerProcess(tmp_path_factory.mktemp(name), name=name,
                             flushDiskType="ASYNC_FLUSH").start()
               for name in ("broker-a", "broker-b")]
    try:
        endpoints = [broker.endpoint for broker in brokers]
        create(endpoints, TOPIC)
        for endpoint in endpoints:
            produce(endpoint, TOPIC, range(EARLY))
        mark_ms = int(time.time() * 1000) + 1
        while int(time.time() * 1000) <= mark_ms:  # the next stores are at or after the mark
            time.sleep(0.001)
        for endpoint in endpoints:
            produce(endpoint, TOPIC, range(EARLY, PER_QUEUE))
        where = {"brokers": ",".join(endpoints), "columns": "kafka"}
        yield where, endpoints, mark_ms
    finally:
        for broker in brokers:
            broker.stop()


def run_available_now(writer, checkpoint: Path):  # type: ignore[no-untyped-def]
    """Start a DataStreamWriter with Trigger.AvailableNow and wait for it to stop by itself."""
    query = (writer.option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
    assert query.awaitTermination(180), "Trigger.AvailableNow did not stop by itself"
    assert query.exception() is None, query.exception()
    return query


def expected_rows() -> Counter[tuple[str, str]]:
    return Counter((f"k{i % 4}", WORDS[i % len(WORDS)])
                   for _ in range(2 * QUEUES) for i in range(PER_QUEUE))


def test_subscribe_and_cast_key_value(spark, guide, tmp_path: Path) -> None:
    where, _, _ = guide
    df = (spark.readStream.format("rocketha").options(**where)
          .option("subscribe", TOPIC).option("startingOffsets", "earliest").load())
    writer = (df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)")
              .writeStream.format("memory").queryName("guide_cast"))
    run_available_now(writer, tmp_path / "ck")
    rows = spark.sql("SELECT key, value FROM guide_cast").collect()
    assert Counter((r.key, r.value) for r in rows) == expected_rows()


def test_watermarked_window_count(spark, guide, tmp_path: Path) -> None:
    where, _, _ = guide
    words = (spark.readStream.format("rocketha").options(**where)
             .option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
             .selectExpr("CAST(value AS STRING) AS word", "timestamp"))
    counts = (words.withWatermark("timestamp", "10 minutes")
              .groupBy(F.window(words.timestamp, "10 minutes", "5 minutes"), words.word)
              .count())
    run_available_now(counts.writeStream.outputMode("update").format("memory")
                      .queryName("guide_windows"), tmp_path / "ck")
    latest: dict[tuple[object, str], int] = {}  # update mode: a window's last row is its count
    for r in spark.sql("SELECT window, word, count FROM guide_windows").collect():
        latest[(r.window, r.word)] = max(latest.get((r.window, r.word), 0), r["count"])
    per_word = Counter[str]()
    for (_, word), count in latest.items():
        per_word[word] += count
    produced = Counter[str]()
    for (_, word), count in expected_rows().items():
        produced[word] += count
    # sliding windows of 10 minutes every 5: each event counts in exactly two windows
    assert per_word == {word: 2 * count for word, count in produced.items()}


def test_stream_static_join(spark, guide, tmp_path: Path) -> None:
    where, _, _ = guide
    static_df = spark.createDataFrame([("k0", "zero"), ("k1", "one")], "key STRING, name STRING")
    stream = (spark.readStream.format("rocketha").options(**where)
              .option("subscribe", TOPIC).option("startingOffsets", "earliest").load()
              .selectExpr("CAST(key AS STRING) AS key", "CAST(value AS STRING) AS value"))
    joined = stream.join(static_df, "key")
    run_available_now(joined.writeStream.format("memory").queryName("guide_join"),
                      tmp_path / "ck")
    rows = spark.sql("SELECT key, value, name FROM guide_join").collect()
    names = {"k0": "zero", "k1": "one"}
    assert Counter((r.key, r.value, r.name) for r in rows) == Counter(
        (key, value, names[key]) for (key, value), n in expected_rows().items()
        if key in names for _ in range(n))


def test_batch_read_resumes_from_a_streams_end_offset(spark, guide, tmp_path: Path) -> None:
    where, endpoints, _ = guide
    create(endpoints, "guide_resume")
    for endpoint in endpoints:
        produce(endpoint, "guide_resume", range(5))
    query = run_available_now(
        spark.readStream.format("rocketha").options(**where)
        .option("subscribe", "guide_resume").option("startingOffsets", "earliest").load()
        .writeStream.format("noop"), tmp_path / "ck")
    end_offset = query.lastProgress["sources"][0]["endOffset"]
    if not isinstance(end_offset, str):  # a JSON object in the progress, as Kafka's
        end_offset = json.dumps(end_offset)
    for endpoint in endpoints:
        produce(endpoint, "guide_resume", range(5, 8))
    df = (spark.read.format("rocketha").options(**where).option("subscribe", "guide_resume")
          .option("startingOffsets", end_offset).option("endingOffsets", "latest").load())
    got = df.selectExpr("brokerName", "partition", "offset").collect()
    assert sorted(tuple(r) for r in got) == sorted(
        (name, q, offset) for name in ("broker-a", "broker-b") for q in range(QUEUES)
        for offset in range(5, 8))


def test_starting_timestamp(spark, guide, tmp_path: Path) -> None:
    where, _, mark_ms = guide
    df = (spark.readStream.format("rocketha").options(**where).option("subscribe", TOPIC)
          .option("startingTimestamp", str(mark_ms)).load())
    run_available_now(df.selectExpr("CAST(key AS STRING)", "CAST(value AS STRING)", "offset")
                      .writeStream.format("memory").queryName("guide_since"), tmp_path / "ck")
    offsets = Counter(r.offset for r in spark.sql("SELECT offset FROM guide_since").collect())
    assert offsets == {offset: 2 * QUEUES for offset in range(EARLY, PER_QUEUE)}


def test_rate_source_into_a_topic_restarts_from_its_checkpoint(spark, guide,
                                                               tmp_path: Path) -> None:
    where, endpoints, _ = guide
    create(endpoints, "guide_rate")
    checkpoint = tmp_path / "ck"

    def run() -> None:
        rate = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", 25)
                .option("numPartitions", 2).load())
        run_available_now(rate.selectExpr("CAST(value AS STRING) AS value")
                          .writeStream.format("rocketha").option("brokers", where["brokers"])
                          .option("topic", "guide_rate"), checkpoint)

    run()
    run()  # the second run starts where the checkpoint says: no value twice, none skipped
    values = (spark.read.format("rocketha").options(**where).option("subscribe", "guide_rate")
              .load().selectExpr("CAST(value AS STRING) AS value").collect())
    # each run is one micro-batch of rowsPerBatch (AvailableNow asks the rate source once)
    assert sorted(int(r.value) for r in values) == list(range(50))


def test_a_kafka_shaped_read_writes_back_as_it_is(spark, guide) -> None:
    where, endpoints, _ = guide
    create(endpoints, "guide_copy")
    df = (spark.read.format("rocketha").options(**where).option("includeHeaders", "true")
          .option("subscribe", TOPIC).load())
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp",
                          "timestampType", "headers", "brokerName"]
    df.write.format("rocketha").option("brokers", where["brokers"]).option(
        "topic", "guide_copy").mode("append").save()
    back = (spark.read.format("rocketha").options(**where).option("includeHeaders", "true")
            .option("subscribe", "guide_copy").load())

    def shape(frame) -> Counter[tuple[object, ...]]:  # type: ignore[no-untyped-def]
        return Counter((r.key, bytes(r.value), r.partition, r.timestampType,
                        tuple((h.key, bytes(h.value)) for h in r.headers))
                       for r in frame.collect())

    original = shape(df)
    assert len(original) == TOTAL and {k[3] for k in original} == {1}
    assert shape(back) == original
