"""The source's IO: find the queues a query reads, their bounds, and read one queue range.

    discover(options)            -> replica sets by brokerName, Bounds per QueueRef
    starting_offsets(...)        -> QueueRef -> first queue offset (startingOffsets / timestamps)
    ending_offsets(...)          -> QueueRef -> end queue offset (endingOffsets / timestamps)
    project_columns(declared)    -> SourceColumns: a user's `.schema(...)`, checked at planning
    read_range(partition, ...)   -> Arrow batches of those columns, exactly [start, end)
    read_ranges(partitions, ...) -> the same for several ranges in turn (a packed partition)

A range read is deterministic: it returns the messages with start <= queueOffset < end (those
matching tagFilter), never anything past `end`, and it waits (up to fetchTimeoutMs) for messages
below `end` that are not visible yet instead of returning fewer. The broker never serves a
message above its confirm position, so a replayed range returns the same rows.

Output columns (Spark DDL, and the exact Arrow form `read()` must yield; connector.spark.columns
says which the default schema holds and which come on request):
    topic STRING, brokerName STRING, queueId INT, queueOffset BIGINT, msgId STRING, key STRING,
    tags STRING, body BINARY, properties MAP<STRING,STRING>, bornTimestamp TIMESTAMP,
    storeTimestamp TIMESTAMP          (timestamps: Arrow timestamp[us, tz=UTC])
and Kafka's names for the same values (columns.KAFKA_ALIASES): value BINARY, partition INT,
offset BIGINT, timestamp TIMESTAMP, timestampType INT (always 1, LogAppendTime), headers
ARRAY<STRUCT<key: STRING, value: BINARY>> (the properties, markers stripped, in map order).

Projection: Spark 4.2 prunes no columns of Python sources, so every column `read()` yields
crosses the Python worker -> Arrow -> JVM path even when the query uses two. The schema in force
(the lean default, the include options, `columns`, or the user's `.schema(...)`) is what a read
yields: any subset of the 11 and of Kafka's 6, each with the type above (NOT NULL only on
columns that are never null). Columns not asked for are never built (no brokerName repeat,
no timestamp casts, no idempotence-marker strip), and a range read asks the broker only for
the consume columns the projection is built from (`consume_columns`): topic, brokerName and
queueId come from the partition, body from `body`, msgId from `msg_id`, and so on; the broker
then skips msg_id formatting and properties decoding for a `queueId, body` query.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from connector.client import Admin, Consumer, PullResult
from connector.client.routes import (
    ReplicaSet,
    client_config,
    queue_bounds,
    route_provider,
    topic_queue_counts,
)
from connector.errors import (
    DataLossError,
    OptionError,
    RoutesUnavailableError,
    SourceSchemaError,
)
from connector.protocol import CONSUME_SCHEMA, IDEMPOTENCE_PROPERTY, RocketHAError
from connector.spark.columns import (
    COLUMN_ARROW_TYPES,
    COLUMN_DDL_TYPES,
    HEADERS_TYPE,
    KAFKA_ALIASES,
    LOG_APPEND_TIME,
    PROPERTIES_TYPE,
    SOURCE_COLUMNS,
    TIMESTAMP_TYPE,
)
from connector.spark.offsets import QueueRef, TopicOffsets, flatten
from connector.spark.options import (
    ASSIGN,
    ENDING_OFFSETS,
    ENDING_OFFSETS_BY_TIMESTAMP,
    STARTING_OFFSETS,
    STARTING_OFFSETS_BY_TIMESTAMP,
    STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY,
    STARTING_TIMESTAMP,
    SUBSCRIBE,
    SourceOptions,
)
from connector.spark.partitions import QueueRangePartition
from connector.spark.planning import Bounds, QueueRange, resolve_offsets
from connector.spark.pushdown import PushedFilters

__all__ = [
    "ALL_SOURCE_COLUMNS",
    "SOURCE_ARROW_SCHEMA",
    "SOURCE_DDL",
    "SourceColumns",
    "check_positions",
    "check_starting",
    "consume_columns",
    "discover",
    "ending_offsets",
    "kafka_headers",
    "narrow_ranges",
    "project_columns",
    "read_range",
    "read_ranges",
    "starting_offsets",
    "strip_markers",
    "to_source_batch",
]

logger = logging.getLogger(__name__)

_PROPERTIES = PROPERTIES_TYPE
_TIMESTAMP = TIMESTAMP_TYPE
_SOURCE_COLUMNS = SOURCE_COLUMNS
_DDL_TYPE = COLUMN_DDL_TYPES  # ours and Kafka's names
_ALIAS_OF = {name: ours for name, _, _, ours in KAFKA_ALIASES}  # Kafka's name -> ours
_OURS_FROM_CONSUME = {name: consume for name, _, _, consume in _SOURCE_COLUMNS}
_FROM_CONSUME = {**_OURS_FROM_CONSUME,  # the consume column a source column is built from
                 **{name: None if ours is None else _OURS_FROM_CONSUME[ours]
                    for name, ours in _ALIAS_OF.items()}}
_MAYBE_NULL = frozenset({"key", "tags", "properties", "headers"})  # the others have a value
_FROM_PARTITION = frozenset({"topic", "brokerName", "queueId", "partition"})  # one per range
SOURCE_DDL = ", ".join(f"{name} {ddl}" for name, ddl, _, _ in _SOURCE_COLUMNS)
SOURCE_ARROW_SCHEMA = pa.schema([(name, arrow) for name, _, arrow, _ in _SOURCE_COLUMNS])
_GONE = ("NO_MATCHED_LOGIC_QUEUE",)
_POLL_WAIT_MS_MAX = 1000


def _lost(options: SourceOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise DataLossError(f"{message} (set failOnDataLoss=false to warn and continue)")
    logger.warning("%s; continuing (failOnDataLoss=false)", message)


def discover(options: SourceOptions) -> tuple[dict[str, ReplicaSet], dict[QueueRef, Bounds]]:
    """The replica sets and the bounds of every queue the subscription selects."""
    routes = route_provider(options.brokers, options.controller, options.request_timeout_ms,
                            options.tls, options.credentials)
    replica_sets = {rs.broker_name: rs for rs in routes.replica_sets()}
    timeout_ms = options.request_timeout_ms
    bounds: dict[QueueRef, Bounds] = {}
    topics_seen: set[str] = set()
    for name, replica_set in sorted(replica_sets.items()):
        for topic in sorted(topic_queue_counts(replica_set, timeout_ms, options.tls,
                                               options.credentials)):
            if not options.topic_matches(topic):
                continue
            topics_seen.add(topic)
            for queue in queue_bounds(replica_set, topic, timeout_ms, options.tls,
                                      options.credentials):
                bounds[QueueRef(topic, name, queue.queue_id)] = Bounds(
                    queue.min_queue_offset, queue.max_queue_offset, queue.from_master)
    if options.subscribe:
        for topic in sorted(set(options.subscribe) - topics_seen):
            _lost(options, f"option {SUBSCRIBE}: topic {topic!r} does not exist on any of "
                  f"the replica sets {sorted(replica_sets)}")
    if options.assign is not None:
        assigned = set(flatten(options.assign))
        for ref in sorted(assigned - set(bounds)):
            _lost(options, f"option {ASSIGN}: queue {ref.topic}/{ref.key} does not exist")
        bounds = {ref: b for ref, b in bounds.items() if ref in assigned}
    return replica_sets, dict(sorted(bounds.items()))


def check_positions(options: SourceOptions, positions: dict[QueueRef, int],
                    bounds: dict[QueueRef, Bounds]) -> None:
    """A query's position past a queue's end means the broker lost messages the query already
    read (and will reuse those offsets): fail, or warn with failOnDataLoss=false. Only the
    master's bounds tell: a slave answering during a failover may not have the last confirm
    position yet (connector.client.routes)."""
    for ref, queue_offset in sorted(positions.items()):
        known = bounds.get(ref)
        if known is not None and queue_offset > known.max_queue_offset and known.from_master:
            _lost(options, f"{ref.topic}/{ref.key}: the query is at queue offset "
                  f"{queue_offset} but the queue ends at {known.max_queue_offset}; messages "
                  "it read are gone and new ones will reuse their offsets")


def check_starting(options: SourceOptions, start: dict[QueueRef, int],
                   bounds: dict[QueueRef, Bounds]) -> dict[QueueRef, int]:
    """A startingOffsets past a queue's end names messages that do not exist (yet, or any
    more): fail, or with failOnDataLoss=false warn and start at the end, as Spark's Kafka
    source does. Returns the offsets to start from."""
    result = dict(start)
    for ref, queue_offset in sorted(start.items()):
        known = bounds.get(ref)
        if known is not None and queue_offset > known.max_queue_offset and known.from_master:
            _lost(options, f"option {STARTING_OFFSETS}: {ref.topic}/{ref.key} starts at queue "
                  f"offset {queue_offset}, past the queue's end {known.max_queue_offset}")
            result[ref] = known.max_queue_offset
    return result


def starting_offsets(options: SourceOptions, replica_sets: dict[str, ReplicaSet],
                     bounds: dict[QueueRef, Bounds], *, default: str) -> dict[QueueRef, int]:
    """First offsets: by timestamp when asked (per queue: the first message stored at or after
    it), else startingOffsets (earliest/latest/JSON), else `default`. A queue with messages but
    none stored at or after its timestamp fails the read, or with
    startingOffsetsByTimestampStrategy=latest starts at its end (Kafka's two strategies); an
    empty queue starts at its end either way (there is nothing to miss)."""
    if options.starting_by_timestamp is None and options.starting_timestamp_ms is None:
        return resolve_offsets(options.starting, bounds, option=STARTING_OFFSETS,
                               default=default)
    result, none_after = _seek_by_timestamp(
        options, replica_sets, bounds, options.starting_by_timestamp,
        options.starting_timestamp_ms, STARTING_OFFSETS_BY_TIMESTAMP, default=default)
    if none_after and options.starting_strategy == "error":
        ref, timestamp_ms = none_after[0]
        option = (STARTING_OFFSETS_BY_TIMESTAMP if options.starting_by_timestamp is not None
                  else STARTING_TIMESTAMP)
        raise OptionError(
            f"option {option}: {ref.topic}/{ref.key} has no message stored at or after "
            f"{timestamp_ms} (its last is older; {len(none_after)} queue(s) like it); set "
            f"{STARTING_OFFSETS_BY_TIMESTAMP_STRATEGY}=latest to start such queues at their "
            "end")
    return result


def ending_offsets(options: SourceOptions, replica_sets: dict[str, ReplicaSet],
                   bounds: dict[QueueRef, Bounds]) -> dict[QueueRef, int]:
    """A batch read's end offsets (exclusive): by timestamp when asked (per queue: the first
    message stored at or after it, so the read stops before it; the queue's end when there is
    none), else endingOffsets ("latest" or JSON)."""
    if options.ending_by_timestamp is None and options.ending_timestamp_ms is None:
        return resolve_offsets(options.ending, bounds, option=ENDING_OFFSETS, default="latest")
    result, _ = _seek_by_timestamp(options, replica_sets, bounds, options.ending_by_timestamp,
                                   options.ending_timestamp_ms, ENDING_OFFSETS_BY_TIMESTAMP,
                                   default="latest")
    return result


def _seek_by_timestamp(options: SourceOptions, replica_sets: dict[str, ReplicaSet],
                       bounds: dict[QueueRef, Bounds], by_queue: TopicOffsets | None,
                       every_queue_ms: int | None, json_option: str, *, default: str
                       ) -> tuple[dict[QueueRef, int], list[tuple[QueueRef, int]]]:
    """Per queue, the first queue offset stored at or after its timestamp (the JSON's, else
    the one for every queue; queues the JSON leaves out take `default`), and the non-empty
    queues where no message is (offset_for_timestamp answers the queue's end)."""
    wanted: dict[QueueRef, int] = {}
    if by_queue is not None:
        wanted = flatten(by_queue)
        missing = sorted(ref for ref in wanted if ref not in bounds)
        if missing:
            raise OptionError(f"option {json_option}: unknown topic or queue "
                              + ", ".join(f"{ref.topic}/{ref.key}" for ref in missing))
    result = resolve_offsets("", bounds, option=json_option, default=default)
    none_after: list[tuple[QueueRef, int]] = []
    for ref, known in bounds.items():
        timestamp_ms = wanted.get(ref, every_queue_ms)
        if timestamp_ms is None:
            continue
        admin = _admin(replica_sets[ref.broker_name], options)
        result[ref] = admin.offset_for_timestamp(ref.topic, ref.queue_id, timestamp_ms)
        if result[ref] >= known.max_queue_offset > known.min_queue_offset:
            none_after.append((ref, timestamp_ms))
    return result, none_after


def narrow_ranges(ranges: list[QueueRange], replica_sets: dict[str, ReplicaSet],
                  options: SourceOptions, pushed: PushedFilters) -> list[QueueRange]:
    """Each queue's range cut to what pushed filters allow: by queue offset, then by store
    time (a seek per bound, the broker's offset_for_timestamp as startingTimestamp uses)."""
    result = []
    for queue_range in ranges:
        ref = queue_range.ref
        start = max(queue_range.start_queue_offset, pushed.queue_offset_min)
        end = queue_range.end_queue_offset
        if pushed.queue_offset_end is not None:
            end = min(end, pushed.queue_offset_end)
        if start < end and pushed.by_time:
            admin = _admin(replica_sets[ref.broker_name], options)
            if pushed.store_ms_min is not None:
                start = max(start, admin.offset_for_timestamp(ref.topic, ref.queue_id,
                                                              pushed.store_ms_min))
            if start < end and pushed.store_ms_end is not None:
                end = min(end, admin.offset_for_timestamp(ref.topic, ref.queue_id,
                                                          pushed.store_ms_end))
        result.append(QueueRange(ref, start, max(start, end)))
    return result


def _admin(replica_set: ReplicaSet, options: SourceOptions) -> Admin:
    return Admin(client_config(replica_set.endpoints, options.request_timeout_ms, options.tls,
                               options.credentials))


@dataclasses.dataclass(frozen=True, slots=True)
class SourceColumns:
    """The columns a query reads, in its declared order, with the nullability it declared
    (Spark rejects a batch whose Arrow schema differs from the declared one in any of these)."""

    names: tuple[str, ...]
    nullable: tuple[bool, ...]

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(name, COLUMN_ARROW_TYPES[name], nullable)
                          for name, nullable in zip(self.names, self.nullable, strict=True)])


