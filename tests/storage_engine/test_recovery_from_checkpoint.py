"""CommitLog recovery and the checkpoint: what the checkpoint's segment holds is checked in full.

Goal: a record below the checkpoint that the disk returns damaged (a flipped bit: the chaos
campaign's `corrupt` fault, found on 2026-12-02 when recovery briefly trusted those bytes) is cut
like a torn one, and the index below a checkpoint that is a record boundary is trusted; everything
past the checkpoint is checked exactly as before: a torn or corrupt tail past the checkpoint is cut
at the same record as a scan from the segment's start cuts it; a torn record right at the
checkpoint is cut there; a checkpoint that is not a record boundary falls back to the scan from the
segment's start; and the checkpoint can never vouch for bytes that were not fsynced (the
CommitLog's sync comes before the checkpoint's rename, and a power cut right after a checkpoint
loses nothing below it). Method: real stores in tmp_path, the damage written into the segment file,
the checkpoint rewritten to a mid-segment record boundary as after a crash; the ordering on the
simulated disk (tests/sim/sim_fs.py), which records syncs and renames.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

from storage_engine import GetStatus, MessageBatch, MessageStore, PutStatus, decode_record
from storage_engine.checkpoint import Checkpoint, read_checkpoint, write_checkpoint
from storage_engine.commit_log import _chain_reaches, _scan_segment
from storage_engine.segment import Segment
from tests.sim.sim_fs import SimDiskFaults, SimFileSystem
from tests.sim.store_sim import CONFIG, STORE
from tests.storage_engine.test_engine_basics import (
    SMALL,
    fill,
    flip_byte,
    last_segment,
    read_all,
)


def record_positions(store: MessageStore, written: list[tuple]) -> dict[tuple, int]:
    positions = {}
    for queue_id, offset, _ in written:
        result = store.get_messages("T", queue_id, offset, max_count=1, max_bytes=1 << 20)
        positions[(queue_id, offset)] = result.messages()[0].log_position
    return positions


def crashed_store(tmp_path: Path, count: int = 1500) -> tuple[list[tuple], dict[tuple, int], int]:
    """A store of `count` messages whose last segment holds many records, left as after a
    crash (abort marker). Returns (written, log position of each, log end)."""
    with MessageStore(tmp_path, SMALL) as store:
        written = fill(store, count)
        positions = record_positions(store, written)
        end = store.log_position_end
    (tmp_path / "abort").touch()
    return written, positions, end


def set_checkpoint(store_dir: Path, log_position: int) -> None:
    """The checkpoint as the flush thread would have left it at `log_position`, before a crash."""
    write_checkpoint(store_dir / "checkpoint", Checkpoint(
        flushed_log_position=log_position, consume_queue_log_position=log_position,
        confirm_log_position=log_position))


def in_last_segment(store_dir: Path, positions: dict[tuple, int]) -> list[int]:
    base = int(last_segment(store_dir).name)
    return sorted(p for p in positions.values() if p >= base)


def damage(path: Path, relative: int, how: str, end_relative: int) -> None:
    with open(path, "r+b") as handle:
        if how == "flip":
            flip_byte(handle, relative + 30)
        elif how == "torn":  # the record's second half never reached the disk
            handle.seek(relative + 60)
            handle.write(bytes(end_relative - relative - 60))
        elif how == "zero_tail":
            handle.seek(relative + 10)
            handle.write(bytes(end_relative - relative - 10))
        else:
            handle.seek(relative)
            handle.write(random.Random(relative).randbytes(end_relative - relative))


def scan_from_segment_start(path: Path, size: int) -> int:
    """Where the scan from the segment's start (the recovery before this change) stops."""
    segment = Segment(path, int(path.name), size)
    try:
        return segment.base_position + _scan_segment(segment)[0]
    finally:
        segment.close()


def test_a_flipped_bit_below_the_checkpoint_is_cut_and_the_store_opens(tmp_path: Path) -> None:
    """The campaign's finding, replayed: seed 11's `corrupt` fault flipped bits in the last
    records of a stopped slave, all below its checkpoint; a recovery that trusted them kept the
    damaged record, and the broker died decoding it at start-up (idempotence rebuild)."""
    written, positions, end = crashed_store(tmp_path)
    tail = in_last_segment(tmp_path, positions)
    victim, checkpoint = tail[-10], tail[-2]
    set_checkpoint(tmp_path, checkpoint)
    segment = last_segment(tmp_path)
    damage(segment, victim - int(segment.name), "flip", end - int(segment.name))
    with MessageStore(tmp_path, SMALL) as store:
        recovery = store.stats().last_recovery
        assert recovery is not None and recovery.cut_bytes > 0
        assert store.log_position_end == victim
        assert read_all(store) == sorted(w for w in written
                                         if positions[(w[0], w[1])] < victim)


