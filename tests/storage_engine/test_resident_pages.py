"""Mapped segment pages leave the process's resident memory once flushed and cold (segment.py,
"resident pages"), and every byte still reads back.

Method: real files and real mmaps; the resident size of a segment's mapping is read from the
kernel (/proc/self/smaps, the mapping of that file), before and after a release. The cold line
is a pure function, checked as a table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from storage_engine.segment import PAGE_SIZE_BYTES, Segment, SegmentQueue, cold_line

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps")

MiB = 1 << 20


def mapped_rss_bytes(pid: int | str, under: Path) -> int:
    """Resident bytes of `pid`'s mappings of files below `under` (smaps Rss lines)."""
    total, inside = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if len(head) >= 5 and "-" in head[0] and not head[0].endswith(":"):
            inside = len(head) == 6 and head[5].startswith(str(under))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total


@pytest.mark.parametrize(("flushed", "end", "window", "line"), [
    (0, 0, 0, 0),
    (100, 100, 0, 100),          # no window: everything flushed is cold
    (100, 100, 40, 60),          # the window behind the end stays
    (50, 100, 10, 50),           # never past the flushed position
    (100, 100, 1000, 0),         # a window larger than the log: nothing is cold
    (120, 100, 10, 90),          # flushed past the end for a moment (a truncation racing)
])
def test_cold_line_is_flushed_and_behind_the_window(flushed: int, end: int, window: int,
                                                     line: int) -> None:
    assert cold_line(flushed_position=flushed, end_position=end,
                     resident_window_bytes=window) == line


def _written_queue(directory: Path, size_bytes: int) -> tuple[SegmentQueue, bytes]:
    queue = SegmentQueue(directory, 4 * MiB)
    data = bytes(range(256)) * (size_bytes // 256)
    view = memoryview(data)
    while view:
        segment = queue.writable_segment()
        if segment.remaining_bytes() == 0:
            segment = queue.roll()
        chunk = min(len(view), segment.remaining_bytes())
        segment.write(view[:chunk])
        view = view[chunk:]
    return queue, data


def _read_all(queue: SegmentQueue, size_bytes: int) -> bytes:
    parts = []
    for position in range(0, size_bytes, MiB):
        part = queue.read(position, MiB)
        assert part is not None
        parts.append(part)
    return b"".join(parts)


def test_flushed_cold_pages_are_released_and_read_back(tmp_path: Path) -> None:
    queue, data = _written_queue(tmp_path / "log", 12 * MiB)  # three segments of 4 MiB
    assert _read_all(queue, len(data)) == data
    assert mapped_rss_bytes("self", tmp_path) >= 11 * MiB  # every page read is resident
    queue.flush()
    released = queue.release_cold_pages(2 * MiB)
    assert released == 10 * MiB
    assert mapped_rss_bytes("self", tmp_path) <= 2 * MiB + 4 * PAGE_SIZE_BYTES
    assert _read_all(queue, len(data)) == data  # faulted back from the page cache
    queue.close()


def test_nothing_unflushed_is_released(tmp_path: Path) -> None:
    queue, data = _written_queue(tmp_path / "log", 8 * MiB)
    assert _read_all(queue, len(data)) == data
    before = mapped_rss_bytes("self", tmp_path)
    assert queue.release_cold_pages(0) == 0  # written, read, never fsynced
    assert mapped_rss_bytes("self", tmp_path) == before
    queue.segments[0].flush()  # the first segment only
    assert queue.release_cold_pages(0) == 4 * MiB
    assert mapped_rss_bytes("self", tmp_path) <= before - 4 * MiB + PAGE_SIZE_BYTES
    queue.close()


def test_release_skips_unmapped_and_closed_segments_and_rounds_to_pages(tmp_path: Path) -> None:
    segment = Segment(tmp_path / "00000000000000000000", 0, MiB)
    segment.write(b"x" * (PAGE_SIZE_BYTES * 3 + 100))
    segment.flush()
    assert segment.release_pages(MiB) == 0  # never read: no mapping to release
    assert segment.read(0, 10) == b"x" * 10
    assert segment.release_pages(MiB) == PAGE_SIZE_BYTES * 3  # the partial page stays
    assert segment.read(PAGE_SIZE_BYTES * 3, 100) == b"x" * 100
    segment.close()
    assert segment.release_pages(MiB) == 0
