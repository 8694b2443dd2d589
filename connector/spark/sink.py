"""The sink's work: check the input columns, cut rows into deterministic chunks, write them.

    check_input_columns(fields, options)   -> SinkColumns, or SinkSchemaError before any write
    chunk_rows(batches, rows_max, bytes_max) -> produce batches, the same cut for the same rows
    write_partition(batches, ...)          -> SinkCommitMessage (one Spark task)

Exactly-once into the topic. A task is a producer: `producer_id` is derived from (query id,
micro-batch id, partition id) for streaming and (write id, partition id) for batch writes, and
its k-th chunk has sequence k. The chunk's last row carries the marker property
(connector.protocol.IDEMPOTENCE_PROPERTY = "<producer_id>/<k>"); the broker stores a chunk only
when k is above the last sequence it stored for that producer. A retried task, or a micro-batch
replayed after a restart, recomputes the same rows in the same order, so the same chunks with
the same keys, and the broker drops the ones it already has, answering each with the original's
positions (its queue ranges go into the commit message as a fresh write's do), or, for a chunk
older than the producer's last idempotenceBatchesKept, DUPLICATE_POSITION_UNKNOWN: written,
counted as duplicate rows, in no queue range. This needs (1) deterministic rows
per partition (no nondeterministic shuffle between source and sink) and (2) the same broker
for a task on every attempt: a task writes to one replica set chosen by partition id.

Input columns (Spark types), what a Kafka job writes among them:
    body BINARY|STRING (alias: value)      the message body; exactly one of the two
    key STRING|BINARY                      RocketMQ keys are strings: BINARY must be UTF-8
    tags STRING
    properties MAP<STRING,STRING>
    headers ARRAY<STRUCT<key STRING, value BINARY|STRING>>   Kafka's: become properties
    topic STRING                           unless the `topic` option is set, which wins
    queueId INT (alias: partition)         a queue id on the replica set the task writes to

headers -> properties: in header order, a later header with the same key replaces an earlier
one (Kafka's Headers.lastHeader(key), what Kafka consumers usually read); the `properties`
column's entries come last, so they win over a header of the same key. A header with a null
value sets nothing (a property is a string: reading it back gives null either way); a null
header key, or a value that is not UTF-8, fails the task naming the partition and the row.

Other columns: those a read yields that say where a record was (ours: brokerName, queueOffset,
msgId, bornTimestamp, storeTimestamp; Kafka's: offset, timestamp, timestampType) are ignored,
so a DataFrame read from a topic is written back as it is, as Kafka's sink allows; any other
name fails at planning with the nearest known column, because a misspelt optional column
(`tag`, `header`) would otherwise drop its data without a word.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from conf import unknown_key_message
from connector.client import Producer, with_marker
from connector.client.routes import ReplicaSet, client_config
from connector.errors import SinkSchemaError, SinkStatusError
from connector.protocol import PRODUCE_SCHEMA, PutIdempotence, PutReply
from connector.spark.options import TOPIC, SinkOptions
from connector.spark.partitions import QueueWriteStats, SinkCommitMessage

__all__ = [
    "IGNORED_COLUMNS",
    "SinkColumns",
    "check_input_columns",
    "chunk_rows",
    "merged_properties",
    "producer_id_for",
    "to_produce_batch",
    "write_partition",
]

logger = logging.getLogger(__name__)

_HEADERS_TYPES = ("array<struct<key:string,value:binary>>",
                  "array<struct<key:string,value:string>>")
_ALLOWED = {
    "body": ("binary", "string"), "value": ("binary", "string"), "key": ("string", "binary"),
    "tags": ("string",), "properties": ("map<string,string>",), "headers": _HEADERS_TYPES,
    "topic": ("string",), "queueId": ("int",), "partition": ("int",),
}
# Columns a read yields that say where a record was (ours, then Kafka's source's): ignored, so
# a DataFrame read from a topic can be written back unchanged (see the module docstring).
IGNORED_COLUMNS = frozenset({"brokerName", "queueOffset", "msgId", "bornTimestamp",
                             "storeTimestamp", "offset", "timestamp", "timestampType"})
_OPTIONAL = ("key", "tags", "properties", "headers", "queueId", "partition")
_PROPERTIES_TYPE = PRODUCE_SCHEMA.field("properties").type


@dataclasses.dataclass(frozen=True, slots=True)
class SinkColumns:
    """Which input columns the sink uses (checked on the driver, used on executors)."""

    body: str  # "body" or "value"
    optional: tuple[str, ...]  # subset of _OPTIONAL, in its order; queueId or partition
    topic_column: bool  # rows name their topic (no `topic` option)


def check_input_columns(fields: Sequence[tuple[str, str]], options: SinkOptions) -> SinkColumns:
    """`fields` are (name, Spark simpleString type). Raises SinkSchemaError naming the column."""
    names = [name for name, _ in fields]
    known = set(_ALLOWED) | IGNORED_COLUMNS
    for name in names:
        if name not in known:
            unknown = unknown_key_message(name, known, "column")
            raise SinkSchemaError(
                f"rocketha sink: {unknown}{' ' if unknown.endswith('?') else '. '}The sink takes "
                f"{', '.join(_ALLOWED)} and ignores {', '.join(sorted(IGNORED_COLUMNS))} "
                "(select() the columns to write)")
    for name, type_name in fields:
        if name in _ALLOWED and type_name not in _ALLOWED[name]:
            raise SinkSchemaError(f"rocketha sink: column {name!r} has type {type_name}; "
                                  f"allowed: {', '.join(_ALLOWED[name])}")
    bodies = [name for name in ("body", "value") if name in names]
    if len(bodies) != 1:
        raise SinkSchemaError("rocketha sink: exactly one of the columns body and value is "
                              f"required, got {bodies or 'neither'}")
    if "queueId" in names and "partition" in names:
        raise SinkSchemaError("rocketha sink: columns queueId and partition are the same "
                              "thing (partition is Kafka's name); give one")
    if options.topic is None and "topic" not in names:
        raise SinkSchemaError(f"rocketha sink: no topic: set option {TOPIC} or give a topic "
                              "column")
    optional = tuple(name for name in _OPTIONAL if name in names)
    return SinkColumns(bodies[0], optional, options.topic is None)


def producer_id_for(task_scope: str, partition_id: int) -> str:
    """`<scope>.<partition>`: the scope is a query id + batch id, or a batch write's id."""
    return f"{task_scope}.{partition_id}"