ALL_SOURCE_COLUMNS = SourceColumns(tuple(SOURCE_ARROW_SCHEMA.names),
                                   (True,) * len(SOURCE_ARROW_SCHEMA))


def project_columns(declared: Sequence[tuple[str, pa.DataType | None, bool, str]]
                    ) -> SourceColumns:
    """Check a user-declared schema against the source's columns, on the driver, before any
    read: `declared` holds (name, the Arrow type Spark will expect or None if it has none,
    nullable, the declared type as text). Raises SourceSchemaError naming the column."""
    if not declared:
        raise SourceSchemaError(f"rocketha: the declared schema has no columns; declare any "
                                f"of: {SOURCE_DDL}")
    seen: set[str] = set()
    for name, arrow_type, nullable, type_text in declared:
        if name not in _DDL_TYPE:
            raise SourceSchemaError(f"rocketha: unknown column {name!r} in the declared "
                                    f"schema; the source's columns are: {SOURCE_DDL}")
        if name in seen:
            raise SourceSchemaError(f"rocketha: column {name!r} is declared twice")
        seen.add(name)
        expected = COLUMN_ARROW_TYPES[name]
        if arrow_type is None or not arrow_type.equals(expected):
            nested = (f" (in Arrow: {arrow_type}, the source yields {expected})"
                      if type_text == _DDL_TYPE[name] else "")  # e.g. map values NOT NULL
            raise SourceSchemaError(f"rocketha: column {name!r} is declared {type_text}; "
                                    f"expected {_DDL_TYPE[name]}{nested}")
        if not nullable and name in _MAYBE_NULL:
            raise SourceSchemaError(f"rocketha: column {name!r} is declared NOT NULL but may "
                                    f"be null; declare it {_DDL_TYPE[name]} (nullable)")
    return SourceColumns(tuple(name for name, _, _, _ in declared),
                         tuple(nullable for _, _, nullable, _ in declared))


