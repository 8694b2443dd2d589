"""The Spark data source `rocketha` (PySpark's Python Data Source API, Arrow both ways).

Spark's camelCase method names live in this module and writers.py (the sink's writer objects);
the work is in source.py (reads), planning.py (pure offset arithmetic) and sink.py (writes).

Who runs what (observed with pyspark 4.2; Spark's python/pyspark/sql/datasource.py docstrings):

    driver, planner      DataSource(options) -> reader()/streamReader()/writer()/streamWriter()
                         options parsed once into frozen SourceOptions/SinkOptions, a
                         declared read schema checked once into SourceColumns
    driver, stream runner one long-lived StreamReader per query run: initialOffset,
                         latestOffset(start, limit), partitions(start, end), commit(end)
    executors            read(partition) / write(batches), from the pickled planner objects

So readers and writers hold plain values only (options, ids); clients are opened inside calls.
Every offset handed to Spark is canonical JSON (offsets.canonical), because Spark compares
offsets as strings.

Streaming offsets state machine (per query run, in the stream runner):

    initialOffset ──► latestOffset(start, limit) ──► partitions(start, end) ──► commit(end)
                          ▲   | caps: AvailableNow target, ReadMaxRows, minOffsetsPerTrigger
                          └───┘ returns `start` unchanged when nothing is admitted
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import ClassVar

import pyarrow as pa
from pyspark.errors import PySparkException
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
)
from pyspark.sql.types import DataType, StructType

from connector.client import Admin
from connector.client.routes import ReplicaSet, client_config
from connector.errors import OptionError, SinkSchemaError
from connector.protocol import RocketHAError
from connector.spark.cold import ColdReader, read_cold, split_cold
from connector.spark.columns import source_ddl
from connector.spark.compat import (
    ADMISSION_CONTROL,
    API,
    Filter,
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
    arrow_type,
    needs,
)
from connector.spark.offsets import QueueRef, canonical, flatten, unflatten
from connector.spark.options import (
    MAX_OFFSETS_PER_TRIGGER,
    MAX_TRIGGER_DELAY,
    MIN_OFFSETS_PER_TRIGGER,
    SinkOptions,
    SourceOptions,
    batch_only_options,
    parse_sink_options,
    parse_source_options,
)
from connector.spark.partitions import (
    ColdRangePartition,
    PackedPartition,
    QueueRangePartition,
)
from connector.spark.planning import (
    Bounds,
    QueueRange,
    admit,
    backlog,
    pack_groups,
    split_ranges,
    trigger_waits,
)
from connector.spark.pushdown import PushedFilters, push_filters, row_mask
from connector.spark.sink import SinkColumns, check_input_columns
from connector.spark.source import (
    ALL_SOURCE_COLUMNS,
    SourceColumns,
    check_positions,
    check_starting,
    discover,
    ending_offsets,
    narrow_ranges,
    project_columns,
    read_range,
    read_ranges,
    starting_offsets,
)
from connector.spark.worker_heap import freeze_worker_heap_once
from connector.spark.writers import BatchWriter, RowStreamWriter, StreamWriter

__all__ = ["OPTION_FEATURES", "RocketHADataSource"]

logger = logging.getLogger(__name__)

# Options that need more than pyspark 4.0 offers, and the API they need (connector.spark.compat
# names its first version): refused at planning without it; the docs' options table shows it.
OPTION_FEATURES = {MAX_OFFSETS_PER_TRIGGER: ADMISSION_CONTROL,
                   MIN_OFFSETS_PER_TRIGGER: ADMISSION_CONTROL,
                   MAX_TRIGGER_DELAY: ADMISSION_CONTROL}


class RocketHADataSource(DataSource):
    """`spark.read/readStream/write/writeStream.format("rocketha")`.

    `cold_reader` serves readColdFromTier; the connector cannot build one (the tier's format
    is storage_engine's), so the composition root's subclass sets it:
    `pyspark_rocketha.DefaultSource`, which Spark registers as "rocketha" (connector.spark.cold).
    """

    cold_reader: ClassVar[ColdReader | None] = None

    @classmethod
    def name(cls) -> str:
        return "rocketha"

    def schema(self) -> str:
        """The lean default schema, or what includeProperties / includeMetadata / columns
        ask for (connector.spark.columns); used only when the user declared no `.schema(...)`."""
        return source_ddl(parse_source_options(self.options).columns)  # type: ignore[arg-type]

    def reader(self, schema: StructType) -> DataSourceReader:
        return BatchReader(*_source_setup(self.options, schema), cold_reader=self.cold_reader)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        batch_only = batch_only_options(self.options)  # type: ignore[arg-type]
        if batch_only:  # as Spark's Kafka source: a stream has no end
            raise OptionError(f"option {batch_only[0]} is for batch reads (spark.read); a "
                              "streaming read has no end (use Trigger.AvailableNow to stop at "
                              "the offsets available when the query starts)")
        if not API.admission_control:  # pyspark 4.0, 4.1 (connector.spark.compat)
            for name, feature in OPTION_FEATURES.items():
                if name in self.options:
                    raise OptionError(needs(feature, API, f"option {name}"))
            return LegacyStreamReader(*_source_setup(self.options, schema),
                                      cold_reader=self.cold_reader)
        return StreamReader(*_source_setup(self.options, schema), cold_reader=self.cold_reader)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        options, columns = _sink_setup(self.options, schema, overwrite, "mode('overwrite')")
        return BatchWriter(options, columns, uuid.uuid4().hex)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        options, columns = _sink_setup(self.options, schema, overwrite,
                                       "outputMode('complete')")
        if not API.arrow_stream_writer:  # pyspark 4.0: Spark hands the writer rows
            return RowStreamWriter(options, columns, schema)
        return StreamWriter(options, columns)


def _source_setup(raw: object, schema: StructType) -> tuple[SourceOptions, SourceColumns]:
    """Options, and the columns to produce: the schema is `schema()`'s unless the user declared
    one (`.schema(...)`), which projects the source onto those columns (see connector.spark.source).
    Both are checked here, on the driver, so a bad one fails before any task reads."""
    options = parse_source_options(raw)  # type: ignore[arg-type]
    declared = [(field.name, _arrow_type(field.dataType), field.nullable,
                 field.dataType.simpleString().upper()) for field in schema.fields]
    return options, project_columns(declared)


def _arrow_type(data_type: DataType) -> pa.DataType | None:
    """The Arrow type Spark's Python worker checks `read()`'s batches against (its own
    conversion, timezone UTC), or None for a type it cannot convert."""
    try:
        return arrow_type(data_type)
    except (PySparkException, TypeError, ValueError):
        return None


def _sink_setup(raw: object, schema: StructType, overwrite: bool, what: str
                ) -> tuple[SinkOptions, SinkColumns]:
    if overwrite:
        raise SinkSchemaError(f"rocketha sink: {what} is not supported: topics are "
                              "append-only; use mode('append') / outputMode('append')")
    options = parse_sink_options(raw)  # type: ignore[arg-type]
    fields = [(field.name, field.dataType.simpleString()) for field in schema.fields]
    return options, check_input_columns(fields, options)


# -- reading ---------------------------------------------------------------------------------
def read_endpoints(replica_set: ReplicaSet, read_from_replicas: bool) -> tuple[str, ...]:
    """Master first; with readFromReplicas, the slaves first and the master as the fallback
    (a slave serves only what it has confirmed, so a read of [start, end) waits, never skips)."""
    endpoints = replica_set.endpoints
    return endpoints[1:] + endpoints[:1] if read_from_replicas else endpoints


def _partitions(ranges: list[QueueRange], replica_sets: dict[str, ReplicaSet],
                options: SourceOptions, cold_reader: ColdReader | None
                ) -> list[InputPartition]:
    cold: list[InputPartition] = []
    if options.read_cold_from_tier:
        cold_parts, ranges = split_cold(ranges, replica_sets, options, cold_reader)
        cold = list(cold_parts)
    ranges = split_ranges(ranges, options.min_partitions, options.max_records_per_partition)
    parts = cold + [QueueRangePartition(r.ref.topic, r.ref.broker_name,
                                        read_endpoints(replica_sets[r.ref.broker_name],
                                                       options.read_from_replicas),
                                        r.ref.queue_id, r.start_queue_offset,
                                        r.end_queue_offset)
                    for r in ranges]
    counts = [p.end_queue_offset - p.start_queue_offset for p in parts]  # type: ignore
    min_rows = (options.min_rows_per_partition if options.max_records_per_partition is None
                else 0)  # packing would undo maxRecordsPerPartition's cut
    groups = pack_groups(counts, min_rows, options.min_partitions)
    return [parts[group[0]] if len(group) == 1 else
            PackedPartition(tuple(parts[index] for index in group)) for group in groups]


def _read(partition: InputPartition, options: SourceOptions, columns: SourceColumns,
          pushed: PushedFilters | None = None, *, cold_reader: ColdReader | None = None
          ) -> Iterator[pa.RecordBatch]:
    if options.worker_gc_freeze:
        freeze_worker_heap_once()
    if isinstance(partition, PackedPartition):
        for part in partition.parts:
            if isinstance(part, ColdRangePartition):
                yield from _read(part, options, columns, pushed, cold_reader=cold_reader)
        batches = read_ranges([part for part in partition.parts
                               if isinstance(part, QueueRangePartition)], options, columns)
    elif isinstance(partition, QueueRangePartition):
        batches = read_range(partition, options, columns)
    elif isinstance(partition, ColdRangePartition):
        batches = read_cold(partition, options, columns, cold_reader)
    else:  # Spark's InputPartition(None) when partitions() planned none
        return
    for batch in batches:
        mask = None if pushed is None else row_mask(batch, pushed)
        if mask is not None:
            batch = batch.filter(mask)
        if batch.num_rows:
            yield batch


class _PushFilters:
    """`BatchReader.pushFilters`, shaped so that Spark's planner sees the base class's.

    Spark (4.1+) calls pushFilters only when `spark.sql.python.filterPushdown.enabled` is true,
    and when it is false it refuses to plan a reader that overrides pushFilters
    (DATA_SOURCE_PUSHDOWN_DISABLED, checked as `reader.pushFilters.__func__ is not
    DataSourceReader.pushFilters`), lest a source that relies on pushdown return unfiltered
    rows. Our pushdown only saves work: without it Spark filters every row itself and the
    result is the same. So the bound object below carries the base `__func__`: reads work with
    the conf off (no pushdown) and push down with it on."""

    def __get__(self, reader: BatchReader | None, owner: type | None = None
                ) -> _BoundPushFilters:
        assert reader is not None
        return _BoundPushFilters(reader)


class _BoundPushFilters:
    __slots__ = ("_reader",)
    # pyspark 4.0 has no pushFilters and never calls this one
    __func__ = staticmethod(getattr(DataSourceReader, "pushFilters", None))

    def __init__(self, reader: BatchReader) -> None:
        self._reader = reader

    def __call__(self, filters: list[Filter]) -> list[Filter]:
        return self._reader.push_filters(filters)


class BatchReader(DataSourceReader):
    """[startingOffsets, endingOffsets) of every selected queue, split by minPartitions, less
    what pushed filters rule out (connector.spark.pushdown)."""

    def __init__(self, options: SourceOptions,
                 columns: SourceColumns = ALL_SOURCE_COLUMNS, *,
                 cold_reader: ColdReader | None = None) -> None:
        self.options = options
        self.columns = columns
        self.cold_reader = cold_reader  # a plain value (connector.spark.cold)
        self.pushed = PushedFilters()

    pushFilters = _PushFilters()

    def push_filters(self, filters: list[Filter]) -> list[Filter]:
        """Keep what the broker can answer (connector.spark.pushdown); return the rest to Spark.
        The tag filter option and pushed tags are ANDed into the broker's tag expression."""
        pushed, kept = push_filters(filters, self.columns.names)
        if pushed.tags is not None and self.options.tag_filter is not None:
            option_tags = frozenset(t.strip() for t in self.options.tag_filter.split("||"))
            pushed = dataclasses.replace(pushed, tags=pushed.tags & option_tags)
        self.pushed = pushed
        if pushed.tags and not pushed.empty:
            self.options = dataclasses.replace(
                self.options, tag_filter=pushed.tag_filter(self.options.tag_filter))
        if pushed.described:
            logger.info("rocketha: pushed filters %s", ", ".join(pushed.described))
        return kept

    def partitions(self) -> list[InputPartition]:
        if self.pushed.empty:
            return []
        replica_sets, bounds = discover(self.options)
        if self.pushed.queue_ids is not None:
            bounds = {ref: b for ref, b in bounds.items()
                      if ref.queue_id in self.pushed.queue_ids}
        start = check_starting(self.options, starting_offsets(
            self.options, replica_sets, bounds, default="earliest"), bounds)
        end = ending_offsets(self.options, replica_sets, bounds)
        ranges = narrow_ranges(
            [QueueRange(ref, start[ref], max(start[ref], end[ref])) for ref in bounds],
            replica_sets, self.options, self.pushed)
        return _partitions(ranges, replica_sets, self.options, self.cold_reader)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options, self.columns, self.pushed,
                     cold_reader=self.cold_reader)


class StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over queue offsets (see the module's state machine)."""

    def __init__(self, options: SourceOptions,
                 columns: SourceColumns = ALL_SOURCE_COLUMNS, *,
                 cold_reader: ColdReader | None = None) -> None:
        self.options = options
        self.columns = columns
        self.cold_reader = cold_reader  # a plain value (connector.spark.cold)
        self._replica_sets: dict[str, ReplicaSet] | None = None  # runner-side caches
        self._latest: dict[QueueRef, int] | None = None
        self._available_now: dict[QueueRef, int] | None = None
        self._last_trigger_ms = int(time.time() * 1000)
        self._group_committed: dict[QueueRef, int] = {}

    def _discover(self) -> dict[QueueRef, Bounds]:
        replica_sets, bounds = discover(self.options)
        self._replica_sets = replica_sets
        return bounds

    def initialOffset(self) -> dict:  # type: ignore[type-arg]
        bounds = self._discover()
        start = starting_offsets(self.options, self._replica_sets or {}, bounds,
                                 default="latest")
        return unflatten(check_starting(self.options, start, bounds))

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger is None:
            return ReadAllAvailable()
        return ReadMaxRows(self.options.max_offsets_per_trigger)

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now = {ref: b.max_queue_offset for ref, b in self._discover().items()}

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:  # type: ignore[type-arg]
        begin = flatten(start)
        bounds = self._discover()
        self._commit_group(begin)  # Spark plans a batch only once the previous one finished
        check_positions(self.options, begin, bounds)
        latest = {ref: b.max_queue_offset for ref, b in bounds.items()}
        self._latest = dict(latest)
        if self._available_now is not None:
            latest = {ref: min(value, self._available_now[ref])
                      for ref, value in latest.items() if ref in self._available_now}
        # A new queue joins at its earliest offset, recorded in this batch's end without rows
        # (so every later range has an explicit start, whatever retention does meanwhile);
        # its rows come from the next batch on. A queue never moves backwards.
        joined = {ref: bounds[ref].min_queue_offset for ref in latest if ref not in begin}
        known = {ref: max(value, begin[ref]) for ref, value in latest.items() if ref in begin}
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        now_ms = int(time.time() * 1000)
        if not joined and self._available_now is None and trigger_waits(  # AvailableNow: drain
                backlog(begin, known), self.options.min_offsets_per_trigger,
                self._last_trigger_ms, now_ms, self.options.max_trigger_delay_ms):
            return canonical(start)
        end = {**admit(begin, known, max_rows), **joined}
        for ref, value in begin.items():  # queues that vanished keep their position
            end.setdefault(ref, value)
        if end != begin:
            self._last_trigger_ms = now_ms
        return unflatten(end)

    def reportLatestOffset(self) -> dict | None:  # type: ignore[type-arg]
        return None if self._latest is None else unflatten(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:  # type: ignore
        begin, finish = flatten(start), flatten(end)
        if begin == finish:
            return []
        if self._replica_sets is None or any(ref.broker_name not in self._replica_sets
                                             for ref in finish):
            self._discover()
        # a queue that joined in this batch has no rows in it (see latestOffset)
        ranges = [QueueRange(ref, begin.get(ref, value), value)
                  for ref, value in finish.items()]
        return _partitions(ranges, self._replica_sets or {}, self.options, self.cold_reader)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return _read(partition, self.options, self.columns, cold_reader=self.cold_reader)

    def commit(self, end: dict) -> None:  # type: ignore[type-arg]
        self._commit_group(flatten(end))

    def _commit_group(self, done: dict[QueueRef, int]) -> None:
        """With groupId, record the query's progress as that group's offsets (best effort:
        the checkpoint, not the group, is the source of truth). Spark calls commit(end) one
        batch late, so latestOffset(start) also records `start`, which Spark has finished."""
        if self.options.group_id is None or done == self._group_committed:
            return
        if self._replica_sets is None:
            self._discover()
        self._group_committed = dict(done)
        for ref, queue_offset in done.items():
            replica_set = (self._replica_sets or {}).get(ref.broker_name)
            if replica_set is None:
                continue
            try:
                admin = Admin(client_config(replica_set.endpoints,
                                            self.options.request_timeout_ms, self.options.tls,
                                            self.options.credentials))
                admin.commit_offset(self.options.group_id, ref.topic, ref.queue_id, queue_offset)
            except RocketHAError as err:
                logger.warning("groupId %s: commit of %s/%s at %d failed: %s",
                               self.options.group_id, ref.topic, ref.key, queue_offset, err)


class LegacyStreamReader(StreamReader):
    """pyspark 4.0 and 4.1 (no admission control): Spark calls `latestOffset()` without the
    start or a limit, so this runner-side reader remembers where the query is from the offsets
    Spark hands it (initialOffset's, each partitions(start, end)'s end, a restart's first
    commit(end)) and plans as StreamReader does from there, with no cap (the trigger options
    that need one are refused in `streamReader`). Trigger.AvailableNow runs through Spark's
    own wrapper: it asks latestOffset() once when the query starts and drains to that.

    Where the position is unknown (a restart whose first call is latestOffset), every queue
    ends at its latest offset; a queue that is not in a batch's start is then read from its
    earliest offset (the 4.2 path's join step is skipped, not its rows)."""

    def __init__(self, options: SourceOptions,
                 columns: SourceColumns = ALL_SOURCE_COLUMNS, *,
                 cold_reader: ColdReader | None = None) -> None:
        super().__init__(options, columns, cold_reader=cold_reader)
        self._position: dict | None = None  # type: ignore[type-arg]  # runner-side

    def initialOffset(self) -> dict:  # type: ignore[type-arg]
        self._position = super().initialOffset()
        return self._position

    def latestOffset(self) -> dict:  # type: ignore[override, type-arg]
        if self._position is not None:
            return super().latestOffset(self._position, ReadAllAvailable())
        bounds = self._discover()
        self._latest = {ref: b.max_queue_offset for ref, b in bounds.items()}
        return unflatten(self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:  # type: ignore
        self._position = end
        begin, finish = flatten(start), flatten(end)
        joined = [ref for ref in finish if ref not in begin]
        if joined:  # from the queue's earliest offset (an empty range after the join step)
            bounds = self._discover()
            begin.update({ref: min(bounds[ref].min_queue_offset, finish[ref])
                          if ref in bounds else finish[ref] for ref in joined})
        finish = {ref: max(value, begin[ref]) for ref, value in finish.items()}
        return super().partitions(unflatten(begin), unflatten(finish))

    def commit(self, end: dict) -> None:  # type: ignore[type-arg]
        if self._position is None:  # a restart commits the last batch of the previous run
            self._position = end
        super().commit(end)
