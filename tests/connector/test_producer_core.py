"""ProducerCore (the asynchronous producer's sans-IO core) against a fake replica set.

The fake is the IO boundary only: a master and a slave log, the broker's real idempotence table
(ha/broker/idempotence.py: IdempotenceTable, rebuilt from the log after a failover or restart as
the broker rebuilds it), PUT_OK only once the slave holds the batch (else FLUSH_SLAVE_TIMEOUT, a
stored-not-acknowledged status), and a duplicate settled the way the broker settles it.
Hypothesis interleaves sends, ticks, flushes, deliveries with random fates (acknowledged,
reply lost after the store, refused, stored but not replicated), failovers (the slave, a prefix
of the master's log, takes over) and master restarts (an unflushed, unreplicated tail is lost).

Invariants: every future gets exactly one result; every acknowledged message is in the final
master's log exactly once; no message of an idempotent producer is stored twice; within a lane
the stored messages keep their send order; nothing stays buffered or in flight at the end.
"""

from __future__ import annotations

import dataclasses
import zlib

import hypothesis.strategies as st
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from connector.client.producer_core import (
    Batch,
    Message,
    ProducerConfig,
    ProducerCore,
    QueueChooser,
    SendResult,
    SetPutReply,
    expand,
    put_results,
)
from connector.protocol import PutIdempotence, PutReply, RetriableError, code_for, status_for
from ha.broker.idempotence import IdempotenceTable

LANES = (("t", None, None), ("t", None, 1), ("u", None, None))


@dataclasses.dataclass(frozen=True)
class Entry:
    lane: tuple[str, str | None, int | None]
    producer_id: str | None
    sequence: int
    message_ids: tuple[int, ...]


class FakeReplicaSet:
    """A master log, a slave log (always a prefix of it) and the master's idempotence table."""

    def __init__(self) -> None:
        self.master: list[Entry] = []
        self.slave: list[Entry] = []
        self.table = IdempotenceTable(1000)
        self.ends: dict[str, int] = {}  # producer id -> log length after its last batch

    def put(self, batch: Batch, replicate: bool) -> PutReply:
        ids = tuple(message.handle for message in batch.messages)
        if batch.producer_id is not None:
            key = PutIdempotence(batch.producer_id, batch.sequence)
            if self.table.is_duplicate(key):
                end = self.ends[batch.producer_id]
                if replicate:
                    self.slave = list(self.master)
                status = "PUT_OK" if len(self.slave) >= end else "FLUSH_SLAVE_TIMEOUT"
                return PutReply(status, code_for(status), [], None, -1, duplicate=True)
        self.master.append(Entry(batch.lane, batch.producer_id, batch.sequence, ids))
        if batch.producer_id is not None:
            self.table.record(PutIdempotence(batch.producer_id, batch.sequence),
                              len(self.master))
            self.ends[batch.producer_id] = len(self.master)
        if replicate:
            self.slave = list(self.master)
        status = "PUT_OK" if replicate else "FLUSH_SLAVE_TIMEOUT"
        first = sum(len(entry.message_ids) for entry in self.master[:-1])
        return PutReply(status, code_for(status), [[0, first, len(ids)]], None,
                        len(self.master))

    def _rebuild(self) -> None:
        self.table = IdempotenceTable(1000)
        self.ends = {}
        for index, entry in enumerate(self.master):
            if entry.producer_id is not None:
                self.table.record(PutIdempotence(entry.producer_id, entry.sequence), index + 1)
                self.ends[entry.producer_id] = index + 1

    def failover(self) -> None:
        """The slave becomes master; the old master rejoins truncated to its log."""
        self.master = list(self.slave)
        self._rebuild()

    def restart(self, kept: int) -> None:
        """The master restarts and loses an unflushed tail, never below what the slave has."""
        self.master = self.master[:max(len(self.slave), kept)]
        self._rebuild()


class ProducerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now_s = 0.0
        self.cluster = FakeReplicaSet()
        self.core = ProducerCore(
            ProducerConfig(linger_ms=5, batch_messages=4, batch_bytes=4096, max_in_flight=2,
                           buffer_bytes=64 * 1024),
            producer_id="p", retries_max=6, send_deadline_ms=400,
            backoff_ms=lambda attempt: min(50, 5 << attempt))
        self.wire: list[Batch] = []
        self.sent: dict[int, tuple[str, str | None, int | None]] = {}  # message id -> lane
        self.results: dict[int, SendResult | BaseException] = {}
        self.next_id = 0

    def _message(self) -> Message:
        return Message(b"m%d" % self.next_id, None, None, None, 100, self.next_id)

    def _take(self, resolutions: list) -> None:
        for handle, result in expand(resolutions):
            assert handle not in self.results, f"message {handle} resolved twice"
            self.results[handle] = result

    def _poll(self) -> None:
        self.wire += self.core.poll(self.now_s)

    @rule(lane=st.sampled_from(LANES), count=st.integers(1, 6), urgent=st.booleans())
    def send(self, lane: tuple[str, str | None, int | None], count: int, urgent: bool) -> None:
        for _ in range(count):
            message = self._message()
            self.core.append(lane, message, self.now_s, urgent=urgent)
            self.sent[self.next_id] = lane
            self.next_id += 1
        self._poll()

    @rule(ms=st.integers(0, 40))
    def tick(self, ms: int) -> None:
        self.now_s += ms / 1000.0
        self._poll()

    @rule()
    def flush(self) -> None:
        self.core.flush()
        self._poll()

    @precondition(lambda self: self.wire)
    @rule(index=st.integers(0, 7),
          fate=st.sampled_from(["acked", "acked", "reply_lost", "refused", "not_acked"]))
    def deliver(self, index: int, fate: str) -> None:
        batch = self.wire.pop(index % len(self.wire))
        outcome: PutReply | RetriableError
        if fate == "refused":
            outcome = PutReply("SERVICE_NOT_AVAILABLE", code_for("SERVICE_NOT_AVAILABLE"), [],
                               None, -1)
        else:
            reply = self.cluster.put(batch, replicate=fate != "not_acked")
            outcome = (RetriableError(status_for("SERVICE_NOT_AVAILABLE"), "reply lost")
                       if fate == "reply_lost" else reply)
        self._take(self.core.complete(batch, outcome, self.now_s))
        self._poll()

    @rule()
    def failover(self) -> None:
        self.cluster.failover()

    @rule(kept=st.integers(0, 30))
    def restart(self, kept: int) -> None:
        self.cluster.restart(kept)

    @invariant()
    def acknowledged_are_stored_once_in_order(self) -> None:
        stored: dict[int, int] = {}
        for position, entry in enumerate(self.cluster.master):
            for message_id in entry.message_ids:
                assert message_id not in stored, f"message {message_id} stored twice"
                stored[message_id] = position
        for message_id, result in self.results.items():
            if isinstance(result, SendResult) and result.ok:
                assert message_id in stored, f"acknowledged message {message_id} lost"
        for lane in LANES:
            positions = [stored[i] for i in sorted(self.sent) if self.sent[i] == lane
                         and i in stored]
            assert positions == sorted(positions), f"lane {lane} reordered"

    @invariant()
    def window_and_buffer_bounded(self) -> None:
        assert self.core.in_flight == len(self.wire) <= 2
        assert 0 <= self.core.buffered_bytes <= 64 * 1024

    def teardown(self) -> None:
        """Drain: every batch acknowledged from here on; every message gets its result."""
        for _ in range(10_000):
            if not self.wire and self.core.pending_messages == 0:
                break
            if self.wire:
                batch = self.wire.pop(0)
                self._take(self.core.complete(batch, self.cluster.put(batch, True),
                                              self.now_s))
            self.now_s += 0.01
            self.core.flush()
            self._poll()
        assert self.core.pending_messages == 0 and self.core.buffered_bytes == 0
        assert set(self.results) == set(self.sent), "a message never got its result"
        self.acknowledged_are_stored_once_in_order()


ProducerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                             deadline=None)
TestProducerCore = ProducerMachine.TestCase


def _core(**overrides: int) -> ProducerCore:
    config = {"linger_ms": 5, "batch_messages": 3, "batch_bytes": 1000, "max_in_flight": 4,
              "buffer_bytes": 2000}
    config.update(overrides)
    return ProducerCore(ProducerConfig(**config), producer_id="p", retries_max=3,
                        send_deadline_ms=1000, backoff_ms=lambda attempt: 10)


def _msg(handle: int, size: int = 100) -> Message:
    return Message(b"x", None, None, None, size, handle)


def test_a_batch_leaves_when_full_or_after_linger_not_before() -> None:
    core = _core()
    for handle in range(4):
        core.append(("t", None, None), _msg(handle), 0.0)
    (full,) = core.poll(0.0)  # the first 3 filled a batch; the 4th lingers
    assert [m.handle for m in full.messages] == [0, 1, 2] and full.sequence == 0
    core.complete(full, PutReply("PUT_OK", 0, [[0, 0, 3]], None, 9), 0.001)
    core.append(("t", None, 2), _msg(9), 0.001)
    assert [b.lane for b in core.poll(0.001)] == [("t", None, None)]  # waited a round trip: goes
    assert core.poll(0.004) == []  # queue 2's message lingers until 0.006
    assert [b.lane for b in core.poll(0.0061)] == [("t", None, 2)]


def test_one_batch_in_flight_per_lane_and_a_retry_goes_first() -> None:
    core = _core()
    for handle in range(6):
        core.append(("t", None, None), _msg(handle), 0.0)
    (first,) = core.poll(0.0)
    assert core.poll(1.0) == []  # the second batch waits for the first
    retry = RetriableError(status_for("SERVICE_NOT_AVAILABLE"), "down")
    assert core.complete(first, retry, 0.0) == []
    assert core.poll(0.005) == []  # backoff
    (again,) = core.poll(0.011)
    assert again is first and again.attempts == 2 and again.sequence == 0
    results = expand(core.complete(again, PutReply("PUT_OK", 0, [[0, 7, 3]], None, 9), 0.02))
    assert [(h, r.queue_offset) for h, r in results] == [(0, 7), (1, 8), (2, 9)]
    (second,) = core.poll(0.02)
    assert second.sequence == 1 and second.producer_id == first.producer_id == "p.0"


def test_the_window_bounds_batches_in_flight_across_lanes() -> None:
    core = _core(max_in_flight=2)
    for queue_id in range(3):
        core.append(("t", None, queue_id), _msg(queue_id), 0.0, urgent=True)
    assert len(core.poll(0.0)) == 2 and core.in_flight == 2


def test_the_buffer_is_bounded_and_oversized_messages_are_refused() -> None:
    core = _core(buffer_bytes=1000, batch_bytes=1000)
    for handle in range(10):
        core.append(("t", None, None), _msg(handle), 0.0)
    try:
        core.append(("t", None, None), _msg(10), 0.0)
        raise AssertionError("buffer_bytes exceeded")
    except Exception as err:  # noqa: BLE001 - checked below
        assert type(err).__name__ == "BufferFull"
    try:
        core.append(("t", None, None), _msg(11, size=1001), 0.0)
        raise AssertionError("a message larger than buffer_bytes was taken")
    except ValueError:
        pass


def test_a_message_larger_than_batch_bytes_goes_alone() -> None:
    core = _core(batch_bytes=500, buffer_bytes=5000)
    core.append(("t", None, None), _msg(0), 0.0)
    core.append(("t", None, None), _msg(1, size=2000), 0.0)
    core.append(("t", None, None), _msg(2), 0.0, urgent=True)
    (first,) = core.poll(0.0)
    assert [m.handle for m in first.messages] == [0]
    core.complete(first, PutReply("PUT_OK", 0, [[0, 0, 1]], None, 9), 0.0)
    (big,) = core.poll(0.0)
    assert [m.handle for m in big.messages] == [1]


