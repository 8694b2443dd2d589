"""Mapped segment pages leave the process's resident memory once flushed and cold (segment.py,
"resident pages"), and every byte still reads back.

Method: real files and real mmaps; the resident size of a segment's mapping is read from the
kernel (/proc/self/smaps, the mapping of that file), before and after a release. The cold line
is a pure function, checked as a table."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from storage_engine import GetStatus, MessageBatch, MessageStore, PutStatus, StoreConfig
from storage_engine.segment import PAGE_SIZE_BYTES, Segment, SegmentQueue, cold_line
from tests.bench.scale_probe import mapped_rss_bytes

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/smaps")

MiB = 1 << 20


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


def test_a_store_checkpoint_releases_what_readers_mapped_and_every_message_reads_back(
        tmp_path: Path) -> None:
    """The flush thread's checkpoint is where the release happens: a store written well past
    its windows, every message read (which maps it), keeps only the windows resident after a
    checkpoint; before one, everything read is resident (so the check below can fail)."""
    config = StoreConfig(commit_log_segment_size_bytes=4 * MiB,
                         message_size_max_bytes=64 * 1024,
                         consume_queue_segment_entries=64 * 1024,
                         commit_log_resident_window_bytes=MiB,
                         consume_queue_resident_window_bytes=64 * 1024)
    bodies = [b"%06d" % n + bytes(1000) for n in range(12_000)]  # ~12.5 MiB of CommitLog
    with MessageStore(tmp_path / "store", config, flush_driven=True) as store:
        for start in range(0, len(bodies), 500):
            batch = bodies[start:start + 500]
            result = store.put_messages(MessageBatch(topic="T", bodies=batch,
                                                     queue_ids=[start // 500 % 2] * len(batch)))
            assert result.status is PutStatus.PUT_OK

        def read_all() -> list[bytes]:
            found = []
            for queue_id in (0, 1):
                queue_offset = 0
                while True:
                    got = store.get_messages("T", queue_id, queue_offset, max_count=1000,
                                             max_bytes=4 * MiB)
                    if got.status is not GetStatus.FOUND:
                        break
                    found += [message.body for message in got.messages()]
                    queue_offset = got.next_queue_offset
            return found

        assert sorted(read_all()) == bodies
        assert mapped_rss_bytes("self", tmp_path) >= 12 * MiB
        assert store.flush_step() and store.checkpoint_step()
        # the CommitLog's window and each queue's window (plus a partial page each)
        assert mapped_rss_bytes("self", tmp_path) <= MiB + 2 * 64 * 1024 + 6 * PAGE_SIZE_BYTES
        assert sorted(read_all()) == bodies
