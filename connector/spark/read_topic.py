"""One read of a whole topic: the rows of its topic table plus the tail the table lacks.

A topic with `table=delta` is copied by its replica set's master into a Delta table
(docs/topic-tables.md). The table holds each queue from its start up to an offset that its
snapshot records (the app transaction `rocketha/<brokerName>/<queueId>`); the log holds the
rest. `read_topic` returns both as one DataFrame:

    load the table's snapshot S (once: its files and its per-queue ends come from S)
    discover the topic's queues and their bounds through the connector (after S, so every
    queue's end is at or past what S holds)
    per queue: the tail is [S's end, the queue's end)            (tail_plan, pure)
      no row in S            -> the tail is the whole queue
      S's end < log's first  -> the messages between are gone from the log and the tier too:
                                failOnDataLoss decides (fail, or warn and start at the first)
      S's end > queue's end  -> the table holds offsets this topic never had: the topic was
                                deleted and created again under the same name; refused
    table rows:  spark.read.parquet(S's files) (Spark's own Parquet reader: column pruning,
                 partition and row-group skipping; no delta-spark JARs needed), or pyarrow
                 on the executors where Spark cannot open them (s3:// without the S3A
                 connector: connector/spark/table_files.py)
    tail rows:   format("rocketha") with startingOffsets / endingOffsets from the plan;
                 a tail up to tail_file_rows_max rows is copied once into Parquet (Spark's
                 tasks read and write it, in storeDate directories as the table's files are;
                 connector/spark/tail_file.py), checked against the plan, and read by
                 Spark's Parquet reader on each action; a longer one, or
                 one with nowhere to go (a cluster without tail_dir), is read through the
                 Python data source on each action
    result:      the union; each (brokerName, queueId, queueOffset) once, contiguous

The snapshot and the plan (`table_part`, `tail_plan`, `table_starting_offsets` for a stream
that continues where the table ends) need no SparkSession; the module imports pyspark.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from connector.errors import DataLossError, OptionError
from connector.protocol.table_ids import queue_app_id
from connector.spark.columns import ALL_COLUMN_NAMES, source_ddl
from connector.spark.offsets import QueueRef, canonical, unflatten
from connector.spark.options import (
    COLUMNS,
    ENDING_OFFSETS,
    STARTING_OFFSETS,
    SUBSCRIBE,
    parse_source_options,
)
from connector.spark.planning import Bounds
from connector.spark.source import discover
from connector.spark.table_files import AUTO, SPARK, arrow_files_frame, choose_reader, spark_uri
from connector.spark.tail_file import (
    PARTITION_COLUMN,
    STORE_DATE_SQL,
    TAIL_FILE_ROWS_MAX,
    check_tail,
    copy_columns,
    local_path,
    summarize,
    summarize_local,
    write_tail,
)
from connector.spark.tail_file import tail_dir as tail_copy_dir

__all__ = ["PARTITION_COLUMN", "TablePart", "TailPlan", "read_topic", "table_part",
           "table_starting_offsets", "tail_plan"]

logger = logging.getLogger(__name__)



@dataclasses.dataclass(frozen=True, slots=True)
class TablePart:
    """What one snapshot of the table holds: its files and, per queue, its end."""

    uri: str
    version: int | None  # None: no table yet (everything is in the tail)
    files: tuple[str, ...]
    ends: dict[QueueRef, int | None]  # the next queue offset not in the table; None: no row


@dataclasses.dataclass(frozen=True, slots=True)
class TailPlan:
    """[starting, ending) per queue: what the tail read takes."""

    starting: dict[QueueRef, int]
    ending: dict[QueueRef, int]
    gaps: dict[QueueRef, tuple[int, int]]  # [table end, log's first): gone before the table
    ahead: tuple[QueueRef, ...]  # the table is past the queue's end (a recreated topic)

    @property
    def rows(self) -> int:
        return sum(self.ending[ref] - start for ref, start in self.starting.items())


def tail_plan(ends: Mapping[QueueRef, int | None], bounds: Mapping[QueueRef, Bounds]
              ) -> TailPlan:
    """Per queue of `bounds`, the tail from the table's end to the queue's end (module doc)."""
    starting, ending, gaps, ahead = {}, {}, {}, []
    for ref, known in sorted(bounds.items()):
        table_end = ends.get(ref)
        start = known.min_queue_offset if table_end is None else table_end
        if start < known.min_queue_offset:
            gaps[ref] = (start, known.min_queue_offset)
            start = known.min_queue_offset
        if start > known.max_queue_offset:
            ahead.append(ref)
            start = known.max_queue_offset
        starting[ref] = start
        ending[ref] = known.max_queue_offset
    return TailPlan(starting, ending, gaps, tuple(ahead))


def _load(uri: str, storage_options: Mapping[str, str] | None) -> Any:
    """The table's newest snapshot (a deltalake DeltaTable), or None when there is none."""
    from deltalake import DeltaTable  # optional dependency (rocketha[tables])
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(uri, storage_options=dict(storage_options or {}) or None)
    except TableNotFoundError:
        return None


