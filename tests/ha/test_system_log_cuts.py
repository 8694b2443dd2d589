"""A system-log fold across a fork truncation (ha/broker/system_log.py; chaos finding 8).

Goal: after a fork truncation cuts the tail of a replica's log and the new master's records
arrive at the same queue offsets, the fold holds the new records' state: it never skips a
record because a read ran into the truncation (seed 606: a deposed master's catch-up read its
cut tail as 0-byte records while the truncation zeroed the ConsumeQueue, skipped them, and
never applied the new master's acknowledged commits at those offsets), and a fold that had
applied records the cut removes goes back to a state below the cut and replays.

Method: real MessageStores in a tmp dir (auto_confirm off: the test moves the confirm position
as the quorum would), the real OffsetLog / TopicLog; the new master's bytes reach the deposed
replica as the HA link ships them (read_log -> append_replicated -> dispatch_replicated). The
read during the truncation is made deterministic by running the catch-up from inside the
store's own truncation, at the fsync that follows the zeroing of the offsets' ConsumeQueue:
the window the chaos run hit. Since the store moves the queue's end down before it zeroes
(tests/storage_engine/test_read_during_truncation.py), that read finds nothing there; with
the store as it was, it reads seed 606's three 0-byte records, and the fold's own check ends
the pass (what a record that does not decode does: the last test).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha.broker.metadata import TopicConfig
from ha.broker.offset_log import OFFSETS_TOPIC, OffsetLog
from ha.broker.offset_table import encode_commit
from ha.broker.system_log import RESTORE_POINTS_KEPT
from ha.broker.topic_log import TopicLog
from storage_engine import MessageBatch, MessageStore, PutStatus
from tests.support.replica_stores import during_queue_zeroing, ship
from tests.support.scripted_put import ScriptedPut, open_small_store


@pytest.fixture
def master(tmp_path: Path) -> Iterator[MessageStore]:
    store = open_small_store(tmp_path / "master")
    try:
        yield store
    finally:
        store.close()


def _offset_log(directory: Path, store: MessageStore, put: ScriptedPut | None = None,
                flush_interval_ms: int = 100_000) -> OffsetLog:
    return OffsetLog(directory, store, flush_interval_ms=flush_interval_ms,
                     put=put or ScriptedPut(store), write_timeout_ms=200)


def _commit(store: MessageStore, queue_offset: int) -> None:
    store.append(MessageBatch(topic=OFFSETS_TOPIC, bodies=[encode_commit("g", "t", 0,
                                                                          queue_offset)],
                              queue_ids=[0]))


def _replica_at_fork(tmp_path: Path, store: MessageStore, master: MessageStore,
                     commits: int = 3) -> tuple[OffsetLog, int]:
    """Commits 1..`commits` on the master, shipped to `store` and confirmed there (records
    both replicas hold), and `store`'s offset log caught up on them; returns it and the log's
    end (the fork point of what follows)."""
    for queue_offset in range(1, commits + 1):
        _commit(master, queue_offset)
    ship(master, store)
    fork = store.log_position_end
    store.set_confirm_log_position(fork)
    deposed = _offset_log(tmp_path / "deposed", store)
    deposed.catch_up()
    return deposed, fork


def test_a_read_during_the_fork_truncation_skips_nothing(
        tmp_path: Path, store: MessageStore, master: MessageStore,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Seed 606 replayed: the deposed master's catch-up reads its forked tail while the
    truncation zeroes the ConsumeQueue; the new master's commits at those queue offsets must
    be applied once they arrive."""
    deposed, fork = _replica_at_fork(tmp_path, store, master)
    assert deposed.query("g", "t") == {"0": 3}
    for queue_offset in (90, 91, 92):  # its last term's tail: never acknowledged
        _commit(store, queue_offset)
    for queue_offset in (4, 5, 6):  # the new master's acknowledged commits
        _commit(master, queue_offset)
    master.set_confirm_log_position(master.log_position_end)

    fired = during_queue_zeroing(monkeypatch, OFFSETS_TOPIC, deposed.catch_up)
    store.truncate_to(fork)  # the handshake's cut
    assert fired, "the catch-up did not run inside the truncation"
    assert deposed.applied_queue_offset == 3  # nothing skipped

    ship(master, store)
    store.set_confirm_log_position(store.log_position_end)
    deposed.catch_up()
    assert deposed.query("g", "t") == {"0": 6}
    assert deposed.applied_queue_offset == 6


