"""ConsumeQueue write-end recovery by bisection (storage_engine/queue_bounds.py).

Goal: finding a queue's first and last entry after a restart reads O(log n) entries, gives
exactly what the former whole-segment scan gave on every segment a clean run leaves (any lead,
any count of written entries, empty tail), never an end before the first hole on a crash-torn
tail, and, through store recovery, leaves every queue exactly matching the CommitLog whatever
the ConsumeQueue tail past the checkpoint holds. Method: hypothesis over segment images with the
former scan kept here as the oracle; real stores in tmp_path for the end-to-end property.
"""

from __future__ import annotations

import math
import os
import random
import struct
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from storage_engine import Message, MessageStore, StoreConfig
from storage_engine.checkpoint import read_checkpoint
from storage_engine.consume_queue import ConsumeQueue
from storage_engine.queue_bounds import (
    EMPTY_ENTRY,
    ENTRY_SIZE_BYTES,
    LEAD_SCAN_CHUNK_BYTES,
    first_written_entry,
    write_end_entry,
)

ENTRY = struct.Struct(">qiq")


def old_scan(image: bytes) -> tuple[int, int]:
    """The former recovery of one segment (lead entries, end entry): the oracle."""
    leading = len(image) - len(image.lstrip(b"\x00"))
    lead = 0 if leading == len(image) else leading // ENTRY_SIZE_BYTES
    start = lead * ENTRY_SIZE_BYTES
    while True:
        found = image.find(EMPTY_ENTRY, start)
        if found < 0:
            return lead, len(image) // ENTRY_SIZE_BYTES
        candidate = -(-found // ENTRY_SIZE_BYTES) * ENTRY_SIZE_BYTES
        if image[candidate:candidate + ENTRY_SIZE_BYTES] == EMPTY_ENTRY or \
                candidate >= len(image):
            return lead, min(candidate, len(image)) // ENTRY_SIZE_BYTES
        start = found + 1


class CountingReader:
    def __init__(self, image: bytes) -> None:
        self.image = image
        self.reads = 0

    def __call__(self, position: int, size: int) -> bytes:
        self.reads += 1
        return self.image[position:position + size]


written_entry = st.builds(
    ENTRY.pack,
    st.integers(0, 2**40),        # log_position: often with leading zero bytes
    st.integers(1, 2**31 - 1),    # size_bytes: never 0 in a written entry
    st.integers(-2**63, 2**63 - 1))


@st.composite
def clean_segment(draw: st.DrawFn) -> tuple[bytes, int, int]:
    """[lead empty][written][empty tail], as a run that did not crash leaves a segment."""
    entry_count = draw(st.integers(1, 300))
    lead = draw(st.integers(0, entry_count))
    written = draw(st.lists(written_entry, max_size=entry_count - lead))
    image = EMPTY_ENTRY * lead + b"".join(written)
    return image + bytes(entry_count * ENTRY_SIZE_BYTES - len(image)), lead, len(written)


@settings(max_examples=200, deadline=None)
@given(clean_segment())
def test_bisection_matches_the_full_scan_on_clean_segments(case: tuple[bytes, int, int]) -> None:
    image, lead, written = case
    entry_count = len(image) // ENTRY_SIZE_BYTES
    reader = CountingReader(image)
    found_lead = first_written_entry(reader, entry_count)
    start = found_lead or 0
    end = write_end_entry(reader, start, entry_count)
    assert (start, end) == old_scan(image)
    assert end - start == written
    if written:
        assert start == lead
    if lead == 0 and written:  # the usual queue: one read for the start, log2 for the end
        assert reader.reads <= 1 + math.ceil(math.log2(entry_count + 1)) + 1


@st.composite
def torn_segment(draw: st.DrawFn) -> tuple[bytes, int]:
    """A written prefix, then anything a crash can leave: holes, torn and whole entries."""
    entry_count = draw(st.integers(1, 200))
    prefix = draw(st.lists(written_entry, max_size=entry_count))
    tail_entries = entry_count - len(prefix)
    tail = draw(st.lists(st.one_of(
        st.just(EMPTY_ENTRY), written_entry,
        st.binary(min_size=ENTRY_SIZE_BYTES, max_size=ENTRY_SIZE_BYTES)),
        min_size=tail_entries, max_size=tail_entries))
    return b"".join(prefix) + b"".join(tail), len(prefix)


@settings(max_examples=200, deadline=None)
@given(torn_segment())
def test_bisection_never_ends_before_the_first_hole(case: tuple[bytes, int]) -> None:
    image, prefix = case
    entry_count = len(image) // ENTRY_SIZE_BYTES
    reader = CountingReader(image)
    end = write_end_entry(reader, 0, entry_count)
    first_hole = next((n for n in range(entry_count)
                       if image[n * 20:n * 20 + 20] == EMPTY_ENTRY), entry_count)
    assert prefix <= first_hole <= end <= entry_count
    # An edge: an empty entry (or the segment's end) right after a written one (or the start).
    assert end == entry_count or image[end * 20:end * 20 + 20] == EMPTY_ENTRY
    assert end == 0 or image[end * 20 - 20:end * 20] != EMPTY_ENTRY
    assert reader.reads <= math.ceil(math.log2(entry_count + 1)) + 1


def test_a_long_lead_is_scanned_in_bounded_chunks() -> None:
    entry_count = 3 * LEAD_SCAN_CHUNK_BYTES // ENTRY_SIZE_BYTES + 7
    lead = entry_count - 5
    image = EMPTY_ENTRY * lead + ENTRY.pack(123, 45, 0) * 5
    sizes: list[int] = []
    found = first_written_entry(lambda at, size: sizes.append(size) or image[at:at + size],
                                entry_count)
    assert found == lead
    assert max(sizes) <= LEAD_SCAN_CHUNK_BYTES
    assert first_written_entry(lambda at, size: bytes(size), entry_count) is None


def test_a_reopened_queue_finds_its_lead_and_end(tmp_path: Path) -> None:
    queue = ConsumeQueue(tmp_path / "q", "T", 0, segment_entries=1000)
    entries = b"".join(ENTRY.pack(100 * n, 90, 0) for n in range(1, 38))
    queue.append(613, entries)  # began at a later offset: a lead of 613 empty entries
    queue.close()
    reopened = ConsumeQueue(tmp_path / "q", "T", 0, segment_entries=1000)
    assert (reopened.min_queue_offset, reopened.max_queue_offset) == (613, 650)
    assert reopened.entry(649) == (3700, 90, 0)
    reopened.append(650, ENTRY.pack(3800, 90, 0) * 400)  # rolls into a second segment
    reopened.close()
    again = ConsumeQueue(tmp_path / "q", "T", 0, segment_entries=1000)
    assert (again.min_queue_offset, again.max_queue_offset) == (613, 1050)
    again.close()


CONFIG = StoreConfig(commit_log_segment_size_bytes=256 * 1024, message_size_max_bytes=16 * 1024,
                     consume_queue_segment_entries=64, checkpoint_interval_ms=3_600_000,
                     flush_interval_ms=3_600_000)
QUEUES = 4


def put_round(store: MessageStore, tag: str, count: int) -> None:
    for n in range(count):
        store.put_message(Message(topic="T", body=f"{tag}{n}".encode(), queue_id=n % QUEUES))


def queue_contents(store: MessageStore) -> dict[int, list[bytes]]:
    contents = {}
    for queue_id in range(QUEUES):
        result = store.get_messages("T", queue_id, store.min_queue_offset("T", queue_id),
                                    max_count=10_000, max_bytes=1 << 24)
        contents[queue_id] = [message.body for message in result.messages()]
    return contents


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 150), st.integers(1, 150))
def test_recovery_rebuilds_any_queue_tail_past_the_checkpoint(
        tmp_path_factory, seed: int, before: int, after: int) -> None:
    """Whatever the index holds past the checkpoint (holes, garbage, whole entries), the
    reopened store's queues list exactly the CommitLog's messages, in order."""
    store_dir = tmp_path_factory.mktemp("store")
    rng = random.Random(seed)
    store = MessageStore(store_dir, CONFIG)
    put_round(store, "a", before)
    store.flush()
    store._write_checkpoint()
    put_round(store, "b", after)
    expected = queue_contents(store)
    store._state.closed = True
    store._flush.stop()
    store._commit_log.flush()  # the log keeps every message; only the index tail is damaged
    store._state.create_first_segments(list(store._queues.values()))  # new queues' files too
    trusted_below = read_checkpoint(store_dir / "checkpoint", store.fs).consume_queue_log_position
    for queue in store._queues.values():
        for offset in range(queue.min_queue_offset, queue.max_queue_offset):
            entry = queue.entry(offset)
            assert entry is not None
            if entry[0] < trusted_below:
                continue
            segment = queue._segments.find(offset * ENTRY_SIZE_BYTES)
            assert segment is not None
            at = offset * ENTRY_SIZE_BYTES - segment.base_position
            damage = rng.choice(("keep", "hole", "garbage", "torn"))
            if damage == "hole":
                segment.file.write_at(EMPTY_ENTRY, at)
            elif damage == "garbage":
                segment.file.write_at(os.urandom(ENTRY_SIZE_BYTES), at)
            elif damage == "torn":
                segment.file.write_at(bytes(rng.randint(1, 19)), at)
    store._release(clean=False)
    with MessageStore(store_dir, CONFIG) as reopened:
        assert queue_contents(reopened) == expected



