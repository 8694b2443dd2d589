"""Topic configs as CommitLog records (ha/broker/metadata.py, topic_log.py; chaos finding 3).

Goal: the topics a broker knows are the fold of the topic records in log order, the same on
every replica; a create, update or delete is applied (and would be answered) only once its
put is PUT_OK, a failed one takes effect in log order once a later record is acknowledged; a
replica applies only what is below its confirm position, a take-over the whole log; topics.json
is a snapshot a restart replays from, and an old topics.json (no position) still loads.
Method: the pure table with hand-written records, and the shell over a real MessageStore with
the put path replaced at its boundary (tests/support/scripted_put.py), as for the offsets.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ha.broker.metadata import (
    TOPICS_TOPIC,
    TopicConfig,
    TopicRecord,
    TopicTable,
    decode_topic_record,
    encode_delete,
    encode_put,
)
from ha.broker.topic_log import TopicLog
from storage_engine import MessageBatch, MessageStore, PutStatus, StorageError
from tests.support.scripted_put import ScriptedPut, open_small_store

A3 = TopicConfig("a", 3, 3)


# -- the pure table ----------------------------------------------------------------------------
def test_records_round_trip() -> None:
    assert decode_topic_record(encode_put(TopicConfig("t", 2, 4, 6))) == \
        TopicRecord("put", "t", TopicConfig("t", 2, 4, 6))
    assert decode_topic_record(encode_delete("t")) == TopicRecord("delete", "t")


@pytest.mark.parametrize("body", [
    b"", b"not json", b"[]", b'{"v": 2, "op": "put", "name": "t"}',
    b'{"v": 1, "op": "drop", "name": "t"}', b'{"v": 1, "op": "delete", "name": "a b"}',
    b'{"v": 1, "op": "put", "name": "t", "read_queue_nums": 0, "write_queue_nums": 1}',
    b'{"v": 1, "op": "put", "name": "t", "read_queue_nums": 1, "write_queue_nums": 1025}',
    b'{"v": 1, "op": "put", "name": "t", "read_queue_nums": true, "write_queue_nums": 1}',
    (b'{"v": 1, "op": "put", "name": "t", "read_queue_nums": 1, "write_queue_nums": 1, '
     b'"perm": 8}'),
    b'{"v": 1, "op": "put", "name": "../x", "read_queue_nums": 1, "write_queue_nums": 1}',
    b"[" * 100_000,
])
def test_a_bad_record_is_refused_with_a_reason(body: bytes) -> None:
    with pytest.raises(ValueError):
        decode_topic_record(body)


def test_the_table_is_the_fold_in_log_order() -> None:
    table = TopicTable()
    records = [encode_put(A3), encode_put(TopicConfig("b", 1, 1)), b"garbage",
               encode_put(TopicConfig("a", 8, 8, 4)),  # an update: the last one wins
               encode_delete("b"), encode_delete("nothing"), encode_put(TopicConfig("c", 2, 2))]
    for queue_offset, body in enumerate(records):
        table.apply(queue_offset, body)
    assert table.sorted_topics() == [TopicConfig("a", 8, 8, 4), TopicConfig("c", 2, 2)]
    assert table.applied_queue_offset == len(records) and table.records_skipped == 1
    with pytest.raises(AssertionError):  # out of order is a bug, never applied
        table.apply(len(records) + 1, encode_delete("a"))


def test_the_snapshot_round_trips_and_old_files_replay_from_zero() -> None:
    table = TopicTable()
    table.apply(0, encode_put(A3))
    again = TopicTable.from_json(json.loads(json.dumps(table.to_json())))
    assert (again.topics, again.applied_queue_offset) == ({"a": A3}, 1)
    old = TopicTable.from_json({"topics": [{"name": "x", "read_queue_nums": 2,
                                            "write_queue_nums": 2, "perm": 6}]})
    assert old.applied_queue_offset == 0 and old.topics == {"x": TopicConfig("x", 2, 2)}
    for bad in ([], {"topics": {}}, {"topics": [{"name": "x"}]}, {"applied_queue_offset": -1},
                {"topics": [{"name": "x", "read_queue_nums": 1, "write_queue_nums": 1,
                             "perm": 9}]}, {"topics": ["x"]}):
        with pytest.raises((TypeError, ValueError)):
            TopicTable.from_json(bad)


# -- the shell over a real store ---------------------------------------------------------------
def _topic_log(directory: Path, store: MessageStore, put: ScriptedPut | None = None) -> TopicLog:
    return TopicLog(directory, store, put=put or ScriptedPut(store), write_timeout_ms=200)


def test_a_change_is_applied_only_once_put_ok(tmp_path: Path, store: MessageStore) -> None:
    put = ScriptedPut(store)
    topics = _topic_log(tmp_path / "c", store, put)
    put.verdicts = [PutStatus.FLUSH_SLAVE_TIMEOUT]
    assert topics.put(A3).status is PutStatus.FLUSH_SLAVE_TIMEOUT  # type: ignore[union-attr]
    assert topics.get("a") is None  # written, not acknowledged: unknown
    put.verdicts = [StorageError("fsync failed")]  # raised after its append: not pending
    with pytest.raises(StorageError):
        topics.put(TopicConfig("b", 1, 1))
    assert topics.get("b") is None
    # a later acknowledged record means the quorum holds the earlier ones too: "a" applies;
    # "b" is read back from the log only once confirmed, so "c" waits behind it
    refused = topics.put(TopicConfig("c", 1, 1))
    assert refused is not None and refused.status is PutStatus.FLUSH_SLAVE_TIMEOUT
    assert "earlier" in refused.error and [topic.name for topic in topics.all()] == ["a"]
    store.set_confirm_log_position(store.log_position_end)  # the quorum's confirm follows
    assert topics.put(TopicConfig("d", 1, 1)).status is PutStatus.PUT_OK  # type: ignore
    assert [topic.name for topic in topics.all()] == ["a", "b", "c", "d"]


def test_a_create_that_changes_nothing_writes_nothing(tmp_path: Path,
                                                      store: MessageStore) -> None:
    topics = _topic_log(tmp_path / "c", store)
    assert topics.put(A3).status is PutStatus.PUT_OK  # type: ignore[union-attr]
    assert topics.put(A3) is None  # the same config: already acknowledged
    assert topics.put(TopicConfig("a", 1, 1), only_if_absent=True) is None  # auto-create
    assert topics.delete("nothing") is None
    assert topics.records_written == 1 and topics.get("a") == A3
    assert topics.put(TopicConfig("a", 5, 5)).status is PutStatus.PUT_OK  # type: ignore
    assert topics.get("a") == TopicConfig("a", 5, 5)


def test_a_replica_applies_below_confirm_and_a_take_over_the_whole_log(
        tmp_path: Path, store: MessageStore) -> None:
    master = _topic_log(tmp_path / "master", store)
    master.put(A3)
    confirmed = store.log_position_end
    master.delete("a")
    store.set_confirm_log_position(confirmed)
    replica = _topic_log(tmp_path / "replica", store)  # the same log, as a slave holds it
    replica.catch_up()
    assert replica.all() == [A3]
    new_master = _topic_log(tmp_path / "new", store)
    store.set_confirm_log_position(store.log_position_end)  # what become_master does first
    new_master.take_over()
    assert new_master.all() == [] and new_master.applied_queue_offset == 2
    replica.catch_up()
    assert replica.all() == []


def test_a_restart_replays_from_the_snapshot(tmp_path: Path) -> None:
    store = open_small_store(tmp_path / "store")
    topics = _topic_log(tmp_path / "c", store)
    topics.put(A3)
    topics.close()  # topics.json covers record 0
    assert json.loads((tmp_path / "c" / "topics.json").read_text())["applied_queue_offset"] == 1
    topics.put(TopicConfig("b", 2, 2))  # after the snapshot (a crash would lose only the file)
    store.set_confirm_log_position(store.log_position_end)
    store.close()
    store = open_small_store(tmp_path / "store")
    try:
        store.set_confirm_log_position(store.log_position_end)
        again = _topic_log(tmp_path / "c", store)
        # a first put into "b" before any catch-up pass: the auto-create decides on every
        # confirmed record, so it finds "b" and writes no record with the default queues
        assert again.put(TopicConfig("b", 8, 8), only_if_absent=True) is None
        assert again.all() == [A3, TopicConfig("b", 2, 2)] and again.records_applied == 1
        assert again.records_written == 0
        started = _topic_log(tmp_path / "c", store).start()  # the broker starts it so
        try:
            assert started.get("b") == TopicConfig("b", 2, 2)
        finally:
            started.close()
    finally:
        store.close()


def test_records_lost_to_retention_come_from_the_masters_snapshot(
        tmp_path: Path, store: MessageStore) -> None:
    writer = _topic_log(tmp_path / "w", store)
    writer.put(A3)
    metadata = json.loads(json.dumps(writer.metadata_json()))  # as it travels
    assert metadata["topics"] == [A3.to_json()]  # the shape slaves before records read
    for _ in range(20):  # fill the first segment: the next record starts the second
        store.append(MessageBatch(topic="filler", bodies=[b"f" * 60_000], queue_ids=[0]))
    writer.put(TopicConfig("b", 1, 1))
    store.set_confirm_log_position(store.log_position_end)
    assert store.delete_expired(now_ms=1 << 60, floor_log_position=store.log_position_end,
                                disk_used_ratio=0.0) >= 1
    assert store.min_queue_offset(TOPICS_TOPIC, 0) == 1
    slave = _topic_log(tmp_path / "s", store)
    slave.catch_up()
    assert slave.all() == [] and slave.applied_queue_offset == 0  # waits for the snapshot
    slave.note_master_snapshot(metadata)
    slave.catch_up()
    assert slave.all() == [A3, TopicConfig("b", 1, 1)] and slave.records_lost == 0
