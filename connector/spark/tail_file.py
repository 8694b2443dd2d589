"""read_topic's tail as a Parquet file: read once through the connector, then by Spark's reader.

The tail (what the topic table does not hold yet) can only be read through the Python data
source, and that costs every query of a read_topic DataFrame a Python task start and a whole
row read: 0.75 times plain Parquet's speed with 5 % of the rows in the tail (bench table,
2026-12-02). Kept in Spark's cache it costs executor memory; shipped from the driver as a local
relation it was slower still (Spark re-sends a local relation's rows on every query). So a
short tail is copied once into Parquet, where every executor can read it, and each query
then reads it as it reads the table:

    tail_dir(spark, given)      where the copy goes: `given`, else a temporary directory when
                                Spark runs in this process (master local[...]), else None
                                (a cluster with no shared directory: the tail stays a Python
                                data source read)
    write_tail(frame, path)     the format("rocketha") tail, written by Spark's tasks (the
                                same read as before, with the same options: TLS, tier ...),
                                partitioned by storeDate as the table is: a query reads the
                                day from the directory (and skips days by it) instead of
                                computing it from storeTimestamp on every row
    summarize(path)             per queue of the copy: count / distinct count / min / max; by
                                pyarrow on the driver when the copy is on its filesystem (the
                                default temporary directory: a few milliseconds), else by a
                                Spark job (seconds: a shuffle for the distinct count)
    check_tail(plan, summary)   the copy holds each planned (brokerName, queueId, queueOffset)
                                exactly once, and nothing else: pure, from that summary

A copy in a temporary directory is removed when the Python process exits; one under a `given`
directory is the caller's (it may be a Hadoop URI this process cannot delete).
"""

from __future__ import annotations

import atexit
import dataclasses
import shutil
import tempfile
import uuid
from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from connector.spark.offsets import QueueRef

__all__ = ["KEY_COLUMNS", "PARTITION_COLUMN", "STORE_DATE_SQL", "TAIL_FILE_ROWS_MAX",
           "QueueSummary", "check_tail", "copy_columns", "local_path", "summarize",
           "summarize_local", "tail_dir", "write_tail"]

# a tail up to this many rows is copied to Parquet once (about 150 B a row after zstd for the
# bench's 100 B bodies: ~150 MB of temporary disk at most); a longer one (a topic opted in
# late) is read through the Python data source on each action, as a copy would cost a full
# read of it before the first answer
TAIL_FILE_ROWS_MAX = 1_000_000
KEY_COLUMNS = ("brokerName", "queueId", "queueOffset")  # always in the copy: check_tail's input
PARTITION_COLUMN = "storeDate"  # the table's partition column: the UTC day of storeTimestamp
MICROS_PER_DAY = 86_400_000_000
# storeDate as the broker computes it (UTC, whatever the session's time zone)
STORE_DATE_SQL = (f"date_from_unix_date(CAST(floor(unix_micros(storeTimestamp) / "
                  f"{MICROS_PER_DAY}) AS INT))")

_temporary: list[str] = []  # directories this process made, removed at exit


@dataclasses.dataclass(frozen=True, slots=True)
class QueueSummary:
    """One queue's rows in the copy."""

    rows: int
    distinct_offsets: int
    min_offset: int
    max_offset: int


def _remove_temporary() -> None:
    for path in _temporary:
        shutil.rmtree(path, ignore_errors=True)


atexit.register(_remove_temporary)


def tail_dir(spark: SparkSession, given: str | None) -> str | None:
    """A fresh directory for one tail copy (module doc), or None: no copy."""
    if given:
        return f"{given.rstrip('/')}/rocketha-tail-{uuid.uuid4().hex}"
    if not str(spark.conf.get("spark.master", "")).startswith("local"):
        return None
    path = tempfile.mkdtemp(prefix="rocketha-tail-")
    _temporary.append(path)
    return f"{path}/tail"