def test_a_fold_past_the_cut_rolls_back_and_replays(tmp_path: Path, store: MessageStore,
                                                    master: MessageStore) -> None:
    """The deposed master applied records of its tail (its puts were answered PUT_OK, here
    by the scripted quorum), the cut removes them: the fold returns below the cut and applies
    the new master's records at the same queue offsets."""
    deposed, fork = _replica_at_fork(tmp_path, store, master)
    for queue_offset in (90, 91, 92):
        assert deposed.commit("g", "t", 0, queue_offset).status is PutStatus.PUT_OK
    assert deposed.query("g", "t") == {"0": 92} and deposed.applied_queue_offset == 6
    for queue_offset in (4, 5):
        _commit(master, queue_offset)
    store.truncate_to(fork)
    ship(master, store)
    store.set_confirm_log_position(store.log_position_end)
    deposed.catch_up()
    assert deposed.query("g", "t") == {"0": 5}
    assert deposed.applied_queue_offset == 5 and deposed.rollbacks == 1
    _commit(master, 6)  # and it keeps following
    ship(master, store)
    store.set_confirm_log_position(store.log_position_end)
    assert deposed.query("g", "t") == {"0": 6}


def test_a_rollback_starts_from_the_last_snapshot_below_the_cut(
        tmp_path: Path, store: MessageStore, master: MessageStore) -> None:
    """A snapshot flushed before the tail is the restart point (only what follows is
    replayed); one that covers cut records is never used; the file is rewritten."""
    deposed, fork = _replica_at_fork(tmp_path, store, master, commits=50)
    deposed.close()  # a snapshot below the cut (records 0-49)
    deposed.commit("h", "t", 0, 7)
    deposed.commit("g", "t", 0, 99)
    deposed.close()  # a snapshot that covers the tail: unusable after the cut
    _commit(master, 51)
    store.truncate_to(fork)
    ship(master, store)
    store.set_confirm_log_position(store.log_position_end)
    applied = deposed.records_applied
    deposed.catch_up()
    assert deposed.query("g", "t") == {"0": 51} and deposed.query("h", "t") == {}
    assert deposed.records_applied - applied == 1  # replayed from record 50, not from 0
    deposed.close()
    again = _offset_log(tmp_path / "deposed", store)  # the file holds the rolled-back fold
    assert again.query("g", "t") == {"0": 51} and again.query("h", "t") == {}


def test_a_topic_fold_past_the_cut_rolls_back(tmp_path: Path, store: MessageStore,
                                              master: MessageStore) -> None:
    """The same for the topic configs: a topic the deposed master created in its cut tail is
    gone, the new master's create at that queue offset is there."""
    old = TopicLog(tmp_path / "old", master, put=ScriptedPut(master), write_timeout_ms=200)
    old.put(TopicConfig("a", 1, 1))
    ship(master, store)
    fork = store.log_position_end
    store.set_confirm_log_position(fork)
    deposed = TopicLog(tmp_path / "deposed", store, put=ScriptedPut(store),
                       write_timeout_ms=200)
    deposed.catch_up()
    deposed.put(TopicConfig("cut", 2, 2))
    assert [topic.name for topic in deposed.all()] == ["a", "cut"]
    old.put(TopicConfig("b", 4, 4))
    store.truncate_to(fork)
    ship(master, store)
    store.set_confirm_log_position(store.log_position_end)
    assert [topic.name for topic in deposed.all()] == ["a", "b"]
    assert deposed.get("b") == TopicConfig("b", 4, 4) and deposed.get("cut") is None


def test_a_cut_above_what_the_fold_applied_changes_nothing(
        tmp_path: Path, store: MessageStore) -> None:
    """A cut past the fold's last record (another topic's tail, unconfirmed offset records it
    never applied) keeps the fold and replays nothing."""
    replica = _offset_log(tmp_path / "r", store)
    for queue_offset in (1, 2):
        _commit(store, queue_offset)
    store.set_confirm_log_position(store.log_position_end)
    replica.catch_up()
    fork = store.log_position_end
    _commit(store, 9)
    store.append(MessageBatch(topic="user", bodies=[b"x"], queue_ids=[0]))
    store.truncate_to(fork)
    applied = replica.records_applied
    replica.catch_up()
    assert replica.query("g", "t") == {"0": 2} and replica.rollbacks == 0
    assert replica.records_applied == applied


