"""CommitLog: every message of every queue, appended in one byte sequence of fixed-size segments.

The CommitLog knows records (record_format) and segments (segment); it does not know queues
beyond the queue offsets it writes into records. Positions are `log_position`s: byte positions in
the whole log, stable across segments. See record_format for the record layout; a segment ends
with a BLANK record when the next record does not fit, so records never span segments.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import struct
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import numpy as np

from storage_engine.errors import CorruptRecordError, StoreFormatError
from storage_engine.fs import OS_FILE_SYSTEM, FileSystem
from storage_engine.names import topic_name_error
from storage_engine.record_format import (
    BLANK_MAGIC_CODE,
    BLANK_RECORD_SIZE_BYTES,
    HEADER,
    HEADER_SIZE_BYTES,
    MESSAGE_MAGIC_CODE,
    RECORD_SIZE_MIN_BYTES,
    encode_batch,
    encode_blank,
    other_format_at,
    scan_record,
    tags_code_of,
)
from storage_engine.record_scan import equal_size_run, valid_run_end
from storage_engine.segment import Segment, SegmentQueue, discard_tail

__all__ = ["CommitLog", "RecordRef", "RecoveryScan"]

logger = logging.getLogger(__name__)

_PREFIX = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE


@dataclasses.dataclass(frozen=True, slots=True)
class RecoveryScan:
    """What a recovery scan found: the valid end, and what it cut after it."""

    scanned_from_log_position: int
    valid_log_position_end: int
    cut_bytes: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class RecordRef:
    """The fields the dispatcher needs from a record (parsed without a full decode)."""

    log_position: int
    size_bytes: int
    topic: str
    queue_id: int
    queue_offset: int
    store_timestamp_ms: int
    tags_code: int


class CommitLog:
    """Segmented append-only log of records. Writers are serialized by the store's lock."""

    def __init__(self, directory: Path, segment_size_bytes: int,
                 fs: FileSystem = OS_FILE_SYSTEM) -> None:
        self.segment_size_bytes = segment_size_bytes
        self._segments = SegmentQueue(directory, segment_size_bytes, fs)

    @property
    def min_log_position(self) -> int:
        return self._segments.min_position

    @property
    def log_position_end(self) -> int:
        return self._segments.end_position

    @property
    def flushed_log_position(self) -> int:
        return self._segments.flushed_position

    @property
    def segments(self) -> Sequence[Segment]:
        return self._segments.segments

    # -- recovery ---------------------------------------------------------------------------
    def recover(self, scan_from_log_position: int) -> RecoveryScan:
        """Find the last valid record at or after `scan_from_log_position` (the checkpoint's),
        and cut everything after it (crash recovery, docs/design.md §4).

        Every record of the checkpoint's segment is checked in full (lengths, topic, both
        checksums), from the segment's start, not only what lies past the checkpoint. The
        bytes below the checkpoint were fsynced, so a crash cannot tear them, but a disk can
        still return them damaged (a flipped bit, a misdirected write: the chaos campaign's
        `corrupt` fault does this to a stopped slave's tail). Trusting them was tried on
        2026-12-02 and the campaign caught it the same day: the damaged record stayed, and the
        broker failed at start-up decoding it. Checked, a damaged record is cut like a torn
        one, and a slave copies the rest again from its master. Segments before the
        checkpoint's are not checked at open (they were checked while they were the last).
        The chain of TOTALSIZE and magic codes from the segment's start must also land exactly
        on the checkpoint position (`_chain_reaches`): `scanned_from_log_position` is then the
        checkpoint's position (the index below it is trusted), else the segment's start (a
        checkpoint that is not a record boundary, or bytes below it that are no longer
        records: the index is rebuilt from there as well).

        A record of a known other record format (record_format.other_format_at: a store
        written by a release with another format) met by the scan raises StoreFormatError
        before anything is cut, wherever it lies in the segment. Every other invalid record
        is cut as a torn tail (record_format's docstring says why the two differ)."""
        segments = self._segments.segments
        if not segments:
            return RecoveryScan(0, 0, 0, "empty log")
        last = segments[-1]
        start = min(max(scan_from_log_position, segments[0].base_position),
                    last.base_position + last.size_bytes)
        index = min((start - segments[0].base_position) // self.segment_size_bytes,
                    len(segments) - 1)
        for earlier in segments[:index]:
            earlier.write_position = earlier.flushed_position = earlier.size_bytes
        relative = start - segments[index].base_position
        if relative and not _chain_reaches(segments[index].map, relative):
            logger.warning("checkpoint log_position %d is not the end of a chain of records "
                           "from its segment's start; rebuilding its index from there", start)
            relative = 0
        scan_from = segments[index].base_position + relative
        relative = 0  # every record of the segment is checked (docstring)
        end, reason = scan_from, "end of data"
        while index < len(segments):
            segment = segments[index]
            relative, reason = _scan_segment(segment, relative)
            end = segment.base_position + relative
            if relative < segment.size_bytes:
                break
            segment.write_position = segment.flushed_position = segment.size_bytes
            index += 1
            relative = 0
        cut_bytes = self.discard_from(end)
        return RecoveryScan(scan_from, end, cut_bytes, reason)

    def discard_from(self, end: int) -> int:
        """Open-time cut (no reader yet): zero everything from `end` in its segment, however
        far stale bytes reach, and delete every later segment. Returns the bytes cut."""
        cut_bytes = 0
        segments = self._segments.segments
        while segments and segments[-1].base_position > end:
            last = segments[-1]
            cut_bytes += max(_written_extent(last), 0)
            self._segments.truncate_to(last.base_position)
        segment = self._segments.find(end)
        if segment is not None:
            relative = end - segment.base_position
            cut_bytes += max(_written_extent(segment) - relative, 0)
            discard_tail(segment, relative)
        return cut_bytes

    # -- writing ----------------------------------------------------------------------------
    def append_batch(
        self,
        *,
        topic_meta: bytes,
        bodies: Sequence[bytes],
        properties: Sequence[bytes] | None,
        queue_ids: Sequence[int],
        queue_offsets: Sequence[int],
        store_timestamp_ms: int,
        store_host: bytes,
        born_timestamp_ms: int,
        born_host: bytes,
        flag: int,
    ) -> tuple[list[int], list[int]]:
        """Encode and write all messages (one put), rolling segments as needed.

        A put that does not fit what is left of the segment goes whole into the next one (as
        RocketMQ's END_OF_FILE does with a batch), so a replica that received a segment's end
        never holds the first part of a put whose rest is in the next segment. Only a put larger
        than a whole segment spans segments (from where the log ends, as before: moving it
        to a new segment would leave most of one empty for each such put).

        Returns (log_positions, sizes_bytes), one entry per message.
        """
        positions: list[int] = []
        sizes: list[int] = []
        encode = functools.partial(
            encode_batch, topic_meta=topic_meta, bodies=bodies, properties=properties,
            queue_ids=queue_ids, queue_offsets=queue_offsets,
            store_timestamp_ms=store_timestamp_ms, store_host=store_host,
            born_timestamp_ms=born_timestamp_ms, born_host=born_host, flag=flag)
        index = 0
        while index < len(bodies):
            segment = self._segments.writable_segment()
            if segment.remaining_bytes() == 0:
                # full to its last byte: copied from a master whose blank record filled it
                # (append_raw), so there is no room for a blank of ours; the next segment
                segment = self._segments.roll()
            parts: list[bytes] = []
            stop = encode(start_index=index, log_position=segment.end_position,
                          space_bytes=segment.remaining_bytes(), out_parts=parts,
                          out_positions=positions, out_sizes=sizes)
            if stop < len(bodies) and index == 0 and segment.write_position > 0:
                whole = self._encode_in_next_segment(segment, encode, len(bodies))
                if whole is not None:  # it fits an empty segment: it starts the next one
                    self._seal_and_roll(segment)
                    data, whole_positions, whole_sizes = whole
                    self._segments.writable_segment().write(data)
                    return whole_positions, whole_sizes
            if parts:
                segment.write(b"".join(parts))
            if stop < len(bodies):
                self._seal_and_roll(segment)
            index = stop
        return positions, sizes

    def _encode_in_next_segment(self, segment: Segment, encode: Callable[..., int], count: int
                                ) -> tuple[bytes, list[int], list[int]] | None:
        """The whole put encoded at the start of the segment after `segment` (data, log
        positions, sizes), or None when it would not fit an empty segment either."""
        parts: list[bytes] = []
        positions: list[int] = []
        sizes: list[int] = []
        if encode(start_index=0, log_position=segment.base_position + segment.size_bytes,
                  space_bytes=self.segment_size_bytes, out_parts=parts,
                  out_positions=positions, out_sizes=sizes) < count:
            return None
        return b"".join(parts), positions, sizes

    def _seal_and_roll(self, segment: Segment) -> None:
        remaining = segment.remaining_bytes()
        assert remaining >= BLANK_RECORD_SIZE_BYTES, (segment.path, remaining)
        segment.write(encode_blank(remaining))
        segment.write_position = segment.size_bytes  # the blank covers the rest (zeros)
        self._segments.roll()

    def append_raw(self, log_position: int, data: bytes | memoryview) -> None:
        """Append bytes copied from another replica's log at the same positions (physical
        replication). `data` must start at our end and follow the segment layout exactly."""
        assert log_position == self.log_position_end, (log_position, self.log_position_end)
        view = memoryview(data)
        while view:
            segment = self._segments.writable_segment()
            if segment.remaining_bytes() == 0:
                segment = self._segments.roll()
            chunk = min(len(view), segment.remaining_bytes())
            segment.write(view[:chunk])
            view = view[chunk:]

    def start_at(self, log_position: int) -> None:
        """An empty log begins at `log_position` (a slave that starts at the master's minimum)."""
        assert not self._segments.segments and log_position % self.segment_size_bytes == 0
        self._segments.start_at(log_position)

    def flush(self) -> int:
        return self._segments.flush()

    def truncate_to(self, log_position: int) -> None:
        self._segments.truncate_to(log_position)

    def release_cold_pages(self, resident_window_bytes: int) -> int:
        """Release the mapped pages that are flushed and more than `resident_window_bytes`
        behind the write end (segment.py: resident pages); returns the bytes released."""
        return self._segments.release_cold_pages(resident_window_bytes)

    def delete_all(self) -> None:
        """Delete every segment, newest first (a crash leaves a prefix of the log)."""
        self._segments.delete_all()

    def delete_first_segment(self) -> Segment:
        return self._segments.delete_first()

    # -- reading ----------------------------------------------------------------------------
    def read(self, log_position: int, size_bytes: int) -> bytes | None:
        return self._segments.read(log_position, size_bytes)

    def read_raw(self, log_position: int, size_bytes_max: int) -> bytes:
        """Bytes from `log_position` up to the written end, within one segment."""
        segment = self._segments.find(log_position)
        if segment is None:
            return b""
        relative = log_position - segment.base_position
        size = min(size_bytes_max, segment.write_position - relative)
        if size <= 0:
            return b""
        return segment.read(relative, size)

    def segment_for(self, log_position: int) -> Segment:
        segment = self._segments.find(log_position)
        assert segment is not None, log_position
        return segment

    def iter_records(self, from_log_position: int, to_log_position: int) -> Iterator[RecordRef]:
        """Parse the records in [from, to): both must be record boundaries of verified data."""
        position = from_log_position
        while position < to_log_position:
            segment = self._segments.find(position)
            assert segment is not None, position
            relative = position - segment.base_position
            data = segment.map
            total, magic = _PREFIX.unpack_from(data, relative)
            if magic != MESSAGE_MAGIC_CODE:  # BLANK: skip to the next segment
                position = segment.base_position + segment.size_bytes
                continue
            yield _record_ref(data, relative, position, total)
            position += total