def to_produce_batch(batch: pa.RecordBatch, columns: SinkColumns, *, partition_id: int = 0,
                     first_row: int = 0) -> pa.RecordBatch:
    """Input rows -> PRODUCE_SCHEMA columns (body binary, key string, headers merged into
    properties, queue_id int32). `partition_id` and `first_row` (the batch's first row within
    the task) only name a bad row in an error."""
    where = f"rocketha sink: partition {partition_id}"
    arrays = {"body": batch.column(columns.body).cast(pa.binary())}
    if arrays["body"].null_count:
        raise SinkSchemaError(f"{where}: column {columns.body!r} has null values")
    if "key" in columns.optional:
        arrays["key"] = _utf8(batch.column("key"), f"{where}: column 'key'", first_row)
    if "tags" in columns.optional:
        arrays["tags"] = batch.column("tags").cast(pa.string())
    if "headers" in columns.optional:
        arrays["properties"] = merged_properties(
            batch.column("headers"),
            batch.column("properties") if "properties" in columns.optional else None,
            where=where, first_row=first_row)
    elif "properties" in columns.optional:
        arrays["properties"] = batch.column("properties").cast(_PROPERTIES_TYPE)
    for name in ("queueId", "partition"):
        if name in columns.optional:
            arrays["queue_id"] = batch.column(name).cast(pa.int32())
    return pa.RecordBatch.from_pydict(arrays)


def _utf8(array: pa.Array, what: str, first_row: int, rows: np.ndarray | None = None
          ) -> pa.Array:
    """`array` (string or binary) as strings; binary must be UTF-8. `rows`: the row of each
    element (header values), else element i is row i."""
    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        return array.cast(pa.string())
    try:
        return array.cast(pa.string())
    except pa.ArrowInvalid:
        for index, value in enumerate(array.to_pylist()):  # the error path only
            try:
                if value is not None:
                    value.decode("utf-8")
            except UnicodeDecodeError:
                row = first_row + (index if rows is None else int(rows[index]))
                raise SinkSchemaError(f"{what}, row {row}: {value[:32]!r} is not UTF-8 "
                                      "(RocketMQ keys and properties are strings)") from None
        raise


