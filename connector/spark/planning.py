"""Pure planning: offsets specs -> per-queue offsets, admission control, splitting into tasks.

No IO here: callers pass the queue bounds they fetched. Everything is a function of its
arguments, so the same inputs always give the same plan (replays plan identical ranges).

    resolve_offsets(spec, bounds)        "earliest" | "latest" | JSON(-2/-1/n) -> QueueRef -> n
    admit(start, latest, max_rows)       cap a trigger at max_rows, split over queues by backlog
    split_ranges(ranges, min_partitions, max_rows) cut big [start, end) ranges into more tasks
    pack_groups(counts, min_rows, ...)   pack small ranges together into fewer tasks
    trigger_waits(...)                   minOffsetsPerTrigger + maxTriggerDelay decision
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from connector.errors import OptionError
from connector.spark.offsets import EARLIEST, LATEST, QueueRef, TopicOffsets, flatten

__all__ = [
    "Bounds",
    "QueueRange",
    "admit",
    "backlog",
    "pack_groups",
    "resolve_offsets",
    "split_ranges",
    "trigger_waits",
]


@dataclasses.dataclass(frozen=True, slots=True)
class Bounds:
    min_queue_offset: int
    max_queue_offset: int
    from_master: bool = True  # False: read from a slave while the master did not answer


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class QueueRange:
    ref: QueueRef
    start_queue_offset: int
    end_queue_offset: int

    @property
    def count(self) -> int:
        return self.end_queue_offset - self.start_queue_offset


def resolve_offsets(spec: str | TopicOffsets, bounds: Mapping[QueueRef, Bounds], *,
                    option: str, default: str) -> dict[QueueRef, int]:
    """One queue offset per known queue. JSON may name a subset: the others take `default`.

    Raises OptionError when the JSON names a queue that does not exist."""
    if isinstance(spec, str):
        pick_latest = (spec or default) == "latest"
        return {ref: (b.max_queue_offset if pick_latest else b.min_queue_offset)
                for ref, b in sorted(bounds.items())}
    given = flatten(spec)
    missing = sorted(ref for ref in given if ref not in bounds)
    if missing:
        names = ", ".join(f"{ref.topic}/{ref.key}" for ref in missing)
        raise OptionError(f"option {option}: unknown topic or queue {names}")
    result = {}
    for ref, b in sorted(bounds.items()):
        value = given.get(ref, EARLIEST if default == "earliest" else LATEST)
        if value == EARLIEST:
            value = b.min_queue_offset
        elif value == LATEST:
            value = b.max_queue_offset
        result[ref] = value
    return result


def backlog(start: Mapping[QueueRef, int], latest: Mapping[QueueRef, int]) -> int:
    return sum(max(0, latest[ref] - start.get(ref, latest[ref])) for ref in latest)


def admit(start: Mapping[QueueRef, int], latest: Mapping[QueueRef, int],
          max_rows: int | None) -> dict[QueueRef, int]:
    """The end offsets of the next batch: `latest`, capped at `max_rows` offsets in total.

    The cap is shared in proportion to each queue's backlog (floored, as Spark's Kafka source
    does); what the floors leave goes one by one to queues in sorted order, so a batch always
    moves when anything is available. Queues in `latest` but not in `start` start at `latest`'s
    caller-chosen start, which the caller passes in `start` (new queues: their min)."""
    sizes = {ref: max(0, latest[ref] - start.get(ref, latest[ref])) for ref in sorted(latest)}
    total = sum(sizes.values())
    if max_rows is None or total <= max_rows:
        return {ref: start.get(ref, latest[ref]) + size for ref, size in sizes.items()}
    shares = {ref: size * max_rows // total for ref, size in sizes.items()}
    leftover = max_rows - sum(shares.values())
    for ref, size in sizes.items():
        if leftover == 0:
            break
        if shares[ref] < size:
            shares[ref] += 1
            leftover -= 1
    return {ref: start.get(ref, latest[ref]) + share for ref, share in shares.items()}


def split_ranges(ranges: list[QueueRange], min_partitions: int | None,
                 max_rows: int | None = None) -> list[QueueRange]:
    """Non-empty ranges; with min_partitions, big ranges are cut so there are at least that
    many tasks (each range gets ceil(count * min_partitions / total) parts), and with
    `max_rows` (maxRecordsPerPartition) into at least ceil(count / max_rows) parts: the larger
    of the two wins, as in Spark's Kafka source. Parts of a range are evenly sized."""
    ranges = sorted(r for r in ranges if r.count > 0)
    total = sum(r.count for r in ranges)
    by_count = bool(min_partitions) and len(ranges) < (min_partitions or 0) and total > 0
    if not by_count and max_rows is None:
        return ranges
    result = []
    for queue_range in ranges:
        parts = 1
        if by_count:
            parts = math.ceil(queue_range.count * (min_partitions or 1) / total)
        if max_rows is not None:
            parts = max(parts, math.ceil(queue_range.count / max_rows))
        parts = min(queue_range.count, parts)
        step, extra = divmod(queue_range.count, parts)
        cursor = queue_range.start_queue_offset
        for index in range(parts):
            size = step + (1 if index < extra else 0)
            result.append(QueueRange(queue_range.ref, cursor, cursor + size))
            cursor += size
        assert cursor == queue_range.end_queue_offset
    return result


def pack_groups(counts: list[int], min_rows: int, min_groups: int | None = None
                ) -> list[list[int]]:
    """Indices of `counts` in groups of about `min_rows` rows or more: one read task each.

    Why: Spark 4.2 starts every task of a Python source for ~0.05-0.15 s on this kind of
    machine (the worker hand-off, not our read), as much as reading 100,000 rows; one task per
    queue made small and mid-size reads pay it per queue (1 M rows in 8 queues spent half its
    time starting tasks). So ranges smaller than `min_rows` share a task, as Spark packs small
    files into `spark.sql.files.maxPartitionBytes`. The number of groups is
    total // min_rows, at least `min_groups` (minPartitions) and 1, at most one per range;
    ranges go largest first to the lightest group (ties: fewer ranges, then lower index), so
    the groups are as even as the ranges allow and the same counts always give the same
    groups. Each group
    lists its indices in ascending order; groups are ordered by their first index.
    `min_rows` 0 (or a single range) keeps one group per range."""
    total = sum(counts)
    if min_rows <= 0 or len(counts) <= 1:
        return [[index] for index in range(len(counts))]
    wanted = max(1, total // min_rows, min_groups or 1)
    if wanted >= len(counts):
        return [[index] for index in range(len(counts))]
    loads = [0] * wanted
    groups: list[list[int]] = [[] for _ in range(wanted)]
    for index in sorted(range(len(counts)), key=lambda i: (-counts[i], i)):
        # ties (empty ranges weigh nothing) go to the group with fewer ranges, so
        # minPartitions holds even for a read whose ranges are all empty
        lightest = min(range(wanted), key=lambda g: (loads[g], len(groups[g]), g))
        loads[lightest] += counts[index]
        groups[lightest].append(index)
    return sorted(sorted(group) for group in groups if group)


def trigger_waits(backlog_count: int, min_rows: int | None, last_trigger_ms: int, now_ms: int,
                  max_trigger_delay_ms: int) -> bool:
    """minOffsetsPerTrigger: hold the trigger back while fewer than `min_rows` offsets wait,
    until `max_trigger_delay_ms` passed since the last batch (then run with what is there)."""
    if min_rows is None or backlog_count >= min_rows:
        return False
    return now_ms - last_trigger_ms < max_trigger_delay_ms