def consume_columns(columns: SourceColumns, *, tag_filter: str | None) -> tuple[str, ...]:
    """The consume columns (CONSUME_SCHEMA order) a range read of `columns` asks the broker
    for: those they are built from, less what the partition knows (topic, brokerName,
    queueId); plus queue_offset with a tag filter (the broker may then scan past the range's
    end, and the rows past it are cut by queue offset) or when nothing else is asked (a pull
    returns at least one column)."""
    wanted = {consume for name in columns.names if name not in _FROM_PARTITION
              and (consume := _FROM_CONSUME[name]) is not None}
    if tag_filter is not None or not wanted:
        wanted.add("queue_offset")
    return tuple(name for name in CONSUME_SCHEMA.names if name in wanted)


def to_source_batch(batch: pa.RecordBatch, broker_name: str, columns: SourceColumns, *,
                    topic: str | None = None, queue_id: int | None = None) -> pa.RecordBatch:
    """A consume batch as the source's Arrow batch of `columns` only. `topic` and `queue_id`,
    when given, fill those columns (the batch then need not carry them: see
    consume_columns); otherwise they come from the batch."""
    arrays = [_source_column(batch, name, broker_name, topic, queue_id)
              for name in columns.names]
    return pa.RecordBatch.from_arrays(arrays, schema=columns.arrow_schema())


