"""The source's projection with no Spark and no broker: declared-schema checks, projected batches.

Goal: a declared schema is accepted exactly when Spark would accept the batches built for it
(same Arrow types, order, nullability), every refusal names the column and the expected type,
and a projected batch holds only the declared columns, equal to the same columns of the full
batch (idempotence markers stripped from properties the same way); a range read asks the
broker only for the consume columns those are built from, and a batch of just those columns
(topic and queueId from the partition) gives the same projected batch. Method: direct calls on
a consume batch built in CONSUME_SCHEMA; the Arrow types come from pyspark's own conversion.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    TimestampNTZType,
    TimestampType,
)

from connector.errors import SourceSchemaError
from connector.protocol import CONSUME_SCHEMA, IDEMPOTENCE_PROPERTY
from connector.spark.cold import cold_columns
from connector.spark.source import (
    ALL_SOURCE_COLUMNS,
    SourceColumns,
    consume_columns,
    project_columns,
    to_source_batch,
)


def declared(name: str, spark_type: DataType, nullable: bool = True
             ) -> tuple[str, pa.DataType, bool, str]:
    return (name, to_arrow_type(spark_type, timezone="UTC"), nullable,
            spark_type.simpleString().upper())


def consume_batch() -> pa.RecordBatch:
    marker = [("n", "1"), (IDEMPOTENCE_PROPERTY, "p/0")]
    return pa.RecordBatch.from_pydict({
        "topic": ["t", "t"], "queue_id": [3, 3], "queue_offset": [7, 8],
        "log_position": [0, 100], "body": [b"a", b"b"], "key": ["k", None],
        "tags": [None, "T"], "properties": [None, marker],
        "born_timestamp": [1000, 2000], "store_timestamp": [1500, 2500],
        "msg_id": ["m7", "m8"]}, schema=CONSUME_SCHEMA)


def test_projected_batch_is_the_declared_columns_of_the_full_batch() -> None:
    columns = project_columns([declared("properties", MapType(StringType(), StringType())),
                               declared("queueId", IntegerType(), nullable=False),
                               declared("brokerName", StringType()),
                               declared("storeTimestamp", TimestampType())])
    projected = to_source_batch(consume_batch(), "broker-a", columns)
    full = to_source_batch(consume_batch(), "broker-a", ALL_SOURCE_COLUMNS)
    assert projected.schema.names == ["properties", "queueId", "brokerName", "storeTimestamp"]
    assert not projected.schema.field("queueId").nullable
    assert projected.schema.equals(columns.arrow_schema())
    for name in projected.schema.names:
        assert projected.column(name).equals(full.column(name)), name
    assert projected.column("properties").to_pylist() == [None, [("n", "1")]]


def test_all_columns_in_source_order_is_the_full_schema() -> None:
    full = to_source_batch(consume_batch(), "broker-a", ALL_SOURCE_COLUMNS)
    assert full.num_columns == 11 and full.num_rows == 2
    assert full.column("msgId").to_pylist() == ["m7", "m8"]
    assert SourceColumns(tuple(full.schema.names), (True,) * 11) == ALL_SOURCE_COLUMNS


@pytest.mark.parametrize("fields, message", [
    ([declared("body", BinaryType()), declared("partitionId", IntegerType())],
     "unknown column 'partitionId'"),
    ([declared("queueOffset", IntegerType())], "'queueOffset' is declared INT; expected BIGINT"),
    ([declared("body", StringType())], "'body' is declared STRING; expected BINARY"),
    ([declared("bornTimestamp", TimestampNTZType())], "expected TIMESTAMP"),
    ([declared("properties", MapType(StringType(), StringType(), False))],
     "'properties' is declared MAP<STRING,STRING>; expected MAP<STRING,STRING> \\(in Arrow"),
    ([declared("tags", StringType(), nullable=False)], "'tags' is declared NOT NULL"),
    ([declared("queueId", IntegerType()), declared("queueId", IntegerType())], "twice"),
    ([("queueId", None, True, "VARIANT")], "'queueId' is declared VARIANT; expected INT"),
    ([], "no columns"),
])
def test_bad_declared_schema_names_the_column(fields, message) -> None:  # type: ignore
    with pytest.raises(SourceSchemaError, match=message):
        project_columns(fields)


def test_not_null_is_accepted_where_values_always_exist() -> None:
    columns = project_columns([declared("queueOffset", LongType(), nullable=False),
                               declared("body", BinaryType(), nullable=False)])
    assert columns.nullable == (False, False)


@pytest.mark.parametrize("names, tag_filter, wanted", [
    (("queueId", "body"), None, ("body",)),
    (("body", "queueId"), "TagA", ("queue_offset", "body")),  # cut past the end by offset
    (("topic", "brokerName", "queueId"), None, ("queue_offset",)),  # never an empty ticket
    (("msgId", "queueOffset"), None, ("queue_offset", "msg_id")),
    (("key", "bornTimestamp", "storeTimestamp"), None,
     ("key", "born_timestamp", "store_timestamp")),
    (("properties",), None, ("properties",)),
    (tuple(ALL_SOURCE_COLUMNS.names), None, ("queue_offset", "body", "key", "tags",
                                              "properties", "born_timestamp",
                                              "store_timestamp", "msg_id")),
])
def test_consume_columns_are_what_the_projection_is_built_from(names, tag_filter,  # type: ignore
                                                               wanted) -> None:
    columns = SourceColumns(names, (True,) * len(names))
    assert consume_columns(columns, tag_filter=tag_filter) == wanted


def test_narrow_consume_batch_gives_the_same_projected_batch() -> None:
    """Built from only the consume columns it needs, topic and queueId from the partition."""
    for names in (("queueId", "body"), ("topic", "properties", "msgId", "queueId"),
                  tuple(ALL_SOURCE_COLUMNS.names)):
        columns = SourceColumns(names, (True,) * len(names))
        narrow = consume_batch().select(list(consume_columns(columns, tag_filter=None)))
        got = to_source_batch(narrow, "broker-a", columns, topic="t", queue_id=3)
        assert got.equals(to_source_batch(consume_batch(), "broker-a", columns)), names


@pytest.mark.parametrize("names, tag_filter, wanted", [
    (("queueId", "body"), None, ("body",)),
    (("queueId", "body"), "TagA || TagB", ("body", "tags")),  # the filter reads tags
    (("queueId", "body"), "*", ("body",)),  # "*" filters nothing
    (("topic", "queueId"), None, ("queue_offset",)),  # never an empty decode
    (("tags", "msgId"), "TagA", ("tags", "msg_id")),
])
def test_cold_reads_decode_what_the_projection_and_the_filter_need(names, tag_filter,  # type: ignore
                                                                   wanted) -> None:
    columns = SourceColumns(names, (True,) * len(names))
    assert cold_columns(columns, tag_filter) == wanted
