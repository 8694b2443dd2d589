"""Where tiered storage plugs into the store: cold reads below the local minimum, and what the
uploader needs to know (sealed segments below the confirm position, their queue ranges, raw
index entries).

Functions over the store's shared state (store_state), called by MessageStore and its reader;
the tier itself is a `ColdTier` (cold_tier.py), attached with `MessageStore.attach_tier`.
While a tier is attached, retention deletes only segments it holds.
"""

from __future__ import annotations

import dataclasses
import logging

from storage_engine.cold_tier import ColdTier
from storage_engine.errors import StorageError
from storage_engine.messages import GetResult, RecordBlock
from storage_engine.statuses import GetStatus
from storage_engine.store_state import StoreState

__all__ = [
    "ColdTier",
    "cold_offset_for_timestamp",
    "read_cold",
    "read_queue_entries",
    "tier_queue_ranges",
    "tier_segments",
]

logger = logging.getLogger("storage_engine.message_store")

_COLD_CANDIDATES = frozenset({GetStatus.OFFSET_TOO_SMALL, GetStatus.NO_MESSAGE_IN_QUEUE,
                              GetStatus.NO_MATCHED_LOGIC_QUEUE})


def read_cold(state: StoreState, topic: str, queue_id: int, queue_offset: int,
              window: GetResult, max_count: int, max_bytes: int) -> RecordBlock | None:
    """A read the local store cannot serve because the offset is below its minimum: the
    tier's records (same limits, never past the confirm position), or None."""
    tier = state.tier
    no_queue = window.status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    if tier is None or window.status not in _COLD_CANDIDATES or (
            not no_queue and queue_offset >= window.min_queue_offset):
        return None
    config = state.config
    try:
        cold = tier.read_block(
            topic, queue_id, queue_offset,
            max_count=max(1, min(max_count, config.read_messages_max)),
            max_bytes=max(1, min(max_bytes, config.read_bytes_max)),
            confirm_log_position=state.confirm)
    except StorageError:  # object store down (counted and logged by the tier): nothing
        # is skipped, the reader retries at the same offset
        return RecordBlock(GetStatus.OFFSET_FOUND_NULL, queue_offset,
                           window.min_queue_offset, window.max_queue_offset)
    if cold is None:
        return None
    high = cold.max_queue_offset if no_queue else window.max_queue_offset
    return dataclasses.replace(cold, max_queue_offset=high)


def cold_offset_for_timestamp(state: StoreState, topic: str, queue_id: int, timestamp_ms: int,
                              local: int) -> int:
    """The answer was the local minimum: an earlier message may match in the tier."""
    tier = state.tier
    if tier is None:
        return local
    try:
        cold = tier.queue_offset_for_timestamp(topic, queue_id, timestamp_ms)
    except StorageError as err:  # object store down: the local answer, logged
        logger.warning("cold offset_for_timestamp %s/%d failed: %s", topic, queue_id, err)
        return local
    return local if cold is None else cold


def tier_segments(state: StoreState) -> list[tuple[int, int, float]]:
    """(base_log_position, size_bytes, mtime_s) of the sealed segments wholly below the
    confirm position: what may be uploaded."""
    with state.lock:
        confirm = state.confirm
        segments = list(state.commit_log.segments[:-1])
    found = []
    for segment in segments:  # stat outside the lock: retention may delete one meanwhile
        if segment.base_position + segment.size_bytes > confirm:
            continue
        try:
            mtime_s = state.fs.mtime_s(segment.path)
        except FileNotFoundError:
            continue  # deleted by retention since the listing: tiered already, or expired
        found.append((segment.base_position, segment.size_bytes, mtime_s))
    return found


def tier_queue_ranges(state: StoreState, log_start: int,
                      log_end: int) -> list[tuple[str, int, int, int]]:
    """For each queue with records in [log_start, log_end), sorted: (topic, queue_id,
    first_queue_offset, end_queue_offset) of those records (two binary searches each)."""
    with state.lock:
        queues = sorted(state.queues.values(), key=lambda q: (q.topic, q.queue_id))
    found = []
    for queue in queues:
        first = queue.first_queue_offset_at_or_after(log_start)
        end = queue.first_queue_offset_at_or_after(log_end)
        if first < end:
            found.append((queue.topic, queue.queue_id, first, end))
    return found


def read_queue_entries(state: StoreState, topic: str, queue_id: int, queue_offset: int,
                       count: int) -> bytes:
    """Raw 20-byte ConsumeQueue entries from `queue_offset`: at most `count`, fewer at the
    end of an index segment (call again from where it stopped); b"" when there are none."""
    queue = state.queues.get((topic, queue_id))
    return b"" if queue is None else queue.read_entries(queue_offset, count)

