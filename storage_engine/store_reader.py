"""The read path: records by queue offset (one by one, or as one block of back-to-back
records), queue bounds, and the queue offset of a timestamp.

Reads take no lock: a ConsumeQueue's entries and the CommitLog's bytes below its end do not
change except by truncation and retention, and each read checks for both (`_still_indexed`,
a zero size, a None read). Reads never return a record past the confirm position, and fall
through to the cold tier below the local minimum (tier_hooks).
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np

from storage_engine.cold_tier import cold_result, tag_matches
from storage_engine.consume_queue import CONSUME_QUEUE_ENTRY, ConsumeQueue
from storage_engine.messages import GetResult, RecordBlock, TagFilter
from storage_engine.record_format import HEADER, STORE_TIMESTAMP_AT
from storage_engine.statuses import GetStatus
from storage_engine.store_state import StoreState
from storage_engine.tier_hooks import cold_offset_for_timestamp, read_cold

__all__ = ["StoreReader"]

_CONSUME_QUEUE_DTYPE = np.dtype(
    [("log_position", ">i8"), ("size_bytes", ">i4"), ("tags_code", ">i8")])
assert _CONSUME_QUEUE_DTYPE.itemsize == CONSUME_QUEUE_ENTRY.size


class StoreReader:
    """Reads of one store's state (thread-safe, lock-free)."""

    def __init__(self, state: StoreState) -> None:
        self._state = state
        self._config = state.config
        self._commit_log = state.commit_log
        self._queues = state.queues

    def get_messages(
        self,
        topic: str,
        queue_id: int,
        queue_offset: int,
        *,
        max_count: int,
        max_bytes: int,
        tag_filter: TagFilter | None = None,
    ) -> GetResult:
        """Up to `max_count` records (at least one if any is visible, then up to `max_bytes`)
        from `queue_offset`, never past the confirm position."""
        queue, window = self._read_window(topic, queue_id, queue_offset)
        if isinstance(window, GetResult):
            cold = read_cold(self._state, topic, queue_id, queue_offset, window, max_count,
                             max_bytes)
            return window if cold is None else cold_result(cold, tag_filter)
        assert queue is not None
        min_offset, max_offset = window
        count_max = max(1, min(max_count, self._config.read_messages_max))
        bytes_max = max(1, min(max_bytes, self._config.read_bytes_max))
        codes = tag_filter.codes if tag_filter is not None else None
        read = self._commit_log.read
        records: list[bytes] = []
        record_offsets: list[int] = []  # each record's queue offset (for `_still_indexed`)
        total_bytes = 0
        cursor = queue_offset
        status = GetStatus.NO_MATCHED_MESSAGE
        while cursor < max_offset and len(records) < count_max:
            raw = queue.read_entries(cursor, min(max_offset - cursor, count_max - len(records)))
            if not raw:
                break
            stop = False
            for log_position, size, code in CONSUME_QUEUE_ENTRY.iter_unpack(raw):
                if (records and total_bytes + size > bytes_max) or size <= 0:
                    stop = True  # full, or an entry a truncation zeroed under this read
                    break
                cursor += 1
                if codes is not None and (code not in codes or not tag_matches(
                        read(log_position, size), tag_filter)):
                    continue
                record = read(log_position, size)
                if record is None:
                    status = GetStatus.MESSAGE_WAS_REMOVING
                    stop = True
                    break
                records.append(record)
                record_offsets.append(cursor - 1)
                total_bytes += size
                if len(records) >= count_max:
                    break
            if stop:
                break
        if records:
            status = GetStatus.FOUND
        return _still_indexed(queue, queue_offset, record_offsets, GetResult(
            status, cursor, min_offset, max_offset, records))

    def get_message_block(
        self, topic: str, queue_id: int, queue_offset: int, *, max_count: int, max_bytes: int
    ) -> RecordBlock:
        """Like get_messages without a tag filter, but the records come back to back in one
        buffer (`data`, with each record's size in `sizes`, an int64 array): records of a queue
        written together are contiguous in the CommitLog, so this is one slice per run instead
        of one per record, and the caller can decode the block with vector operations. The
        ConsumeQueue entries are scanned as arrays too (no per-entry Python step)."""
        queue, window = self._read_window(topic, queue_id, queue_offset)
        if isinstance(window, GetResult):
            cold = read_cold(self._state, topic, queue_id, queue_offset, window, max_count,
                             max_bytes)
            if cold is not None:
                return cold
            return RecordBlock(window.status, window.next_queue_offset,
                               window.min_queue_offset, window.max_queue_offset)
        assert queue is not None
        min_offset, max_offset = window
        count_max = max(1, min(max_count, self._config.read_messages_max))
        positions, sizes = _block_entries(queue, queue_offset, max_offset, count_max,
                                          max(1, min(max_bytes, self._config.read_bytes_max)))
        zeroed = np.flatnonzero(sizes <= 0)  # entries a truncation zeroed under this read
        if zeroed.size:
            positions, sizes = positions[:zeroed[0]], sizes[:zeroed[0]]
        if sizes.size == 0:
            return RecordBlock(GetStatus.NO_MATCHED_MESSAGE, queue_offset, min_offset,
                               max_offset, b"", sizes)
        block = self._read_block(positions, sizes, queue_offset, min_offset, max_offset)
        end = queue.max_queue_offset  # as in `_still_indexed`
        keep = min(len(block.sizes), max(0, end - queue_offset))
        if keep == len(block.sizes):
            return block
        status = block.status if keep else GetStatus.NO_MATCHED_MESSAGE
        return RecordBlock(status, queue_offset + keep, min_offset, max_offset,
                           block.data[:int(block.sizes[:keep].sum())], block.sizes[:keep])

    def min_queue_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queues.get((topic, queue_id))
        low = 0 if queue is None else self._min_readable_queue_offset(queue)
        tier = self._state.tier
        cold_low = None if tier is None else tier.min_queue_offset(topic, queue_id)
        return low if cold_low is None else min(low, cold_low)

    def max_queue_offset(self, topic: str, queue_id: int) -> int:
        """The next queue_offset a reader would wait for (only confirmed messages count)."""
        queue = self._queues.get((topic, queue_id))
        return 0 if queue is None else self._visible_max_queue_offset(queue)

    def queue_offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue_offset whose store timestamp is >= `timestamp_ms` (max when none)."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return cold_offset_for_timestamp(self._state, topic, queue_id, timestamp_ms, 0)
        low, high = self._min_readable_queue_offset(queue), self._visible_max_queue_offset(queue)
        while low < high:
            mid = (low + high) // 2
            entry = queue.entry(mid)
            header = None if entry is None else self._commit_log.read(entry[0], HEADER.size)
            if header is None:
                low = mid + 1
                continue
            store_ms = int.from_bytes(header[STORE_TIMESTAMP_AT:STORE_TIMESTAMP_AT + 8], "big")
            if store_ms < timestamp_ms:
                low = mid + 1
            else:
                high = mid
        if self._state.tier is not None and low == self._min_readable_queue_offset(queue):
            return cold_offset_for_timestamp(self._state, topic, queue_id, timestamp_ms, low)
        return low

    def _read_window(self, topic: str, queue_id: int, queue_offset: int
                     ) -> tuple[ConsumeQueue | None, GetResult | tuple[int, int]]:
        """The queue and its readable [min, max), or the status that ends the read now."""
        queue = self._queues.get((topic, queue_id))
        if queue is None:
            return None, GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        low = self._min_readable_queue_offset(queue)
        high = self._visible_max_queue_offset(queue)
        if high <= low:
            return queue, GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, low, low, high)
        if queue_offset < low:
            return queue, GetResult(GetStatus.OFFSET_TOO_SMALL, low, low, high)
        if queue_offset == high:
            return queue, GetResult(GetStatus.OFFSET_OVERFLOW_ONE, queue_offset, low, high)
        if queue_offset > high:
            return queue, GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, high, low, high)
        return queue, (low, high)

    def _read_block(self, positions: np.ndarray, sizes: np.ndarray, queue_offset: int,
                    min_offset: int, max_offset: int) -> RecordBlock:
        ends = positions + sizes
        breaks = np.flatnonzero(positions[1:] != ends[:-1]) + 1
        run_first = np.concatenate(([0], breaks)).tolist()
        run_last = (np.concatenate((breaks, [sizes.size])) - 1).tolist()
        pieces: list[bytes] = []
        for first, last in zip(run_first, run_last, strict=True):
            start = int(positions[first])
            piece = self._commit_log.read(start, int(ends[last]) - start)
            if piece is None:  # retention removed it under us
                status = GetStatus.FOUND if pieces else GetStatus.MESSAGE_WAS_REMOVING
                return RecordBlock(status, queue_offset + first, min_offset, max_offset,
                                   b"".join(pieces), sizes[:first])
            pieces.append(piece)
        return RecordBlock(GetStatus.FOUND, queue_offset + sizes.size, min_offset, max_offset,
                           b"".join(pieces), sizes)

    def _visible_max_queue_offset(self, queue: ConsumeQueue) -> int:
        """The queue's end, less the trailing entries past the confirm position."""
        confirm = self._state.confirm
        end = queue.max_queue_offset
        low = queue.min_queue_offset
        scanned = 0
        while end > low and scanned < self._config.consume_queue_tail_scan_entries_max:
            entry = queue.entry(end - 1)
            if entry is None or entry[0] + entry[1] <= confirm:
                break
            end -= 1
            scanned += 1
        return end

    def _min_readable_queue_offset(self, queue: ConsumeQueue) -> int:
        """The queue's first entry whose record still exists (retention removes from the front)."""
        low = queue.min_queue_offset
        log_min = self._commit_log.min_log_position
        first = queue.entry(low)
        if first is None or first[0] >= log_min:
            return low
        return queue.first_queue_offset_at_or_after(log_min)


