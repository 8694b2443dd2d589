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

Input columns (Spark types):
    body BINARY|STRING (alias: value), key STRING, tags STRING, properties MAP<STRING,STRING>,
    topic STRING (unless the `topic` option is set, which wins), queueId INT
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from connector.client import Producer, with_marker
from connector.client.routes import ReplicaSet, client_config
from connector.errors import SinkSchemaError, SinkStatusError
from connector.protocol import PRODUCE_SCHEMA, PutIdempotence, PutReply
from connector.spark.options import TOPIC, SinkOptions
from connector.spark.partitions import QueueWriteStats, SinkCommitMessage

__all__ = [
    "SinkColumns",
    "check_input_columns",
    "chunk_rows",
    "producer_id_for",
    "to_produce_batch",
    "write_partition",
]

logger = logging.getLogger(__name__)

_ALLOWED = {
    "body": ("binary", "string"), "value": ("binary", "string"), "key": ("string",),
    "tags": ("string",), "properties": ("map<string,string>",), "topic": ("string",),
    "queueId": ("int",),
}


@dataclasses.dataclass(frozen=True, slots=True)
class SinkColumns:
    """Which input columns the sink uses (checked on the driver, used on executors)."""

    body: str  # "body" or "value"
    optional: tuple[str, ...]  # subset of key, tags, properties, queueId
    topic_column: bool  # rows name their topic (no `topic` option)


def check_input_columns(fields: Sequence[tuple[str, str]], options: SinkOptions) -> SinkColumns:
    """`fields` are (name, Spark simpleString type). Raises SinkSchemaError naming the column."""
    names = [name for name, _ in fields]
    unknown = [name for name in names if name not in _ALLOWED]
    if unknown:
        raise SinkSchemaError(f"rocketha sink: unknown column(s) {unknown}; allowed: "
                              f"{sorted(_ALLOWED)}")
    for name, type_name in fields:
        if type_name not in _ALLOWED[name]:
            raise SinkSchemaError(f"rocketha sink: column {name!r} has type {type_name}; "
                                  f"allowed: {', '.join(_ALLOWED[name])}")
    bodies = [name for name in ("body", "value") if name in names]
    if len(bodies) != 1:
        raise SinkSchemaError("rocketha sink: exactly one of the columns body and value is "
                              f"required, got {bodies or 'neither'}")
    if options.topic is None and "topic" not in names:
        raise SinkSchemaError(f"rocketha sink: no topic: set option {TOPIC} or give a topic "
                              "column")
    optional = tuple(name for name in ("key", "tags", "properties", "queueId") if name in names)
    return SinkColumns(bodies[0], optional, options.topic is None)


def producer_id_for(task_scope: str, partition_id: int) -> str:
    """`<scope>.<partition>`: the scope is a query id + batch id, or a batch write's id."""
    return f"{task_scope}.{partition_id}"


def to_produce_batch(batch: pa.RecordBatch, columns: SinkColumns) -> pa.RecordBatch:
    """Input rows -> PRODUCE_SCHEMA columns (body binary, queue_id int32)."""
    arrays = {"body": batch.column(columns.body).cast(pa.binary())}
    for name in columns.optional:
        target = "queue_id" if name == "queueId" else name
        arrays[target] = batch.column(name).cast(PRODUCE_SCHEMA.field(target).type)
    if arrays["body"].null_count:
        raise SinkSchemaError(f"rocketha sink: column {columns.body!r} has null values")
    return pa.RecordBatch.from_pydict(arrays)


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


def _split_by_topic(batch: pa.RecordBatch, columns: SinkColumns, options: SinkOptions
                    ) -> Iterator[tuple[str, pa.RecordBatch]]:
    if not columns.topic_column:
        assert options.topic is not None
        yield options.topic, batch
        return
    topic_column = batch.column("topic")
    if topic_column.null_count:
        raise SinkSchemaError("rocketha sink: column 'topic' has null values")
    rest = [name for name in batch.schema.names if name != "topic"]
    plain = batch.select(rest)
    for topic in pc.unique(topic_column).to_pylist():  # first-appearance order: deterministic
        yield topic, plain.filter(pc.equal(topic_column, topic))


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
        for topic, chunk in _topic_chunks(batches, columns, options):
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
                  options: SinkOptions) -> Iterator[tuple[str, pa.RecordBatch]]:
    """(topic, produce chunk) in a deterministic order. Rows for several topics are grouped
    per incoming batch; with one topic the chunks are cut across incoming batches."""
    converted = (to_produce_batch(batch, columns) if not columns.topic_column
                 else batch for batch in batches)
    if not columns.topic_column:
        assert options.topic is not None
        for chunk in chunk_rows(converted, options.write_batch_rows, options.write_batch_bytes):
            yield options.topic, chunk
        return
    for batch in converted:
        for topic, part in _split_by_topic(batch, columns, options):
            part_columns = dataclasses.replace(columns, topic_column=False)
            for chunk in chunk_rows([to_produce_batch(part, part_columns)],
                                    options.write_batch_rows, options.write_batch_bytes):
                yield topic, chunk