def test_stored_not_acknowledged_is_retried_then_returned_at_the_deadline() -> None:
    core = _core()
    core.append(("t", None, None), _msg(0), 0.0, urgent=True)
    (batch,) = core.poll(0.0)
    not_acked = PutReply("FLUSH_SLAVE_TIMEOUT", code_for("FLUSH_SLAVE_TIMEOUT"), [[0, 4, 1]],
                         None, 9)
    assert core.complete(batch, not_acked, 0.0) == []  # idempotent: retried
    (batch,) = core.poll(0.5)
    ((_, result),) = expand(core.complete(batch, not_acked, 0.995))  # the deadline: 1.0
    assert result.status == "FLUSH_SLAVE_TIMEOUT" and not result.ok
    assert core.buffered_bytes == 0 and core.pending_messages == 0


def test_the_queue_chooser_hashes_keys_like_the_broker_and_keyless_sticks_per_batch() -> None:
    chooser = QueueChooser(sticky_messages=3)
    assert chooser.choose("t", "k") is None  # unknown topic: the broker picks
    chooser.learn("t", 5)
    assert all(chooser.choose("t", f"k{n}") == (None, zlib.crc32(f"k{n}".encode()) % 5)
               for n in range(50))
    keyless = [chooser.choose("t", None) for _ in range(9)]
    first = keyless[0]
    assert first is not None and first[0] is None
    assert keyless[0:3] == [first] * 3 and keyless[3:6] == [(None, (first[1] + 1) % 5)] * 3
    assert keyless[6:9] == [(None, (first[1] + 2) % 5)] * 3


def _choose(chooser: QueueChooser, topic: str, key: str | None) -> tuple[str | None, int]:
    choice = chooser.choose(topic, key)
    assert choice is not None, f"{topic}: route unknown"
    return choice