def _source_column(batch: pa.RecordBatch, name: str, broker_name: str, topic: str | None,
                   queue_id: int | None) -> pa.Array:
    if name == "timestampType":
        return pa.repeat(pa.scalar(LOG_APPEND_TIME, pa.int32()), batch.num_rows)
    if name == "headers":
        return kafka_headers(_source_column(batch, "properties", broker_name, topic, queue_id))
    name = _ALIAS_OF.get(name) or name  # Kafka's name for one of ours: the same values
    if name == "brokerName":
        return pa.repeat(pa.scalar(broker_name, pa.string()), batch.num_rows)
    if name == "topic" and topic is not None:
        return pa.repeat(pa.scalar(topic, pa.string()), batch.num_rows)
    if name == "queueId" and queue_id is not None:
        return pa.repeat(pa.scalar(queue_id, pa.int32()), batch.num_rows)
    column = batch.column(_OURS_FROM_CONSUME[name])
    if name == "properties":
        if column.null_count < batch.num_rows and pc.any(
                pc.equal(column.keys, IDEMPOTENCE_PROPERTY)).as_py():
            return strip_markers(column)
        return column
    if name in ("bornTimestamp", "storeTimestamp"):
        return column.cast(_TIMESTAMP)
    return column


def kafka_headers(properties: pa.MapArray) -> pa.Array:
    """Properties as Kafka's headers: the same entries in map order, each value as bytes (the
    UTF-8 of the string); a null map is a null list (Kafka's null for a record without
    headers). Built from the map's own buffers (no per-row Python)."""
    offsets = properties.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    keys, items = properties.keys, properties.items
    if len(keys) != last - first:  # the whole child of a sliced map
        keys, items = keys.slice(first, last - first), items.slice(first, last - first)
    entries = pa.StructArray.from_arrays([keys, items.cast(pa.binary())],
                                         fields=list(HEADERS_TYPE.value_type))
    return pa.ListArray.from_arrays(pa.array((offsets - first).astype(np.int32)), entries,
                                    type=HEADERS_TYPE, mask=properties.is_null())


