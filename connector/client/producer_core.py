"""Sans-IO core of the asynchronous producer: batching, in-flight window, retries, order.

`Producer.send_async` (connector/client/producer.py) appends one message to a *lane* and returns a
future; this core decides when a lane's messages leave as one batch, which batches may be on
the wire, and what each message's future gets once the broker answered. It does no IO and reads
no clock: the shell (connector/client/async_sender.py) passes `now_s`, runs the round trips the core
hands out (`poll`) and reports each outcome (`complete`); the property tests drive it with a
fake cluster (tests/connector/test_producer_core.py).

Lanes and queues. A lane is (topic, replica set, queue_id). The producer picks the queue of a
message without a queue_id itself (`QueueChooser`), by the broker's own rule (ha/broker/service.py
`_choose_queues`): crc32(key) % writeQueueNums for a keyed message, so one key always maps to one
queue and one lane, and its order holds; a keyless message goes to a "sticky" queue that moves
on (round robin) every `batch_messages` keyless messages (Kafka's sticky partitioner), so
keyless load spreads over the queues in whole batches, several lanes in flight at once. A
producer with a controller chooses the same way among every writable queue of every replica set
that takes the topic's writes (the topic's route: set by set, their queues numbered in order),
and its lanes name their set; without one the set is None (the one set its routes name). Until
the topic's queues are known (the shell asks in the background; a topic the first put creates
is not known yet), messages go to the lane (topic, None, None) and the broker picks per row by
the same rule; the producer moves a topic to per-queue lanes, or to a new route (a set added or
drained, looked up again every QUEUE_LOOKUP_INTERVAL_S with a controller), only while none of
its lanes holds a keyed message waiting for its answer, so no key's messages are ever split
between two lanes at once. Without a controller, a topic whose writeQueueNums changes after the
producer learnt it keeps the old count in this producer (a limit: ask again on restart).

    send_async ──► lane.open (≤ batch_messages, ≤ batch_bytes) ──closed──► lane.queued
                     closed when full, linger_ms after its first message, or on flush
    poll ──► lane.queued[0] on the wire when the lane has nothing in flight, its backoff has
             passed and fewer than max_in_flight batches are in flight (per producer)
    complete ──► acknowledged: every message's result, in order
             └─► retriable failure: back to the head of lane.queued with a backoff

Order and idempotence: one batch in flight per lane. The broker's idempotence
(ha/broker/idempotence.py) answers a batch whose (producer id, sequence) is <= the last one it
stored for that producer id as a duplicate: it assumes what it stored of a producer is a prefix
of the producer's sequence, and it has no gap check (Kafka's broker rejects sequence n+1 while
n is missing: OUT_OF_ORDER_SEQUENCE). The broker goes on reading a DoPut stream after a batch
that was *not* stored (SERVICE_NOT_AVAILABLE...), so with two batches n, n+1 of one producer id
in flight, n+1 could be stored after n was refused, and the retry of n would then be answered
"duplicate": an acknowledgement for a message never stored, the worst bug. Hence:
  - every lane has its own producer id (`<producer id>.<lane number>`) and sequence 0, 1, 2...
    given when a batch closes, so lanes never share a sequence space;
  - a lane sends batch n+1 only after batch n was answered with a stored status (or failed for
    good: its messages get the error, and n+1 is free to go; a retry of n never happens after
    that, so nothing is acknowledged that was not stored);
  - a retry carries the same (producer id, sequence) and goes first in its lane, so after a
    failover (a new master holding a prefix of the old master's log, its table rebuilt from
    that log) the batch is stored once and in its place.
Several batches are in flight per producer (`max_in_flight`, across lanes: different queues or
topics), none two per lane. Throughput does not need more: while a lane's batch is in flight
the next one fills (up to `batch_messages`), so one message per call still goes out in batches
of hundreds under load. Two in flight per lane would need a broker-side gap check first.

Not acknowledged unless acknowledged: a message's future gets PUT_OK (its row's queue offset,
the original's for a retry the broker had stored before, with `error="duplicate"`; or
DUPLICATE_POSITION_UNKNOWN when the broker can no longer place it) only from a broker reply for
its own batch; a stored status that is not PUT_OK (FLUSH_SLAVE_TIMEOUT...) is retried while
idempotent, until the deadline, and then returned as it is, as `Producer.send` does.
"""

