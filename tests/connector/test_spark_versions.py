"""The connector's Spark smoke set, run on every supported pyspark (`build.py test --pyspark X`).

Goal: read, readStream, write and writeStream work on pyspark 4.0 to 4.3, each through the
path its version offers (connector.spark.compat): the Arrow stream writer from 4.1 and a row
writer on 4.0; admission control and the AvailableNow mixin from 4.2, and before that Spark's
latestOffset() with the position kept by the reader; filter pushdown from 4.1. What a version
lacks is refused with one line naming the version it needs. The default suite runs this module
on the project's pinned pyspark and, through build.py, on the oldest supported one (4.0).
Method: one real broker process, the session's real SparkSession, `format("rocketha")` found
by Spark's own lookup of `pyspark_rocketha` (no register()), rows compared with what was
produced.
"""

from __future__ import annotations

import contextlib
import io

import pyspark
import pytest

from connector import Admin, ClientConfig, Producer
from connector.spark.compat import API, parse_version

pytestmark = [pytest.mark.spark, pytest.mark.integration]

VERSION = parse_version(pyspark.__version__)[:2]
QUEUES = 2


def create(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic(topic, queues=QUEUES)


def produce(broker, topic: str, start: int, count: int) -> None:  # type: ignore[no-untyped-def]
    with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
        rows = [{"body": f"m{index}".encode(), "queue_id": index % QUEUES}
                for index in range(start, start + count)]
        assert all(r.ok for r in producer.send_batch(topic, rows))


def bodies(spark, broker, topic: str) -> list[str]:  # type: ignore[no-untyped-def]
    frame = (spark.read.format("rocketha").option("brokers", broker.endpoint)
             .option("subscribe", topic).load())
    return sorted(row.body for row in frame.selectExpr("CAST(body AS STRING) AS body").collect())


def source(spark, broker, topic: str, **options: str):  # type: ignore[no-untyped-def]
    stream = (spark.readStream.format("rocketha").option("brokers", broker.endpoint)
              .option("subscribe", topic).option("startingOffsets", "earliest"))
    for key, value in options.items():
        stream = stream.option(key, value)
    return stream.load()


def test_the_detected_api_is_the_one_this_version_ships() -> None:
    assert API.version == pyspark.__version__
    assert API.arrow_stream_writer == (VERSION >= (4, 1))
    assert API.filter_pushdown == (VERSION >= (4, 1))
    assert API.admission_control == (VERSION >= (4, 2))


def test_batch_write_then_batch_read(spark, broker) -> None:
    create(broker, "versions_batch")
    frame = spark.createDataFrame([(f"b{i}", i % QUEUES) for i in range(40)],
                                  "value STRING, queueId INT")
    (frame.write.format("rocketha").option("brokers", broker.endpoint)
     .option("topic", "versions_batch").mode("append").save())
    assert bodies(spark, broker, "versions_batch") == sorted(f"b{i}" for i in range(40))


def test_stream_to_stream_restarts_from_its_checkpoint(spark, broker, tmp_path) -> None:
    """readStream -> writeStream (Trigger.AvailableNow), twice on one checkpoint: each message
    arrives once, although the second run's reader starts from the checkpoint only."""
    create(broker, "versions_in")
    create(broker, "versions_out")
    produce(broker, "versions_in", 0, 20)

    def run() -> list[int]:
        query = (source(spark, broker, "versions_in").select("body")
                 .writeStream.format("rocketha").option("brokers", broker.endpoint)
                 .option("topic", "versions_out")
                 .option("checkpointLocation", str(tmp_path / "cp"))
                 .trigger(availableNow=True).start())
        assert query.awaitTermination(180), "AvailableNow did not stop by itself"
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    assert sum(run()) == 20
    produce(broker, "versions_in", 20, 11)
    assert sum(run()) == 11
    assert bodies(spark, broker, "versions_out") == sorted(f"m{i}" for i in range(31))


def test_max_offsets_per_trigger_caps_batches_or_names_the_version(spark, broker,
                                                                   tmp_path) -> None:
    create(broker, "versions_capped")
    produce(broker, "versions_capped", 0, 30)
    stream = source(spark, broker, "versions_capped", maxOffsetsPerTrigger="12")

    def start():  # type: ignore[no-untyped-def]
        return (stream.select("body").writeStream.format("memory").queryName("versions_capped")
                .option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(availableNow=True).start())

    if VERSION < (4, 2):
        with pytest.raises(Exception, match=r"option maxOffsetsPerTrigger needs pyspark 4\.2 "
                                            r"or later \(admission control\); this is pyspark "):
            query = start()
            query.awaitTermination(120)
            assert query.exception() is None
        return
    query = start()
    assert query.awaitTermination(180)
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [12, 12, 6]


@contextlib.contextmanager
def pushdown(spark, enabled: bool):  # type: ignore[no-untyped-def]
    key = "spark.sql.python.filterPushdown.enabled"
    spark.conf.set(key, str(enabled).lower())
    try:
        yield
    finally:
        spark.conf.unset(key)


@pytest.mark.parametrize("enabled", [False, True])
def test_filters_give_the_same_rows_pushed_or_not(spark, broker, enabled: bool) -> None:
    """queueId = 1 reads the same rows with pushdown on or off, and on every version (4.0 has
    no pushdown: Spark filters); from 4.1 with the conf on, the plan shows it pushed."""
    topic = f"versions_filtered_{str(enabled).lower()}"
    create(broker, topic)
    produce(broker, topic, 0, 10)
    with pushdown(spark, enabled):
        frame = (spark.read.format("rocketha").option("brokers", broker.endpoint)
                 .option("subscribe", topic).load().where("queueId = 1"))
        rows = sorted(row.body for row in frame.selectExpr("CAST(body AS STRING) AS body")
                      .collect())
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            frame.explain(mode="formatted")
    assert rows == sorted(f"m{i}" for i in range(1, 10, 2))
    pushed = "PushedFilters" in printed.getvalue()
    assert pushed == (enabled and VERSION >= (4, 1)), printed.getvalue()
