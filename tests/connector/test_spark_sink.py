"""The `rocketha` sink: batch append and streaming writes, exactly once into the topic.

Goal: a batch append writes every row once with its key/tags/properties (the idempotence
marker never shows up in reads); bad input columns and overwrite/complete fail before anything
is written, naming the problem; a status outside acceptStatuses fails the task, and a stored
status listed in it (FLUSH_SLAVE_TIMEOUT from a replica set whose quorum cannot answer) lets the
task succeed with the rows stored; a streaming
task that fails after writing part of its rows is retried and the topic still holds exactly N;
a query restarted from its checkpoint after a crash between write and commit (the commit log
entry removed, and the broker SIGKILLed and restarted in between) adds no duplicates.
Method: real broker processes, a real SparkSession with task retries (local[2,20]); the broker
is SIGKILLed while write tasks are half way, and restarted after the sink's send deadline; for
acceptStatuses, a 2-replica SYNC_MASTER set (inSyncReplicas=2) whose slave is SIGSTOPped but
kept in the SyncStateSet, so every put is stored and times out waiting for its second ack.
"""

from __future__ import annotations

import json
import signal
import time

import pytest
from pyspark.sql import functions as F

from connector import Admin, ClientConfig, Producer
from tests.ha.replica_set import ReplicaSet
from tests.integration.broker_process import BrokerProcess

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def admin(broker: BrokerProcess) -> Admin:
    return Admin(ClientConfig(brokers=(broker.endpoint,)))


def stored_count(broker: BrokerProcess, topic: str) -> int:
    return sum(q["max_queue_offset"] - q["min_queue_offset"]
               for q in admin(broker).queue_offsets(topic))


def read_topic(spark, broker: BrokerProcess, topic: str):  # type: ignore[no-untyped-def]
    return (spark.read.format("rocketha").option("brokers", broker.endpoint)
            .option("subscribe", topic).option("includeProperties", "true").load())


def duplicates_dropped(broker: BrokerProcess) -> int:
    return int(admin(broker).broker_stats()["idempotence"]["duplicates_dropped"])


def test_batch_append_round_trip(spark, broker) -> None:
    admin(broker).create_topic("sink_batch", queues=2)
    df = spark.createDataFrame(
        [(f"body{i}", f"k{i}", "T" if i % 2 else None, {"n": str(i)}, i % 2) for i in range(50)],
        "value STRING, key STRING, tags STRING, properties MAP<STRING,STRING>, queueId INT")
    (df.write.format("rocketha").option("brokers", broker.endpoint)
     .option("topic", "sink_batch").mode("append").save())
    rows = read_topic(spark, broker, "sink_batch").select(
        F.col("body").cast("string").alias("body"), "key", "tags", "properties", "queueId"
    ).collect()
    assert sorted((r.body, r.key, r.tags, r.properties, r.queueId) for r in rows) == sorted(
        (f"body{i}", f"k{i}", "T" if i % 2 else None, {"n": str(i)}, i % 2) for i in range(50))


def test_topic_column_routes_rows(spark, broker) -> None:
    df = spark.createDataFrame([(f"x{i}".encode(), f"sink_route_{i % 2}") for i in range(20)],
                               "body BINARY, topic STRING")
    df.write.format("rocketha").option("brokers", broker.endpoint).mode("append").save()
    assert stored_count(broker, "sink_route_0") == 10
    assert stored_count(broker, "sink_route_1") == 10


@pytest.mark.parametrize("ddl, mode, message", [
    ("body STRING, colour STRING", "append", "unknown column.*colour"),
    ("body INT", "append", "column 'body' has type int"),
    ("key STRING", "append", "body and value"),
    ("body STRING", "overwrite", "append-only"),
])
def test_bad_input_fails_before_writing(spark, broker, ddl: str, mode: str,
                                        message: str) -> None:
    admin(broker).create_topic("sink_bad", queues=1)
    values = {"STRING": "x", "INT": 1}
    row = tuple(values[part.split()[1]] for part in ddl.split(", "))
    df = spark.createDataFrame([row], ddl)
    with pytest.raises(Exception, match=message):
        (df.write.format("rocketha").option("brokers", broker.endpoint)
         .option("topic", "sink_bad").mode(mode).save())
    assert stored_count(broker, "sink_bad") == 0


def test_rejected_status_fails_the_task(spark, broker) -> None:
    admin(broker).create_topic("sink_illegal", queues=1)
    too_big = spark.range(1).select(F.expr("repeat('x', 2 * 1024 * 1024)").alias("body"))
    with pytest.raises(Exception, match="MESSAGE_ILLEGAL"):
        (too_big.write.format("rocketha").option("brokers", broker.endpoint)
         .option("topic", "sink_illegal").mode("append").save())
    assert stored_count(broker, "sink_illegal") == 0