def _entries(array: pa.ListArray | pa.MapArray) -> tuple[np.ndarray, np.ndarray]:
    """(row, child index) of every entry of the non-null rows, in order (slice-aware)."""
    offsets = array.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    lengths = np.diff(offsets)
    rows = np.repeat(np.arange(len(array), dtype=np.int64), lengths)
    children = np.arange(int(offsets[0]), int(offsets[-1]), dtype=np.int64)
    if array.null_count:
        valid = np.asarray(array.is_valid())[rows]
        rows, children = rows[valid], children[valid]
    return rows, children


def merged_properties(headers: pa.ListArray, properties: pa.MapArray | None, *, where: str,
                      first_row: int = 0) -> pa.MapArray:
    """Kafka headers and a properties map -> one properties map per row (module docstring:
    later entries win, properties last; null header values set nothing). A row with no entry
    left is null, as a message without properties reads back."""
    rows, children = _entries(headers)
    structs = headers.values.take(pa.array(children))
    present = np.asarray(structs.is_valid()) if len(structs) else np.zeros(0, bool)
    keys, values = (structs.field("key"), structs.field("value"))
    if keys.filter(pa.array(present)).null_count:
        row = first_row + int(rows[np.flatnonzero(present & ~np.asarray(keys.is_valid()))[0]])
        raise SinkSchemaError(f"{where}: column 'headers', row {row}: a header has a null key")
    keep = present & np.asarray(values.is_valid())
    rows, keys = rows[keep], keys.filter(pa.array(keep))
    values = _utf8(values.filter(pa.array(keep)), f"{where}: column 'headers'", first_row,
                   rows)
    if properties is not None:
        map_rows, map_children = _entries(properties)
        index = pa.array(map_children)
        rows = np.concatenate([rows, map_rows])
        keys = pa.concat_arrays([keys.cast(pa.string()),
                                 properties.keys.take(index).cast(pa.string())])
        values = pa.concat_arrays([values, properties.items.take(index).cast(pa.string())])
    order = np.arange(len(rows), dtype=np.int64)
    last = (pa.table({"row": rows, "key": keys, "order": order})
            .group_by(["row", "key"], use_threads=False).aggregate([("order", "max")]))
    kept = last.column("order_max").to_numpy()
    kept = kept[np.lexsort((kept, rows[kept]))]  # by row, then in entry order
    counts = np.bincount(rows[kept], minlength=len(headers))
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    taken = pa.array(kept)
    return pa.MapArray.from_arrays(pa.array(offsets), keys.take(taken).cast(pa.string()),
                                   values.take(taken), type=_PROPERTIES_TYPE,
                                   mask=pa.array(counts == 0))


def chunk_rows(batches: Iterable[pa.RecordBatch], rows_max: int, bytes_max: int
               ) -> Iterator[pa.RecordBatch]:
    """Re-cut a stream of batches into chunks of `rows_max` rows (the last may be shorter),
    whatever the incoming boundaries; a chunk over `bytes_max` is halved until it fits (a row
    larger than that goes alone). The cut depends only on the rows, so retries repeat it."""
    pending: list[pa.RecordBatch] = []
    pending_rows = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        pending.append(batch)
        pending_rows += batch.num_rows
        while pending_rows >= rows_max:
            table = pa.Table.from_batches(pending)
            yield from _fit(table.slice(0, rows_max).combine_chunks().to_batches()[0], bytes_max)
            rest = table.slice(rows_max)
            pending = rest.to_batches()
            pending_rows = rest.num_rows
    if pending_rows:
        table = pa.Table.from_batches(pending).combine_chunks()
        yield from _fit(table.to_batches()[0], bytes_max)


def _fit(batch: pa.RecordBatch, bytes_max: int) -> Iterator[pa.RecordBatch]:
    stack = [batch]
    while stack:  # bounded: every split halves a batch of >= 2 rows
        current = stack.pop()
        if current.nbytes <= bytes_max or current.num_rows == 1:
            yield current
            continue
        half = current.num_rows // 2
        stack.append(current.slice(half))
        stack.append(current.slice(0, half))


