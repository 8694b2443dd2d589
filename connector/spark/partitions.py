"""What Spark pickles and ships to executors: partitions and commit messages, plain values only.

A read task gets a `QueueRangePartition` (read through a broker) or a `ColdRangePartition` (read
from the tier's objects): everything `read()` needs, because the executor sees the reader as the
planner built it, not the driver's long-lived streaming reader. Small ranges share one task as a
`PackedPartition` of them (planning.pack_groups says why). A write task returns a
`SinkCommitMessage`.
"""

from __future__ import annotations

import dataclasses

from pyspark.sql.datasource import InputPartition, WriterCommitMessage

__all__ = ["ColdRangePartition", "PackedPartition", "QueueRangePartition", "QueueWriteStats",
           "SinkCommitMessage", "unpacked"]


@dataclasses.dataclass(frozen=True, slots=True)
class QueueRangePartition(InputPartition):
    """Read messages of one queue in [start_queue_offset, end_queue_offset)."""

    topic: str
    broker_name: str
    endpoints: tuple[str, ...]
    queue_id: int
    start_queue_offset: int
    end_queue_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class QueueWriteStats:
    """Rows one task wrote to one queue: count and the queue-offset range [first, last]."""

    topic: str
    broker_name: str
    queue_id: int
    count: int
    first_queue_offset: int
    last_queue_offset: int


@dataclasses.dataclass(frozen=True, slots=True)
class SinkCommitMessage(WriterCommitMessage):
    """One write task's outcome: per-queue stats, statuses seen, duplicates the broker dropped."""

    partition_id: int
    rows: int
    queues: tuple[QueueWriteStats, ...]
    statuses: tuple[tuple[str, int], ...]  # (status, rows) for every status seen
    duplicate_rows: int  # rows of batches the broker recognised as already written


@dataclasses.dataclass(frozen=True, slots=True)
class ColdRangePartition(InputPartition):
    """Read messages of one queue in [start_queue_offset, end_queue_offset) straight from the
    tier's objects (readColdFromTier): `pieces` are the cold reader's picklable plans."""

    topic: str
    broker_name: str
    queue_id: int
    start_queue_offset: int
    end_queue_offset: int
    tier_url: str
    tier_storage_options: tuple[tuple[str, str], ...] = dataclasses.field(repr=False)  # secret
    pieces: tuple[object, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class PackedPartition(InputPartition):
    """Several ranges read one after another by one task (QueueRangePartition or
    ColdRangePartition each; never nested)."""

    parts: tuple[InputPartition, ...]


def unpacked(partitions: list[InputPartition] | tuple[InputPartition, ...]
             ) -> list[InputPartition]:
    """The ranges of `partitions`, packed ones opened up, in order."""
    result: list[InputPartition] = []
    for partition in partitions:
        result.extend(partition.parts if isinstance(partition, PackedPartition) else (partition,))
    return result
