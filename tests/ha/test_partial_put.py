"""A new master never keeps the first part of a put whose rest it never received.

Goal: the CI failure of 2026-11-26 (`test_demo_small_scale_with_failover`: 60 orders twice in
the table) replayed and fixed. The demo's master (256 KiB segments) wrote a 100-row put across a
segment's end, 60 rows in one segment and 40 in the next; the slave received the first
segment's transfer, the master was SIGKILLed before the second, and the slave, elected, kept the
60 rows. They lack the put's last row, which carries the idempotence marker, so the producer's
retry of the put was stored whole after them.

Method: real stores (a master, a replica fed with `read_log` / `append_replicated` as the HA
link does), the take-over plan (ha/replication/takeover_core.py) carried out with the store's
primitives, and the idempotence follower (ha/broker/idempotence.py) that a promoted slave takes its
table from. Fixed by: a put starts a new segment when it does not fit the current one
(CommitLog.append_batch), and every record but a put's last carries SYSFLAG_PUT_CONTINUES, so a
take-over cuts a replica's log back to the end of its last whole put.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from connector.protocol import IDEMPOTENCE_PROPERTY
from ha.broker.idempotence import IdempotenceConfig, IdempotenceFollower
from ha.replication.takeover_core import CutTail, TakeOverLog, plan_take_over
from storage_engine import MessageBatch, MessageStore, StoreConfig, decode_record
from tests.support.replica_stores import ship

SEGMENT_SIZE_BYTES = 1 << 17
CONFIG = StoreConfig(commit_log_segment_size_bytes=SEGMENT_SIZE_BYTES,
                     message_size_max_bytes=4096)
TOPIC = "orders"
BODY_BYTES = 1000


@pytest.fixture()
def stores(tmp_path: Path) -> Iterator[tuple[MessageStore, MessageStore]]:
    master = MessageStore(tmp_path / "master", CONFIG)
    replica = MessageStore(tmp_path / "replica", CONFIG, auto_confirm=False)
    try:
        yield master, replica
    finally:
        replica.close()
        master.close()


def put(store: MessageStore, producer: str, sequence: int, rows: int) -> list[int]:
    """One idempotent put of `rows` rows over 4 queues, its marker in the last row."""
    properties: list[dict[str, str] | None] = [None] * rows
    properties[-1] = {IDEMPOTENCE_PROPERTY: f"{producer}/{sequence}"}
    result = store.append(MessageBatch(
        topic=TOPIC, bodies=[f"{producer}/{sequence}/{row}".encode().ljust(BODY_BYTES)
                             for row in range(rows)],
        queue_ids=[row % 4 for row in range(rows)], properties=properties))
    assert result.status.name == "PUT_OK"
    return list(result.log_positions)


def take_over(replica: MessageStore, epoch: int) -> None:
    """What Replication.become_master does with the store (ha/broker/replication.py)."""
    plan = plan_take_over(TakeOverLog(replica.log_position_end,
                                      replica.complete_log_position_end(),
                                      tuple(replica.epochs.entries)), epoch)
    for effect in plan.effects:
        if isinstance(effect, CutTail):
            replica.cut_tail(effect.log_position)
    replica.set_confirm_log_position(replica.log_position_end)
    replica.epochs.append(epoch, replica.log_position_end)


def rows_stored(store: MessageStore) -> list[bytes]:
    """Every row in the store (confirmed to its end first: reads stop at the confirm)."""
    store.set_confirm_log_position(store.log_position_end)
    bodies = []
    for queue_id in range(4):
        result = store.get_messages(TOPIC, queue_id, 0, max_count=10_000, max_bytes=1 << 30)
        bodies += [decode_record(raw).body.rstrip() for raw in result.records]
    return bodies


def test_a_put_that_does_not_fit_the_segment_starts_the_next_one(
        stores: tuple[MessageStore, MessageStore]) -> None:
    master, _ = stores
    while master.log_position_end < SEGMENT_SIZE_BYTES - 20 * BODY_BYTES:
        put(master, "filler", master.log_position_end, 4)
    before = master.log_position_end
    result = master.append(MessageBatch(topic=TOPIC, bodies=[b"x" * BODY_BYTES] * 100,
                                        queue_ids=[0] * 100))
    assert result.log_positions[0] == SEGMENT_SIZE_BYTES > before  # whole, in the next one
    # a put larger than a whole segment still goes in, spanning segments from the log's end
    # (not from a new segment: that would leave most of one empty for each such put)
    end = master.log_position_end
    big = master.append(MessageBatch(topic=TOPIC, bodies=[b"y" * BODY_BYTES] * 200,
                                     queue_ids=[0] * 200))
    assert big.status.name == "PUT_OK"
    assert big.log_positions[0] == end < 2 * SEGMENT_SIZE_BYTES
    assert big.log_positions[-1] > 2 * SEGMENT_SIZE_BYTES


def test_the_demo_failure_a_segment_end_no_longer_splits_a_put(
        stores: tuple[MessageStore, MessageStore]) -> None:
    """The slave holds the master's first segment whole; the put that did not fit it is not
    there at all, so the retry stores each of its rows once."""
    master, replica = stores
    sequence = 0
    while master.log_position_end < SEGMENT_SIZE_BYTES - 40 * BODY_BYTES:
        put(master, "p", sequence, 20)
        sequence += 1
    put(master, "p", sequence, 100)  # does not fit the first segment
    ship(master, replica, SEGMENT_SIZE_BYTES)  # the first segment's transfers, then the SIGKILL
    replica.epochs.append(1, 0)
    follower = IdempotenceFollower(replica, IdempotenceConfig())
    follower.catch_up(now_ms=0)
    take_over(replica, 2)
    table = follower.catch_up(now_ms=0)
    assert table.last_sequence("p") == sequence - 1  # the 100-row put is not there
    put(replica, "p", sequence, 100)  # the producer's retry
    rows = rows_stored(replica)
    assert len(rows) == len(set(rows)) == 20 * sequence + 100


def test_a_take_over_cuts_a_put_the_replica_holds_in_part(
        stores: tuple[MessageStore, MessageStore]) -> None:
    """A transfer cut inside a put (by size, or a slave far behind): the new master cuts the
    put's rows it holds, its idempotence table stays (nothing it recorded was cut), and the
    retry stores each row once."""
    master, replica = stores
    put(master, "p", 0, 10)
    put(master, "q", 0, 10)
    first_end = master.log_position_end
    put(master, "p", 1, 10)
    half = master.log_position_end - 5 * (master.log_position_end - first_end) // 10
    ship(master, replica, first_end)
    replica.set_confirm_log_position(first_end)
    replica.epochs.append(1, 0)
    follower = IdempotenceFollower(replica, IdempotenceConfig())
    follower.catch_up(now_ms=0)
    ship(master, replica, half)
    follower.catch_up(now_ms=0)
    assert replica.complete_log_position_end() == first_end
    cuts = replica.index_cuts
    take_over(replica, 2)
    assert replica.log_position_end == first_end
    assert replica.lowest_cut_since(cuts) == first_end
    table = follower.catch_up(now_ms=0)
    assert table.last_sequence("p") == 0 and table.last_sequence("q") == 0
    put(replica, "p", 1, 10)
    rows = rows_stored(replica)
    assert len(rows) == len(set(rows)) == 30


def test_a_put_a_reader_may_have_seen_in_part_stays(
        stores: tuple[MessageStore, MessageStore]) -> None:
    """The confirm position inside the put: readers may have read its first rows, so the
    take-over keeps every whole record (at least once: a retry may store those rows again)."""
    master, replica = stores
    put(master, "p", 0, 10)
    positions = put(master, "p", 1, 10)
    ship(master, replica, positions[4] + 10)  # 4 whole records and a bit of the fifth
    replica.set_confirm_log_position(positions[2])
    assert replica.complete_log_position_end() == positions[4]


def test_a_reopened_replica_still_finds_where_its_last_whole_put_ends(
        tmp_path: Path, stores: tuple[MessageStore, MessageStore]) -> None:
    master, replica = stores
    put(master, "p", 0, 10)
    first_end = master.log_position_end
    put(master, "p", 1, 10)
    ship(master, replica, first_end + 3 * (master.log_position_end - first_end) // 10)
    replica.close()
    reopened = MessageStore(tmp_path / "replica", CONFIG, auto_confirm=False)
    try:
        assert reopened.complete_log_position_end() == first_end
        reopened.truncate_to(first_end + 1)  # a fork point inside the put
        assert reopened.complete_log_position_end() == first_end
    finally:
        reopened.close()