def test_an_undecodable_confirmed_record_stalls_the_fold_loudly(
        tmp_path: Path, store: MessageStore, caplog: pytest.LogCaptureFixture) -> None:
    """A confirmed record that does not decode (corrupted on this replica) is never skipped:
    the fold stops before it, says so at every pass it still fails (rate-limited), and counts
    it; the records after it wait. What a torn read looked like is what a corrupt record looks
    like, and skipping either can lose an acknowledged change."""
    for queue_offset in (1, 2, 3):
        _commit(store, queue_offset)
    store.set_confirm_log_position(store.log_position_end)
    second = store.get_messages(OFFSETS_TOPIC, 0, 1, max_count=1, max_bytes=1 << 20)
    record = second.records[0]
    position = store.log_position_end - 2 * len(record)  # the records have one size
    segment = store._commit_log.segment_for(position)  # a bit flip in record 1's body
    relative = position - segment.base_position + len(record) // 2
    segment.file.write_at(bytes([segment.map[relative] ^ 0x01]), relative)
    replica = _offset_log(tmp_path / "r", store)
    with caplog.at_level("WARNING", logger="ha.broker.system_log"):
        replica.catch_up()
        replica.catch_up()
    assert replica.query("g", "t") == {"0": 1} and replica.applied_queue_offset == 1
    assert replica.records_unreadable >= 2
    warnings = [r for r in caplog.records if "does not decode" in r.getMessage()]
    assert len(warnings) == 1 and "record 1 " in warnings[0].getMessage()


def test_a_snapshot_of_records_the_log_lost_is_rolled_back_at_start(
        tmp_path: Path, store: MessageStore) -> None:
    """A snapshot written while the fold covered records that the log no longer holds when
    the broker starts (a cut before the restart, a tail lost with unflushed bytes): the fold
    rebuilds below the log's end, and the records written there since are applied."""
    for queue_offset in (1, 2):
        _commit(store, queue_offset)
    store.set_confirm_log_position(store.log_position_end)
    fork = store.log_position_end
    before = _offset_log(tmp_path / "c", store)
    before.catch_up()
    for queue_offset in (90, 91):  # acked above the confirm position (the scripted quorum)
        before.commit("g", "t", 0, queue_offset)
    before.close()  # the file covers records 0-3, the last at or past `fork`
    store.truncate_to(fork)  # the tail is lost before the restart
    again = _offset_log(tmp_path / "c", store)
    again.catch_up()  # what start() does before the broker serves
    assert again.query("g", "t") == {"0": 2} and again.rollbacks == 1
    for queue_offset in (3, 4):  # the new master's records at those queue offsets
        _commit(store, queue_offset)
    store.set_confirm_log_position(store.log_position_end)
    assert again.query("g", "t") == {"0": 4}


def test_a_snapshot_from_before_log_positions_still_loads(tmp_path: Path,
                                                          store: MessageStore) -> None:
    """consumerOffset.json written before snapshots said their log position: the broker
    starts from it and applies only the records after it."""
    for queue_offset in (1, 2, 3):
        _commit(store, queue_offset)
    store.set_confirm_log_position(store.log_position_end)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / "consumerOffset.json").write_text(json.dumps(
        {"offsets": {"g": {"t": {"0": 2}}}, "applied_queue_offset": 2}))
    offsets = _offset_log(tmp_path / "c", store)
    offsets.catch_up()
    assert offsets.query("g", "t") == {"0": 3} and offsets.records_applied == 1
    offsets.close()
    saved = json.loads((tmp_path / "c" / "consumerOffset.json").read_text())
    last = store.get_messages(OFFSETS_TOPIC, 0, 2, max_count=1, max_bytes=1 << 20)
    assert saved["applied_log_position"] == store.log_position_end - len(last.records[0])


