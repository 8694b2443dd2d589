"""The Spark source's columns: names, types, where each comes from, and which a read yields.

Spark 4.2 prunes no columns of Python sources (its PythonScanBuilder has filter pushdown only),
so every column a read yields crosses the Python worker -> Arrow -> JVM path, used or not. The
default schema therefore holds what most jobs read, as Spark's Kafka source does (key, value,
topic, partition, offset, timestamp; headers only with includeHeaders):

    default            topic, brokerName, queueId, queueOffset, key, tags, body, storeTimestamp
    includeProperties  + properties                      (Kafka's includeHeaders)
    includeMetadata    + msgId, bornTimestamp
    includeHeaders     + headers                         (Kafka's, from the properties)
    columns=a,b,...    exactly those, in that order ("*": all 11 of ours)
    columns=kafka      key, value, topic, partition, offset, timestamp, timestampType,
                       brokerName (+ headers with includeHeaders): Kafka's source's columns
                       in Kafka's order, then the replica set

Kafka's names (KAFKA_ALIASES) are the same values under Kafka's names, so a job written for
`format("kafka")` runs its `CAST(value AS STRING)`, `partition`, `offset`, `timestamp` unchanged:
value = body, partition = queueId, offset = queueOffset, timestamp = storeTimestamp (the
broker's store time, Kafka's LogAppendTime, so timestampType is always 1), headers = the
properties as Kafka's ARRAY<STRUCT<key, value BINARY>>. `key` stays STRING (RocketMQ keys are
strings; `CAST(key AS STRING)` works unchanged). Any of them may be listed in `columns` or
declared in `.schema(...)` beside ours. brokerName is last so that Kafka's seven keep their
positions (an `INSERT INTO` a table made from a Kafka read matches by position); with it,
(topic, brokerName, partition, offset) names a record (KAFKA_RECORD_KEY).

Record identity: (topic, brokerName, queueId, queueOffset) names one record (RECORD_KEY), as
RocketMQ's MessageQueue is topic + brokerName + queueId. Queue ids restart on every replica set,
so without brokerName a topic on two sets repeats (topic, queueId, queueOffset). The same
triple keys the offsets JSON ("<brokerName>:<queueId>", offsets.py). brokerName costs one more
string column per read (the same value for a whole range); Spark 4.2 refuses a dictionary- or
run-end-encoded Arrow column where the schema says STRING (DATA_SOURCE_RETURN_SCHEMA_MISMATCH),
so it is a plain string column, built once per batch (docs/benchmarks/spark.md has its cost).

Added columns take their place in the canonical order below. `.schema(...)` set by the user
overrides all of this (any subset of the 11, any order).

No pyspark here: options.py validates the `columns` option against these names.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "ALL_COLUMN_NAMES",
    "COLUMN_ARROW_TYPES",
    "COLUMN_DDL_TYPES",
    "DEFAULT_COLUMN_NAMES",
    "HEADERS_COLUMN_NAMES",
    "KAFKA_ALIASES",
    "KAFKA_COLUMN_NAMES",
    "KAFKA_RECORD_KEY",
    "LOG_APPEND_TIME",
    "METADATA_COLUMN_NAMES",
    "PROPERTIES_COLUMN_NAMES",
    "RECORD_KEY",
    "SOURCE_COLUMNS",
    "kafka_columns",
    "source_ddl",
    "with_extras",
]

PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
# (column, Spark DDL type, Arrow type Spark expects, consume-batch column it comes from)
SOURCE_COLUMNS: tuple[tuple[str, str, pa.DataType, str | None], ...] = (
    ("topic", "STRING", pa.string(), "topic"),
    ("brokerName", "STRING", pa.string(), None),
    ("queueId", "INT", pa.int32(), "queue_id"),
    ("queueOffset", "BIGINT", pa.int64(), "queue_offset"),
    ("msgId", "STRING", pa.string(), "msg_id"),
    ("key", "STRING", pa.string(), "key"),
    ("tags", "STRING", pa.string(), "tags"),
    ("body", "BINARY", pa.binary(), "body"),
    ("properties", "MAP<STRING,STRING>", PROPERTIES_TYPE, "properties"),
    ("bornTimestamp", "TIMESTAMP", TIMESTAMP_TYPE, "born_timestamp"),
    ("storeTimestamp", "TIMESTAMP", TIMESTAMP_TYPE, "store_timestamp"),
)
ALL_COLUMN_NAMES = tuple(name for name, _, _, _ in SOURCE_COLUMNS)
PROPERTIES_COLUMN_NAMES = ("properties",)
METADATA_COLUMN_NAMES = ("msgId", "bornTimestamp")
RECORD_KEY = ("topic", "brokerName", "queueId", "queueOffset")  # unique per record (see above)
DEFAULT_COLUMN_NAMES = tuple(name for name in ALL_COLUMN_NAMES
                             if name not in PROPERTIES_COLUMN_NAMES + METADATA_COLUMN_NAMES)
HEADERS_TYPE = pa.list_(pa.field("element", pa.struct([("key", pa.string()),
                                                         ("value", pa.binary())])))
# Kafka's source's names for our values: (column, Spark DDL type, Arrow type, our column)
KAFKA_ALIASES: tuple[tuple[str, str, pa.DataType, str | None], ...] = (
    ("value", "BINARY", pa.binary(), "body"),
    ("partition", "INT", pa.int32(), "queueId"),
    ("offset", "BIGINT", pa.int64(), "queueOffset"),
    ("timestamp", "TIMESTAMP", TIMESTAMP_TYPE, "storeTimestamp"),
    ("timestampType", "INT", pa.int32(), None),  # always LOG_APPEND_TIME
    ("headers", "ARRAY<STRUCT<key: STRING, value: BINARY>>", HEADERS_TYPE, "properties"),
)
LOG_APPEND_TIME = 1  # Kafka's timestampType of a broker-set timestamp (CreateTime is 0)
HEADERS_COLUMN_NAMES = ("headers",)
KAFKA_COLUMN_NAMES = ("key", "value", "topic", "partition", "offset", "timestamp",
                      "timestampType", "brokerName")
KAFKA_RECORD_KEY = ("topic", "brokerName", "partition", "offset")  # as RECORD_KEY
COLUMN_DDL_TYPES = {name: ddl for name, ddl, _, _ in SOURCE_COLUMNS + KAFKA_ALIASES}
COLUMN_ARROW_TYPES = {name: arrow for name, _, arrow, _ in SOURCE_COLUMNS + KAFKA_ALIASES}
_DDL_TYPE = COLUMN_DDL_TYPES


def with_extras(*, include_properties: bool, include_metadata: bool,
                include_headers: bool = False) -> tuple[str, ...]:
    """The default columns plus the groups asked for, in the canonical order (headers last)."""
    wanted = set(DEFAULT_COLUMN_NAMES)
    if include_properties:
        wanted.update(PROPERTIES_COLUMN_NAMES)
    if include_metadata:
        wanted.update(METADATA_COLUMN_NAMES)
    headers = HEADERS_COLUMN_NAMES if include_headers else ()
    return tuple(name for name in ALL_COLUMN_NAMES if name in wanted) + headers


def kafka_columns(*, include_headers: bool) -> tuple[str, ...]:
    """`columns=kafka`: Kafka's source's columns in its order, (headers,) then brokerName."""
    headers = HEADERS_COLUMN_NAMES if include_headers else ()
    return KAFKA_COLUMN_NAMES[:-1] + headers + KAFKA_COLUMN_NAMES[-1:]


def source_ddl(names: tuple[str, ...] = ALL_COLUMN_NAMES) -> str:
    """Spark DDL of `names` (all nullable)."""
    return ", ".join(f"{name} {_DDL_TYPE[name]}" for name in names)
