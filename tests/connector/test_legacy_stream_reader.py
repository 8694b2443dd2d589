"""The paths the connector takes on an older pyspark, on any pyspark, without Spark.

Goal: before 4.2 Spark calls `latestOffset()` with no start; LegacyStreamReader keeps the
query's position from what Spark hands it and delivers each message once across batches and
restarts (a restart that commits first, and one whose first call is latestOffset); the data
source picks LegacyStreamReader / RowStreamWriter when the API lacks admission control / the
Arrow stream writer, and refuses the trigger options that need 4.2 with one line naming it; the
version helpers of connector.spark.compat. Method: the reader called as 4.0's stream runner
calls it (pyspark/sql/streaming/python_streaming_source_runner.py: initialOffset, latestOffset,
partitions, commit), one broker process; `API` replaced by the one an old pyspark has.
"""

from __future__ import annotations

import dataclasses

import pytest
from pyspark.sql import Row
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from connector import Admin, ClientConfig, Producer
from connector.errors import OptionError
from connector.spark import compat, datasource
from connector.spark.datasource import (
    LegacyStreamReader,
    RocketHADataSource,
    StreamReader,
)
from connector.spark.options import parse_source_options
from connector.spark.writers import RowStreamWriter, StreamWriter, rows_to_batches

QUEUES = 2
SCHEMA = StructType([StructField("body", BinaryType()), StructField("key", StringType())])
OLD_API = compat.SparkAPI(version="4.0.0", arrow_stream_writer=False, filter_pushdown=False,
                          admission_control=False)


def produce(broker, topic: str, start: int, count: int) -> None:  # type: ignore
    with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
        rows = [{"body": f"m{i}".encode(), "queue_id": i % QUEUES}
                for i in range(start, start + count)]
        assert all(r.ok for r in producer.send_batch(topic, rows))


def legacy(broker, topic: str) -> LegacyStreamReader:  # type: ignore[no-untyped-def]
    return LegacyStreamReader(parse_source_options(
        {"brokers": broker.endpoint, "subscribe": topic, "startingOffsets": "earliest"}))


def batch(stream: LegacyStreamReader, start: dict) -> tuple[dict, list[str]]:  # type: ignore
    """One trigger as 4.0's runner plans it: latestOffset(), then partitions(start, end)."""
    end = stream.latestOffset()
    if end == start:
        return end, []
    found = [body.decode() for partition in stream.partitions(start, end)
             for b in stream.read(partition) for body in b.column("body").to_pylist()]
    return end, sorted(found)


@pytest.mark.integration
def test_each_message_once_across_batches_and_restarts(broker) -> None:  # type: ignore
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("legacy_t", queues=QUEUES)
    produce(broker, "legacy_t", 0, 10)
    stream = legacy(broker, "legacy_t")
    start = stream.initialOffset()
    end, rows = batch(stream, start)
    assert rows == sorted(f"m{i}" for i in range(10))
    assert batch(stream, end) == (end, [])  # nothing new: the same offset, no batch
    produce(broker, "legacy_t", 10, 6)
    end2, rows = batch(stream, end)
    assert rows == sorted(f"m{i}" for i in range(10, 16))

    produce(broker, "legacy_t", 16, 4)
    restarted = legacy(broker, "legacy_t")  # a restart that commits the last batch first
    restarted.commit(end2)
    end3, rows = batch(restarted, end2)
    assert rows == sorted(f"m{i}" for i in range(16, 20))

    produce(broker, "legacy_t", 20, 4)
    blind = legacy(broker, "legacy_t")  # a restart whose first call is latestOffset()
    end4, rows = batch(blind, end3)
    assert rows == sorted(f"m{i}" for i in range(20, 24))
    assert end4 == {"legacy_t": {"broker-a:0": 12, "broker-a:1": 12}}


@pytest.mark.integration
def test_a_queue_missing_from_the_start_is_read_from_its_earliest(broker) -> None:  # type: ignore
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("legacy_join", queues=QUEUES)
    produce(broker, "legacy_join", 0, 8)
    blind = legacy(broker, "legacy_join")
    _end, rows = batch(blind, {"legacy_join": {"broker-a:0": 4}})
    # queue 0 from its offset 4 (messages m8.. none), queue 1 from its earliest: m1, m3, m5, m7
    assert rows == ["m1", "m3", "m5", "m7"]


def test_an_old_api_gets_the_legacy_reader_and_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(datasource, "API", OLD_API)
    source = RocketHADataSource(CaseInsensitiveDict({"brokers": "h:1", "subscribe": "t"}))
    sink = RocketHADataSource(CaseInsensitiveDict({"brokers": "h:1", "topic": "t"}))
    assert type(source.streamReader(SCHEMA)) is LegacyStreamReader
    assert type(sink.streamWriter(SCHEMA, False)) is RowStreamWriter
    monkeypatch.setattr(datasource, "API", dataclasses.replace(
        OLD_API, arrow_stream_writer=True, admission_control=True))
    assert type(source.streamReader(SCHEMA)) is StreamReader
    assert type(sink.streamWriter(SCHEMA, False)) is StreamWriter


@pytest.mark.parametrize("option", ["maxOffsetsPerTrigger", "MINOFFSETSPERTRIGGER",
                                    "maxTriggerDelay"])
def test_trigger_options_need_admission_control(monkeypatch: pytest.MonkeyPatch,
                                                option: str) -> None:
    monkeypatch.setattr(datasource, "API", OLD_API)
    source = RocketHADataSource(CaseInsensitiveDict(
        {"brokers": "h:1", "subscribe": "t", option: "5"}))
    with pytest.raises(OptionError) as raised:
        source.streamReader(SCHEMA)
    name = option if option != "MINOFFSETSPERTRIGGER" else "minOffsetsPerTrigger"
    assert str(raised.value) == (f"rocketha: option {name} needs pyspark 4.2 or later "
                                 "(admission control); this is pyspark 4.0.0")


def test_rows_become_arrow_batches_of_the_schema() -> None:
    rows = [Row(body=bytearray(f"b{i}".encode()), key=None if i % 2 else f"k{i}")
            for i in range(10)]
    batches = list(rows_to_batches(iter(rows), SCHEMA, 4))
    assert [b.num_rows for b in batches] == [4, 4, 2]
    assert batches[0].schema.names == ["body", "key"]
    assert [r["body"] for b in batches for r in b.to_pylist()] == [f"b{i}".encode()
                                                                    for i in range(10)]
    assert list(rows_to_batches(iter([]), SCHEMA, 4)) == []


def test_version_helpers() -> None:
    assert compat.parse_version("4.1.0.dev2") == (4, 1, 0)
    assert compat.parse_version("4.2") == (4, 2, 0)
    with pytest.raises(ValueError, match="not a pyspark version"):
        compat.parse_version("four")
    assert [compat.supported(v) for v in ("3.5.3", "4.0.0", "4.3.1", "5.0.0")] == \
        [False, True, True, False]
    assert compat.needs(compat.FILTER_PUSHDOWN, OLD_API, "pushdown") == \
        "rocketha: pushdown needs pyspark 4.1 or later (filter pushdown); this is pyspark 4.0.0"
