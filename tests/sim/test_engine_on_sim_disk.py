"""The real storage engine over the simulated disk: seeded crash schedules through real recovery.

Goal: whatever a power cut does to what was not fsynced (lost, torn, bit-flipped; directory
entries undone) and whenever an fsync fails, the store's real recovery path (checkpoint,
truncation intent, CommitLog scan, ConsumeQueue trim and rebuild) brings back every message
that was acknowledged, byte for byte, serves nothing that fails its checksum, never serves past
the confirm position, and after a failed fsync acknowledges nothing more (fail-stop).

Method: tests/sim/store_sim.py (one seed: a schedule of appends, flushes, checkpoints, fork
truncations, crashes and failing fsyncs against a model); `SEEDS` run by default,
`python3 build.py sim --store --seeds N` runs more. Two found bugs are replayed by name, and a
recovery broken on purpose (checksums ignored) must be caught.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from storage_engine import (
    RECORD_HEADER,
    GetStatus,
    MessageBatch,
    MessageStore,
    PutStatus,
    commit_log,
    decode_record,
    record_format,
    set_fsync_failure_handler,
)
from tests.sim.sim_fs import SimFileSystem
from tests.sim.store_sim import CONFIG, STORE, DiskFailure, DiskRun, faults_of

SEEDS = 300


@pytest.fixture(autouse=True)
def recorded_fsync_failures() -> Iterator[list[str]]:
    """A failed fsync must not end the test process: record it (the store still fail-stops)."""
    seen: list[str] = []
    previous = set_fsync_failure_handler(lambda err, path: seen.append(path))
    yield seen
    set_fsync_failure_handler(previous)


def test_a_new_queue_directory_survives_a_power_cut() -> None:
    # Found by this simulator: ConsumeQueue directories were made with a plain mkdir; their
    # entry was never made durable, so a power cut after a flush and a checkpoint could take
    # a whole queue's index away and its acknowledged messages became unreadable
    # (OFFSET_TOO_SMALL from 0). files.make_dirs_durable fsyncs the parent of each new dir.
    fs = SimFileSystem(random.Random(1))
    store = MessageStore(STORE, CONFIG, fs=fs, flush_driven=True)
    bodies = [b"m%d" % index for index in range(100)]
    result = store.append(MessageBatch(topic="orders", bodies=bodies, queue_ids=[0] * 100))
    assert result.status is PutStatus.PUT_OK
    assert store.flush_step() and store.checkpoint_step()
    fs.crash()
    reopened = MessageStore(STORE, CONFIG, fs=fs, flush_driven=True)
    got = reopened.get_messages("orders", 0, 0, max_count=200, max_bytes=1 << 20)
    assert got.status is GetStatus.FOUND
    assert [decode_record(record).body for record in got.records] == bodies


def test_a_failed_fsync_stops_flushing_and_recovery_keeps_what_was_acknowledged(
        recorded_fsync_failures: list[str]) -> None:
    fs = SimFileSystem(random.Random(2))
    store = MessageStore(STORE, CONFIG, fs=fs, flush_driven=True)
    acked = store.append(MessageBatch(topic="orders", bodies=[b"acked"], queue_ids=[0]))
    assert store.flush_step()
    store.append(MessageBatch(topic="orders", bodies=[b"never acked"], queue_ids=[0]))
    fs.fail_next_syncs(1)
    assert not store.flush_step()
    assert recorded_fsync_failures and "commitlog" in recorded_fsync_failures[0]
    syncs = fs.stats.syncs
    assert not store.flush_step() and not store.checkpoint_step()  # never retried
    assert fs.stats.syncs == syncs
    assert store.stats().flushed_log_position == acked.log_position_end
    put = store.put_messages(MessageBatch(topic="orders", bodies=[b"later"], queue_ids=[0]))
    assert put.status is PutStatus.SERVICE_NOT_AVAILABLE  # never PUT_OK after the failure
    store.close()  # no clean checkpoint over lost pages
    assert fs.exists(STORE / "abort")
    fs.crash()
    reopened = MessageStore(STORE, CONFIG, fs=fs, flush_driven=True)
    assert reopened.stats().recovered_after_crash
    got = reopened.get_messages("orders", 0, 0, max_count=10, max_bytes=1 << 20)
    assert [decode_record(record).body for record in got.records] == [b"acked"]


@pytest.mark.parametrize("first", range(0, SEEDS, 50))
def test_crash_schedules_keep_every_acknowledged_message(first: int) -> None:
    failures = []
    for seed in range(first, first + 50):
        try:
            DiskRun(seed).run()
        except DiskFailure as failure:
            failures.append(str(failure))
    assert not failures, "\n".join(failures)


def test_the_schedules_exercise_the_faults_they_claim() -> None:
    runs = [DiskRun(seed).run() for seed in range(40)]
    assert sum(run["crashes"] for run in runs) > 200
    assert sum(run["torn"] for run in runs) > 20
    assert sum(run["flipped"] for run in runs) > 10
    assert sum(run["sync_failures"] for run in runs) > 3


def test_the_checker_catches_recovery_that_serves_a_flipped_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a broken recovery scan that accepts a record whose checksum fails
    strict_scan = commit_log.scan_record

    def lax_scan(buf: bytes | memoryview, pos: int, end: int) -> int:
        total = strict_scan(buf, pos, end)
        if total >= 0 or end - pos < 8:
            return total
        size = int.from_bytes(bytes(buf[pos:pos + 4]), "big")
        if RECORD_HEADER.size < size <= end - pos:
            reason = record_format._check_record(buf, pos, size)
            if reason is not None and "checksum" in reason:
                return size
        return -1

    monkeypatch.setattr(commit_log, "scan_record", lax_scan)
    for seed in range(100):
        if faults_of(seed).bit_flip_probability == 0:
            continue
        try:
            DiskRun(seed).run()
        except DiskFailure as failure:
            assert "fails its checksum" in str(failure)
            return
    raise AssertionError("a recovery that ignores checksums went unnoticed in 100 seeds")


def test_a_deleted_topic_stays_deleted_after_a_power_cut() -> None:
    # delete_topic removed the topic's ConsumeQueue directory without fsyncing its parent:
    # a power cut undid the removal and the deleted topic's queues (and messages) came back
    fs = SimFileSystem(random.Random(3))
    store = MessageStore(STORE, CONFIG, fs=fs, flush_driven=True)
    for topic in ("orders", "audit"):
        store.append(MessageBatch(topic=topic, bodies=[b"a", b"b"], queue_ids=[0, 1]))
    assert store.flush_step() and store.checkpoint_step()
    assert store.delete_topic("orders") == 2
    fs.crash()
    reopened = MessageStore(STORE, CONFIG, fs=fs, flush_driven=True)
    assert [key for key in reopened.queues() if key[0] == "orders"] == []
    assert reopened.max_queue_offset("audit", 1) == 1  # the other topic is untouched


def test_a_reset_log_stays_reset_after_a_power_cut() -> None:
    # reset_to (a slave far behind its master's retention) drops every segment and queue and
    # restarts the log empty at a segment boundary: after a power cut the store must open at
    # that position with no old queue. (Each segment removal fsyncs its directory; an old
    # ConsumeQueue directory that came back would be trimmed by recovery, as it points below
    # the log's start: checked with the consumequeue directory's fsync switched off.)
    fs = SimFileSystem(random.Random(4))
    store = MessageStore(STORE, CONFIG, fs=fs, flush_driven=True, auto_confirm=False)
    store.append(MessageBatch(topic="orders", bodies=[b"x" * 100] * 10, queue_ids=[0] * 10))
    assert store.flush_step() and store.checkpoint_step()
    boundary = 3 * CONFIG.commit_log_segment_size_bytes
    store.reset_to(boundary)
    fs.crash()
    reopened = MessageStore(STORE, CONFIG, fs=fs, flush_driven=True, auto_confirm=False)
    assert reopened.min_log_position == reopened.log_position_end == boundary
    assert reopened.queues() == []
    assert reopened.epochs.entries == ()
