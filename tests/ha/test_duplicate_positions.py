"""A duplicate answer names the original's positions (issue 43).

Goal: a batch is stored, its answer lost, and it is sent again, to the same master, to the
master restarted on the same log, or to a new master that took over with a copy of the log
(its table rebuilt from the markers, or kept current as a slave): every answer of the retry
names the same positions as the first answer (every row's queue id and queue offset, the
batch's log end). Where the broker can no longer know them (older than the batches kept per
producer, a retry whose rows are not the stored ones) the answer is DUPLICATE_POSITION_UNKNOWN,
never PUT_OK without positions. Method: the broker's idempotence shell over a real MessageStore
in temporary directories, put the way the broker puts (ha/broker/service.py `_put_batch`), the
"new master" a store opened on a copy of the old one's directory (what it had replicated).
"""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import pyarrow as pa
import pytest

from connector.client import with_marker
from connector.client.producer_core import put_results
from connector.protocol import PutIdempotence, PutReply, code_for
from ha.broker.arrow_codec import rows_from_batch
from ha.broker.batch_places import locate_in_log
from ha.broker.idempotence import (
    IdempotenceConfig,
    IdempotenceFollower,
    IdempotenceTable,
    IdempotentPuts,
    rebuild_table,
)
from storage_engine import MessageBatch, MessageStore, StoreConfig

STORE = StoreConfig(commit_log_segment_size_bytes=1 << 20, message_size_max_bytes=8192,
                    consume_queue_segment_entries=64)
CONFIG = IdempotenceConfig(producers_max=100, window_messages=10_000, window_ms=10**12,
                           batches_max=3)
NOW_MS = 2_000_000_000_000
TOPIC = "t"


def marked(producer: str, sequence: int, bodies: list[bytes]) -> pa.RecordBatch:
    return with_marker(pa.record_batch({"body": pa.array(bodies, pa.binary())}),
                       PutIdempotence(producer, sequence))


def put_like_broker(store: MessageStore, batch: pa.RecordBatch,
                    queue_ids: list[int]) -> PutReply:
    """The broker's store step: one append, the reply in the broker's shape."""
    rows = rows_from_batch(batch)
    result = store.put_messages(MessageBatch(topic=TOPIC, bodies=rows.bodies,
                                             queue_ids=queue_ids, properties=rows.properties,
                                             born_timestamp_ms=1))
    assert result.status.name == "PUT_OK", result
    offsets = list(result.queue_offsets)
    if len(set(queue_ids)) == 1:
        return PutReply("PUT_OK", 0, [[queue_ids[0], offsets[0], len(queue_ids)]], None,
                        result.log_position_end)
    ranges: dict[int, list[int]] = {}
    for queue_id, queue_offset in zip(queue_ids, offsets, strict=True):
        ranges.setdefault(queue_id, [queue_id, queue_offset, 0])[2] += 1
    return PutReply("PUT_OK", 0, list(ranges.values()), list(queue_ids),
                    result.log_position_end)


def where(reply: PutReply, rows: int) -> tuple[list[tuple[int, int]], int]:
    """What an answer says of the rows: (queue id, queue offset) per row, and the log end."""
    return reply.row_offsets(rows), reply.log_position_end


def never_stored() -> PutReply:
    raise AssertionError("a duplicate was stored again")


class Master:
    """A broker's put path: the idempotence shell over a store."""

    def __init__(self, store: MessageStore, table: IdempotenceTable) -> None:
        self.store = store
        self.puts = IdempotentPuts(table, functools.partial(locate_in_log, store))

    def put(self, batch: pa.RecordBatch, queue_ids: list[int]) -> PutReply:
        return self.puts.put(batch, functools.partial(put_like_broker, self.store, batch,
                                                      queue_ids), topic=TOPIC)

    def resend(self, batch: pa.RecordBatch) -> PutReply:
        reply = self.puts.put(batch, never_stored, topic=TOPIC)
        assert reply.duplicate
        return reply


# (name, the rows' queues) of the batches under test; the others share their queues
SHAPES = [("one queue", [1, 1, 1, 1]),
          ("several queues", [0, 2, 0, 1, 2, 2]),
          ("one row", [2])]


def load(master: Master, queue_ids: list[int]) -> tuple[pa.RecordBatch, PutReply]:
    """Other producers' batches around the one under test, on the same queues."""
    master.put(marked("before", 0, [b"b%d" % i for i in range(5)]), [0, 1, 2, 1, 0])
    master.put(marked("before", 1, [b"c"] * 3), [queue_ids[-1]] * 3)  # same bytes, next door
    batch = marked("p", 0, [b"row-%d" % i for i in range(len(queue_ids))])
    first = master.put(batch, queue_ids)
    assert not first.duplicate
    master.put(marked("after", 0, [b"a%d" % i for i in range(4)]), [2, 1, 0, 1])
    return batch, first


@pytest.mark.parametrize("queue_ids", [shape for _, shape in SHAPES],
                         ids=[name for name, _ in SHAPES])