def test_a_new_queue_whose_first_index_entry_a_crash_lost_keeps_every_message(
        tmp_path: Path) -> None:
    """Replay of a finding: a queue made after the last checkpoint, whose first index entry a
    crash lost (it reads as an empty entry, like a queue that starts at a later offset). The
    old recovery took that hole for the queue's start, so message 0 stayed in the CommitLog but
    out of the queue (min offset 1): an acknowledged message no reader could reach."""
    store = MessageStore(tmp_path, CONFIG)
    put_round(store, "a", 10)
    store.flush()
    store._write_checkpoint()
    bodies = [f"new{n}".encode() for n in range(3)]
    for body in bodies:
        store.put_message(Message(topic="N", body=body, queue_id=0))
    store._state.closed = True
    store._flush.stop()
    store._commit_log.flush()
    queue = store._queues[("N", 0)]
    store._state.create_first_segments([queue])  # its file made, not fsynced
    segment = queue._segments.find(0)
    assert segment is not None
    segment.file.write_at(EMPTY_ENTRY, 0)  # the first entry's page never reached the disk
    store._release(clean=False)
    with MessageStore(tmp_path, CONFIG) as reopened:
        assert reopened.min_queue_offset("N", 0) == 0
        result = reopened.get_messages("N", 0, 0, max_count=10, max_bytes=1 << 20)
        assert [message.body for message in result.messages()] == bodies