from __future__ import annotations

import collections
import dataclasses
import random
import zlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeAlias

from connector.protocol import (
    PutReply,
    RocketHAError,
    error_for_code,
    status_for,
)

__all__ = [
    "MESSAGE_OVERHEAD_BYTES",
    "NOTHING",
    "POLL_NOW",
    "STORED_NOT_ACKED",
    "WAKE_TIMER",
    "Batch",
    "BufferFull",
    "LaneKey",
    "Message",
    "ProducerConfig",
    "ProducerCore",
    "QueueChooser",
    "Resolution",
    "SendResult",
    "SetPutReply",
    "TopicRoute",
    "expand",
    "message_size_bytes",
    "put_results",
    "results_of",
]

# Put statuses meaning "stored on this master, not (yet) acknowledged": an idempotent
# producer retries them (the broker's idempotence table answers the retry once the batch is
# as durable as an acknowledged one; a new master stores it if it never got it).
STORED_NOT_ACKED = frozenset({"FLUSH_SLAVE_TIMEOUT", "SLAVE_NOT_AVAILABLE",
                              "FLUSH_DISK_TIMEOUT"})

NOTHING, WAKE_TIMER, POLL_NOW = 0, 1, 2  # what `append` asks of the shell
MESSAGE_OVERHEAD_BYTES = 64  # counted per message on top of its fields (Arrow offsets, ...)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ProducerConfig:
    """How `Producer.send_async` batches (Kafka's names where they exist). Picklable."""

    linger_ms: int = 5  # a lane's batch leaves this long after its first message at the latest
    batch_messages: int = 1024  # ... or once it holds this many messages
    batch_bytes: int = 1 << 20  # ... or once it would grow past this many bytes
    max_in_flight: int = 8  # batches on the wire at once (one per lane at most)
    buffer_bytes: int = 32 << 20  # messages accepted and not yet answered, in bytes (and the
    # largest message: one larger than batch_bytes goes in a batch of its own)
    max_block_ms: int = 10_000  # send_async waits this long for buffer room, then raises

    def __post_init__(self) -> None:
        for name in ("batch_messages", "batch_bytes", "max_in_flight", "buffer_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"ProducerConfig.{name} must be >= 1")
        for name in ("linger_ms", "max_block_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"ProducerConfig.{name} must be >= 0")
        if self.batch_bytes > self.buffer_bytes:
            raise ValueError("ProducerConfig.batch_bytes must be <= buffer_bytes")


POSITION_UNKNOWN = "DUPLICATE_POSITION_UNKNOWN"


@dataclasses.dataclass(frozen=True, slots=True)
class SendResult:
    """One message's outcome. PUT_OK always comes with its queue id and queue offset;
    DUPLICATE_POSITION_UNKNOWN means stored earlier (a retry the broker recognised), as
    durable as PUT_OK, at a position it can no longer name (`stored` True, `ok` False)."""

    status: str
    queue_id: int = -1
    queue_offset: int = -1
    error: str = ""
    broker_name: str = ""  # the replica set of queue_id ("": the one set of `brokers`)

    @property
    def ok(self) -> bool:
        return self.status == "PUT_OK"

    @property
    def stored(self) -> bool:
        """Acknowledged: PUT_OK, or stored earlier at an unknown position."""
        return self.status == "PUT_OK" or self.status == POSITION_UNKNOWN


# (topic, replica set, queue_id): the set None is the one the producer's routes name (a
# producer without a controller); queue_id None: the broker picks per row
LaneKey = tuple[str, str | None, int | None]


@dataclasses.dataclass(frozen=True, slots=True)
class SetPutReply(PutReply):
    """A broker's reply and the replica set that gave it (a producer writing to several sets;
    the set is the client's knowledge, not on the wire)."""

    broker_name: str = ""

    @classmethod
    def of(cls, reply: PutReply, broker_name: str) -> SetPutReply:
        return cls(reply.status, reply.code, reply.queues, reply.row_queue_ids,
                   reply.log_position_end, reply.error, reply.duplicate, broker_name)


@dataclasses.dataclass(slots=True)
class Message:
    """A message as the core sees it. The shell passes its futures instead (SendFuture has
    these attributes and is its own handle: one object per message, not three, which is
    most of what the garbage collector costs per message); the core reads only `key`,
    `size_bytes` and `handle`."""

    body: bytes
    key: str | None
    tags: str | None
    properties: tuple[tuple[str, str], ...] | None
    size_bytes: int
    handle: Any  # the shell's future; the core only hands it back


def message_size_bytes(body: bytes, key: str | None, tags: str | None,
                       properties: Mapping[str, str] | None) -> int:
    size = len(body) + MESSAGE_OVERHEAD_BYTES
    if key is not None:
        size += len(key)
    if tags is not None:
        size += len(tags)
    if properties:
        size += sum(len(name) + len(value) for name, value in properties.items())
    return size


@dataclasses.dataclass(slots=True, eq=False)
class Batch:
    lane: LaneKey
    producer_id: str | None  # None: not idempotent
    sequence: int
    messages: list[Message]
    size_bytes: int
    keyed_count: int = 0  # messages with a key
    attempts: int = 0
    deadline_s: float | None = None  # set at the first attempt
    not_before_s: float = 0.0  # backoff: no attempt before this
    last_error: RocketHAError | None = None
    last_stored_reply: PutReply | None = None  # an idempotent batch's STORED_NOT_ACKED reply
    wire: Any = None  # the shell's encoded batch, kept for retries


class BufferFull(Exception):
    """`append` found no room: the shell waits for completions (max_block_ms) and tries
    again."""


@dataclasses.dataclass(slots=True, eq=False)
class _Lane:
    key: LaneKey
    producer_id: str | None
    next_sequence: int = 0
    open: list[Message] = dataclasses.field(default_factory=list)
    open_bytes: int = 0
    open_keyed: int = 0
    open_since_s: float = 0.0
    urgent: bool = False  # close the open batch at the next poll (flush, or a sync send)
    queued: collections.deque[Batch] = dataclasses.field(default_factory=collections.deque)
    in_flight: Batch | None = None
    keyed_pending: int = 0  # messages with a key appended and not answered yet


# What every message of a batch gets: (the batch's messages, outcome), where the outcome is
# the broker's reply of a stored batch (one SendResult per row: `results_of`), a SendResult
# every message gets (MESSAGE_ILLEGAL...), or the error every message gets. Per batch, not
# per message: the shell makes a message's SendResult only when its future is looked at.
Outcome: TypeAlias = "PutReply | SendResult | BaseException"
Resolution = tuple[list[Message], Outcome]


class ProducerCore:
    """The state of one producer's pending messages. Not thread-safe: the shell holds a lock
    around every call."""

    def __init__(self, config: ProducerConfig, *, producer_id: str | None,
                 retries_max: int, send_deadline_ms: int,
                 backoff_ms: Callable[[int], int]) -> None:
        self.config = config
        self.producer_id = producer_id
        self.retries_max = retries_max
        self.send_deadline_s = send_deadline_ms / 1000.0
        self.backoff_ms = backoff_ms
        self.buffered_bytes = 0
        self.pending_messages = 0
        self.in_flight = 0
        self._lanes: dict[LaneKey, _Lane] = {}
        # The lanes that may hold messages (open, queued or in flight): `poll` and
        # `next_wakeup_s` walk these, not every lane ever used. A lane joins on `append` (the
        # only way messages enter) and leaves when one of those walks finds it idle. Why: a
        # producer sending to 10,000 queues keeps a lane per queue, and walking them all twice
        # per send took 0.6 ms of CPU each at ~3,000 lanes (docs/benchmarks/scale.md).
        self._busy: dict[LaneKey, _Lane] = {}
        # the limits `append` reads on every message, as plain attributes
        self._buffer_bytes = config.buffer_bytes
        self._batch_bytes = config.batch_bytes
        self._batch_messages = config.batch_messages
        self._max_in_flight = config.max_in_flight
        self._linger_zero = config.linger_ms == 0

    # -- input ------------------------------------------------------------------------------
    def append(self, lane_key: LaneKey, message: Message, now_s: float, *,
               urgent: bool = False) -> int:
        """Take one message (raises BufferFull when `buffer_bytes` has no room for it, and
        ValueError when it could never fit a batch). Returns what the shell must do: POLL_NOW
        (a batch of an idle lane is ready), WAKE_TIMER (an idle lane's linger started) or
        NOTHING (the lane's batch in flight will poll when it completes)."""
        size_bytes = message.size_bytes
        if self.buffered_bytes + size_bytes > self._buffer_bytes:
            if size_bytes > self._buffer_bytes:
                raise ValueError(f"message of ~{size_bytes} bytes > buffer_bytes "
                                 f"{self._buffer_bytes}")
            raise BufferFull(f"{self.buffered_bytes} bytes buffered, buffer_bytes "
                             f"{self._buffer_bytes}")
        lane = self._lanes.get(lane_key)
        if lane is None:
            lane = self._lanes[lane_key] = _Lane(lane_key, None if self.producer_id is None
                                                 else f"{self.producer_id}.{len(self._lanes)}")
        self._busy[lane_key] = lane
        messages = lane.open
        if not messages:
            lane.open_since_s = now_s
        elif lane.open_bytes + size_bytes > self._batch_bytes:
            self._close_open(lane)  # (a message larger than batch_bytes: a batch of its own)
            messages = lane.open
            lane.open_since_s = now_s
        messages.append(message)
        lane.open_bytes += size_bytes
        if message.key is not None:
            lane.keyed_pending += 1
            lane.open_keyed += 1
        self.buffered_bytes += size_bytes
        self.pending_messages += 1
        if urgent:
            lane.urgent = True
        if len(messages) >= self._batch_messages or lane.open_bytes >= self._batch_bytes:
            self._close_open(lane)
        if lane.in_flight is not None or self.in_flight >= self._max_in_flight:
            return NOTHING
        if lane.queued or lane.urgent or self._linger_zero:
            return POLL_NOW
        return WAKE_TIMER if len(messages) == 1 else NOTHING

    def flush(self) -> list[Any]:
        """Send every open batch at the next poll; returns the handle of each lane's last
        pending message (a lane's messages complete in order, so once those are done every
        message appended before the flush is)."""
        last = []
        for lane in self._lanes.values():
            if lane.open:
                lane.urgent = True
                last.append(lane.open[-1].handle)
            elif lane.queued:
                last.append(lane.queued[-1].messages[-1].handle)
            elif lane.in_flight is not None:
                last.append(lane.in_flight.messages[-1].handle)
        return last

    def _close_open(self, lane: _Lane) -> None:
        batch = Batch(lane.key, lane.producer_id, lane.next_sequence, lane.open, lane.open_bytes,
                      lane.open_keyed)
        lane.next_sequence += 1
        lane.queued.append(batch)
        lane.open = []
        lane.open_bytes = 0
        lane.open_keyed = 0
        lane.urgent = False

    # -- scheduling -------------------------------------------------------------------------
    def poll(self, now_s: float) -> list[Batch]:
        """The batches to put on the wire now (each marked in flight)."""
        out: list[Batch] = []
        linger_s = self.config.linger_ms / 1000.0
        idle: list[LaneKey] = []
        for lane in self._busy.values():
            if self.in_flight >= self.config.max_in_flight:
                break
            if lane.in_flight is not None:
                continue
            if not lane.queued and lane.open and (
                    lane.urgent or now_s >= lane.open_since_s + linger_s):
                self._close_open(lane)
            if not lane.queued:
                if not lane.open:
                    idle.append(lane.key)
                continue
            if lane.queued[0].not_before_s > now_s:
                continue
            batch = lane.queued.popleft()
            if batch.deadline_s is None:
                batch.deadline_s = now_s + self.send_deadline_s
            batch.attempts += 1
            lane.in_flight = batch
            self.in_flight += 1
            out.append(batch)
        self._forget_idle(idle)
        return out

    def next_wakeup_s(self) -> float | None:
        """When `poll` may next have work without any other event (a linger ending, a
        backoff passing); None: only an append or a completion can give it some."""
        linger_s = self.config.linger_ms / 1000.0
        wakeups = []
        idle: list[LaneKey] = []
        for lane in self._busy.values():
            if lane.in_flight is not None:
                continue
            if lane.queued:
                wakeups.append(lane.queued[0].not_before_s)
            elif lane.open:
                wakeups.append(lane.open_since_s if lane.urgent else
                               lane.open_since_s + linger_s)
            else:
                idle.append(lane.key)
        self._forget_idle(idle)
        return min(wakeups) if wakeups else None

    def _forget_idle(self, keys: list[LaneKey]) -> None:
        """Drop lanes found with nothing open, queued or in flight from the busy set (the lane
        itself, its producer id and sequence, stay in `_lanes`)."""
        for key in keys:
            lane = self._busy.get(key)
            if lane is not None and lane.in_flight is None and not lane.queued \
                    and not lane.open:
                del self._busy[key]

    # -- outcomes ---------------------------------------------------------------------------
    def complete(self, batch: Batch, outcome: PutReply | RocketHAError,
                 now_s: float) -> list[Resolution]:
        """The broker's reply to `batch` (or the error of its attempt): what each of its
        messages' futures gets, or [] when the batch goes back for a retry."""
        lane = self._lanes[batch.lane]
        assert lane.in_flight is batch, "complete() of a batch that is not in flight"
        lane.in_flight = None
        self.in_flight -= 1
        if lane.open:  # they waited a round trip already: no linger on top
            lane.urgent = True
        if isinstance(outcome, PutReply):
            status = status_for(outcome.status)
            if status.stored and not (batch.producer_id is not None
                                      and outcome.status in STORED_NOT_ACKED):
                return self._resolve(batch, outcome)
            if status.stored:
                batch.last_stored_reply = outcome
                error: RocketHAError = error_for_code(outcome.code,
                                                      outcome.error or outcome.status)
            elif status.retriable:
                error = error_for_code(outcome.code, outcome.error or outcome.status)
                batch.last_stored_reply = None
            else:  # MESSAGE_ILLEGAL...: a result, as Producer.send returns it
                return self._resolve(batch, SendResult(outcome.status, error=outcome.error))
        else:
            error = outcome
            batch.last_stored_reply = None
            if not error.retriable:
                return self._resolve(batch, error)
        batch.last_error = error
        delay_s = self.backoff_ms(batch.attempts - 1) / 1000.0
        assert batch.deadline_s is not None
        if batch.attempts > self.retries_max or now_s + delay_s >= batch.deadline_s:
            if batch.last_stored_reply is not None:  # the deadline passed: the answer stands
                return self._resolve(batch, batch.last_stored_reply)
            return self._resolve(batch, error)
        batch.not_before_s = now_s + delay_s
        lane.queued.appendleft(batch)  # first again: the lane's order holds
        return []

    def complete_with(self, batch: Batch, error: BaseException) -> list[Resolution]:
        """`batch`'s attempt raised something unexpected (a bug below): its messages get it."""
        lane = self._lanes[batch.lane]
        assert lane.in_flight is batch, "complete_with() of a batch that is not in flight"
        lane.in_flight = None
        self.in_flight -= 1
        return self._resolve(batch, error)

    def lane_has_keys(self, lane_key: LaneKey) -> bool:
        """True while a keyed message of the lane waits for its answer."""
        lane = self._lanes.get(lane_key)
        return lane is not None and lane.keyed_pending > 0

    def fail_pending(self, error: BaseException) -> list[Resolution]:
        """Every message not in flight gets `error` (close gave up waiting)."""
        resolutions: list[Resolution] = []
        for lane in self._lanes.values():
            for batch in lane.queued:
                resolutions += self._resolve(batch, error)
            lane.queued.clear()
            if lane.open:
                self._close_open(lane)
                resolutions += self._resolve(lane.queued[0], error)
                lane.queued.clear()
        return resolutions

    def _resolve(self, batch: Batch, outcome: PutReply | SendResult | BaseException
                 ) -> list[Resolution]:
        self.buffered_bytes -= batch.size_bytes
        self.pending_messages -= len(batch.messages)
        self._lanes[batch.lane].keyed_pending -= batch.keyed_count
        return [(batch.messages, outcome)]

    def lanes(self) -> Iterator[LaneKey]:
        return iter(self._lanes)


def results_of(outcome: PutReply | SendResult | BaseException, rows: int
               ) -> list[SendResult | BaseException]:
    """What each of a resolved batch's `rows` messages gets (see Resolution)."""
    if isinstance(outcome, PutReply):
        return list(put_results(outcome, rows))
    return [outcome] * rows


def expand(resolutions: list[Resolution]) -> list[tuple[Any, SendResult | BaseException]]:
    """(handle, result) per message of `resolutions`, in order."""
    expanded: list[tuple[Any, SendResult | BaseException]] = []
    for messages, outcome in resolutions:
        expanded += zip([message.handle for message in messages],
                        results_of(outcome, len(messages)), strict=True)
    return expanded


def put_results(reply: PutReply, rows: int) -> list[SendResult]:
    """One result per row of a put's reply (`send_batch`, `send_async`'s futures). A stored
    reply names every row's position, a duplicate's included (the original's); one that does
    not (DUPLICATE_POSITION_UNKNOWN, or a broker from before issue 43 answering a duplicate
    PUT_OK without positions) is DUPLICATE_POSITION_UNKNOWN: never a PUT_OK at -1."""
    if not status_for(reply.status).stored:
        return [SendResult(reply.status, error=reply.error)] * rows
    offsets = reply.row_offsets(rows)
    if len(offsets) != rows:  # (row_offsets asserts a single range's count)
        if reply.status == "PUT_OK" or reply.status == POSITION_UNKNOWN:
            return [SendResult(POSITION_UNKNOWN, error=reply.error or
                               "stored earlier; its position is no longer known")] * rows
        return [SendResult(reply.status, error=reply.error)] * rows  # not acknowledged yet
    error = "duplicate" if reply.duplicate and not reply.error else reply.error
    broker_name = reply.broker_name if isinstance(reply, SetPutReply) else ""
    return [SendResult(reply.status, queue_id, queue_offset, error, broker_name)
            for queue_id, queue_offset in offsets]


# A topic's writable queues as the producer learnt them: (replica set, writeQueueNums) per
# set taking its writes, in order; the set None: the producer's one set (no controller).
TopicRoute = tuple[tuple[str | None, int], ...]


class QueueChooser:
    """The (replica set, queue) of a message sent without queue_id, among every writable queue
    of every set taking the topic's writes, numbered in the route's order (set by set):
    crc32(key) % the total (the broker's rule when there is one set), or for a keyless message
    a sticky queue that moves on every `sticky_messages` keyless messages (across sets, as a
    RocketMQ producer chooses among the topic's message queues on every broker). None while
    the topic's route is unknown."""

    def __init__(self, sticky_messages: int) -> None:
        self.sticky_messages = sticky_messages
        # topic -> (route, [(set, queue) of every writable queue], [sticky index, left])
        self._topics: dict[str, tuple[TopicRoute, list[tuple[str | None, int]], list[int]]] = {}

    def queue_count(self, topic: str) -> int | None:
        state = self._topics.get(topic)
        return None if state is None else len(state[1])

    def route(self, topic: str) -> TopicRoute | None:
        state = self._topics.get(topic)
        return None if state is None else state[0]

    def learn(self, topic: str, route: int | TopicRoute) -> None:
        """The topic's writeQueueNums (one set), or its route; a new route replaces the old
        one (its sticky queue starts again at a random queue)."""
        if isinstance(route, int):
            route = ((None, route),)
        queues = [(name, queue_id) for name, count in route for queue_id in range(count)]
        assert queues, "a route with no writable queue"
        self._topics[topic] = (route, queues, [random.randrange(len(queues)),
                                               self.sticky_messages])

    def forget(self, topic: str) -> None:
        self._topics.pop(topic, None)

    def choose(self, topic: str, key: str | None) -> tuple[str | None, int] | None:
        state = self._topics.get(topic)
        if state is None:
            return None
        _, queues, sticky = state
        if key is not None:
            return queues[zlib.crc32(key.encode()) % len(queues)]
        if sticky[1] <= 0:
            sticky[0] = (sticky[0] + 1) % len(queues)
            sticky[1] = self.sticky_messages
        sticky[1] -= 1
        return queues[sticky[0]]
