"""What a store of thousands of queues pays per queue; the savings keep every safety rule.

Goal: a queue's first message fsyncs no directory on the put path (its new directories and
segment file are made durable by the next checkpoint, before it vouches for their entries, and a
power cut before that checkpoint loses nothing acknowledged: recovery rebuilds the index from the
CommitLog); a checkpoint fsyncs the queues written since the last one, not every queue; two
checkpoints at once each wait for everything they vouch for; a deleted topic's pending directory
is skipped, not fsynced; a segment is mapped only once read, and never after it is closed.
Method: the real engine over the simulated disk (tests/sim/sim_fs.py), which counts every file and
directory sync and loses whatever was not made durable at a crash.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest

from storage_engine import (
    GetStatus,
    MessageBatch,
    MessageStore,
    PutStatus,
    decode_record,
)
from storage_engine.consume_queue import ConsumeQueue, PreparedSegment
from storage_engine.files import PendingDirectorySyncs
from tests.sim.sim_fs import SimFileSystem
from tests.sim.store_sim import CONFIG, STORE
from tests.sim.test_engine_on_sim_disk import recorded_fsync_failures  # noqa: F401 (autouse)

QUEUE_ROOT = STORE / "consumequeue"


class CountingDisk(SimFileSystem):
    """The simulated disk, recording each sync's path (file or directory) in order; `on_sync`
    runs inside a sync, before it completes (what another thread could do meanwhile)."""

    def __init__(self) -> None:
        super().__init__(random.Random(7))
        self.synced: list[Path] = []
        self.on_sync: Callable[[Path], None] | None = None

    def before_sync(self, path: Path, inode: object) -> None:
        super().before_sync(path, inode)  # type: ignore[arg-type]
        self.synced.append(Path(path))
        hook, self.on_sync = self.on_sync, None
        if hook is not None:
            hook(Path(path))

    def take(self) -> list[Path]:
        synced, self.synced = self.synced, []
        return synced


def _open(disk: CountingDisk) -> MessageStore:
    return MessageStore(STORE, CONFIG, fs=disk, flush_driven=True)


def _put(store: MessageStore, topic: str, queue_id: int, body: bytes) -> None:
    result = store.append(MessageBatch(topic=topic, bodies=[body], queue_ids=[queue_id]))
    assert result.status is PutStatus.PUT_OK


def _bodies(store: MessageStore, topic: str, queue_id: int) -> list[bytes]:
    got = store.get_messages(topic, queue_id, 0, max_count=100, max_bytes=1 << 20)
    assert got.status is GetStatus.FOUND, (topic, queue_id, got.status)
    return [decode_record(record).body for record in got.records]


def test_a_queues_first_put_fsyncs_nothing_and_the_checkpoint_makes_it_durable() -> None:
    disk = CountingDisk()
    store = _open(disk)
    disk.take()
    for queue_id in range(3):
        _put(store, "orders", queue_id, b"m%d" % queue_id)
    # was: 3 directory fsyncs per new queue, on the put path under the store's lock
    assert not any(path.is_relative_to(QUEUE_ROOT) for path in disk.take())
    assert store.flush_step() and store.checkpoint_step()
    synced = set(disk.take())
    assert {QUEUE_ROOT, QUEUE_ROOT / "orders"} | {
        QUEUE_ROOT / "orders" / str(queue_id) for queue_id in range(3)} <= synced
    disk.crash()  # the checkpoint vouched for the entries: their directories are durable
    reopened = _open(disk)
    assert [_bodies(reopened, "orders", queue_id) for queue_id in range(3)] == [
        [b"m0"], [b"m1"], [b"m2"]]


def test_a_power_cut_before_the_checkpoint_loses_no_new_queue() -> None:
    # A crash between the CommitLog append and the creation of the new queues' files: the
    # entries were only in memory, and recovery rebuilds the index from the fsynced CommitLog
    # (everything past the checkpoint).
    disk = CountingDisk()
    store = _open(disk)
    assert store.checkpoint_step()
    for queue_id in range(4):
        _put(store, "audit", queue_id, b"a%d" % queue_id)
    assert store.flush_step()  # SYNC_FLUSH: these are the acknowledged puts
    assert not any(path.is_relative_to(QUEUE_ROOT) for path in disk.take())
    assert not disk.exists(QUEUE_ROOT / "audit")  # no file yet: the put path made none
    disk.crash()
    reopened = _open(disk)
    assert [_bodies(reopened, "audit", queue_id) for queue_id in range(4)] == [
        [b"a0"], [b"a1"], [b"a2"], [b"a3"]]


def test_a_checkpoint_fsyncs_only_the_queues_written_since_the_last_one() -> None:
    disk = CountingDisk()
    store = _open(disk)
    for queue_id in range(40):
        _put(store, "wide", queue_id, b"x")
    assert store.flush_step() and store.checkpoint_step()
    first = [path for path in disk.take() if path.is_relative_to(QUEUE_ROOT / "wide")]
    assert len([path for path in first if path.name.isdigit() and len(path.name) == 20]) == 40
    assert store.stats().unflushed_queue_count == 0  # (broker_stats: unflushed_queues)
    _put(store, "wide", 7, b"y")
    state = store._state
    assert state.unflushed_queues == {state.queues[("wide", 7)]}  # what the checkpoint visits
    assert store.stats().unflushed_queue_count == 1
    assert store.flush_step() and store.checkpoint_step()
    second = [path for path in disk.take() if path.is_relative_to(QUEUE_ROOT)]
    assert second == [QUEUE_ROOT / "wide" / "7" / f"{0:020d}"]  # one queue, no directory
    assert store.checkpoint_step()
    assert not any(path.is_relative_to(QUEUE_ROOT) for path in disk.take())


def test_a_queue_written_while_a_checkpoint_flushes_it_stays_to_flush() -> None:
    disk = CountingDisk()
    store = _open(disk)
    _put(store, "orders", 0, b"first")
    assert store.checkpoint_step()
    state = store._state
    queue = state.queues[("orders", 0)]

    def write_meanwhile(path: Path) -> None:  # the put path, between the flush and its end
        if path.is_relative_to(QUEUE_ROOT / "orders" / "0"):
            _put(store, "orders", 0, b"second")
    _put(store, "orders", 0, b"between")
    disk.on_sync = write_meanwhile
    assert store.checkpoint_step()
    assert queue in state.unflushed_queues and not queue.flushed
    assert store.checkpoint_step()
    assert queue not in state.unflushed_queues and queue.flushed


def test_a_directory_added_while_another_sync_runs_is_fsynced_by_it_or_later() -> None:
    disk = CountingDisk()
    disk.make_dirs(Path("/a/b"))
    syncs = PendingDirectorySyncs(disk)
    syncs.add(Path("/a"))
    # A second pass that starts while the first fsyncs /a must still fsync /a itself (else
    # it could vouch for it before the first pass's fsync ends), and an add during the
    # fsync keeps /a pending for the next pass.
    inner: list[int] = []

    def second_pass(path: Path) -> None:
        inner.append(syncs.sync_all())
        syncs.add(Path("/a"))
    disk.on_sync = second_pass
    assert syncs.sync_all() == 1
    assert inner == [1] and len(syncs) == 1
    assert syncs.sync_all() == 1 and len(syncs) == 0


def test_a_deleted_topics_pending_directories_are_skipped(
        recorded_fsync_failures: list[str]) -> None:  # noqa: F811 (the fixture)
    disk = CountingDisk()
    store = _open(disk)
    _put(store, "gone", 0, b"x")
    _put(store, "kept", 0, b"y")
    assert store.delete_topic("gone") == 1
    assert store.flush_step() and store.checkpoint_step()
    assert recorded_fsync_failures == []
    assert not any(path.is_relative_to(QUEUE_ROOT / "gone") for path in disk.take())
    disk.crash()
    reopened = _open(disk)
    assert reopened.queues() == [("kept", 0)]


def test_a_segment_is_mapped_on_its_first_read_and_never_once_closed() -> None:
    disk = CountingDisk()
    store = _open(disk)
    for queue_id in range(5):
        _put(store, "lazy", queue_id, b"z")
    assert store.flush_step() and store.checkpoint_step()  # creates the queues' files
    queues: list[ConsumeQueue] = [store._state.queues[("lazy", q)] for q in range(5)]
    segments = [queue._segments.segments[0] for queue in queues]
    assert all(segment._map is None for segment in segments)  # written, never read
    assert _bodies(store, "lazy", 3) == [b"z"]
    assert [segment._map is not None for segment in segments] == [
        False, False, False, True, False]
    segments[0].close()
    with pytest.raises(ValueError):
        segments[0].map  # noqa: B018 - the property maps: a closed one must refuse
    assert segments[0]._map is None


class CreatingDisk(CountingDisk):
    """Also records the files and directories created below the ConsumeQueue root."""

    def __init__(self) -> None:
        super().__init__()
        self.created: list[Path] = []

    def open(self, path: Path, *, create: bool, mode: int = 0o644):  # type: ignore[no-untyped-def]
        if create and not self.exists(path) and Path(path).is_relative_to(QUEUE_ROOT):
            self.created.append(Path(path))
        return super().open(path, create=create, mode=mode)

    def make_dirs(self, path: Path) -> None:
        if not self.exists(path) and Path(path).is_relative_to(QUEUE_ROOT):
            self.created.append(Path(path))
        super().make_dirs(path)


def test_a_queues_first_put_creates_no_file_and_is_read_from_memory() -> None:
    disk = CreatingDisk()
    store = _open(disk)
    disk.created.clear()
    for queue_id in range(3):
        _put(store, "fresh", queue_id, b"f%d" % queue_id)
    _put(store, "fresh", 1, b"again")
    assert store.flush_step()  # SYNC_FLUSH: the puts are acknowledged now
    assert disk.created == []  # no mkdir, no file create on the put path
    # read-your-ack: what was acknowledged is served before any file exists
    assert [_bodies(store, "fresh", queue_id) for queue_id in range(3)] == [
        [b"f0"], [b"f1", b"again"], [b"f2"]]
    assert store.max_queue_offset("fresh", 1) == 2
    assert store.flush_step() and store.checkpoint_step()  # the checkpoint creates them
    assert {QUEUE_ROOT / "fresh" / str(q) / f"{0:020d}" for q in range(3)} <= set(disk.created)
    _put(store, "fresh", 1, b"third")  # now appended to the file
    assert store.flush_step()
    assert _bodies(store, "fresh", 1) == [b"f1", b"again", b"third"]
    assert store.flush_step() and store.checkpoint_step()
    disk.crash()
    reopened = _open(disk)
    assert [_bodies(reopened, "fresh", queue_id) for queue_id in range(3)] == [
        [b"f0"], [b"f1", b"again", b"third"], [b"f2"]]


def test_a_crash_after_the_file_is_made_but_before_the_checkpoint_loses_nothing() -> None:
    # the checkpoint's first step ran (files made, entries written to them, nothing fsynced)
    # and the power went before it flushed and wrote the checkpoint
    disk = CountingDisk()
    store = _open(disk)
    assert store.checkpoint_step()
    for queue_id in range(3):
        _put(store, "half", queue_id, b"h%d" % queue_id)
    assert store.flush_step()  # the acknowledged puts (SYNC_FLUSH)
    state = store._state
    state.create_first_segments(list(state.unflushed_queues))
    assert all(state.queues[("half", q)]._head is None for q in range(3))
    disk.crash()
    reopened = _open(disk)
    assert [_bodies(reopened, "half", queue_id) for queue_id in range(3)] == [
        [b"h0"], [b"h1"], [b"h2"]]


def test_a_queue_fuller_than_its_first_segment_gets_it_on_the_put_path() -> None:
    disk = CreatingDisk()
    store = _open(disk)
    entries = CONFIG.consume_queue_segment_entries
    bodies = [b"b%d" % index for index in range(entries + 3)]
    for body in bodies:
        _put(store, "burst", 0, body)
    assert store.flush_step()
    assert QUEUE_ROOT / "burst" / "0" / f"{0:020d}" in disk.created  # made once, when full
    got = [decode_record(record).body for record in store.get_messages(
        "burst", 0, 0, max_count=entries, max_bytes=1 << 20).records]
    got += [decode_record(record).body for record in store.get_messages(
        "burst", 0, entries, max_count=entries, max_bytes=1 << 20).records]
    assert got == bodies
    assert store.flush_step() and store.checkpoint_step()
    disk.crash()
    reopened = _open(disk)
    assert reopened.max_queue_offset("burst", 0) == len(bodies)


def test_a_topic_deleted_while_its_first_file_is_made_leaves_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    disk = CountingDisk()
    store = _open(disk)
    _put(store, "gone", 0, b"x")
    _put(store, "kept", 0, b"y")
    queue = store._state.queues[("gone", 0)]
    made = queue.prepare_first_segment

    def then_delete() -> PreparedSegment | None:
        prepared = made()
        assert store.delete_topic("gone") == 1  # waits for `removing` when in another thread
        return prepared
    monkeypatch.setattr(queue, "prepare_first_segment", then_delete)
    assert store.flush_step() and store.checkpoint_step()
    assert not disk.exists(QUEUE_ROOT / "gone")
    disk.crash()
    assert _open(disk).queues() == [("kept", 0)]


def test_a_queue_cut_while_its_first_file_is_made_keeps_no_stale_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A truncation restarts the queue elsewhere meanwhile: the file made for its old start must
    # go (an empty segment left behind would read as entries of zeros below the new start).
    disk = CountingDisk()
    store = _open(disk)
    _put(store, "cut", 0, b"x")
    queue = store._state.queues[("cut", 0)]
    made = queue.prepare_first_segment
    restart_at = 3 * CONFIG.consume_queue_segment_entries

    def then_cut() -> PreparedSegment | None:
        prepared = made()
        with store._state.lock:
            queue.delete_all(next_queue_offset=restart_at)
        return prepared
    monkeypatch.setattr(queue, "prepare_first_segment", then_cut)
    store._state.create_first_segments([queue])
    assert not disk.exists(QUEUE_ROOT / "cut" / "0" / f"{0:020d}")
    assert queue.min_queue_offset == queue.max_queue_offset == restart_at