def _part_of(snapshot: Any, uri: str, queues: Sequence[QueueRef]) -> TablePart:
    if snapshot is None:
        return TablePart(uri, None, (), dict.fromkeys(queues))
    ends = {ref: snapshot.transaction_version(queue_app_id(ref.broker_name, ref.queue_id))
            for ref in queues}
    return TablePart(uri, snapshot.version(), tuple(snapshot.file_uris()), ends)


def table_part(uri: str, queues: Sequence[QueueRef],
               storage_options: Mapping[str, str] | None = None) -> TablePart:
    """The table's newest snapshot: its files and each of `queues`' end in it."""
    return _part_of(_load(uri, storage_options), uri, queues)


def _plan(topic: str, table: str, storage_options: Mapping[str, str] | None,
          options: Mapping[str, str]) -> tuple[TablePart, TailPlan]:
    """The snapshot first, then the queues' bounds (so no queue ends before the table)."""
    source = parse_source_options({**options, SUBSCRIBE: topic})
    snapshot = _load(table, storage_options)
    _, bounds = discover(source)
    part = _part_of(snapshot, table, list(bounds))
    plan = tail_plan(part.ends, bounds)
    if plan.ahead:
        names = ", ".join(ref.key for ref in plan.ahead)
        raise OptionError(
            f"topic {topic}: its table {table} holds offsets past the end of queue(s) {names}: "
            "the topic was deleted and created again under the same name; read the table "
            "alone, or move it away so the broker starts a new one")
    for ref, (table_end, first) in plan.gaps.items():
        message = (f"topic {topic}: queue {ref.key}: offsets [{table_end}, {first}) left the "
                   "log and the tier before the table got them")
        if source.fail_on_data_loss:
            raise DataLossError(f"{message} (set failOnDataLoss=false to warn and continue)")
        logger.warning("%s; continuing (failOnDataLoss=false)", message)
    return part, plan


def table_starting_offsets(topic: str, *, table: str,
                           table_storage_options: Mapping[str, str] | None = None,
                           **options: str) -> str:
    """startingOffsets JSON where the table ends, for a stream that continues the table
    (`options`: the connector's, e.g. brokers= or controller=)."""
    _, plan = _plan(topic, table, table_storage_options, options)
    return json.dumps(canonical(unflatten(plan.starting)))


def _tail(spark: SparkSession, topic: str, plan: TailPlan, columns: Sequence[str],
          options: Mapping[str, str], copy_to: str | None) -> DataFrame:
    """The tail's rows and storeDate: format("rocketha") over the plan's ranges, copied to
    Parquet at `copy_to` (and checked against the plan) when given."""
    tail_columns = (tuple(dict.fromkeys([*columns, "storeTimestamp"])) if copy_to is None
                    else copy_columns(columns))
    tail_options = {**options, SUBSCRIBE: topic,
                    STARTING_OFFSETS: json.dumps(canonical(unflatten(plan.starting))),
                    ENDING_OFFSETS: json.dumps(canonical(unflatten(plan.ending))),
                    COLUMNS: ",".join(tail_columns)}
    tail = spark.read.format("rocketha").options(**tail_options).load()
    if copy_to is None:
        return tail.withColumn(PARTITION_COLUMN, F.expr(STORE_DATE_SQL))
    write_tail(tail, copy_to)
    copied = (spark.read.schema(f"{source_ddl(tail_columns)}, {PARTITION_COLUMN} DATE")
              .parquet(copy_to))
    on_driver = local_path(copy_to)
    summary = summarize(copied) if on_driver is None else summarize_local(on_driver)
    filtered = parse_source_options(tail_options).tag_filter is not None
    problems = check_tail(topic, plan.starting, plan.ending, summary, filtered=filtered)
    assert not problems, f"read_topic: the tail's copy at {copy_to}: {'; '.join(problems)}"
    return copied


