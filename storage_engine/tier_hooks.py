"""Where tiered storage plugs into the store: cold reads below the local minimum, and what the
uploader needs to know (sealed segments below the confirm position, their queue ranges, raw
index entries).

A mixin of MessageStore plus the `ColdTier` protocol the store asks of
`storage_engine.tiered.TierReader` (this module imports nothing from `tiered`: the tier attaches
itself with `attach_tier`). While a tier is attached, retention deletes only segments it holds.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Protocol

import numpy as np

from storage_engine.consume_queue import ConsumeQueue
from storage_engine.errors import StorageError
from storage_engine.messages import GetResult, RecordBlock, TagFilter
from storage_engine.record_format import decode_properties
from storage_engine.statuses import GetStatus

__all__ = ["ColdTier", "TieredReadsMixin", "cold_result", "tag_matches"]

logger = logging.getLogger("storage_engine.message_store")


class TieredReadsMixin:
    """Tiered-storage methods of MessageStore (not usable on its own)."""

    def attach_tier(self, tier: ColdTier | None) -> None:
        """Serve reads below the local minimum from `tier`; from now on retention deletes only
        segments the tier holds (verified uploads)."""
        self._tier = tier

    def _read_cold(self, topic: str, queue_id: int, queue_offset: int, window: GetResult,
                   max_count: int, max_bytes: int) -> RecordBlock | None:
        """A read the local store cannot serve because the offset is below its minimum: the
        tier's records (same limits, never past the confirm position), or None."""
        tier = self._tier
        no_queue = window.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
        if tier is None or window.status not in _COLD_CANDIDATES or (
                not no_queue and queue_offset >= window.min_queue_offset):
            return None
        try:
            cold = tier.read_block(
                topic, queue_id, queue_offset,
                max_count=max(1, min(max_count, self.config.read_messages_max)),
                max_bytes=max(1, min(max_bytes, self.config.read_bytes_max)),
                confirm_log_position=self._confirm)
        except StorageError:  # object store down (counted and logged by the tier): nothing
            # is skipped, the reader retries at the same offset
            return RecordBlock(GetStatus.OFFSET_FOUND_NULL, queue_offset,
                               window.min_queue_offset, window.max_queue_offset)
        if cold is None:
            return None
        high = cold.max_queue_offset if no_queue else window.max_queue_offset
        return dataclasses.replace(cold, max_queue_offset=high)

    def _cold_offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int,
                                   local: int) -> int:
        """The answer was the local minimum: an earlier message may match in the tier."""
        if self._tier is None:
            return local
        try:
            cold = self._tier.queue_offset_for_timestamp(topic, queue_id, timestamp_ms)
        except StorageError as err:  # object store down: the local answer, logged
            logger.warning("cold offset_for_timestamp %s/%d failed: %s", topic, queue_id, err)
            return local
        return local if cold is None else cold

    def tier_segments(self) -> list[tuple[int, int, float]]:
        """(base_log_position, size_bytes, mtime_s) of the sealed segments wholly below the
        confirm position: what may be uploaded."""
        with self._lock:
            confirm = self._confirm
            segments = list(self._commit_log.segments[:-1])
        found = []
        for segment in segments:  # stat outside the lock: retention may delete one meanwhile
            if segment.base_position + segment.size_bytes > confirm:
                continue
            try:
                mtime_s = self.fs.mtime_s(segment.path)
            except FileNotFoundError:
                continue  # deleted by retention since the listing: tiered already, or expired
            found.append((segment.base_position, segment.size_bytes, mtime_s))
        return found

    def tier_queue_ranges(self, log_start: int, log_end: int) -> list[tuple[str, int, int, int]]:
        """For each queue with records in [log_start, log_end), sorted: (topic, queue_id,
        first_queue_offset, end_queue_offset) of those records (two binary searches each)."""
        with self._lock:
            queues = sorted(self._queues.values(), key=lambda q: (q.topic, q.queue_id))
        found = []
        for queue in queues:
            first = _first_entry_at_or_after(queue, log_start)
            end = _first_entry_at_or_after(queue, log_end)
            if first < end:
                found.append((queue.topic, queue.queue_id, first, end))
        return found

    def read_queue_entries(self, topic: str, queue_id: int, queue_offset: int,
                           count: int) -> bytes:
        """Raw 20-byte ConsumeQueue entries from `queue_offset`: at most `count`, fewer at the
        end of an index segment (call again from where it stopped); b"" when there are none."""
        queue = self._queues.get((topic, queue_id))
        return b"" if queue is None else queue.read_entries(queue_offset, count)


class ColdTier(Protocol):
    """What the store asks of tiered storage (storage_engine.tiered.TierReader)."""

    def holds_segment(self, base_log_position: int, log_position_end: int) -> bool: ...

    def min_queue_offset(self, topic: str, queue_id: int) -> int | None: ...

    def queue_offset_for_timestamp(self, topic: str, queue_id: int,
                                   timestamp_ms: int) -> int | None:
        """The tier's first queue_offset stored at or after `timestamp_ms`; None when the tier
        has none (the answer lies in the local store)."""

    def read_block(self, topic: str, queue_id: int, queue_offset: int, *, max_count: int,
                   max_bytes: int, confirm_log_position: int) -> RecordBlock | None:
        """FOUND with records; OFFSET_TOO_SMALL below the tier's minimum; NO_MATCHED_MESSAGE
        when nothing there is visible yet; None when the tier does not hold `queue_offset`."""


_COLD_CANDIDATES = frozenset({GetStatus.OFFSET_TOO_SMALL, GetStatus.NO_MESSAGE_IN_QUEUE,
                              GetStatus.NO_MATCHED_LOGIC_QUEUE})


def _first_entry_at_or_after(queue: ConsumeQueue, log_position: int) -> int:
    low, high = queue.min_queue_offset, queue.max_queue_offset
    while low < high:
        mid = (low + high) // 2
        entry = queue.entry(mid)
        if entry is not None and entry[0] < log_position:
            low = mid + 1
        else:
            high = mid
    return low


def cold_result(block: RecordBlock, tag_filter: TagFilter | None) -> GetResult:
    """A cold block as get_messages returns it (records split, tag filter applied)."""
    records, position = [], 0
    for size in np.asarray(block.sizes).tolist():
        record = block.data[position:position + size]
        position += size
        if tag_filter is None or tag_matches(record, tag_filter):
            records.append(record)
    status = block.status
    if status is GetStatus.FOUND and not records:
        status = GetStatus.NO_MATCHED_MESSAGE
    return GetResult(status, block.next_queue_offset, block.min_queue_offset,
                     block.max_queue_offset, records)


def tag_matches(record: bytes | None, tag_filter: TagFilter | None) -> bool:
    """Exact tag check after the tags_code matched (hash collisions are possible)."""
    if record is None or tag_filter is None:
        return record is not None
    body_size = int.from_bytes(record[84:88], "big")
    topic_at = 88 + body_size
    props_at = topic_at + 1 + record[topic_at] + 2
    try:
        tags = decode_properties(record[props_at:len(record) - 20]).get("TAGS")
    except ValueError:
        return False
    return tags in tag_filter.tags