def test_a_resend_gets_the_first_answers_positions_on_every_master(
        tmp_path: Path, queue_ids: list[int]) -> None:
    rows = len(queue_ids)
    old_dir, new_dir, slave_dir = tmp_path / "old", tmp_path / "new", tmp_path / "slave"
    with MessageStore(old_dir, STORE) as store:
        master = Master(store, IdempotenceTable(100, CONFIG.batches_max))
        batch, first = load(master, queue_ids)
        expected = where(first, rows)
        same_master = master.resend(batch)  # the answer was lost: sent again
        assert (same_master.status, where(same_master, rows)) == ("PUT_OK", expected)
    shutil.copytree(old_dir, new_dir)  # what a slave replicated: the same bytes
    shutil.copytree(old_dir, slave_dir)
    with MessageStore(old_dir, STORE) as store:  # the master restarted
        restarted = Master(store, rebuild_table(store, CONFIG, now_ms=NOW_MS))
        reply = restarted.resend(batch)
        assert (reply.status, where(reply, rows)) == ("PUT_OK", expected)
    with MessageStore(new_dir, STORE) as store:  # a new master, its table rebuilt at take-over
        taken_over = Master(store, rebuild_table(store, CONFIG, now_ms=NOW_MS))
        reply = taken_over.resend(batch)
        assert (reply.status, where(reply, rows)) == ("PUT_OK", expected)
        assert reply.encode() == PutReply.decode(reply.encode()).encode()  # on the wire
    with MessageStore(slave_dir, STORE) as store:  # a slave's table, kept current, promoted
        follower = IdempotenceFollower(store, CONFIG)
        promoted = Master(store, follower.catch_up(now_ms=NOW_MS))
        reply = promoted.resend(batch)
        assert (reply.status, where(reply, rows)) == ("PUT_OK", expected)
    results = put_results(reply, rows)  # what Producer.send / send_batch return
    assert [(r.status, r.queue_id, r.queue_offset) for r in results] == [
        ("PUT_OK", queue_id, queue_offset) for queue_id, queue_offset in expected[0]]


def test_a_resend_waiting_for_its_quorum_names_the_positions_too(tmp_path: Path) -> None:
    with MessageStore(tmp_path, STORE) as store:
        master = Master(store, IdempotenceTable(100, 5))
        batch, first = load(master, [0, 0])
        still = master.puts.put(batch, never_stored, lambda _end: "FLUSH_SLAVE_TIMEOUT",
                                topic=TOPIC)
        assert (still.status, where(still, 2)) == ("FLUSH_SLAVE_TIMEOUT", where(first, 2))


def test_older_than_the_kept_batches_is_position_unknown_never_put_ok(tmp_path: Path) -> None:
    with MessageStore(tmp_path, STORE) as store:
        master = Master(store, IdempotenceTable(100, CONFIG.batches_max))
        batches = [marked("p", sequence, [b"s%d" % sequence] * 2) for sequence in range(5)]
        firsts = [master.put(batch, [sequence % 3] * 2) for sequence, batch
                  in enumerate(batches)]
        for sequence in (2, 3, 4):  # the last three kept
            reply = master.resend(batches[sequence])
            assert where(reply, 2) == where(firsts[sequence], 2)
        for sequence in (0, 1):
            reply = master.resend(batches[sequence])
            assert (reply.status, reply.code, reply.queues) == (
                "DUPLICATE_POSITION_UNKNOWN", code_for("DUPLICATE_POSITION_UNKNOWN"), [])
            results = put_results(reply, 2)
            assert {(r.status, r.ok, r.stored) for r in results} == {
                ("DUPLICATE_POSITION_UNKNOWN", False, True)}
        rebuilt = Master(store, rebuild_table(store, CONFIG, now_ms=NOW_MS))
        assert rebuilt.resend(batches[0]).status == "DUPLICATE_POSITION_UNKNOWN"
        assert where(rebuilt.resend(batches[4]), 2) == where(firsts[4], 2)


def test_a_retry_whose_rows_differ_is_not_given_anothers_positions(tmp_path: Path) -> None:
    """After a rebuild only the marker record is known: the rest is read from the log and
    compared with the retry's rows, so a retry with other rows (a client bug) or more rows
    than were stored gets no positions rather than someone else's."""
    with MessageStore(tmp_path, STORE) as store:
        master = Master(store, IdempotenceTable(100, 5))
        batch, _ = load(master, [1, 1])
        rebuilt = Master(store, rebuild_table(store, CONFIG, now_ms=NOW_MS))
        longer = marked("p", 0, [b"c", b"row-0", b"row-1"])  # the batch before is next door
        assert rebuilt.resend(longer).status == "DUPLICATE_POSITION_UNKNOWN"
        other = marked("p", 0, [b"row-0", b"other"])
        assert rebuilt.resend(other).status == "DUPLICATE_POSITION_UNKNOWN"
        assert rebuilt.resend(batch).status == "PUT_OK"


def test_an_old_brokers_put_ok_without_positions_is_not_an_ack_at_minus_one() -> None:
    """A broker from before issue 43 answers a duplicate PUT_OK with no queues: the client
    maps it to DUPLICATE_POSITION_UNKNOWN."""
    results = put_results(PutReply("PUT_OK", 0, [], None, -1, "", duplicate=True), 3)
    assert [r.status for r in results] == ["DUPLICATE_POSITION_UNKNOWN"] * 3
    assert not any(r.ok for r in results) and all(r.stored for r in results)
