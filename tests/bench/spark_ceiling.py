"""A Python data source with no IO at all, for bench_spark: Spark 4.2's own ceiling.

`read()` yields the same pre-built Arrow batch again and again, in rocketha's 11 columns
(`shape=all`), its lean default 7 (`shape=default`) or just `queueId INT, body BINARY`
(`shape=narrow`). What
the aggregation reaches over it is what any Python source can reach on this machine: the cost
of Python workers, the Arrow stream into the JVM and the Arrow -> row conversion, with nothing
read. The gap between the two shapes is the cost of columns Spark cannot prune for Python
sources.
Like rocketha's reader it freezes the worker's heap at its first task
(connector/spark/worker_heap.py), so the ceiling does not pay a full garbage collection after each
task that our read skips.
"""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from connector.spark.columns import ALL_COLUMN_NAMES, DEFAULT_COLUMN_NAMES, source_ddl
from connector.spark.source import SOURCE_ARROW_SCHEMA
from connector.spark.worker_heap import freeze_worker_heap_once

__all__ = ["CeilingSource"]

BATCH_ROWS = 4096
BODY_BYTES = 100
SHAPES = {"all": ALL_COLUMN_NAMES, "default": DEFAULT_COLUMN_NAMES,
          "narrow": ("queueId", "body")}


class _Part(InputPartition):
    def __init__(self, rows: int) -> None:
        self.rows = rows


def _batch(rows: int, shape: str) -> pa.RecordBatch:
    bodies = pa.array([b"x" * BODY_BYTES] * rows, pa.binary())
    queue_ids = pa.array([0] * rows, pa.int32())
    nulls = pa.nulls(rows, pa.string())
    stamps = pa.array([0] * rows, pa.timestamp("us", "UTC"))
    columns = [pa.array(["bench"] * rows), pa.array(["broker-a"] * rows), queue_ids,
               pa.array(range(rows), pa.int64()), pa.array([f"{n:032X}" for n in range(rows)]),
               nulls, nulls, bodies, pa.nulls(rows, pa.map_(pa.string(), pa.string())),
               stamps, stamps]
    full = pa.RecordBatch.from_arrays(columns, schema=SOURCE_ARROW_SCHEMA)
    return full.select(list(SHAPES[shape]))


class _Reader(DataSourceReader):
    def __init__(self, rows: int, partitions: int, shape: str) -> None:
        self.rows, self.partitions_count, self.shape = rows, partitions, shape

    def partitions(self) -> list[InputPartition]:
        share, extra = divmod(self.rows, self.partitions_count)
        return [_Part(share + (1 if index < extra else 0))
                for index in range(self.partitions_count)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, _Part)
        freeze_worker_heap_once()  # as rocketha's reads do: the ceiling keeps its advantages
        batch = _batch(BATCH_ROWS, self.shape)
        left = partition.rows
        while left > 0:
            yield batch if left >= BATCH_ROWS else batch.slice(0, left)
            left -= BATCH_ROWS


class CeilingSource(DataSource):
    """Options: rows, partitions, shape (all | default | narrow)."""

    @classmethod
    def name(cls) -> str:
        return "rocketha_ceiling"

    def schema(self) -> str:
        return source_ddl(SHAPES[self.options.get("shape", "all")])

    def reader(self, schema: StructType) -> DataSourceReader:
        return _Reader(int(self.options["rows"]), int(self.options.get("partitions", "8")),
                       self.options.get("shape", "all"))
