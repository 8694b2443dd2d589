"""Fixed-size segment files and the ordered queue of them (RocketMQ's MappedFile/MappedFileQueue).

Both the CommitLog and every ConsumeQueue are a `SegmentQueue`: a directory of files of
`segment_size_bytes` each, named by the 20-digit position of their first byte, contiguous.

Why pwrite + mmap: writes go through `os.pwrite` into a file preallocated with ftruncate (the
measured fast path on this machine, reference/machine-and-peers.md); reads slice a read-only mmap
of the whole segment (no syscall per message, and the page cache is shared with the writes),
made on the first read, so that thousands of written but unread ConsumeQueues hold no mapping.
All of it goes through the store's FileSystem (fs.py), so a simulator can put a simulated disk
underneath; OsFileSystem is exactly the pwrite + mmap above.
Nothing here understands records: the positions a caller passes are trusted, and invariants are
asserted.

Resident pages (`SegmentQueue.release_below`): the pages of a mapping that a read touched count
in the process's VmRSS until the mapping goes, so a broker whose readers follow the log would
grow by every byte written. The flush thread therefore drops, once per checkpoint, the page-table
entries of every mapped range below a cold line (`cold_line`: flushed, and more than the
resident window behind the write end) with madvise(MADV_DONTNEED). Why this and not unmapping
cold segments: the mapping stays valid, so a reader holding a slice of it (or racing the
release) never sees a closed map; a later read of a released page faults it back from the page
cache (a minor fault, no disk read while the kernel keeps the page). Why it cannot lose a byte:
on a MAP_SHARED file mapping MADV_DONTNEED drops only this process's view of the page cache, not
the pages (man 2 madvise: later accesses see "the up-to-date contents of the underlying mapped
file"), and our mappings are PROT_READ, so no page is dirty through them: every byte reached the
file by pwrite. Only flushed ranges are released all the same, so the rule needs no kernel
subtlety to hold.

Truncation never shrinks a mapped file (touching a mapping past EOF is SIGBUS); it overwrites
the cut range with zeros and deletes later segments, so a reader racing it sees zeros, which every
scanner treats as "no data".
"""

from __future__ import annotations

import logging
import mmap
import threading
from pathlib import Path

from storage_engine.errors import StorageError
from storage_engine.files import (
    PendingDirectorySyncs,
    fsync_directory,
    make_dirs_durable,
    sync_file,
)
from storage_engine.fs import OS_FILE_SYSTEM, Buffer, FileSystem

__all__ = ["Segment", "SegmentQueue", "cold_line", "discard_tail", "segment_file_name"]

logger = logging.getLogger(__name__)

ZERO_CHUNK_BYTES = 1 << 20
PAGE_SIZE_BYTES = mmap.PAGESIZE
# Guards each segment's first mapping against its close (Segment.map): held only then.
_MAPPING = threading.Lock()
_ZEROS = bytes(ZERO_CHUNK_BYTES)


def segment_file_name(base_position: int) -> str:
    return f"{base_position:020d}"


def cold_line(*, flushed_position: int, end_position: int, resident_window_bytes: int) -> int:
    """Where a queue's cold range ends: below it a byte is flushed and more than
    `resident_window_bytes` behind the write end, so its mapped pages may be released."""
    # flushed may pass the end for a moment (a truncation racing the flush thread): min() holds
    assert resident_window_bytes >= 0, resident_window_bytes
    return max(0, min(flushed_position, end_position - resident_window_bytes))


