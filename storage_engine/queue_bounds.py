"""Where a ConsumeQueue segment's written entries begin and end, found without reading it whole.

A ConsumeQueue segment is preallocated (a file hole) and written front to back, so after a
restart it looks like `[empty lead][written entries][empty tail]`: the lead exists only when the
queue began at a later queue offset (a slave that started at its master's minimum), and an empty
entry is 20 zero bytes (a written entry never is: its size_bytes is never 0). Reading the whole
6 MB segment of every queue to find those two edges cost ~15 ms and ~6 MB of resident pages per
queue at start-up; these searches read what the edges need:

- `write_end_entry` bisects for the first empty entry: ~log2(entries) 20-byte reads.
- `first_written_entry` reads entry 0 (written whenever the queue began at the segment's start,
  the usual case) and only otherwise scans forward in bounded chunks to the first written byte.

After a crash the unsynced tail may hold holes (a page the kernel never wrote back) before
entries that did reach the disk. A linear scan stops at the first hole; the bisection may stop
at a later one, never an earlier one: every entry before the first hole is written, so the
edge it returns is at or past the first hole. That is all recovery needs: store_recovery walks
back from the end to the last entry the checkpoint vouches for and the CommitLog confirms, and
the dispatcher rebuilds the rest from the log, so the walk covers only what lies past the
checkpoint either way.

Sans-IO: both take `read_at(position_bytes, size_bytes) -> bytes` over one segment.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["ENTRY_SIZE_BYTES", "LEAD_SCAN_CHUNK_BYTES", "first_written_entry",
           "write_end_entry"]

ENTRY_SIZE_BYTES = 20
EMPTY_ENTRY = bytes(ENTRY_SIZE_BYTES)
# The forward scan for a lead reads this much per call (a whole number of entries), so a queue
# with a lead costs bounded memory however long the lead is.
LEAD_SCAN_CHUNK_BYTES = (64 * 1024 // ENTRY_SIZE_BYTES) * ENTRY_SIZE_BYTES

ReadAt = Callable[[int, int], bytes]


def first_written_entry(read_at: ReadAt, entry_count: int) -> int | None:
    """Index of the first entry that is not all zeros; None when every entry is empty."""
    if entry_count <= 0:
        return None
    if read_at(0, ENTRY_SIZE_BYTES) != EMPTY_ENTRY:
        return 0
    chunk_entries = LEAD_SCAN_CHUNK_BYTES // ENTRY_SIZE_BYTES
    for first in range(0, entry_count, chunk_entries):
        count = min(chunk_entries, entry_count - first)
        chunk = read_at(first * ENTRY_SIZE_BYTES, count * ENTRY_SIZE_BYTES)
        written = chunk.lstrip(b"\x00")
        if written:
            return first + (len(chunk) - len(written)) // ENTRY_SIZE_BYTES
    return None


def write_end_entry(read_at: ReadAt, start_entry: int, entry_count: int) -> int:
    """Index of an empty entry at or after `start_entry` whose predecessor is written (or is
    before `start_entry`); `entry_count` when the segment is full.

    Entries [start_entry, end) are taken to be written and the rest empty; on such a segment
    this is exactly the first empty entry. On a crash-torn tail it is at or past the first
    hole (see the module docstring)."""
    low, high = start_entry, entry_count
    while low < high:
        middle = (low + high) // 2
        if read_at(middle * ENTRY_SIZE_BYTES, ENTRY_SIZE_BYTES) == EMPTY_ENTRY:
            high = middle
        else:
            low = middle + 1
    return low
