"""The real storage engine over the simulated disk: seeded crash schedules through real recovery.

Goal: whatever a power cut does to what was not fsynced (lost, torn, bit-flipped; directory
entries undone) and whenever an fsync fails, the store's real recovery path (checkpoint,
truncation intent, CommitLog scan, ConsumeQueue trim and rebuild) brings back every message
that was acknowledged, byte for byte, serves nothing that fails its checksum, never serves past
the confirm position, and after a failed fsync acknowledges nothing more (fail-stop).

Method: one seed fixes a schedule of appends (two topics, three queues, varied sizes, small
segments so CommitLog and ConsumeQueue files roll), group-commit flushes, checkpoints, fork
truncations (`truncate_to`, the replica path) and crashes, on a `MessageStore(fs=SimFileSystem,
flush_driven=True)` (SYNC_FLUSH: a message is acknowledged once a flush step covered it).
A model keeps every message in log order. After each crash the store is reopened and must
serve exactly the model's messages that end at or below the recovered log end, which must be
at or past the acknowledged end; the rest is dropped from the model. `SEEDS` run by default;
`python3 build.py sim --disk --seeds N` runs more.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_engine import (
    RECORD_HEADER,
    CorruptRecordError,
    FlushDiskType,
    FsyncFailedError,
    GetStatus,
    MessageBatch,
    MessageStore,
    PutStatus,
    StoreConfig,
    commit_log,
    decode_record,
    record_format,
    set_fsync_failure_handler,
)
from tests.sim.sim_fs import SimDiskFaults, SimFileSystem

SEEDS = 300
STORE = Path("/broker/store")
CONFIG = StoreConfig(commit_log_segment_size_bytes=68 * 1024, message_size_max_bytes=2048,
                     consume_queue_segment_entries=16, flush_disk_type=FlushDiskType.SYNC_FLUSH)
TOPICS = ("orders", "audit")
QUEUES = 3


@dataclasses.dataclass(slots=True)
class _Written:
    topic: str
    queue_id: int
    body: bytes
    log_position: int
    log_position_end: int


class DiskFailure(AssertionError):
    """An invariant broke; the message names the seed and the replay command."""


@pytest.fixture(autouse=True)
def recorded_fsync_failures() -> Iterator[list[str]]:
    """A failed fsync must not end the test process: record it (the store still fail-stops)."""
    seen: list[str] = []
    previous = set_fsync_failure_handler(lambda err, path: seen.append(path))
    yield seen
    set_fsync_failure_handler(previous)


def faults_of(seed: int) -> SimDiskFaults:
    rng = random.Random(seed ^ 0xD15C)
    return SimDiskFaults(torn_write_probability=rng.choice((0.0, 0.5, 1.0)),
                         bit_flip_probability=rng.choice((0.0, 0.5)),
                         sync_failure_probability=rng.choice((0.0, 0.0, 0.01)))


class DiskRun:
    """One seeded schedule against one store directory on one simulated disk."""

    def __init__(self, seed: int, steps: int = 120) -> None:
        self.seed = seed
        self.steps = steps
        self.rng = random.Random(seed)
        self.fs = SimFileSystem(random.Random(seed ^ 0xF5), faults_of(seed))
        self.log: list[_Written] = []
        self.acked_end = 0
        self.crashes = 0
        self.store = self.open()

    def fail(self, what: str) -> None:
        raise DiskFailure(f"seed {self.seed}: {what} (faults {self.fs.faults}, disk "
                          f"{self.fs.stats}); replay: python3 build.py sim --disk "
                          f"--seed {self.seed}")

    def open(self) -> MessageStore:
        """Start the store (a restart: its recovery runs on a disk without faults)."""
        self.fs.faults, faults = SimDiskFaults(), self.fs.faults
        try:
            return MessageStore(STORE, CONFIG, fs=self.fs, flush_driven=True)
        finally:
            self.fs.faults = faults

    def run(self) -> dict[str, int]:
        for _ in range(self.steps):
            roll = self.rng.random()
            try:
                if roll < 0.55:
                    self.append()
                elif roll < 0.75:
                    if self.store.flush_step():
                        self.acked_end = self.store.stats().flushed_log_position
                    else:
                        self.died()  # fail-stop: the process ends, a restart recovers
                elif roll < 0.82:
                    if not self.store.checkpoint_step():
                        self.died()
                elif roll < 0.87:
                    self.truncate()
                else:
                    self.crash()
            except FsyncFailedError:
                self.died()
        self.crash()
        return {"messages": len(self.log), "crashes": self.crashes,
                "torn": self.fs.stats.torn_writes, "flipped": self.fs.stats.bits_flipped,
                "sync_failures": self.fs.stats.sync_failures}

    def append(self) -> None:
        topic = self.rng.choice(TOPICS)
        count = self.rng.randint(1, 12)
        queue_ids = [self.rng.randrange(QUEUES) for _ in range(count)]
        bodies = [self.rng.randbytes(self.rng.choice((1, 40, 300, 1500))) for _ in range(count)]
        start = self.store.end_log_position
        try:
            result = self.store.append(MessageBatch(topic=topic, bodies=bodies,
                                                    queue_ids=queue_ids))
        except FsyncFailedError:  # a segment roll's directory fsync: part of it may be written
            self.learn_written(start)
            raise
        if result.status is not PutStatus.PUT_OK:
            self.fail(f"append answered {result.status}")
        for body, queue_id, start in zip(bodies, queue_ids, result.log_positions):
            self.log.append(_Written(topic, queue_id, body, start, self._record_end(start)))

    def learn_written(self, start: int) -> None:
        """Add what an interrupted append wrote from `start` (never acknowledged: it may or
        may not survive, and the model must know it if it does)."""
        position, end = start, self.store.end_log_position
        while position < end:
            raw = self.store.read_log(position, 1 << 20)
            if len(raw) < 8 or raw[4:8] != (0xDAA320A7).to_bytes(4, "big"):  # BLANK or end
                segment = CONFIG.commit_log_segment_size_bytes
                position = (position // segment + 1) * segment
                continue
            message = decode_record(raw)
            self.log.append(_Written(message.topic, message.queue_id, message.body, position,
                                     position + message.size_bytes))
            position += message.size_bytes

    def _record_end(self, log_position: int) -> int:
        raw = self.store.read_log(log_position, 4)  # TOTALSIZE
        return log_position + int.from_bytes(raw, "big")

    def truncate(self) -> None:
        """The replica path's fork truncation, at a record start at or past confirm."""
        confirm = self.store.confirm_log_position
        starts = [w.log_position for w in self.log if w.log_position >= confirm]
        if not starts:
            return
        cut = self.rng.choice(starts)
        self.store.truncate_to(cut)
        self.log = [w for w in self.log if w.log_position < cut]

    def died(self) -> None:
        """After a failed fsync: nothing more is acknowledged, and the process stops."""
        if self.store.flush_step():
            self.fail("a flush succeeded after a failed fsync (fail-stop broken)")
        self.crash()

    def crash(self) -> None:
        self.crashes += 1
        self.fs.crash()
        self.store = self.open()
        self.verify_recovered()

    def verify_recovered(self) -> None:
        stats = self.store.stats()
        end = stats.end_log_position
        if end < self.acked_end:
            self.fail(f"ACKNOWLEDGED MESSAGES LOST: the log ends at {end} after recovery, "
                      f"below the acknowledged end {self.acked_end}")
        if stats.confirm_log_position > end:
            self.fail(f"confirm {stats.confirm_log_position} past the log end {end}")
        survivors = [w for w in self.log if w.log_position_end <= end]
        if (survivors and survivors[-1].log_position_end != end
                and end % CONFIG.commit_log_segment_size_bytes != 0):
            self.fail(f"the recovered end {end} is not a record boundary "
                      f"(last surviving record ends at {survivors[-1].log_position_end})")
        for topic in TOPICS:
            for queue_id in range(QUEUES):
                expected = [w for w in survivors if (w.topic, w.queue_id) == (topic, queue_id)]
                self.verify_queue(topic, queue_id, expected, stats.confirm_log_position)
        self.log = survivors
        self.acked_end = end  # recovery flushed and checkpointed what it kept

    def verify_queue(self, topic: str, queue_id: int, expected: list[_Written],
                     confirm: int) -> None:
        served: list[bytes] = []
        queue_offset = 0
        while True:
            got = self.store.get_messages(topic, queue_id, queue_offset, max_count=64,
                                          max_bytes=1 << 20)
            if got.status is not GetStatus.FOUND:
                if got.status not in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE,
                                      GetStatus.NO_MATCHED_LOGIC_QUEUE):
                    self.fail(f"{topic}/{queue_id} at {queue_offset}: {got.status}")
                break
            for record in got.records:
                try:
                    message = decode_record(record)  # verifies the whole-record checksum
                except CorruptRecordError as err:
                    self.fail(f"{topic}/{queue_id}: served a record that fails its checksum "
                              f"at queue_offset {queue_offset}: {err}")
                if message.log_position + message.size_bytes > confirm:
                    self.fail(f"{topic}/{queue_id}: served a record past confirm {confirm}")
                served.append(message.body)
            queue_offset = got.next_queue_offset
        if served != [w.body for w in expected]:
            self.fail(f"{topic}/{queue_id}: served {len(served)} messages, expected "
                      f"{len(expected)}; first difference at "
                      f"{next((i for i, (a, b) in enumerate(zip(served, [w.body for w in expected])) if a != b), min(len(served), len(expected)))}")


def run_disk_seed(seed: int, steps: int = 120) -> dict[str, int]:
    previous = set_fsync_failure_handler(lambda err, path: None)
    try:
        return DiskRun(seed, steps).run()
    finally:
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