def _record_ref(data: object, relative: int, position: int, total: int) -> RecordRef:
    """The dispatcher's fields of a record; its lengths and topic are checked (a replica's
    records come from a master: CorruptRecordError rather than an IndexError or a bad path)."""
    if total < RECORD_SIZE_MIN_BYTES:
        raise CorruptRecordError(f"TOTALSIZE {total}", log_position=position)
    fields = HEADER.unpack_from(data, relative)  # type: ignore[arg-type]
    body_size = fields[14]
    if not 0 <= body_size <= total - RECORD_SIZE_MIN_BYTES:
        raise CorruptRecordError(f"BODYLENGTH {body_size} in TOTALSIZE {total}",
                                 log_position=position)
    topic_at = relative + HEADER_SIZE_BYTES + body_size
    raw = bytes(data[topic_at:relative + total])  # type: ignore[index]
    topic_size = raw[0]
    topic = raw[1:1 + topic_size].decode("latin-1")
    if 3 + topic_size > len(raw) or topic_name_error(topic) is not None:
        raise CorruptRecordError(f"topic {topic[:40]!r} of {topic_size} bytes",
                                 log_position=position)
    tags_code = tags_code_of(raw[3 + topic_size:])
    return RecordRef(position, total, topic, fields[3], fields[5], fields[10], tags_code)