class Segment:
    """One preallocated file. Positions passed in and out are relative to the segment start."""

    __slots__ = (
        "_closed",
        "_map",
        "base_position",
        "file",
        "flushed_position",
        "path",
        "size_bytes",
        "write_position",
    )

    def __init__(self, path: Path, base_position: int, size_bytes: int,
                 fs: FileSystem = OS_FILE_SYSTEM) -> None:
        self.path = path
        self.base_position = base_position
        self.size_bytes = size_bytes
        try:
            self.file = fs.open(path, create=True)
            if self.file.size_bytes() != size_bytes:
                self.file.truncate(size_bytes)
        except OSError as err:
            raise StorageError(f"cannot open segment {path}: {err}") from err
        self._map: Buffer | None = None  # mapped on the first read (`map`)
        self._closed = False
        self.write_position = 0
        self.flushed_position = 0

    @property
    def map(self) -> Buffer:
        """A read-only mapping of the whole segment, made on the first read: a segment only
        written (a ConsumeQueue nobody reads yet, of thousands) costs no mmap call and no
        mapping. ValueError once closed, as a closed mapping's slice raises."""
        view = self._map
        if view is None:
            with _MAPPING:  # never maps a closed file (its descriptor may name another one)
                if self._closed:
                    raise ValueError(f"segment {self.path} is closed")
                view = self._map
                if view is None:
                    try:
                        view = self._map = self.file.map_readonly(self.size_bytes)
                    except OSError as err:
                        raise StorageError(f"cannot map segment {self.path}: {err}") from err
        return view

    @property
    def end_position(self) -> int:
        """Absolute position just past the last written byte."""
        return self.base_position + self.write_position

    def remaining_bytes(self) -> int:
        return self.size_bytes - self.write_position

    def write(self, data: bytes | memoryview) -> None:
        """Append at write_position (the caller checked it fits)."""
        size = len(data)
        assert self.write_position + size <= self.size_bytes, (self.path, size)
        written = self.file.write_at(data, self.write_position)
        if written != size:
            raise StorageError(f"short write to {self.path}: {written} of {size} bytes")
        self.write_position += size

    def read(self, position: int, size: int) -> bytes:
        assert position >= 0 and position + size <= self.size_bytes, (self.path, position, size)
        return bytes(self.map[position:position + size])  # mmap slices are bytes already

    def flush(self) -> int:
        """fdatasync if anything is unflushed; returns the flushed relative position."""
        target = self.write_position
        if target > self.flushed_position:
            sync_file(self.file, self.path, data_only=True)
            self.flushed_position = max(self.flushed_position, target)
        return self.flushed_position

    def zero_from(self, position: int) -> None:
        """Overwrite [position, max(write_position, position)) with zeros and fsync. The end
        moves down first: reads take no lock, and a reader that takes its bounds after this
        never reaches the zeros (a ConsumeQueue entry read as zeros names a 0-byte record at
        log position 0, which passes the confirm check: chaos finding 8)."""
        end = self.write_position
        self.write_position = position
        cursor = position
        while cursor < end:
            chunk = min(ZERO_CHUNK_BYTES, end - cursor)
            self.file.write_at(_ZEROS[:chunk], cursor)
            cursor += chunk
        sync_file(self.file, self.path, data_only=True)
        self.flushed_position = min(self.flushed_position, position)

    def release_pages(self, end: int) -> int:
        """Release the mapped pages of [0, `end`) (relative, rounded down to whole pages) that
        this process holds; the data stays in the file and the page cache. Only flushed bytes
        (the module docstring says why that is not even needed). Returns the bytes released
        (0 when the segment is not mapped)."""
        end = min(end, self.flushed_position)
        end -= end % PAGE_SIZE_BYTES
        if end <= 0:
            return 0
        with _MAPPING:  # never a closed mapping (madvise on it raises)
            view = self._map
            if view is None or self._closed:
                return 0
            self.file.release_pages(view, end)
        return end

    def close(self) -> None:
        with _MAPPING:
            self._closed = True
            view, self._map = self._map, None
        if view is not None:
            self.file.unmap(view)  # a reader may still hold a view: the GC unmaps it later
        self.file.close()


