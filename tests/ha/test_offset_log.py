"""Consumer-group offsets as CommitLog records (ha/broker/offset_table.py, offset_log.py).

Goal: the offsets a broker serves are the fold of the offset records in log order, the same on
every replica; a commit is applied (and would be answered) only once its put is PUT_OK, and a
record whose put failed takes effect in log order once a later one is acknowledged, never out
of order; a replica applies only what is below its confirm position; a take-over applies the
whole log; a restart replays from the snapshot. Method: the pure table with hand-written
records, and the shell over a real MessageStore (auto_confirm off: the test moves the confirm
position as the quorum would), with the put path replaced at its boundary by an append to that
store answered with a scripted status (the quorum's verdict).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ha.broker.offset_log import OffsetLog
from ha.broker.offset_table import (
    OFFSETS_TOPIC,
    OffsetRecord,
    OffsetTable,
    decode_offset_record,
    encode_commit,
    encode_delete_group,
)
from storage_engine import MessageBatch, MessageStore, PutStatus
from tests.support.scripted_put import ScriptedPut
from tests.support.scripted_put import open_small_store as _open_store


# -- the pure table ----------------------------------------------------------------------------
def test_records_round_trip() -> None:
    assert decode_offset_record(encode_commit("g", "t", 3, 17)) == \
        OffsetRecord("commit", "g", "t", 3, 17)
    assert decode_offset_record(encode_delete_group("g")) == OffsetRecord("delete_group", "g")


@pytest.mark.parametrize("body", [
    b"", b"not json", b"[]", b'{"v": 2, "op": "commit"}', b'{"v": 1, "op": "drop", "group": "g"}',
    b'{"v": 1, "op": "commit", "group": "g", "topic": "t", "queue_id": -1, "queue_offset": 1}',
    b'{"v": 1, "op": "commit", "group": "g", "topic": "t", "queue_id": 0, "queue_offset": true}',
    (b'{"v": 1, "op": "commit", "group": "bad name", "topic": "t", "queue_id": 0, '
     b'"queue_offset": 1}'),
    (b'{"v": 1, "op": "commit", "group": "g", "topic": "t/../x", "queue_id": 0, '
     b'"queue_offset": 1}'),
    b"[" * 100_000,
])
def test_a_bad_record_is_refused_with_a_reason(body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_offset_record(body)


def test_the_table_is_the_fold_in_log_order() -> None:
    table = OffsetTable()
    records = [encode_commit("g", "t", 0, 5), encode_commit("g", "t", 1, 2),
               b"garbage", encode_commit("g", "t", 0, 3),  # a reset back: the last one wins
               encode_commit("h", "t", 0, 1), encode_delete_group("h"),
               encode_commit("g", "u", 0, 8)]
    for queue_offset, body in enumerate(records):
        table.apply(queue_offset, body)
    assert table.offsets == {"g": {"t": {"0": 3, "1": 2}, "u": {"0": 8}}}
    assert table.applied_queue_offset == len(records)
    assert table.records_skipped == 1
    with pytest.raises(AssertionError):  # out of order is a bug, never applied
        table.apply(len(records) + 1, encode_commit("g", "t", 0, 9))


def test_the_snapshot_round_trips_and_old_files_replay_from_zero() -> None:
    table = OffsetTable()
    table.apply(0, encode_commit("g", "t", 0, 5))
    again = OffsetTable.from_json(json.loads(json.dumps(table.to_json())))
    assert (again.offsets, again.applied_queue_offset) == ({"g": {"t": {"0": 5}}}, 1)
    old = OffsetTable.from_json({"offsets": {"g": {"t": {"0": 4}}}})  # before offset records
    assert old.applied_queue_offset == 0 and old.query("g", "t") == {"0": 4}
    for bad in ([], {"offsets": {"g": {"t": {"0": "x"}}}}, {"applied_queue_offset": -1}):
        with pytest.raises((TypeError, ValueError)):
            OffsetTable.from_json(bad)


# -- the shell over a real store ---------------------------------------------------------------
def _offset_log(directory: Path, store: MessageStore, put: ScriptedPut | None = None,
                write_timeout_ms: int = 200) -> OffsetLog:
    return OffsetLog(directory, store, flush_interval_ms=100_000,
                     put=put or ScriptedPut(store), write_timeout_ms=write_timeout_ms)


def test_a_commit_is_applied_only_once_put_ok(tmp_path: Path, store: MessageStore) -> None:
    put = ScriptedPut(store)
    offsets = _offset_log(tmp_path / "c", store, put)
    assert offsets.commit("g", "t", 0, 5).status is PutStatus.PUT_OK
    assert offsets.query("g", "t") == {"0": 5}
    put.verdicts = [PutStatus.FLUSH_SLAVE_TIMEOUT]
    assert offsets.commit("g", "t", 0, 9).status is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert offsets.query("g", "t") == {"0": 5}  # written, not acknowledged: not served
    # a later acknowledged record means the quorum holds the earlier one too: log order
    assert offsets.commit("g", "t", 1, 2).status is PutStatus.PUT_OK
    assert offsets.query("g", "t") == {"0": 9, "1": 2}
    put.verdicts = [PutStatus.SLAVE_NOT_AVAILABLE]
    offsets.commit("g", "t", 1, 7)
    offsets.commit("g", "t", 1, 4)  # acked after the failed 7: 4 is last in the log
    assert offsets.query("g", "t") == {"0": 9, "1": 4}
    assert offsets.delete_group("nobody") is None
    assert offsets.delete_group("g").status is PutStatus.PUT_OK  # type: ignore[union-attr]
    assert offsets.query("g", "t") == {}


def test_a_replica_applies_only_below_its_confirm_position(tmp_path: Path,
                                                           store: MessageStore) -> None:
    master = _offset_log(tmp_path / "master", store)
    master.commit("g", "t", 0, 1)
    confirmed = store.log_position_end
    master.commit("g", "t", 0, 2)
    store.set_confirm_log_position(confirmed)
    replica = _offset_log(tmp_path / "replica", store)  # the same log, as a slave holds it
    replica.catch_up()
    assert replica.query("g", "t") == {"0": 1}
    store.set_confirm_log_position(store.log_position_end)
    assert replica.query("g", "t") == {"0": 2}  # a read catches up first
    assert replica.applied_queue_offset == master.applied_queue_offset == 2


def test_a_take_over_applies_the_whole_log_and_forgets_pending(tmp_path: Path,
                                                               store: MessageStore) -> None:
    put = ScriptedPut(store)
    offsets = _offset_log(tmp_path / "c", store, put)
    put.verdicts = [PutStatus.FLUSH_SLAVE_TIMEOUT]
    offsets.commit("g", "t", 0, 9)  # the last term could not ack it; the log kept it
    store.set_confirm_log_position(store.log_position_end)  # what become_master does first
    offsets.take_over()
    assert offsets.query("g", "t") == {"0": 9}
    assert offsets.commit("g", "t", 0, 10).status is PutStatus.PUT_OK
    assert offsets.query("g", "t") == {"0": 10} and offsets.applied_queue_offset == 2


def test_a_record_this_process_did_not_write_waits_for_its_confirmation(
        tmp_path: Path, store: MessageStore) -> None:
    """A put cut short by an error (or a restart) leaves a record the pending list lacks: the
    next acknowledged commit reads it from the log once confirmed, never skips it."""
    offsets = _offset_log(tmp_path / "c", store)
    store.append(MessageBatch(topic=OFFSETS_TOPIC, bodies=[encode_commit("g", "t", 0, 3)],
                              queue_ids=[0]))
    refused = offsets.commit("g", "t", 1, 1)  # confirm is still at 0: cannot apply in order
    assert refused.status is PutStatus.FLUSH_SLAVE_TIMEOUT and "earlier" in refused.error
    assert offsets.query("g", "t") == {}
    store.set_confirm_log_position(store.log_position_end)
    assert offsets.commit("g", "t", 1, 2).status is PutStatus.PUT_OK
    assert offsets.query("g", "t") == {"0": 3, "1": 2}


def test_a_restart_replays_from_the_snapshot(tmp_path: Path) -> None:
    store = _open_store(tmp_path / "store")
    offsets = _offset_log(tmp_path / "c", store)
    for queue_offset in range(5):
        offsets.commit("g", "t", 0, queue_offset)
    offsets.close()  # the snapshot covers records 0-4
    offsets.commit("g", "t", 1, 7)  # after the snapshot (a crash would lose only the file)
    store.set_confirm_log_position(store.log_position_end)
    store.close()
    store = _open_store(tmp_path / "store")
    try:
        store.set_confirm_log_position(store.log_position_end)
        again = _offset_log(tmp_path / "c", store)
        again.catch_up()
        assert again.query("g", "t") == {"0": 4, "1": 7}
        assert again.records_applied == 1  # only what the snapshot did not cover
    finally:
        store.close()


def test_records_lost_to_retention_come_from_the_masters_snapshot(
        tmp_path: Path, store: MessageStore) -> None:
    """Retention removed records a replica never applied (it joined late, or was down past
    fileReservedTime): a slave takes the master's offsets from the HA metadata instead of
    skipping them; a take-over without that snapshot skips them and says so."""
    writer = _offset_log(tmp_path / "w", store)
    for queue_offset in range(3):
        writer.commit("g", "t", 0, queue_offset)
    metadata = json.loads(json.dumps(writer.metadata_json()))  # as it travels
    for _ in range(20):  # fill the first segment: the next record starts the second
        store.append(MessageBatch(topic="filler", bodies=[b"f" * 60_000], queue_ids=[0]))
    writer.commit("g", "t", 1, 5)
    store.set_confirm_log_position(store.log_position_end)
    assert store.delete_expired(now_ms=1 << 60, floor_log_position=store.log_position_end,
                                disk_used_ratio=0.0) >= 1
    assert store.min_queue_offset(OFFSETS_TOPIC, 0) == 3
    slave = _offset_log(tmp_path / "s", store)
    slave.catch_up()
    assert slave.query("g", "t") == {} and slave.applied_queue_offset == 0  # waits
    slave.note_master_snapshot(metadata)
    slave.catch_up()
    assert slave.query("g", "t") == {"0": 2, "1": 5} and slave.records_lost == 0
    late = _offset_log(tmp_path / "late", store)
    late.take_over()
    assert late.query("g", "t") == {"1": 5} and late.records_lost == 3
