"""CommitLog recovery's report of what it cut (storage_engine/commit_log.py `_written_extent`).

Goal: the search for the last non-zero byte of the last segment, which runs at every open,
finds it in any chunk layout without indexing every byte. Method: real segments in tmp_path,
hypothesis over writes and chunk sizes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from storage_engine.segment import Segment, segment_file_name


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 70_000), st.binary(min_size=1, max_size=300)),
                max_size=6), st.integers(1, 40_000))
def test_written_extent_finds_the_last_non_zero_byte(tmp_path_factory, writes, chunk: int) -> None:
    """The CommitLog's open-time cut report: the last non-zero byte, in any chunk layout."""
    from storage_engine import commit_log
    size = 72 * 1024
    segment = Segment(tmp_path_factory.mktemp("seg") / segment_file_name(0), 0, size)
    image = bytearray(size)
    for at, data in writes:
        data = data[:size - at]
        segment.file.write_at(data, at)
        image[at:at + len(data)] = data
    expected = len(bytes(image).rstrip(b"\x00"))
    original = commit_log.EXTENT_SCAN_CHUNK_BYTES
    commit_log.EXTENT_SCAN_CHUNK_BYTES = chunk
    try:
        assert commit_log._written_extent(segment) == expected
    finally:
        commit_log.EXTENT_SCAN_CHUNK_BYTES = original
        segment.close()
