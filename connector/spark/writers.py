"""The Spark sink's writer objects: which replica set a write task targets, its producer id, and
the driver-side commit log lines (the rows themselves go through connector.spark.sink).

    BatchWriter       df.write (Arrow batches), producer ids from a per-job write id
    StreamWriter      df.writeStream on pyspark 4.1+ (Arrow batches), producer ids from the
                      query id and the batch id
    RowStreamWriter   df.writeStream on pyspark 4.0 (rows): rows back into Arrow batches

Each write task writes to one replica set, chosen by Spark's partition id, so a retried task
(and a replayed micro-batch) finds its idempotence state on the same broker and the broker
drops what it already stored. RocketHADataSource (datasource.py) picks the writer by the
pyspark version (connector.spark.compat).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.conversion import LocalDataToArrowConversion
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from connector.client.routes import ReplicaSet, route_provider, writable_topics
from connector.spark.compat import DataSourceStreamArrowWriter
from connector.spark.options import SinkOptions
from connector.spark.partitions import SinkCommitMessage
from connector.spark.sink import SinkColumns, producer_id_for, write_partition
from connector.spark.worker_heap import freeze_worker_heap_once

__all__ = [
    "ROW_WRITER_BATCH_ROWS",
    "BatchWriter",
    "RowStreamWriter",
    "StreamWriter",
    "rows_to_batches",
    "write_task",
]

logger = logging.getLogger(__name__)


def _target(options: SinkOptions, partition_id: int) -> ReplicaSet:
    """The replica set a task writes to: the same one on every attempt (idempotence)."""
    routes = route_provider(options.brokers, options.controller, options.request_timeout_ms,
                            options.tls, options.credentials)
    replica_sets = sorted(routes.replica_sets())
    if options.topic is not None and len(replica_sets) > 1:
        # prefer those hosting the topic and taking its writes (not drained)
        hosting = [rs for rs in replica_sets
                   if options.topic in writable_topics(rs, options.request_timeout_ms,
                                                       options.tls, options.credentials)]
        replica_sets = hosting or replica_sets
    return replica_sets[partition_id % len(replica_sets)]


def write_task(batches: Iterator[pa.RecordBatch], options: SinkOptions, columns: SinkColumns,
           scope: str | None) -> SinkCommitMessage:
    if options.worker_gc_freeze:
        freeze_worker_heap_once()
    context = TaskContext.get()
    partition_id = context.partitionId() if context is not None else 0
    producer_id = None
    if options.exactly_once and scope is not None:
        producer_id = producer_id_for(scope, partition_id)
    return write_partition(batches, options=options, columns=columns,
                           replica_set=_target(options, partition_id),
                           partition_id=partition_id, producer_id=producer_id)


def _log_commit(messages: Sequence[WriterCommitMessage | None], what: str) -> None:
    done = [m for m in messages if isinstance(m, SinkCommitMessage)]
    logger.info("%s committed: %d rows (%d duplicates dropped by the broker) from %d tasks",
                what, sum(m.rows for m in done), sum(m.duplicate_rows for m in done), len(done))


class BatchWriter(DataSourceArrowWriter):
    """`df.write.format("rocketha").mode("append")`: task retries of one job are idempotent
    (producer ids come from a per-job write id)."""

    def __init__(self, options: SinkOptions, columns: SinkColumns, write_id: str) -> None:
        self.options = options
        self.columns = columns
        self.write_id = write_id

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(iterator, self.options, self.columns, f"w{self.write_id}")

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _log_commit(messages, f"batch write {self.write_id}")

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        logger.warning("batch write %s aborted; rows written by finished tasks stay",
                       self.write_id)


def _stream_scope(options: SinkOptions) -> str | None:
    """The producer-id scope of a streaming write task: the query id and the batch id."""
    context = TaskContext.get()
    scope = None
    if context is not None:
        query_id = context.getLocalProperty("sql.streaming.queryId")
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        if query_id and batch_id is not None:
            scope = f"{query_id.replace('-', '')}.{batch_id}"
    if scope is None and options.exactly_once:
        logger.warning("no streaming query id in the task context: exactly-once is off")
    return scope


class _StreamCommits:
    """The driver side of a streaming write: Spark calls these once per micro-batch."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _log_commit(messages, f"micro-batch {batchId}")

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        logger.warning("micro-batch %d aborted; the replay's duplicates are dropped by the "
                       "broker", batchId)


class StreamWriter(_StreamCommits, DataSourceStreamArrowWriter):
    """`df.writeStream.format("rocketha")`: exactly-once into the topic across task retries
    and micro-batch replays (producer ids from the query id and the batch id)."""

    def __init__(self, options: SinkOptions, columns: SinkColumns) -> None:
        self.options = options
        self.columns = columns

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommitMessage:
        return write_task(iterator, self.options, self.columns, _stream_scope(self.options))


# Rows a RowStreamWriter turns into one Arrow batch: bounds the rows held at once per task.
ROW_WRITER_BATCH_ROWS = 4096


class RowStreamWriter(_StreamCommits, DataSourceStreamWriter):
    """StreamWriter for pyspark 4.0, which has no Arrow stream writer and hands `write` rows:
    they go back into Arrow batches of ROW_WRITER_BATCH_ROWS (Spark's own conversion of local
    rows, as createDataFrame uses) and on to the same sink code."""

    def __init__(self, options: SinkOptions, columns: SinkColumns, schema: StructType) -> None:
        self.options = options
        self.columns = columns
        self.schema = schema

    def write(self, iterator: Iterator[Row]) -> SinkCommitMessage:  # type: ignore[override]
        return write_task(rows_to_batches(iterator, self.schema, ROW_WRITER_BATCH_ROWS),
                      self.options, self.columns, _stream_scope(self.options))


def rows_to_batches(rows: Iterator[Row], schema: StructType, batch_rows: int
                    ) -> Iterator[pa.RecordBatch]:
    """Rows of `schema` as Arrow batches of at most `batch_rows` rows."""
    assert batch_rows > 0
    chunk: list[Row] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == batch_rows:
            yield from LocalDataToArrowConversion.convert(chunk, schema, False).to_batches()
            chunk = []
    if chunk:
        yield from LocalDataToArrowConversion.convert(chunk, schema, False).to_batches()