def _scan_segment(segment: Segment, start: int = 0) -> tuple[int, str]:
    """(relative end of the valid records from `start`, a record boundary, and why the scan
    stopped). Every record is checked in full: runs of valid records in bulk (record_scan's
    valid_run_end), and the record each run stops at by scan_record, which decides what it
    is. A BLANK ends the segment. StoreFormatError on a record of a known other format
    (nothing cut yet)."""
    data = segment.map
    size = segment.size_bytes
    position = start
    while position < size:
        position = valid_run_end(data, position, size)
        if position >= size:
            break
        total = scan_record(data, position, size)
        if total == 0:
            return size, "segment sealed"
        if total < 0:
            if data[position:position + 8] == bytes(8):
                return position, "zero-filled tail"
            log_position = segment.base_position + position
            other = other_format_at(data, position, size, log_position)
            if other is not None:
                raise StoreFormatError(*other, log_position)
            return position, f"invalid record at segment offset {position}"
        position += total
    return position, "segment full"


def _chain_reaches(data: object, target: int) -> bool:
    """Whether the records from data[0] chain exactly to `target`: each TOTALSIZE at least a
    record's smallest, each magic code a message's, the last one ending at `target` (or a
    BLANK reaching it: `target` is the end of a sealed segment).

    Only sizes and magic codes are read (no checksum): this checks that a checkpoint position
    is a record boundary of a well-formed run, not the records' contents. A run of records of
    one size (a batch of equal bodies) is checked with numpy (record_scan.equal_size_run);
    other records cost one unpack each."""
    raw = np.frombuffer(data, dtype=np.uint8)  # type: ignore[call-overload]
    unpack = _PREFIX.unpack_from
    position = 0
    while position < target:
        if target - position < BLANK_RECORD_SIZE_BYTES:
            return False
        total, magic = unpack(data, position)  # type: ignore[arg-type]
        if magic == BLANK_MAGIC_CODE:  # the segment's end marker: a sealed, full segment
            return bool(position + total == target)
        if magic != MESSAGE_MAGIC_CODE or total < RECORD_SIZE_MIN_BYTES:
            return False
        position += total * equal_size_run(data, raw, position, total,
                                           (target - position) // total)
    return position == target


EXTENT_SCAN_CHUNK_BYTES = 16 << 20


def _written_extent(segment: Segment) -> int:
    """How far non-zero bytes reach in the segment (for reporting what recovery cut).

    Runs at every open on the last segment (1 GiB by default), so it must not read the
    file's unwritten tail byte by byte: file holes are skipped (FileHandle.data_end:
    SEEK_DATA/SEEK_HOLE), and what remains is scanned from the end in numpy chunks."""
    data_end = segment.file.data_end(segment.size_bytes)
    view = np.frombuffer(segment.map, dtype=np.uint8)
    end = data_end
    while end > 0:
        start = max(0, end - EXTENT_SCAN_CHUNK_BYTES)
        chunk = view[start:end]
        if chunk.any():
            # argmax of the reversed mask stops at the last non-zero byte; flatnonzero would
            # build an index of every non-zero byte (128 MB for a written 16 MiB chunk).
            return end - int(np.argmax(chunk[::-1] != 0))
        end = start
    return 0
