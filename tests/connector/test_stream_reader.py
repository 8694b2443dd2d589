"""The stream reader's offset logic against a real broker, without Spark (fast, exact).

Goal: initialOffset/latestOffset/partitions/read behave as Spark's micro-batch engine needs:
canonical offsets, ReadMaxRows caps each batch, ReadAllAvailable ignores the cap,
minOffsetsPerTrigger holds a trigger back until maxTriggerDelay, the AvailableNow target is
never passed, subscribePattern picks up a topic created later (from its first message), replays
of [start, end) return the same rows, failOnDataLoss=false turns a missing topic into a warning,
and every object Spark pickles survives a pickle round trip. Method: the reader is called the
way Spark's stream runner calls it (observed order in the PySpark reference), one broker
process, the client library to produce.
"""

from __future__ import annotations

import json
import logging
import pickle

import pytest
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connector import Admin, ClientConfig, Producer
from connector.client.routes import ReplicaSet
from connector.spark.datasource import BatchReader, RocketHADataSource, StreamReader, read_endpoints
from connector.spark.options import parse_source_options
from connector.spark.source import ALL_SOURCE_COLUMNS

pytestmark = pytest.mark.integration

# the source's schema built by hand (StructType.fromDDL would need a SparkSession)
FULL_SCHEMA = StructType(
    [StructField(name, StringType()) for name in ("topic", "brokerName")]
    + [StructField("queueId", IntegerType()), StructField("queueOffset", LongType())]
    + [StructField(name, StringType()) for name in ("msgId", "key", "tags")]
    + [StructField("body", BinaryType()),
       StructField("properties", MapType(StringType(), StringType()))]
    + [StructField(name, TimestampType()) for name in ("bornTimestamp", "storeTimestamp")])


def produce(broker, topic: str, count: int, queues: int = 2) -> None:  # type: ignore
    with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
        rows = [{"body": f"{topic}-{i}".encode(), "queue_id": i % queues} for i in range(count)]
        assert all(r.ok for r in producer.send_batch(topic, rows))


def reader(broker, **options: str) -> StreamReader:  # type: ignore[no-untyped-def]
    return StreamReader(parse_source_options({"brokers": broker.endpoint, **options}))


def bodies(stream: StreamReader, start: dict, end: dict) -> list[str]:  # type: ignore
    found = []
    for partition in stream.partitions(start, end):
        for batch in stream.read(partition):
            found += [body.decode() for body in batch.column("body").to_pylist()]
    return sorted(found)


def test_admission_control_and_replay(broker) -> None:  # type: ignore[no-untyped-def]
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("sr_cap", queues=2)
    produce(broker, "sr_cap", 30)
    stream = reader(broker, subscribe="sr_cap", startingOffsets="earliest",
                    maxOffsetsPerTrigger="12")
    start = stream.initialOffset()
    assert json.dumps(start) == '{"sr_cap": {"broker-a:0": 0, "broker-a:1": 0}}'
    limit = stream.getDefaultReadLimit()
    assert limit == ReadMaxRows(12)
    sizes, seen = [], []
    while True:
        end = stream.latestOffset(start, limit)
        if end == start:
            break
        batch = bodies(stream, start, end)
        assert bodies(stream, start, end) == batch  # a replay returns the same rows
        sizes.append(len(batch))
        seen += batch
        start = end
    assert sizes == [12, 12, 6]
    assert sorted(seen) == sorted(f"sr_cap-{i}" for i in range(30))
    assert stream.reportLatestOffset() == {"sr_cap": {"broker-a:0": 15, "broker-a:1": 15}}
    produce(broker, "sr_cap", 40)
    assert stream.latestOffset(start, ReadAllAvailable()) == \
        {"sr_cap": {"broker-a:0": 35, "broker-a:1": 35}}


def test_min_offsets_per_trigger_waits_until_the_delay(broker) -> None:  # type: ignore
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("sr_min", queues=2)
    produce(broker, "sr_min", 4)
    held = reader(broker, subscribe="sr_min", startingOffsets="earliest",
                  minOffsetsPerTrigger="10", maxTriggerDelay="1h")
    start = held.initialOffset()
    assert held.latestOffset(start, held.getDefaultReadLimit()) == start
    released = reader(broker, subscribe="sr_min", startingOffsets="earliest",
                      minOffsetsPerTrigger="10", maxTriggerDelay="0ms")
    assert released.latestOffset(start, released.getDefaultReadLimit()) == \
        {"sr_min": {"broker-a:0": 2, "broker-a:1": 2}}


def test_available_now_target_and_pattern_discovery(broker) -> None:  # type: ignore
    admin = Admin(ClientConfig(brokers=(broker.endpoint,)))
    admin.create_topic("srp_a", queues=1)
    produce(broker, "srp_a", 5, queues=1)
    stream = reader(broker, subscribePattern="srp_.*", startingOffsets="earliest")
    stream.prepareForTriggerAvailableNow()
    start = stream.initialOffset()
    produce(broker, "srp_a", 5, queues=1)  # after the target: not part of this run
    end = stream.latestOffset(start, stream.getDefaultReadLimit())
    assert end == {"srp_a": {"broker-a:0": 5}}
    assert stream.latestOffset(end, stream.getDefaultReadLimit()) == end

    tailing = reader(broker, subscribePattern="srp_.*")  # latest: starts after the 10
    start = tailing.initialOffset()
    admin.create_topic("srp_b", queues=1)
    produce(broker, "srp_b", 3, queues=1)
    joined = tailing.latestOffset(start, tailing.getDefaultReadLimit())
    assert joined == {"srp_a": {"broker-a:0": 10}, "srp_b": {"broker-a:0": 0}}  # at earliest
    assert bodies(tailing, start, joined) == []
    end = tailing.latestOffset(joined, tailing.getDefaultReadLimit())
    assert end == {"srp_a": {"broker-a:0": 10}, "srp_b": {"broker-a:0": 3}}
    assert bodies(tailing, joined, end) == [f"srp_b-{i}" for i in range(3)]