class SegmentQueue:
    """Contiguous segments in one directory; absolute positions in and out.

    `directory_syncs`: None fsyncs the directory whenever it or a segment file is created (the
    CommitLog's segments); else those fsyncs are left to `directory_syncs.sync_all` (the
    ConsumeQueues': the checkpoint makes them durable before it vouches for their entries).
    A deletion's directory fsync is never deferred."""

    def __init__(self, directory: Path, segment_size_bytes: int,
                 fs: FileSystem = OS_FILE_SYSTEM,
                 directory_syncs: PendingDirectorySyncs | None = None) -> None:
        self.directory = directory
        self.segment_size_bytes = segment_size_bytes
        self.segments: list[Segment] = []
        self.fs = fs
        self._directory_syncs = directory_syncs
        if directory_syncs is None:
            make_dirs_durable(directory, fs)
            self._load()
        elif fs.is_dir(directory):
            self._load()
        # else a new queue: its directory is made with its first segment (`prepare`), so that
        # opening a queue in memory touches no file system metadata

    def _load(self) -> None:
        names = sorted(name for name in self.fs.list_dir(self.directory) if name.isdigit())
        expected = None
        for name in names:
            base = int(name)
            if base % self.segment_size_bytes != 0 or (expected is not None and base != expected):
                # A gap or misaligned file: everything from here on cannot be trusted.
                logger.warning("removing non-contiguous segment %s/%s", self.directory, name)
                self.fs.remove(self.directory / name)
                continue
            self.segments.append(Segment(self.directory / name, base, self.segment_size_bytes,
                                         self.fs))
            expected = base + self.segment_size_bytes

    @property
    def min_position(self) -> int:
        return self.segments[0].base_position if self.segments else 0

    @property
    def end_position(self) -> int:
        return self.segments[-1].end_position if self.segments else 0

    @property
    def flushed_position(self) -> int:
        for segment in self.segments:
            if segment.flushed_position < segment.write_position:
                return segment.base_position + segment.flushed_position
        return self.end_position

    def start_at(self, position: int) -> None:
        """An empty queue begins at `position` (a slave far behind, or after retention)."""
        assert not self.segments
        base = position - position % self.segment_size_bytes
        segment = self._create(base)
        segment.write_position = segment.flushed_position = position - base

    def _create(self, base: int) -> Segment:
        segment = self.prepare(base)
        self.segments.append(segment)
        return segment

    def prepare(self, base: int) -> Segment:
        """Create the segment file at `base` (and the directory, if missing) without making it
        part of the queue: `_create` appends it at once; a ConsumeQueue's first segment is
        made by a checkpoint outside the store's lock and adopted under it
        (ConsumeQueue.adopt_first_segment)."""
        syncs = self._directory_syncs
        if syncs is not None:
            syncs.make_dirs(self.directory)
        segment = Segment(self.directory / segment_file_name(base), base, self.segment_size_bytes,
                          self.fs)
        if syncs is None:
            fsync_directory(self.directory, self.fs)
        else:
            syncs.add(self.directory)
        return segment

    def writable_segment(self) -> Segment:
        """The last segment, created when the queue is empty."""
        if not self.segments:
            return self._create(0)
        return self.segments[-1]

    def roll(self) -> Segment:
        """Start the next segment; the current one must be full."""
        last = self.segments[-1]
        assert last.write_position == last.size_bytes, (last.path, last.write_position)
        return self._create(last.base_position + self.segment_size_bytes)

    def find(self, position: int) -> Segment | None:
        segments = self.segments
        if not segments or position < segments[0].base_position:
            return None
        index = (position - segments[0].base_position) // self.segment_size_bytes
        if index >= len(segments):
            return None
        segment = segments[index]
        assert segment.base_position <= position < segment.base_position + segment.size_bytes
        return segment

    def read(self, position: int, size: int) -> bytes | None:
        """Bytes [position, position+size) if they are inside one segment, else None."""
        segment = self.find(position)
        if segment is None:
            return None
        relative = position - segment.base_position
        if relative + size > segment.size_bytes:
            return None
        try:
            return segment.read(relative, size)
        except ValueError:  # unmapped by a concurrent retention pass
            return None

    def flush(self) -> int:
        for segment in self.segments:
            if segment.write_position > segment.flushed_position:
                segment.flush()
        return self.flushed_position

    def release_cold_pages(self, resident_window_bytes: int) -> int:
        """Release the mapped pages that are flushed and more than `resident_window_bytes`
        behind the write end (module docstring); returns the bytes released."""
        return self.release_below(cold_line(
            flushed_position=self.flushed_position, end_position=self.end_position,
            resident_window_bytes=resident_window_bytes))

    def release_below(self, position: int) -> int:
        """Release the mapped pages of every segment below absolute `position` (flushed bytes
        only: Segment.release_pages); returns the bytes released. Every pass walks the whole
        cold range, so pages a catching-up reader faulted back in go again."""
        released = 0
        for segment in list(self.segments):  # a copy: retention may drop one meanwhile
            if segment.base_position >= position:
                break
            released += segment.release_pages(position - segment.base_position)
        return released

    def truncate_to(self, position: int) -> None:
        """Cut everything at and after `position` (crash-safety is the caller's intent record)."""
        for segment in reversed(list(self.segments)):
            if segment.base_position >= position and segment is not self.segments[0]:
                self._delete_last()
            elif segment.base_position <= position:
                relative = min(position - segment.base_position, segment.size_bytes)
                if relative < segment.write_position:
                    segment.zero_from(relative)
                break
        if self.segments and position < self.segments[0].base_position:
            # Cut below the first segment: the queue becomes empty at `position`.
            self._delete_last()
            self.start_at(position)

    def delete_all(self) -> None:
        """Delete every segment, newest first (a crash leaves a contiguous prefix)."""
        while self.segments:
            self._delete_last()

    def _delete_last(self) -> None:
        segment = self.segments.pop()
        segment.close()
        self.fs.remove(segment.path)
        fsync_directory(self.directory, self.fs)

    def delete_first(self) -> Segment:
        """Drop the oldest segment (retention). Never the last one: it holds the write end."""
        assert len(self.segments) > 1
        segment = self.segments.pop(0)
        segment.close()
        self.fs.remove(segment.path)
        return segment

    def close(self) -> None:
        for segment in self.segments:
            segment.close()
        self.segments = []


def discard_tail(segment: Segment, relative: int) -> None:
    """Recovery only (no reader can hold the map yet): zero everything from `relative` to the
    end of the file, however far stale bytes reach, by shrinking and re-growing the file."""
    segment.file.truncate(relative)
    segment.file.truncate(segment.size_bytes)
    sync_file(segment.file, segment.path, data_only=True)
    segment.write_position = segment.flushed_position = relative