def write_tail(frame: DataFrame, path: str) -> None:
    """The tail's rows (`frame`, the format("rocketha") read, with storeTimestamp) under `path`
    as the table lays out its own: `storeDate=<day>/` directories, one Parquet file per day
    (one task writes them: each query of the copy then adds one task, not one per connector
    partition)."""
    (frame.withColumn(PARTITION_COLUMN, F.expr(STORE_DATE_SQL)).coalesce(1).write
     .mode("error").option("compression", "zstd").partitionBy(PARTITION_COLUMN).parquet(path))


def local_path(path: str) -> str | None:
    """`path` on the driver's filesystem (no scheme, or file://), or None (a Hadoop URI)."""
    if path.startswith("file://"):
        return path[len("file://"):]
    return None if "://" in path else path


def summarize_local(path: str) -> dict[tuple[str, int], QueueSummary]:
    """summarize() of a copy on the driver's filesystem, by pyarrow (its key columns only)."""
    import pyarrow.dataset as ds

    keys = ds.dataset(path, format="parquet", partitioning="hive").to_table(
        columns=list(KEY_COLUMNS))
    rows = keys.group_by(["brokerName", "queueId"]).aggregate(
        [("queueOffset", "count"), ("queueOffset", "count_distinct"),
         ("queueOffset", "min"), ("queueOffset", "max")]).to_pylist()
    return {(row["brokerName"], row["queueId"]): QueueSummary(
        row["queueOffset_count"], row["queueOffset_count_distinct"], row["queueOffset_min"],
        row["queueOffset_max"]) for row in rows}


def summarize(frame: DataFrame) -> dict[tuple[str, int], QueueSummary]:
    """Per queue of the copy: rows, distinct offsets, min and max (one small Spark job)."""
    rows = frame.groupBy("brokerName", "queueId").agg(
        F.count(F.lit(1)).alias("rows"), F.countDistinct("queueOffset").alias("distinct"),
        F.min("queueOffset").alias("low"), F.max("queueOffset").alias("high")).collect()
    return {(row["brokerName"], row["queueId"]): QueueSummary(
        row["rows"], row["distinct"], row["low"], row["high"]) for row in rows}


def check_tail(topic: str, starting: Mapping[QueueRef, int], ending: Mapping[QueueRef, int],
               summary: Mapping[tuple[str, int], QueueSummary], *, filtered: bool
               ) -> list[str]:
    """What is wrong with the copy against the plan [starting, ending) per queue (empty: it is
    right). `filtered` (a tag filter): a queue may hold fewer rows, never others or twice."""
    problems = []
    planned = {(ref.broker_name, ref.queue_id): (start, ending[ref])
               for ref, start in starting.items() if ending[ref] > start}
    for key in sorted(set(summary) - set(planned)):
        problems.append(f"{topic} {key[0]}:{key[1]}: rows from a queue with no tail")
    for key, (start, end) in sorted(planned.items()):
        found = summary.get(key)
        name = f"{topic} {key[0]}:{key[1]} [{start}, {end})"
        if found is None:
            if not filtered:
                problems.append(f"{name}: no row")
            continue
        if found.rows != found.distinct_offsets:
            problems.append(f"{name}: {found.rows - found.distinct_offsets} offset(s) twice")
        if found.min_offset < start or found.max_offset >= end:
            problems.append(f"{name}: offsets {found.min_offset}..{found.max_offset} outside")
        elif not filtered and found.distinct_offsets != end - start:
            problems.append(f"{name}: {found.distinct_offsets} offsets, {end - start} planned")
    return problems


def copy_columns(columns: Sequence[str]) -> tuple[str, ...]:
    """The copy's columns: the asked ones, storeTimestamp (write_tail computes storeDate from
    it) and the keys check_tail needs."""
    return tuple(dict.fromkeys([*columns, "storeTimestamp", *KEY_COLUMNS]))
