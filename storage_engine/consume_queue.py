"""ConsumeQueue: the per-(topic, queue) index of a CommitLog (RocketMQ's 20-byte CQ unit).

    entry (20 bytes, big-endian, entry n at byte n * 20 of the queue's byte space)
    0   8  log_position   where the record starts in the CommitLog
    8   4  size_bytes     the record's TOTALSIZE (> 0; 0 marks "no entry yet")
    12  8  tags_code      Java String.hashCode of the TAGS property, 0 without tags

Files live in `consumequeue/<topic>/<queue_id>/<20-digit byte position>`. The index is derived
data: the dispatcher writes it after the CommitLog bytes it points at, never ahead of them, and
recovery can always rebuild it from the CommitLog. Entries of one queue have increasing
log_positions, which makes "cut every entry at or past log_position P" a binary search.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import NamedTuple

from storage_engine.files import PendingDirectorySyncs
from storage_engine.fs import OS_FILE_SYSTEM, FileSystem
from storage_engine.queue_bounds import first_written_entry, write_end_entry
from storage_engine.segment import Segment, SegmentQueue

__all__ = ["CONSUME_QUEUE_ENTRY", "ConsumeQueue", "PreparedSegment"]

CONSUME_QUEUE_ENTRY = struct.Struct(">qiq")
ENTRY_SIZE = CONSUME_QUEUE_ENTRY.size
assert ENTRY_SIZE == 20


class PreparedSegment(NamedTuple):
    """A new queue's first segment file, made outside the store's lock, not yet adopted."""

    head: tuple[int, bytearray]  # the queue's head it was made for (identity is checked)
    segment: Segment
    copied: int  # bytes of the head already written to it


class ConsumeQueue:
    """One queue's index. Not thread-safe for writers; the store serializes them.

    `directory_syncs`: where the fsyncs of the queue's new directories and segment files wait
    for the next checkpoint (None: done at once). `unflushed`: the store's set of queues
    written since their last flush; `append` adds this queue, so a checkpoint flushes the
    queues written since the last one rather than every queue of the store.

    `defer_first_segment`: a new queue's first entries wait in memory (`_head`) until a
    checkpoint creates the queue's directory and first segment file outside the store's lock
    (StoreState.create_first_segments) and hands it over (`adopt_first_segment`). Why: at
    thousands of queues most puts are a queue's first, and its mkdir and file create are
    ext4 metadata operations that wait behind other processes' journal commits: 20 to 350 ms
    at a load of 10, on the put path and under the store's lock, which every other put then
    waits for (docs/benchmarks/scale.md). Not preallocating would not help (ftruncate is the
    cheap part, it makes a sparse file), nor would creating the files when a topic is
    created (an auto-created topic's first put, and a slave's, would still pay). Reads serve
    the entries from memory meanwhile (read-your-ack), and nothing is lost in a crash
    before the checkpoint: the checkpoint vouches only for queues it has flushed, and
    recovery rebuilds the rest from the CommitLog, as for any entry past the checkpoint. The
    head never outgrows the first segment: an append that would overflow it creates the
    segment at once, under the lock (today's cost, paid once per queue at most)."""

    def __init__(self, directory: Path, topic: str, queue_id: int, segment_entries: int,
                 fs: FileSystem = OS_FILE_SYSTEM, *,
                 directory_syncs: PendingDirectorySyncs | None = None,
                 unflushed: set[ConsumeQueue] | None = None,
                 defer_first_segment: bool = False) -> None:
        self.topic = topic
        self.queue_id = queue_id
        self._unflushed = unflushed
        self._defer = defer_first_segment
        # (first queue offset, packed entries) of a queue without segment files yet; replaced,
        # never mutated except by appending, so a reader without the lock sees a consistent one
        self._head: tuple[int, bytearray] | None = None
        self._segments = SegmentQueue(directory, segment_entries * ENTRY_SIZE, fs,
                                      directory_syncs)
        self._recover_write_end()

    def _recover_write_end(self) -> None:
        """Find where the queue starts and ends after a restart, touching O(log n) entries.

        The first segment may begin with empty entries (a queue that started at a later
        queue_offset, e.g. on a slave that began at the master's minimum), so the minimum is the
        first non-empty entry; the end is the first empty entry after it in the last segment
        (queue_bounds: a bisection, and what it means on a crash-torn tail).
        """
        segments = self._segments.segments
        self._min_queue_offset = 0
        if not segments:
            return
        for segment in segments[:-1]:
            segment.write_position = segment.flushed_position = segment.size_bytes
        first, last = segments[0], segments[-1]
        entry_count = first.size_bytes // ENTRY_SIZE
        # Read through the file rather than the mapping: recovery's probes then leave no pages
        # mapped into this process for each of thousands of queues.
        # A segment of zeros (everything lost in a crash) holds no entries and starts at its base.
        lead_entries = first_written_entry(first.file.read_at, entry_count) or 0
        self._min_queue_offset = first.base_position // ENTRY_SIZE + lead_entries
        search_from = lead_entries if last is first else 0
        end = write_end_entry(last.file.read_at, search_from, entry_count) * ENTRY_SIZE
        last.write_position = last.flushed_position = end

    # -- positions --------------------------------------------------------------------------
    @property
    def min_queue_offset(self) -> int:
        return max(self._min_queue_offset, self._segments.min_position // ENTRY_SIZE)

    @property
    def max_queue_offset(self) -> int:
        """The next queue_offset to be written (RocketMQ's maxOffset)."""
        head = self._head  # (read before the segments: adopt_first_segment's order)
        if not self._segments.segments:
            return self._min_queue_offset if head is None else head[0] + len(head[1]) // ENTRY_SIZE
        return self._segments.end_position // ENTRY_SIZE

    # -- writing ----------------------------------------------------------------------------
    def append(self, first_queue_offset: int, entries: bytes) -> None:
        """Write packed entries starting at `first_queue_offset` (the current end, or the start
        of an empty queue)."""
        assert len(entries) % ENTRY_SIZE == 0
        if self._unflushed is not None:
            self._unflushed.add(self)
        position = first_queue_offset * ENTRY_SIZE
        if not self._segments.segments and self._append_to_head(first_queue_offset, entries):
            return
        if not self._segments.segments:
            assert first_queue_offset >= self._min_queue_offset, (self.topic, first_queue_offset)
            self._segments.start_at(position)
            self._min_queue_offset = first_queue_offset
        assert position == self._segments.end_position, (
            self.topic, self.queue_id, first_queue_offset, self.max_queue_offset)
        view = memoryview(entries)
        while view:
            segment = self._segments.writable_segment()
            if segment.remaining_bytes() == 0:
                segment = self._segments.roll()
            chunk = min(len(view), segment.remaining_bytes())
            segment.write(view[:chunk])
            view = view[chunk:]

    def _append_to_head(self, first_queue_offset: int, entries: bytes) -> bool:
        """Keep the entries of a queue without a segment in memory (`defer_first_segment`);
        False when the queue does not defer or they would overflow its first segment (the
        head, if any, is then written to a segment created now, and the caller goes on)."""
        head = self._head
        if head is None:
            if not self._defer:
                return False
            assert first_queue_offset >= self._min_queue_offset, (self.topic, first_queue_offset)
            start, held = first_queue_offset, 0
        else:
            start, held = head[0], len(head[1])
            assert first_queue_offset * ENTRY_SIZE == start * ENTRY_SIZE + held, (
                self.topic, self.queue_id, first_queue_offset, self.max_queue_offset)
        size = self._segments.segment_size_bytes
        if start * ENTRY_SIZE % size + held + len(entries) <= size:
            if head is None:
                self._min_queue_offset = start
                self._head = (start, bytearray(entries))
            else:
                head[1].extend(entries)
            return True
        if head is not None:  # the first segment fills up before a checkpoint made it
            prepared = self.prepare_first_segment()
            assert prepared is not None and self.adopt_first_segment(prepared)
        return False

    def prepare_first_segment(self) -> PreparedSegment | None:
        """Without the store's lock: create the first segment's file (and directories) of a
        queue whose entries are only in memory, and copy the entries there so far (None when
        there is nothing to create). `adopt_first_segment` then makes it the queue's."""
        head = self._head
        if head is None or self._segments.segments:
            return None
        start, entries = head
        position = start * ENTRY_SIZE
        segment = self._segments.prepare(position - position % self._segments.segment_size_bytes)
        copied = bytes(entries)  # appends may go on meanwhile: the rest is copied under the lock
        segment.write_position = segment.flushed_position = position - segment.base_position
        segment.write(copied)
        return PreparedSegment(head, segment, len(copied))

    def adopt_first_segment(self, prepared: PreparedSegment) -> bool:
        """Under the store's lock: write the entries appended since `prepare_first_segment`
        and make its segment the queue's first. False, changing nothing, when the queue no
        longer has the head it was made for (created meanwhile, cut, reset or deleted: every
        one of those replaces the head): the caller then disposes of the file."""
        head = self._head
        if head is not prepared.head or self._segments.segments:
            return False
        segment = prepared.segment
        segment.write(bytes(head[1][prepared.copied:]))
        # Readers take no lock: the segment holds every entry before it joins the queue, and
        # the head goes only after (they look at the head first, then at the segments).
        self._segments.segments.append(segment)
        self._head = None
        return True

    def holds_segment_file(self, path: Path) -> bool:
        return any(segment.path == path for segment in self._segments.segments)

    def flush(self) -> None:
        self._segments.flush()

    @property
    def flushed(self) -> bool:
        """Every written entry is fsynced (none waits in memory for its segment)."""
        return self._head is None and (
            self._segments.flushed_position >= self._segments.end_position)

    def release_cold_pages(self, resident_window_bytes: int) -> int:
        """As CommitLog.release_cold_pages, for this queue's index segments."""
        return self._segments.release_cold_pages(resident_window_bytes)

    def first_queue_offset_at_or_after(self, log_position: int) -> int:
        """The first queue offset whose record starts at or after `log_position`
        (max_queue_offset when none does): a binary search, entries being in log order."""
        low, high = self.min_queue_offset, self.max_queue_offset
        while low < high:
            mid = (low + high) // 2
            entry = self.entry(mid)
            if entry is not None and entry[0] < log_position:
                low = mid + 1
            else:
                high = mid
        return low

    def truncate_from_log_position(self, log_position: int) -> None:
        """Remove every entry whose record starts at or after `log_position`."""
        self.truncate_to_queue_offset(self.first_queue_offset_at_or_after(log_position))

    def truncate_to_queue_offset(self, queue_offset: int) -> None:
        if queue_offset >= self.max_queue_offset:
            return
        if queue_offset <= self.min_queue_offset:
            self.delete_all(next_queue_offset=queue_offset)
            return
        head = self._head
        if head is not None and not self._segments.segments:
            start, entries = head
            self._head = (start, entries[:(queue_offset - start) * ENTRY_SIZE])
            return
        self._segments.truncate_to(queue_offset * ENTRY_SIZE)

    # -- reading ----------------------------------------------------------------------------
    def entry(self, queue_offset: int) -> tuple[int, int, int] | None:
        """(log_position, size_bytes, tags_code), or None outside [min, max)."""
        if not self.min_queue_offset <= queue_offset < self.max_queue_offset:
            return None
        raw = self._read(queue_offset * ENTRY_SIZE, ENTRY_SIZE)
        if raw is None:
            return None
        return CONSUME_QUEUE_ENTRY.unpack(raw)

    def read_entries(self, queue_offset: int, count: int) -> bytes:
        """Raw entries from `queue_offset`, at most `count`, never crossing a segment."""
        end = min(queue_offset + count, self.max_queue_offset)
        if queue_offset < self.min_queue_offset or end <= queue_offset:
            return b""
        head = self._head
        if head is not None and not self._segments.segments:
            return self._read_head(head, queue_offset * ENTRY_SIZE,
                                   (end - queue_offset) * ENTRY_SIZE) or b""
        segment = self._segments.find(queue_offset * ENTRY_SIZE)
        if segment is None:
            return b""
        segment_end = (segment.base_position + segment.size_bytes) // ENTRY_SIZE
        end = min(end, segment_end)
        raw = self._segments.read(queue_offset * ENTRY_SIZE, (end - queue_offset) * ENTRY_SIZE)
        return raw or b""

    def _read(self, position: int, size: int) -> bytes | None:
        head = self._head
        if head is not None and not self._segments.segments:
            return self._read_head(head, position, size)
        return self._segments.read(position, size)

    @staticmethod
    def _read_head(head: tuple[int, bytearray], position: int, size: int) -> bytes | None:
        offset = position - head[0] * ENTRY_SIZE
        if offset < 0 or offset + size > len(head[1]):
            return None
        return bytes(head[1][offset:offset + size])

    # -- retention --------------------------------------------------------------------------
    def delete_segments_before_log_position(self, log_position: int) -> int:
        """Drop whole index segments whose every entry points below `log_position`."""
        deleted = 0
        segments = self._segments.segments
        while len(segments) > 1:
            first = segments[0]
            last_index = (first.base_position + first.size_bytes) // ENTRY_SIZE - 1
            entry = self.entry(last_index)
            if entry is None or entry[0] >= log_position:
                break
            self._segments.delete_first()
            deleted += 1
        return deleted

    def delete_all(self, *, next_queue_offset: int = 0) -> None:
        for segment in list(self._segments.segments):
            segment.close()
            self._segments.fs.remove(segment.path)
        self._segments.segments = []
        self._head = None
        self._min_queue_offset = next_queue_offset

    def close(self) -> None:
        self._head = None
        self._segments.close()