def test_accepted_stored_status_lets_the_task_succeed(spark, tmp_path) -> None:
    # the slave stays in the SyncStateSet (long housekeeping / not-catchup limits) while frozen,
    # so inSyncReplicas=2 admits each put, and its wait for the second ack times out
    replicas = ReplicaSet(tmp_path / "set", 2, inSyncReplicas="2", syncFlushTimeout="300",
                          haHousekeepingInterval="120000", haMaxTimeSlaveNotCatchup="120000")
    try:
        master = replicas.endpoints[0]
        Admin(ClientConfig(brokers=(master,))).create_topic("sink_accept", queues=2)
        replicas.wait_sync_state_set([0, 1])
        replicas.signal(1, signal.SIGSTOP)
        assert replicas.put("sink_accept", [b"probe"])["status"] == "FLUSH_SLAVE_TIMEOUT"
        before = replicas.info(0)
        df = spark.createDataFrame([(f"a{i}", i % 2) for i in range(30)],
                                   "value STRING, queueId INT")
        (df.write.format("rocketha").option("brokers", master).option("topic", "sink_accept")
         .option("acceptStatuses", "PUT_OK,FLUSH_SLAVE_TIMEOUT").mode("append").save())
        after = replicas.info(0)
        assert after["max_log_position"] > before["max_log_position"], "nothing was stored"
        assert after["confirm_log_position"] == before["confirm_log_position"], \
            "the writes were acknowledged by the quorum: the status was not FLUSH_SLAVE_TIMEOUT"
        replicas.signal(1, signal.SIGCONT)  # the quorum confirms them: now readable
        wait_until(lambda: replicas.info(0)["confirm_log_position"]
                   == after["max_log_position"], 30, "the slave to confirm the writes")
        bodies = (spark.read.format("rocketha").option("brokers", master)
                  .option("subscribe", "sink_accept").load()
                  .select(F.col("body").cast("string").alias("body")).collect())
        assert sorted(r.body for r in bodies) == sorted(["probe"] + [f"a{i}" for i in range(30)])
    finally:
        replicas.down()


def fill(broker: BrokerProcess, topic: str, count: int) -> None:
    admin(broker).create_topic(topic, queues=2)
    with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
        for start in range(0, count, 1000):
            rows = [{"body": f"m{i}".encode(), "queue_id": i % 2}
                    for i in range(start, min(count, start + 1000))]
            assert all(r.ok for r in producer.send_batch(topic, rows))


def copy_query(spark, broker: BrokerProcess, source: str, target: str,  # type: ignore
               checkpoint, **options: str):
    stream = (spark.readStream.format("rocketha").option("brokers", broker.endpoint)
              .option("subscribe", source).option("startingOffsets", "earliest")
              .option("fetchMaxMessages", "300").load().select("body", "key"))
    writer = (stream.writeStream.format("rocketha").option("brokers", broker.endpoint)
              .option("topic", target).option("writeBatchRows", "200"))
    for key, value in options.items():
        writer = writer.option(key, value)
    return (writer.option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
            .start())


def wait_until(condition, timeout_s: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def test_tasks_retried_after_broker_crash_mid_write_keep_exactly_n(spark, tmp_path) -> None:
    """SIGKILL the broker while both write tasks are half way: their puts fail past the
    client's deadline, Spark retries the tasks, the retries re-send every chunk from the
    start, and the restarted broker (its table rebuilt from the log) drops the stored ones."""
    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        count = 40_000
        fill(broker, "eo_source", count)
        admin(broker).create_topic("eo_target", queues=2)
        query = copy_query(spark, broker, "eo_source", "eo_target", tmp_path / "cp",
                           writeBatchRows="100", requestTimeoutMs="500")
        wait_until(lambda: stored_count(broker, "eo_target") >= 1000, 300, "the first writes")
        broker.kill()
        time.sleep(3)  # the outage: longer than the sink's send deadline (3 x 500 ms)
        broker.start()
        # a deadline, not a pace: 400 chunks of 100 rows take minutes on a loaded machine
        assert query.awaitTermination(600), "the copy did not finish in 10 minutes"
        assert query.exception() is None, query.exception()
        assert duplicates_dropped(broker) > 0, "no retried task re-sent a stored chunk"
        assert stored_count(broker, "eo_target") == count
        bodies = read_topic(spark, broker, "eo_target").select(F.col("body").cast("string"))
        assert bodies.distinct().count() == count
    finally:
        broker.stop()


def test_replay_after_crash_between_write_and_commit(spark, tmp_path) -> None:
    broker = BrokerProcess(tmp_path / "broker").start()
    try:
        count = 2000
        fill(broker, "replay_source", count)
        admin(broker).create_topic("replay_target", queues=2)
        checkpoint = tmp_path / "cp"
        query = copy_query(spark, broker, "replay_source", "replay_target", checkpoint)
        assert query.awaitTermination(180) and query.exception() is None
        assert stored_count(broker, "replay_target") == count
        # crash between write and commit: the sink wrote batch N, Spark never recorded it
        commits = sorted((checkpoint / "commits").glob("[0-9]*"), key=lambda p: int(p.name))
        last = commits[-1]
        offsets = json.loads((checkpoint / "offsets" / last.name).read_text().splitlines()[-1])
        assert offsets, "the replayed batch must have offsets"
        last.unlink()
        (last.parent / f".{last.name}.crc").unlink(missing_ok=True)  # Hadoop's checksum file
        broker.kill()  # the broker forgets everything but its log
        broker.start()
        query = copy_query(spark, broker, "replay_source", "replay_target", checkpoint)
        assert query.awaitTermination(180) and query.exception() is None
        assert duplicates_dropped(broker) > 0, "the replayed batch was not sent again"
        assert stored_count(broker, "replay_target") == count
    finally:
        broker.stop()