@pytest.mark.parametrize("how", ["flip", "torn", "zero_tail", "rubbish"])
def test_a_damaged_tail_past_the_checkpoint_is_cut_where_a_full_scan_cuts_it(
        tmp_path: Path, how: str) -> None:
    written, positions, end = crashed_store(tmp_path)
    tail = in_last_segment(tmp_path, positions)
    assert len(tail) > 40 and tail[0] > 0  # a second segment
    checkpoint, victim = tail[len(tail) // 2], tail[-5]
    set_checkpoint(tmp_path, checkpoint)
    segment = last_segment(tmp_path)
    damage(segment, victim - int(segment.name), how, end - int(segment.name))
    expected_end = scan_from_segment_start(segment, SMALL.commit_log_segment_size_bytes)
    assert expected_end == victim
    with MessageStore(tmp_path, SMALL) as store:
        recovery = store.stats().last_recovery
        assert recovery is not None
        assert recovery.scanned_from_log_position == checkpoint  # not the segment's start
        assert store.log_position_end == expected_end
        assert recovery.cut_bytes > 0
        kept = sorted(w for w in written if positions[(w[0], w[1])] < victim)
        assert read_all(store) == kept


def test_a_torn_record_right_at_the_checkpoint_is_cut_there(tmp_path: Path) -> None:
    written, positions, end = crashed_store(tmp_path)
    tail = in_last_segment(tmp_path, positions)
    checkpoint = tail[len(tail) // 2]
    set_checkpoint(tmp_path, checkpoint)
    segment = last_segment(tmp_path)
    damage(segment, checkpoint - int(segment.name), "torn", end - int(segment.name))
    with MessageStore(tmp_path, SMALL) as store:
        assert store.log_position_end == checkpoint
        assert store.stats().last_recovery.cut_bytes == 60  # the torn half is zeros
        assert read_all(store) == sorted(w for w in written
                                         if positions[(w[0], w[1])] < checkpoint)


def test_rubbish_after_a_mid_segment_checkpoint_is_cut_and_writing_goes_on(
        tmp_path: Path) -> None:
    written, positions, end = crashed_store(tmp_path)
    tail = in_last_segment(tmp_path, positions)
    checkpoint = tail[len(tail) // 3]
    set_checkpoint(tmp_path, checkpoint)
    segment = last_segment(tmp_path)
    base = int(segment.name)
    with open(segment, "r+b") as handle:  # rubbish from the checkpoint well past the old end
        handle.seek(checkpoint - base)
        handle.write(os.urandom(end - checkpoint + 5000))
    kept = sorted(w for w in written if positions[(w[0], w[1])] < checkpoint)
    with MessageStore(tmp_path, SMALL) as store:
        assert store.log_position_end == checkpoint
        assert store.stats().last_recovery.reason.startswith("invalid record")
        assert read_all(store) == kept
        put = store.put_messages(MessageBatch(topic="T", bodies=[b"after"], queue_ids=[0]))
        assert put.status is PutStatus.PUT_OK
    with MessageStore(tmp_path, SMALL) as store:  # a clean reopen finds the new record too
        assert store.log_position_end > checkpoint
        assert len(read_all(store)) == len(kept) + 1


def test_a_checkpoint_that_is_not_a_record_boundary_falls_back_to_the_segment_start(
        tmp_path: Path) -> None:
    written, positions, end = crashed_store(tmp_path)
    tail = in_last_segment(tmp_path, positions)
    set_checkpoint(tmp_path, tail[len(tail) // 2] + 7)
    with MessageStore(tmp_path, SMALL) as store:
        recovery = store.stats().last_recovery
        assert recovery.scanned_from_log_position == int(last_segment(tmp_path).name)
        assert store.log_position_end == end
        assert read_all(store) == sorted(written)


def test_zeros_below_the_checkpoint_fall_back_to_the_segment_start(tmp_path: Path) -> None:
    """Bytes the checkpoint vouches for that are no longer records (a file cut short from
    outside) are not trusted: the chain of sizes does not reach the checkpoint."""
    written, positions, end = crashed_store(tmp_path)
    tail = in_last_segment(tmp_path, positions)
    hole = tail[len(tail) // 4]
    segment = last_segment(tmp_path)
    with open(segment, "r+b") as handle:
        handle.truncate(hole - int(segment.name) + 17)
    set_checkpoint(tmp_path, end)
    with MessageStore(tmp_path, SMALL) as store:
        assert store.log_position_end == hole
        assert read_all(store) == sorted(w for w in written if positions[(w[0], w[1])] < hole)


def test_the_chain_of_sizes_lands_only_on_record_boundaries(tmp_path: Path) -> None:
    """_chain_reaches: true at every record boundary of a segment (runs of equal sizes and
    mixed ones), false everywhere else, and true at a sealed segment's end."""
    with MessageStore(tmp_path, SMALL) as store:
        for index in range(40):  # equal-size batches and mixed sizes, rolling segments
            size = 1 + index % 7
            bodies = [b"x" * (50 if index % 2 else 10 + 37 * n) for n in range(size * 20)]
            assert store.put_messages(MessageBatch(topic="T", bodies=bodies,
                                                   queue_ids=[0] * len(bodies))).status \
                is PutStatus.PUT_OK
        got = store.get_messages("T", 0, 0, max_count=100_000, max_bytes=1 << 30)
        records = [(m.log_position, len(record)) for m, record in
                   zip(got.messages(), got.records, strict=True)]
        segment_size = SMALL.commit_log_segment_size_bytes
        first = store._commit_log.segments[0]
        data = first.map
        boundaries = {p for p, _ in records if p < segment_size}
        ends = {p + n for p, n in records if p + n <= segment_size}
        assert _chain_reaches(data, segment_size)  # sealed by a BLANK
        for target in sorted(boundaries | ends)[1:]:
            assert _chain_reaches(data, target), target
        rng = random.Random(5)
        for target in rng.sample(range(1, max(ends)), 300):
            assert _chain_reaches(data, target) == (target in boundaries | ends), target


class RecordingDisk(SimFileSystem):
    """The simulated disk, recording each file sync and rename in order."""

    def __init__(self) -> None:
        super().__init__(random.Random(7), SimDiskFaults(torn_write_probability=1.0,
                                                         bit_flip_probability=1.0))
        self.events: list[tuple[str, str]] = []

    def before_sync(self, path: Path, inode: object) -> None:
        super().before_sync(path, inode)  # type: ignore[arg-type]
        self.events.append(("sync", str(path)))

    def rename(self, source: Path, target: Path) -> None:
        super().rename(source, target)
        self.events.append(("rename", str(target)))


def test_the_checkpoint_is_written_only_after_the_data_it_vouches_for_is_fsynced() -> None:
    """A crash between the checkpoint's write and the data's fsync cannot happen: the fsync
    comes first. Checked twice: the order of syncs and renames, and a power cut (tearing and
    flipping whatever was not synced) right after a checkpoint that no flush preceded."""
    disk = RecordingDisk()
    store = MessageStore(STORE, CONFIG, fs=disk, flush_driven=True)
    bodies = [b"m%d" % index * 30 for index in range(300)]
    put = store.append(MessageBatch(topic="orders", bodies=bodies, queue_ids=[0] * 300))
    assert put.status is PutStatus.PUT_OK
    disk.events.clear()
    assert store.checkpoint_step()  # no flush_step before it: the checkpoint flushes first
    syncs_of_log = [i for i, (kind, path) in enumerate(disk.events)
                    if kind == "sync" and "commitlog" in path]
    renames = [i for i, (kind, path) in enumerate(disk.events)
               if kind == "rename" and path.endswith("checkpoint")]
    assert syncs_of_log and len(renames) == 1
    assert max(syncs_of_log) < renames[0]
    more = store.append(MessageBatch(topic="orders", bodies=[b"late" * 50] * 20,
                                     queue_ids=[0] * 20))
    assert more.status is PutStatus.PUT_OK  # past the checkpoint, never synced
    disk.crash()
    checkpoint = read_checkpoint(STORE / "checkpoint", disk)
    assert checkpoint is not None
    assert checkpoint.flushed_log_position == put.log_position_end
    reopened = MessageStore(STORE, CONFIG, fs=disk, flush_driven=True)
    assert reopened.stats().last_recovery.scanned_from_log_position == put.log_position_end
    assert reopened.log_position_end >= put.log_position_end  # a torn prefix may survive
    got = reopened.get_messages("orders", 0, 0, max_count=1000, max_bytes=1 << 24)
    assert got.status is GetStatus.FOUND
    found = [decode_record(record).body for record in got.records]
    assert found[:300] == bodies
    assert set(found[300:]) <= {b"late" * 50}