def test_fail_on_data_loss_false_warns(broker, caplog) -> None:  # type: ignore
    stream = reader(broker, subscribe="sr_missing", failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="connector.spark.source"):
        assert stream.initialOffset() == {}
    assert "sr_missing" in caplog.text


def test_everything_spark_pickles_round_trips(broker) -> None:  # type: ignore
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("sr_pickle", queues=1)
    produce(broker, "sr_pickle", 3, queues=1)
    options = CaseInsensitiveDict({"brokers": broker.endpoint, "subscribe": "sr_pickle",
                                   "startingOffsets": "earliest"})
    source = pickle.loads(pickle.dumps(RocketHADataSource(options)))
    batch_reader = pickle.loads(pickle.dumps(source.reader(FULL_SCHEMA)))
    assert batch_reader.columns == ALL_SOURCE_COLUMNS
    partitions = pickle.loads(pickle.dumps(batch_reader.partitions()))
    assert sum(b.num_rows for p in partitions for b in batch_reader.read(p)) == 3
    stream = source.streamReader(FULL_SCHEMA)
    stream.initialOffset()  # runner-side caches must not stop the planner copy pickling
    assert pickle.loads(pickle.dumps(stream)).options == stream.options
    narrow = StructType([StructField("body", BinaryType()), StructField("queueId", IntegerType())])
    projected = pickle.loads(pickle.dumps(source.streamReader(narrow)))
    assert projected.columns.names == ("body", "queueId")
    with pytest.raises(Exception, match="unknown column 'a'"):
        source.reader(StructType([StructField("a", StringType())]))


def test_read_from_replicas_puts_slaves_first() -> None:
    replica_set = ReplicaSet("broker-a", ("m:1", "s1:2", "s2:3"))
    assert read_endpoints(replica_set, False) == ("m:1", "s1:2", "s2:3")
    assert read_endpoints(replica_set, True) == ("s1:2", "s2:3", "m:1")


def test_starting_offsets_by_timestamp(broker) -> None:  # type: ignore[no-untyped-def]
    admin = Admin(ClientConfig(brokers=(broker.endpoint,)))
    admin.create_topic("sr_time", queues=2)
    produce(broker, "sr_time", 4)
    stream = reader(broker, subscribe="sr_time",
                    startingOffsetsByTimestamp=json.dumps({"sr_time": {"broker-a:1": 0}}))
    # queue 1 from the first message stored at or after t=0; queue 0 by the default (latest)
    assert stream.initialOffset() == {"sr_time": {"broker-a:0": 2, "broker-a:1": 0}}
    with pytest.raises(Exception, match=r"startingOffsetsByTimestamp.*sr_time/broker-a:7"):
        reader(broker, subscribe="sr_time", startingOffsetsByTimestamp=json.dumps(
            {"sr_time": {"broker-a:7": 0}})).initialOffset()


def test_complete_mode_and_overwrite_are_refused() -> None:
    source = RocketHADataSource(CaseInsensitiveDict({"brokers": "h:1", "topic": "t"}))
    schema = StructType([StructField("body", StringType())])
    with pytest.raises(Exception, match="append-only"):
        source.streamWriter(schema, True)
    with pytest.raises(Exception, match="append-only"):
        source.writer(schema, True)


def test_position_past_the_queue_end_is_data_loss(broker, caplog) -> None:  # type: ignore
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("sr_lost", queues=1)
    produce(broker, "sr_lost", 2, queues=1)
    ahead = {"sr_lost": {"broker-a:0": 9}}  # as if the broker lost 7 messages the query read
    strict = reader(broker, subscribe="sr_lost")
    with pytest.raises(Exception, match="failOnDataLoss"):
        strict.latestOffset(ahead, strict.getDefaultReadLimit())
    lenient = reader(broker, subscribe="sr_lost", failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="connector.spark.source"):
        assert lenient.latestOffset(ahead, lenient.getDefaultReadLimit()) == ahead
    assert "queue ends at 2" in caplog.text


def test_ending_offsets_on_a_stream_is_an_error() -> None:
    source = RocketHADataSource(CaseInsensitiveDict({"brokers": "h:1", "subscribe": "t",
                                                     "endingOffsets": "latest"}))
    with pytest.raises(Exception, match="endingOffsets is for batch reads"):
        source.streamReader(FULL_SCHEMA)


def test_starting_offsets_past_the_end_follows_fail_on_data_loss(broker, caplog) -> None:  # type: ignore
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("sr_past", queues=1)
    produce(broker, "sr_past", 3, queues=1)
    past = json.dumps({"sr_past": {"broker-a:0": 10}})
    with pytest.raises(Exception, match=r"past the queue's end 3.*failOnDataLoss"):
        reader(broker, subscribe="sr_past", startingOffsets=past).initialOffset()
    lenient = reader(broker, subscribe="sr_past", startingOffsets=past, failOnDataLoss="false")
    with caplog.at_level(logging.WARNING, logger="connector.spark.source"):
        assert lenient.initialOffset() == {"sr_past": {"broker-a:0": 3}}
    assert "starts at queue offset 10" in caplog.text
    batch = BatchReader(parse_source_options({"brokers": broker.endpoint, "subscribe": "sr_past",
                                              "startingOffsets": past}))
    with pytest.raises(Exception, match="past the queue's end 3"):
        batch.partitions()