def _still_indexed(queue: ConsumeQueue, queue_offset: int, record_offsets: list[int],
                   result: GetResult) -> GetResult:
    """`result` less what lies past the queue's end as it is after the read. Why: reads
    take no lock, and a truncation moves a queue's end down before it zeroes the entries
    past it (Segment.zero_from); a read that took its bounds before that may have read
    zeros, which name a 0-byte record at log position 0 (chaos finding 8)."""
    end = queue.max_queue_offset
    if result.next_queue_offset <= end:
        return result
    keep = bisect.bisect_left(record_offsets, end)
    records = result.records[:keep]
    status = result.status if records else GetStatus.NO_MATCHED_MESSAGE
    return dataclasses.replace(result, status=status, records=records,
                               next_queue_offset=max(end, queue_offset))


def _block_entries(queue: ConsumeQueue, queue_offset: int, max_offset: int,
                   count_max: int, bytes_max: int) -> tuple[np.ndarray, np.ndarray]:
    """(log_positions, sizes) of the entries from `queue_offset`: at most `count_max`, and
    after the first one only while the running size stays within `bytes_max`."""
    position_parts: list[np.ndarray] = []
    size_parts: list[np.ndarray] = []
    taken, cursor, bytes_left = 0, queue_offset, bytes_max
    while cursor < max_offset and taken < count_max:  # one pass per CQ segment crossed
        raw = queue.read_entries(cursor, min(max_offset - cursor, count_max - taken))
        if not raw:
            break
        entries = np.frombuffer(raw, dtype=_CONSUME_QUEUE_DTYPE)
        sizes = entries["size_bytes"].astype(np.int64)
        running = np.cumsum(sizes)
        keep = int(np.searchsorted(running, bytes_left, side="right"))
        if taken == 0:
            keep = max(keep, 1)
        if keep == 0:
            break
        position_parts.append(entries["log_position"][:keep].astype(np.int64))
        size_parts.append(sizes[:keep])
        taken += keep
        cursor += keep
        bytes_left -= int(running[keep - 1])
        if keep < entries.size:
            break
    if not size_parts:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return np.concatenate(position_parts), np.concatenate(size_parts)