@dataclasses.dataclass
class _Tally:
    rows: int = 0
    duplicate_rows: int = 0
    statuses: dict[str, int] = dataclasses.field(default_factory=dict)
    queues: dict[tuple[str, int], list[int]] = dataclasses.field(default_factory=dict)

    def add(self, topic: str, reply: PutReply, rows: int) -> None:
        self.rows += rows
        self.statuses[reply.status] = self.statuses.get(reply.status, 0) + rows
        if reply.duplicate:
            self.duplicate_rows += rows
        for queue_id, first, count in reply.queues:
            entry = self.queues.setdefault((topic, queue_id), [first, first + count - 1, 0])
            entry[0], entry[1] = min(entry[0], first), max(entry[1], first + count - 1)
            entry[2] += count

    def message(self, partition_id: int, broker_name: str) -> SinkCommitMessage:
        queues = tuple(QueueWriteStats(topic, broker_name, queue_id, count, first, last)
                       for (topic, queue_id), (first, last, count) in sorted(self.queues.items()))
        return SinkCommitMessage(partition_id, self.rows, queues,
                                 tuple(sorted(self.statuses.items())), self.duplicate_rows)


def _split_by_topic(topics: pa.Array, batch: pa.RecordBatch
                    ) -> Iterator[tuple[str, pa.RecordBatch]]:
    if topics.null_count:
        raise SinkSchemaError("rocketha sink: column 'topic' has null values")
    for topic in pc.unique(topics).to_pylist():  # first-appearance order: deterministic
        yield topic, batch.filter(pc.equal(topics, topic))


def write_partition(batches: Iterable[pa.RecordBatch], *, options: SinkOptions,
                    columns: SinkColumns, replica_set: ReplicaSet, partition_id: int,
                    producer_id: str | None) -> SinkCommitMessage:
    """Write one task's rows; raises SinkStatusError on a status not in acceptStatuses.

    With `producer_id` (exactlyOnce), every chunk carries its idempotence marker."""
    producer = Producer(client_config(replica_set.endpoints, options.request_timeout_ms,
                                      options.tls, options.credentials))
    tally = _Tally()
    sequence = 0
    try:
        for topic, chunk in _topic_chunks(batches, columns, options, partition_id):
            if producer_id is not None:
                chunk = with_marker(chunk, PutIdempotence(producer_id, sequence))
            sequence += 1
            reply = producer.put(topic, chunk)
            if reply.status not in options.accept_statuses and not (
                    producer_id is not None and reply.status == "DUPLICATE_POSITION_UNKNOWN"):
                # (a replayed chunk stored earlier, its position forgotten: written, counted
                # as duplicate rows and in `statuses`, never in the queue ranges)
                raise SinkStatusError(
                    f"rocketha sink: write of {chunk.num_rows} rows to {topic} on "
                    f"{replica_set.broker_name} returned {reply.status} ({reply.error}); "
                    f"acceptStatuses={','.join(sorted(options.accept_statuses))}")
            tally.add(topic, reply, chunk.num_rows)
    finally:
        producer.close()
    return tally.message(partition_id, replica_set.broker_name)


def _topic_chunks(batches: Iterable[pa.RecordBatch], columns: SinkColumns,
                  options: SinkOptions, partition_id: int = 0
                  ) -> Iterator[tuple[str, pa.RecordBatch]]:
    """(topic, produce chunk) in a deterministic order. Rows for several topics are grouped
    per incoming batch; with one topic the chunks are cut across incoming batches."""
    def converted() -> Iterator[tuple[pa.RecordBatch, pa.RecordBatch]]:
        first_row = 0
        for batch in batches:
            yield batch, to_produce_batch(batch, columns, partition_id=partition_id,
                                          first_row=first_row)
            first_row += batch.num_rows

    if not columns.topic_column:
        assert options.topic is not None
        for chunk in chunk_rows((produce for _, produce in converted()),
                                options.write_batch_rows, options.write_batch_bytes):
            yield options.topic, chunk
        return
    for batch, produce in converted():
        for topic, part in _split_by_topic(batch.column("topic"), produce):
            for chunk in chunk_rows([part], options.write_batch_rows, options.write_batch_bytes):
                yield topic, chunk
