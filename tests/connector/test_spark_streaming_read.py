"""Streaming reads through `spark.readStream.format("rocketha")`.

Goal: a query with a checkpoint, stopped and restarted while messages keep arriving, delivers
every message exactly once; Trigger.AvailableNow drains what exists and stops by itself;
maxOffsetsPerTrigger bounds every micro-batch; groupId records progress as consumer-group
offsets; a declared schema (`readStream.schema(...)`) delivers just those columns, and a wrong
one fails the query naming the column. Method: a real broker process, a real SparkSession, a
Parquet file sink (itself exactly-once through its metadata log) read back and compared with
what was produced.
"""

from __future__ import annotations

import json

import pytest

from connector import Admin, ClientConfig, Producer

pytestmark = [pytest.mark.spark, pytest.mark.integration]

QUEUES = 2


def produce(broker, topic: str, start: int, count: int) -> None:  # type: ignore[no-untyped-def]
    with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
        rows = [{"body": f"m{index}".encode(), "queue_id": index % QUEUES}
                for index in range(start, start + count)]
        assert all(r.ok for r in producer.send_batch(topic, rows))


def run_available_now(spark, broker, topic: str, out, checkpoint,  # type: ignore[no-untyped-def]
                      **options: str) -> list[dict]:  # type: ignore[type-arg]
    stream = (spark.readStream.format("rocketha").option("brokers", broker.endpoint)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        stream = stream.option(key, value)
    query = (stream.load().selectExpr("CAST(body AS STRING) AS body", "queueId", "queueOffset")
             .writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(180), "AvailableNow did not stop by itself"
    assert query.exception() is None
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def test_restart_from_checkpoint_delivers_each_message_once(spark, broker, tmp_path) -> None:
    topic = "stream_restart"
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic(topic, queues=QUEUES)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    produce(broker, topic, 0, 30)
    first = run_available_now(spark, broker, topic, out, checkpoint, maxOffsetsPerTrigger="12",
                              groupId="spark_group")
    assert [p["numInputRows"] for p in first] == [12, 12, 6]
    end = json.loads(first[-1]["sources"][0]["endOffset"])
    assert end == {topic: {"broker-a:0": 15, "broker-a:1": 15}}

    produce(broker, topic, 30, 25)
    second = run_available_now(spark, broker, topic, out, checkpoint)
    assert sum(p["numInputRows"] for p in second) == 25
    bodies = [r.body for r in spark.read.parquet(str(out)).collect()]
    assert sorted(bodies) == sorted(f"m{index}" for index in range(55))
    first_end = json.loads(second[-1]["sources"][0]["endOffset"])[topic]
    assert first_end == {"broker-a:0": 28, "broker-a:1": 27}
    # the group saw the first run's progress (groupId was only set there)
    committed = Admin(ClientConfig(brokers=(broker.endpoint,))).query_offsets("spark_group",
                                                                               topic)
    assert committed == {0: 15, 1: 15}


def test_latest_start_and_tag_filter(spark, broker, tmp_path) -> None:
    topic = "stream_latest"
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic(topic, queues=QUEUES)
    with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
        producer.send_batch(topic, [{"body": b"old", "tags": "A", "queue_id": 0}])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    stream = (spark.readStream.format("rocketha").option("brokers", broker.endpoint)
              .option("subscribe", topic).option("tagFilter", "A || B").load()
              .selectExpr("CAST(body AS STRING) AS body", "tags"))
    query = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(processingTime="0.2 seconds")
             .start())
    try:
        query.processAllAvailable()  # the initial offset (latest) is fixed now
        with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
            producer.send_batch(topic, [{"body": f"new{i}".encode(), "tags": "ABC"[i % 3],
                                         "queue_id": i % QUEUES} for i in range(9)])
        query.processAllAvailable()
    finally:
        query.stop()
    rows = sorted((r.body, r.tags) for r in spark.read.parquet(str(out)).collect())
    assert rows == sorted((f"new{i}", "ABC"[i % 3]) for i in range(9) if i % 3 != 2)


def declared_stream(spark, broker, topic: str, ddl: str):  # type: ignore[no-untyped-def]
    return (spark.readStream.format("rocketha").schema(ddl).option("brokers", broker.endpoint)
            .option("subscribe", topic).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "10").load())


def test_declared_schema_streams_only_those_columns(spark, broker, tmp_path) -> None:
    topic = "stream_projected"
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic(topic, queues=QUEUES)
    produce(broker, topic, 0, 25)
    stream = declared_stream(spark, broker, topic, "queueOffset BIGINT, body BINARY, queueId INT")
    assert stream.columns == ["queueOffset", "body", "queueId"]
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    query = (stream.writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    assert query.awaitTermination(180), "AvailableNow did not stop by itself"
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [10, 10, 5]
    written = spark.read.parquet(str(out))
    assert written.columns == ["queueOffset", "body", "queueId"]
    rows = sorted((r.queueId, r.queueOffset, bytes(r.body)) for r in written.collect())
    # produce() puts message i on queue i % QUEUES, so it is that queue's (i // QUEUES)-th
    assert rows == sorted((i % QUEUES, i // QUEUES, f"m{i}".encode()) for i in range(25))


def test_bad_declared_schema_fails_the_query_naming_the_column(spark, broker, tmp_path) -> None:
    topic = "stream_bad_schema"
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic(topic, queues=QUEUES)
    produce(broker, topic, 0, 4)
    stream = declared_stream(spark, broker, topic, "body BINARY, queueId BIGINT")
    with pytest.raises(Exception, match="column 'queueId' is declared BIGINT; expected INT"):
        query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        query.awaitTermination(120)
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.parquet"))


def test_offsets_behind_latest_through_the_listener(spark, broker, tmp_path) -> None:  # type: ignore
    """Kafka's min/max/avgOffsetsBehindLatest, published by spark_app's listener (Python
    sources cannot report source metrics): 30 messages on 2 queues read 12 per batch are 9,
    3 and 0 behind per queue after the three batches."""
    import time

    from spark_app.progress import OffsetsBehindLatestListener

    topic = "stream_behind"
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic(topic, queues=QUEUES)
    produce(broker, topic, 0, 30)
    listener = OffsetsBehindLatestListener()
    spark.streams.addListener(listener)
    try:
        stream = (spark.readStream.format("rocketha").option("brokers", broker.endpoint)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", "12").load().selectExpr("queueOffset"))
        query = (stream.writeStream.format("parquet").option("path", str(tmp_path / "out"))
                 .option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(processingTime="0.2 seconds").start())
        seen: dict[int, dict] = {}  # type: ignore[type-arg]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and 2 not in seen:
            for entry in listener.history(str(query.id)):
                seen[entry["batchId"]] = entry
            time.sleep(0.05)
        query.stop()
        assert [(seen[b]["minOffsetsBehindLatest"], seen[b]["maxOffsetsBehindLatest"],
                 seen[b]["avgOffsetsBehindLatest"]) for b in (0, 1, 2)] == [
            ("9", "9", "9.0"), ("3", "3", "3.0"), ("0", "0", "0.0")]
    finally:
        spark.streams.removeListener(listener)