def read_topic(spark: SparkSession, topic: str, *, table: str,
               table_storage_options: Mapping[str, str] | None = None,
               columns: Sequence[str] = ALL_COLUMN_NAMES, table_reader: str = AUTO,
               cache_tail: bool = False, tail_file_rows_max: int = TAIL_FILE_ROWS_MAX,
               tail_dir: str | None = None, **options: str) -> DataFrame:
    """The whole topic: the table's rows and the tail it does not hold yet (module doc).

    `table`: the table's URI (a path, s3:// or s3a://); `table_storage_options`: delta-rs's,
    to read its log (S3 endpoint and keys; the pyarrow reader uses them too); `columns`: any
    of the connector's 11 (storeDate, the partition column, comes along); `table_reader`:
    who reads the table's files, "auto", "spark" or "arrow" (connector/spark/table_files.py:
    Spark's Parquet reader where Hadoop can open the URI, else pyarrow on the executors);
    `tail_file_rows_max`: a tail of at most this many rows is copied once into Parquet
    under `tail_dir` (a directory every executor reads at the same URI; by default a
    temporary directory when Spark runs in this process, removed at exit; without one on a
    cluster, no copy), so each query reads it with Spark's Parquet reader (0 = never copy);
    `cache_tail`: keep the tail's rows in Spark's cache after the first action, so later
    queries of this DataFrame skip the Python data source (the tail is a fixed offset range:
    caching it changes no answer; it costs the tail's rows in executor memory until
    `unpersist`); `options`: the connector's source options (brokers= or controller=, TLS,
    credentials ...).

    Otherwise the tail is read by Spark's tasks through `format("rocketha")` on each action.
    Reading it once on the driver into a local relation was measured slower: Spark ships a
    local relation's rows to the tasks on every query (52,000 rows: 4.4 s against 3.0 s)."""
    unknown = [name for name in columns if name not in ALL_COLUMN_NAMES]
    if unknown or not columns:
        raise OptionError(f"read_topic: columns {unknown or '(none)'} are not among "
                          f"{', '.join(ALL_COLUMN_NAMES)}")
    if any(key.lower() in {k.lower() for k in (STARTING_OFFSETS, ENDING_OFFSETS, COLUMNS,
                                                SUBSCRIBE)} for key in options):
        raise OptionError("read_topic sets subscribe, startingOffsets, endingOffsets and "
                          "columns itself: pass the topic and `columns=` instead")
    reader = choose_reader(spark, table, table_reader)
    part, plan = _plan(topic, table, table_storage_options, options)
    wanted = [*columns, PARTITION_COLUMN]
    table_schema = f"{source_ddl()}, {PARTITION_COLUMN} DATE"
    frames: list[DataFrame] = []
    if part.files and reader == SPARK:
        frames.append(spark.read.schema(table_schema).option("basePath", spark_uri(part.uri))
                      .parquet(*map(spark_uri, part.files)).select(*wanted))
    elif part.files:
        frames.append(arrow_files_frame(spark, part.files, table_schema, columns,
                                        table_storage_options))
    if plan.rows:
        copy_to = tail_copy_dir(spark, tail_dir) if plan.rows <= tail_file_rows_max else None
        tail = _tail(spark, topic, plan, columns, options, copy_to)
        tail = tail.select(*wanted)
        frames.append(tail.cache() if cache_tail else tail)
    if not frames:
        return spark.createDataFrame([], table_schema).select(*wanted)
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result

