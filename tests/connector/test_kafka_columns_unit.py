"""Kafka's column names on the source, with no Spark session and no broker.

Goal: `columns=kafka` yields Kafka's source's columns in Kafka's order with brokerName last
(and headers before it with includeHeaders); the include options and a column list combine
with it only as documented, each refusal naming the options; Kafka's names are the same values
as ours (value = body, partition = queueId, offset = queueOffset, timestamp = storeTimestamp),
timestampType is 1 on every row, and headers are the properties as Kafka's
ARRAY<STRUCT<key, value BINARY>> with the sink's markers stripped and a null list where a
message has none, also from a sliced batch; a range read asks the broker for no more than
the values need; a declared schema in Kafka's types is accepted with the Arrow types Spark's
own conversion gives (on every supported pyspark: connector.spark.compat). Method: direct
calls on a consume batch built in CONSUME_SCHEMA.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from connector.errors import OptionError
from connector.protocol import CONSUME_SCHEMA, IDEMPOTENCE_PROPERTY
from connector.spark.columns import COLUMN_DDL_TYPES, KAFKA_RECORD_KEY, LOG_APPEND_TIME
from connector.spark.compat import arrow_type
from connector.spark.options import parse_source_options
from connector.spark.source import SourceColumns, consume_columns, project_columns, to_source_batch

# Kafka's source's types (its KafkaOffsetReader schema), key as ours: STRING
SPARK_TYPES: dict[str, DataType] = {
    "key": StringType(), "value": BinaryType(), "topic": StringType(),
    "partition": IntegerType(), "offset": LongType(), "timestamp": TimestampType(),
    "timestampType": IntegerType(), "brokerName": StringType(),
    "headers": ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))}
BASE = {"brokers": "127.0.0.1:1", "subscribe": "t"}


def consume_batch() -> pa.RecordBatch:
    marker = [("trace", "t1"), (IDEMPOTENCE_PROPERTY, "p/0")]
    return pa.RecordBatch.from_pydict({
        "topic": ["t"] * 3, "queue_id": [3] * 3, "queue_offset": [7, 8, 9],
        "log_position": [0, 100, 200], "body": [b"a", b"b", b"c"], "key": ["k", None, "k2"],
        "tags": [None, "T", None], "properties": [None, marker, [(IDEMPOTENCE_PROPERTY, "p/1")]],
        "born_timestamp": [1000, 2000, 3000], "store_timestamp": [1500, 2500, 3500],
        "msg_id": ["m7", "m8", "m9"]}, schema=CONSUME_SCHEMA)


def test_kafka_columns_are_kafkas_in_its_order_then_the_replica_set() -> None:
    kafka = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
    assert parse_source_options({**BASE, "columns": "kafka"}).columns == (*kafka, "brokerName")
    assert parse_source_options({**BASE, "columns": "Kafka", "includeHeaders": "true"}
                                ).columns == (*kafka, "headers", "brokerName")
    assert set(KAFKA_RECORD_KEY) <= {*kafka, "brokerName"}
    # includeHeaders on the default schema adds the one column; Kafka's names mix with ours
    default = parse_source_options(BASE).columns
    assert parse_source_options({**BASE, "includeHeaders": "true"}).columns == (
        *default, "headers")
    assert parse_source_options({**BASE, "columns": "queueId,value,timestamp"}).columns == (
        "queueId", "value", "timestamp")


@pytest.mark.parametrize("options, message", [
    ({"columns": "kafka", "includeProperties": "true"},
     "option columns=kafka excludes includeProperties and includeMetadata"),
    ({"columns": "key,value", "includeHeaders": "true"},
     "option columns excludes includeProperties, includeMetadata and includeHeaders"),
    ({"columns": "key,vlaue"}, "unknown column 'vlaue'; the source's columns are .*value"),
    ({"includeHeaders": "yes please"}, "includeHeaders"),
])
def test_bad_combinations_name_the_options(options: dict[str, str], message: str) -> None:
    with pytest.raises(OptionError, match=message):
        parse_source_options({**BASE, **options})


def test_kafka_names_carry_the_same_values_as_ours() -> None:
    batch = consume_batch()
    kafka = parse_source_options({**BASE, "columns": "kafka", "includeHeaders": "true"}).columns
    ours = ("key", "body", "topic", "queueId", "queueOffset", "storeTimestamp", "brokerName")
    got = to_source_batch(batch, "broker-b", SourceColumns(kafka, (True,) * len(kafka)))
    mine = to_source_batch(batch, "broker-b", SourceColumns(ours, (True,) * len(ours)))
    for kafka_name, our_name in zip(("key", "value", "topic", "partition", "offset",
                                     "timestamp", "brokerName"), ours, strict=True):
        assert got.column(kafka_name).to_pylist() == mine.column(our_name).to_pylist()
    assert got.column("timestampType").to_pylist() == [LOG_APPEND_TIME] * 3
    # markers are bookkeeping, not headers; a message left with none has null headers
    assert got.column("headers").to_pylist() == [
        None, [{"key": "trace", "value": b"t1"}], None]
    sliced = to_source_batch(batch.slice(1, 1), "broker-b", SourceColumns(("headers",), (True,)))
    assert sliced.column("headers").to_pylist() == [[{"key": "trace", "value": b"t1"}]]
    plain = pa.RecordBatch.from_pydict(
        {**{name: batch.column(name) for name in CONSUME_SCHEMA.names if name != "properties"},
         "properties": pa.array([[("a", "1"), ("b", "")], None, []],
                                type=CONSUME_SCHEMA.field("properties").type)},
        schema=CONSUME_SCHEMA)
    assert to_source_batch(plain.slice(0, 2), "b", SourceColumns(("headers",), (True,))
                           ).column("headers").to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": b""}], None]


def test_a_range_read_asks_only_for_what_kafkas_columns_are_built_from() -> None:
    kafka = parse_source_options({**BASE, "columns": "kafka"}).columns
    assert consume_columns(SourceColumns(kafka, (True,) * len(kafka)), tag_filter=None) == (
        "queue_offset", "body", "key", "store_timestamp")
    only_type = SourceColumns(("timestampType", "partition"), (True, True))
    assert consume_columns(only_type, tag_filter=None) == ("queue_offset",)


def test_a_declared_kafka_schema_takes_sparks_own_arrow_types() -> None:
    names = parse_source_options({**BASE, "columns": "kafka", "includeHeaders": "true"}).columns
    declared = [(name, arrow_type(SPARK_TYPES[name]), True,
                 COLUMN_DDL_TYPES[name]) for name in names]
    columns = project_columns(declared)
    assert columns.names == names
    batch = to_source_batch(consume_batch(), "b", columns)
    assert batch.schema.types == [arrow for _, arrow, _, _ in declared]
