"""The Spark source's columns: names, types, where each comes from, and which a read yields.

Spark 4.2 prunes no columns of Python sources (its PythonScanBuilder has filter pushdown only),
so every column a read yields crosses the Python worker -> Arrow -> JVM path, used or not. The
default schema therefore holds what most jobs read, as Spark's Kafka source does (key, value,
topic, partition, offset, timestamp; headers only with includeHeaders):

    default            topic, brokerName, queueId, queueOffset, key, tags, body, storeTimestamp
    includeProperties  + properties                      (Kafka's includeHeaders)
    includeMetadata    + msgId, bornTimestamp
    columns=a,b,...    exactly those, in that order ("*": all 11)

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
    "DEFAULT_COLUMN_NAMES",
    "METADATA_COLUMN_NAMES",
    "PROPERTIES_COLUMN_NAMES",
    "RECORD_KEY",
    "SOURCE_COLUMNS",
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
_DDL_TYPE = {name: ddl for name, ddl, _, _ in SOURCE_COLUMNS}


def with_extras(*, include_properties: bool, include_metadata: bool) -> tuple[str, ...]:
    """The default columns plus the groups asked for, in the canonical order."""
    wanted = set(DEFAULT_COLUMN_NAMES)
    if include_properties:
        wanted.update(PROPERTIES_COLUMN_NAMES)
    if include_metadata:
        wanted.update(METADATA_COLUMN_NAMES)
    return tuple(name for name in ALL_COLUMN_NAMES if name in wanted)


def source_ddl(names: tuple[str, ...] = ALL_COLUMN_NAMES) -> str:
    """Spark DDL of `names` (all nullable)."""
    return ", ".join(f"{name} {_DDL_TYPE[name]}" for name in names)