def strip_markers(properties: pa.MapArray) -> pa.Array:
    """Drop the sink's idempotence markers (bookkeeping, not user properties), vectorized: the
    map entries are filtered and the offsets recounted; a map left empty becomes null."""
    offsets = properties.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    first, last = int(offsets[0]), int(offsets[-1])
    keys, items = properties.keys, properties.items
    if len(keys) != last - first:  # the whole child of a sliced map: cut our entries out
        keys, items = keys.slice(first, last - first), items.slice(first, last - first)
    keep = pc.not_equal(keys, IDEMPOTENCE_PROPERTY).fill_null(True).to_numpy(
        zero_copy_only=False)
    kept_before = np.concatenate([[0], np.cumsum(keep, dtype=np.int64)])
    new_offsets = kept_before[offsets - first]
    counts = np.diff(new_offsets)
    valid = np.asarray(properties.is_valid()) & (counts > 0)
    mask = pa.array(~valid)
    return pa.MapArray.from_arrays(pa.array(new_offsets.astype(np.int32)),
                                   keys.filter(pa.array(keep)), items.filter(pa.array(keep)),
                                   type=_PROPERTIES, mask=mask)


def read_range(partition: QueueRangePartition, options: SourceOptions, columns: SourceColumns
               ) -> Iterator[pa.RecordBatch]:
    """Messages of one queue with start <= queueOffset < end, in order (see module doc), as
    batches of `columns`."""
    return read_ranges((partition,), options, columns)