def _cut_after_retention(tmp_path: Path, store: MessageStore) -> OffsetLog:
    """A fold that applied group h's commits (records 0-2, queue 1, then removed by
    retention), one more (record 3, queue 0), and a cut tail (record 4, g at 90, acked above
    the confirm position); no snapshot was ever flushed, so a rebuild starts from the base."""
    for queue_offset in (1, 2, 3):
        store.append(MessageBatch(topic=OFFSETS_TOPIC, bodies=[encode_commit("h", "t", 1,
                                                                              queue_offset)],
                                  queue_ids=[0]))
    for _ in range(20):  # fill the first segment: the next record starts the second
        store.append(MessageBatch(topic="filler", bodies=[b"f" * 60_000], queue_ids=[0]))
    store.append(MessageBatch(topic=OFFSETS_TOPIC, bodies=[encode_commit("h", "t", 0, 4)],
                              queue_ids=[0]))
    store.set_confirm_log_position(store.log_position_end)
    fork = store.log_position_end
    fold = _offset_log(tmp_path / "c", store)
    fold.catch_up()
    assert fold.commit("g", "t", 0, 90).status is PutStatus.PUT_OK
    assert store.delete_expired(now_ms=1 << 60, floor_log_position=fork,
                                disk_used_ratio=0.0) >= 1
    assert store.min_queue_offset(OFFSETS_TOPIC, 0) == 3
    store.truncate_to(fork)
    return fold


def test_a_rebuild_past_removed_records_waits_for_the_masters_snapshot(
        tmp_path: Path, store: MessageStore) -> None:
    """A replica's rebuild that needs records retention removed keeps the table as it was
    (never one without them) until the master's snapshot comes, then takes it."""
    fold = _cut_after_retention(tmp_path, store)
    master_table = {"offsets": {"h": {"t": {"0": 4, "1": 3}}},
                    "offsets_applied_queue_offset": 4}
    fold.catch_up()
    assert fold.query("h", "t") == {"0": 4, "1": 3} and fold.rollbacks == 0  # waits
    fold.note_master_snapshot(master_table)
    fold.catch_up()
    assert fold.query("h", "t") == {"0": 4, "1": 3} and fold.query("g", "t") == {}
    assert fold.rollbacks == 1 and fold.records_lost == 0


def test_a_take_over_whose_rebuild_needs_removed_records_keeps_the_table(
        tmp_path: Path, store: MessageStore) -> None:
    """A new master cannot wait for anyone's snapshot: rather than skip the removed records
    (every change they made lost), it keeps the table as it was, and says so."""
    fold = _cut_after_retention(tmp_path, store)
    fold.take_over()
    assert fold.query("h", "t") == {"0": 4, "1": 3} and fold.records_lost == 0
    assert fold.applied_queue_offset == 4  # the next record goes where the log ends


def test_the_last_snapshot_below_the_confirm_position_outlives_the_recent_ones(
        tmp_path: Path, store: MessageStore) -> None:
    """More snapshots than RESTORE_POINTS_KEPT were taken above the confirm position (a
    master acked commits for a while before its confirm position followed): a rollback
    still starts from the last one that was all below the confirm position."""
    for queue_offset in range(1, 21):
        _commit(store, queue_offset)
    store.set_confirm_log_position(store.log_position_end)
    fork = store.log_position_end
    fold = _offset_log(tmp_path / "c", store)
    fold.catch_up()
    fold.close()  # below the confirm position: 20 records
    for queue_offset in range(RESTORE_POINTS_KEPT + 1):
        fold.commit("g", "t", 1, queue_offset)
        fold.close()  # a snapshot above the confirm position
    store.truncate_to(fork)
    _commit(store, 21)
    store.set_confirm_log_position(store.log_position_end)
    applied = fold.records_applied
    fold.catch_up()
    assert fold.query("g", "t") == {"0": 21} and fold.rollbacks == 1
    assert fold.records_applied - applied == 1  # from record 20, not from 0


def test_a_log_restarted_past_its_end_keeps_the_table(tmp_path: Path,
                                                      store: MessageStore) -> None:
    """`reset_to` (a replica so far behind that it restarts its log empty at the master's
    minimum) drops records, it does not fork them: what the table applied was confirmed, so
    it stays (the records after the gap come from the master's snapshot, as before)."""
    for queue_offset in (1, 2, 3):
        _commit(store, queue_offset)
    store.set_confirm_log_position(store.log_position_end)
    replica = _offset_log(tmp_path / "r", store)
    replica.catch_up()
    store.reset_to(store.segment_size_bytes * 4)
    replica.catch_up()
    assert replica.query("g", "t") == {"0": 3} and replica.rollbacks == 0