def test_the_queue_chooser_spreads_over_every_writable_queue_of_every_set() -> None:
    """Route ((a, 3), (b, 2)): queues numbered a/0..2 then b/0..1; a key goes to
    crc32(key) % 5 of them (one lane for ever while the route holds), keyless messages stick
    to one queue per batch and walk through all five, across both sets."""
    chooser = QueueChooser(sticky_messages=2)
    route = (("broker-a", 3), ("broker-b", 2))
    chooser.learn("t", route)
    assert chooser.route("t") == route and chooser.queue_count("t") == 5
    flat: list[tuple[str | None, int]] = [("broker-a", 0), ("broker-a", 1), ("broker-a", 2),
                                          ("broker-b", 0), ("broker-b", 1)]
    keys = [f"k{n}" for n in range(200)]
    chosen = [_choose(chooser, "t", key) for key in keys]
    assert chosen == [flat[zlib.crc32(key.encode()) % 5] for key in keys]
    assert {name for name, _ in chosen} == {"broker-a", "broker-b"}  # (a failing hash: one set)
    assert chosen == [chooser.choose("t", key) for key in keys]  # stable
    keyless = [_choose(chooser, "t", None) for _ in range(10)]
    start = flat.index(keyless[0])
    assert keyless == [flat[(start + n // 2) % 5] for n in range(10)]
    assert set(keyless) == set(flat)  # every queue of both sets, whole batches each


def test_a_new_route_adds_and_drains_sets() -> None:
    """A set added to the route gets keys and keyless batches; a set drained from it (its
    write permission off) gets none after the route changes."""
    chooser = QueueChooser(sticky_messages=1)
    chooser.learn("t", (("broker-a", 4),))
    keys = [f"k{n}" for n in range(200)]
    assert {chooser.choose("t", key) for key in keys} <= {("broker-a", q) for q in range(4)}
    chooser.learn("t", (("broker-a", 4), ("broker-b", 4)))
    no_keys: list[str | None] = [None] * 8
    spread = [_choose(chooser, "t", key) for key in [*keys, *no_keys]]
    assert {name for name, _ in spread[:200]} == {"broker-a", "broker-b"}
    assert set(spread[200:]) == {
        (name, q) for name in ("broker-a", "broker-b") for q in range(4)}
    chooser.learn("t", (("broker-a", 4),))  # broker-b drained
    after = [_choose(chooser, "t", key) for key in [*keys, *no_keys]]
    assert {name for name, _ in after} == {"broker-a"}
    assert chooser.choose("u", "k") is None  # another topic: still unknown


def test_lanes_of_two_sets_have_their_own_producer_ids_and_sequences() -> None:
    """The broker's idempotence table is per replica set and per producer id: a lane of
    broker-a and a lane of broker-b (same topic and queue id) never share a sequence space."""
    core = _core()
    for lane in (("t", "broker-a", 0), ("t", "broker-b", 0), ("t", "broker-a", 0)):
        core.append(lane, _msg(0), 0.0, urgent=True)
    batches = core.poll(0.0)
    assert [b.lane for b in batches] == [("t", "broker-a", 0), ("t", "broker-b", 0)]
    assert batches[0].producer_id != batches[1].producer_id
    assert [b.sequence for b in batches] == [0, 0]


def test_a_result_names_the_replica_set_of_its_reply() -> None:
    reply = SetPutReply.of(PutReply("PUT_OK", 0, [[1, 40, 2]], None, 9), "broker-b")
    assert put_results(reply, 2) == [SendResult("PUT_OK", 1, 40, "", "broker-b"),
                                      SendResult("PUT_OK", 1, 41, "", "broker-b")]
    one_set = put_results(PutReply("PUT_OK", 0, [[1, 40, 1]], None, 9), 1)
    assert one_set == [SendResult("PUT_OK", 1, 40)] and one_set[0].broker_name == ""


def test_a_lane_counts_its_keyed_messages_until_answered() -> None:
    core = _core()
    keyed = Message(b"x", "k", None, None, 100, 0)
    core.append(("t", None, None), _msg(1), 0.0)
    assert not core.lane_has_keys(("t", None, None))  # keyless messages do not hold the switch
    core.append(("t", None, None), keyed, 0.0, urgent=True)
    assert core.lane_has_keys(("t", None, None))
    (batch,) = core.poll(0.0)
    core.complete(batch, PutReply("PUT_OK", 0, [[0, 0, 2]], None, 9), 0.0)
    assert not core.lane_has_keys(("t", None, None))


def test_idle_lanes_leave_the_walk_and_come_back_with_their_sequence() -> None:
    """poll/next_wakeup_s walk only lanes that may hold messages (issue 42: a producer of
    10,000 queues walked every lane it ever used, twice per send). A lane found idle leaves
    that walk; its next message brings it back with its producer id and next sequence."""
    core = _core()
    ok = PutReply("PUT_OK", 0, [[0, 0, 1]], None, 9)
    for queue_id in range(50):  # one message to each of 50 lanes, answered
        core.append(("t", None, queue_id), _msg(queue_id), 0.0, urgent=True)
        (batch,) = core.poll(0.0)
        core.complete(batch, ok, 0.0)
    assert core.next_wakeup_s() is None and core.poll(1.0) == []
    assert len(core._busy) == 0 and len(list(core.lanes())) == 50
    core.append(("t", None, 7), _msg(100), 1.0)  # lingers: a wake-up, then it leaves
    assert core.next_wakeup_s() == 1.005 and core.poll(1.001) == []
    (again,) = core.poll(1.006)
    assert again.producer_id == "p.7" and again.sequence == 1 and len(core._busy) == 1
    core.append(("t", None, 50), _msg(101), 1.006, urgent=True)  # a new lane: a new id
    (new,) = core.poll(1.006)
    assert new.producer_id == "p.50" and new.sequence == 0