def read_ranges(partitions: Sequence[QueueRangePartition], options: SourceOptions,
                columns: SourceColumns) -> Iterator[pa.RecordBatch]:
    """Each range's messages (as read_range), one range after another.

    The next pull is sent while the batches of the current one are handed to Spark (one pull
    ahead, on a helper thread: Flight's receive and Spark's Arrow writer both release the GIL),
    so the broker builds the next block while the worker ships this one; at the end of a range
    the pull ahead is the next range's first, so a task of several small ranges (a packed
    partition) does not stall between them. Ranges of one replica set share a connection."""
    consumers: dict[tuple[str, ...], Consumer] = {}
    wanted = consume_columns(columns, tag_filter=options.tag_filter)

    def consumer_for(partition: QueueRangePartition) -> Consumer:  # the task's thread only
        found = consumers.get(partition.endpoints)
        if found is None:
            found = consumers[partition.endpoints] = Consumer(
                client_config(partition.endpoints, options.request_timeout_ms, options.tls,
                              options.credentials), group=options.group_id)
        return found

    def pull(consumer: Consumer, partition: QueueRangePartition, at: int,
             until: float) -> PullResult:
        wait_ms = max(0, min(_POLL_WAIT_MS_MAX, int((until - time.monotonic()) * 1000)))
        return consumer.pull(
            partition.topic, partition.queue_id, at,
            max_messages=min(options.fetch_max_messages, partition.end_queue_offset - at),
            max_bytes=options.fetch_max_bytes, tag_filter=options.tag_filter,
            max_wait_ms=wait_ms, columns=wanted)

    prefetch = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rocketha-pull")
    ahead: tuple[int, int, Future[PullResult]] | None = None  # (range index, offset, pull)

    def pull_ahead(index: int, at: int) -> tuple[int, int, Future[PullResult]]:
        partition = partitions[index]
        until = time.monotonic() + options.fetch_timeout_ms / 1000.0
        return index, at, prefetch.submit(pull, consumer_for(partition), partition, at, until)

    try:
        for index, partition in enumerate(partitions):
            where = f"{partition.topic}/{partition.broker_name}:{partition.queue_id}"
            cursor, end = partition.start_queue_offset, partition.end_queue_offset
            deadline = time.monotonic() + options.fetch_timeout_ms / 1000.0
            following = next((i for i in range(index + 1, len(partitions))
                              if partitions[i].end_queue_offset
                              > partitions[i].start_queue_offset), None)
            while cursor < end:
                try:
                    if ahead is not None and ahead[:2] == (index, cursor):
                        result = ahead[2].result()
                    else:
                        result = pull(consumer_for(partition), partition, cursor, deadline)
                    ahead = None
                except RocketHAError as err:
                    if err.name == "TOPIC_NOT_EXIST":
                        _lost(options, f"{where}: topic deleted while reading [{cursor}, {end})")
                        break
                    raise
                if result.status == "OFFSET_TOO_SMALL":
                    low = result.reply.min_queue_offset
                    _lost(options, f"{where}: queue offsets [{cursor}, {min(low, end)}) were "
                          "removed by retention before they were read")
                    cursor = min(low, end)
                    continue
                if result.status in _GONE:
                    _lost(options, f"{where}: the queue no longer exists; [{cursor}, {end}) "
                          "unread")
                    break
                if cursor < result.next_queue_offset < end:
                    ahead = pull_ahead(index, result.next_queue_offset)
                elif result.next_queue_offset >= end and following is not None:
                    ahead = pull_ahead(following, partitions[following].start_queue_offset)
                yield from _range_batches(result, cursor, end, wanted, partition, columns)
                if result.next_queue_offset > cursor:
                    cursor = result.next_queue_offset
                    deadline = time.monotonic() + options.fetch_timeout_ms / 1000.0
                elif time.monotonic() >= deadline:
                    raise RoutesUnavailableError(
                        f"{where}: queue offsets [{cursor}, {end}) were not readable within "
                        f"fetchTimeoutMs={options.fetch_timeout_ms} (status {result.status})")
    finally:
        prefetch.shutdown(wait=False, cancel_futures=True)


def _range_batches(result: PullResult, cursor: int, end: int, wanted: tuple[str, ...],
                   partition: QueueRangePartition, columns: SourceColumns
                   ) -> Iterator[pa.RecordBatch]:
    """One pull's rows below `end`, as source batches."""
    table = result.table
    if "queue_offset" not in wanted:  # no tag filter: the rows are cursor, cursor + 1...
        table = table.slice(0, end - cursor)
    for batch in table.to_batches():
        if "queue_offset" in wanted and batch.num_rows and \
                batch.column("queue_offset")[-1].as_py() >= end:
            batch = batch.filter(pc.less(batch.column("queue_offset"), end))
        if batch.num_rows:
            yield to_source_batch(batch, partition.broker_name, columns,
                                  topic=partition.topic, queue_id=partition.queue_id)
