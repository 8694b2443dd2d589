"""The Producer: asynchronous sends in lanes (batched in the background, a future per
message), `send` (the same, waited for), and `send_batch` / `put` (a batch the caller built).

Non-retriable put statuses (MESSAGE_ILLEGAL...) come back as results; request errors
(BAD_SCHEMA, TOPIC_NOT_EXIST...) raise `FatalError`. The batching decisions are the sans-IO
core's (connector/client/producer_core.py), the threads connector/client/async_sender.py's,
each round trip a put channel's (connector/client/put_channel.py).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Self

import pyarrow as pa
from pyarrow import flight

from connector.client.admin import Admin
from connector.client.async_sender import AsyncSender, SendFuture
from connector.client.broker_calls import _Routes
from connector.client.config import Backoff, ClientConfig
from connector.client.encoding import _messages_to_batch, _rows_to_batch, with_marker
from connector.client.producer_core import (
    MESSAGE_OVERHEAD_BYTES,
    Batch,
    LaneKey,
    ProducerConfig,
    ProducerCore,
    QueueChooser,
    SendResult,
    SetPutReply,
    TopicRoute,
    message_size_bytes,
    put_results,
)
from connector.client.put_channel import _PutChannel
from connector.client.routes import route_provider, writable_queue_counts
from connector.client.stream_pool import StreamPool
from connector.errors import RoutesUnavailableError
from connector.protocol import PutIdempotence, PutReply, RocketHAError

__all__ = ["QUEUE_LOOKUP_INTERVAL_S", "Producer"]

logger = logging.getLogger(__name__)


# a producer asks a topic's writeQueueNums (with a controller: its route) at most this often
QUEUE_LOOKUP_INTERVAL_S = 1.0


class Producer:
    """Sends messages: `send_async` (batched in the background, a future per message),
    `send` (the same, waited for), `send_batch` / `put` (a batch the caller built).

    `send_async` appends the message to its lane's batch, (topic, replica set, queue: the given
    queue_id, else crc32(key) % writeQueueNums or a sticky queue for keyless messages, see
    connector/client/producer_core.py), and returns at once; batches leave when full
    (`ProducerConfig.batch_messages` / `batch_bytes`), `linger_ms` after their first message, or on
    `flush()`, at most `max_in_flight` at a time and one per lane, so order holds per queue and per
    key (connector/client/producer_core.py says why, and what the broker's idempotence allows).
    Messages waiting for an answer hold at most `buffer_bytes`; past that `send_async` blocks up to
    `max_block_ms`, then raises ProducerBufferFullError. `send` marks its lane urgent (no linger)
    and runs the round trip on the calling thread when the lane is idle, so its latency is a round
    trip's. The producer's DoPut streams are shared by its lanes and topics (each batch names
    its topic): a stream per broker per round trip in flight there, not per topic or queue
    (connector/client/stream_pool.py).

    With `idempotent=True` every batch carries (producer id, sequence) in its last row, so a
    retry of a batch the broker already stored (the reply was lost, e.g. its master died
    after replicating it) is answered from the broker's idempotence table instead of being
    stored twice; the table survives restarts and failover (rebuilt from the log). With
    `controller` too, a put whose master is replaced while it waits (the master was paused or
    cut off) is sent again to the new master instead of waiting out the old one
    (connector/client/master_watch.py). An idempotent producer also retries a batch answered with a
    status that means "stored here, not acknowledged" (FLUSH_SLAVE_TIMEOUT,
    SLAVE_NOT_AVAILABLE, FLUSH_DISK_TIMEOUT: e.g. a deposed master whose slaves left it) until
    the send deadline: the retry is answered PUT_OK only once the batch is as durable as an
    acknowledged one (on the new master if there is one), and never stored twice. When the
    deadline passes the last such reply is returned, as without idempotence.

    With `controller`, `send_async` and `send` write to every replica set that takes the
    topic's writes: the producer looks up the topic's route (each set's writeQueueNums, write
    permission on) every QUEUE_LOOKUP_INTERVAL_S and chooses among all their queues (a set
    added with `topic update --add-broker-name` gets writes, a drained one gets no new ones);
    each result names its set (`SendResult.broker_name`). A new route is applied while no
    keyed message of the topic waits for its answer, so a key's messages are never in two
    lanes at once. `send_batch` and `put` go to one master, as before.

    `send_async`, `send`, `flush` and `close` are thread-safe; `send_batch` and `put` are
    not (one thread at a time; they do not wait for, nor order with, asynchronous sends).
    """

    def __init__(self, config: ClientConfig, *, idempotent: bool = False,
                 batching: ProducerConfig | None = None) -> None:
        self.config = config
        self.batching = batching or ProducerConfig()
        self.idempotent = idempotent
        self._producer_id = uuid.uuid4().hex if idempotent else None
        self._sequence = 0
        self._routes = _Routes(config.brokers)  # shared by every channel below
        # idle DoPut streams, shared by every channel below: as many per (broker, topic) as
        # round trips ran there at once, not one per lane (connector/client/stream_pool.py)
        self._streams = StreamPool()
        self._channel = _PutChannel(config, idempotent=idempotent, routes=self._routes,
                                    streams=self._streams)
        self._lane_channels: dict[LaneKey, _PutChannel] = {}
        self._lock = threading.Lock()
        # `send_batch` and `put` are thread-safe: their round trips share self._channel (its
        # retries and master watch are one thread's); an idempotent sequence must also be taken and
        # sent by one thread at a time (two batches with one sequence: the second would be
        # answered as a duplicate without being stored). `send` goes through the lanes, one
        # batch in flight per lane (connector/client/async_sender.py).
        self._send_lock = threading.RLock()
        self._sender: AsyncSender | None = None
        self._chooser = QueueChooser(self.batching.batch_messages)
        self._lookup_config = dataclasses.replace(config, retries_max=0)
        self._lookup_lock = threading.Lock()
        self._lookup_after: dict[str, float] = {}
        self._found: dict[str, TopicRoute] = {}  # looked up, not applied yet
        self._looking_up: set[str] = set()
        # with a controller: write to every replica set of a topic, its route looked up again
        # every QUEUE_LOOKUP_INTERVAL_S
        self._spread = config.controller is not None

    @property
    def endpoint(self) -> str:
        """The broker `send_batch` / `put` send to (routes as in Admin and Consumer)."""
        return self._channel.endpoint

    # -- asynchronous ---------------------------------------------------------------------
    def send_async(self, topic: str, body: bytes | str, *, key: str | None = None,
                   tags: str | None = None, properties: Mapping[str, str] | None = None,
                   queue_id: int | None = None) -> Future[SendResult]:
        """Queue one message; the future gets its SendResult (PUT_OK with its queue offset,
        or the broker's other status), or the typed error its batch ended with
        (RocketHAError after the retries and the send deadline). A message larger than
        batch_bytes goes in a batch of its own (the broker's maxMessageSize decides). Raises at
        once ProducerBufferFullError (no room within max_block_ms), ProducerClosedError, or
        ValueError (a message larger than buffer_bytes)."""
        return self._send_async(topic, body, key, tags, properties, queue_id, inline=False)

    def send(self, topic: str, body: bytes | str, *, key: str | None = None,
             tags: str | None = None, properties: Mapping[str, str] | None = None,
             queue_id: int | None = None) -> SendResult:
        """`send_async(...).result()`, without waiting for linger_ms."""
        return self._send_async(topic, body, key, tags, properties, queue_id,
                                inline=True).result()

    def _send_async(self, topic: str, body: bytes | str, key: str | None, tags: str | None,
                    properties: Mapping[str, str] | None, queue_id: int | None, *,
                    inline: bool) -> Future[SendResult]:
        sender = self._sender or self._start_sender()
        if isinstance(body, str):
            body = body.encode()
        if key is None and tags is None and not properties:  # the common case, inlined
            future = SendFuture(body, None, None, None, len(body) + MESSAGE_OVERHEAD_BYTES)
        else:
            future = SendFuture(body, key, tags,
                                tuple(properties.items()) if properties else None,
                                message_size_bytes(body, key, tags, properties))
        if queue_id is not None:
            return sender.send((topic, None, queue_id), future, inline)
        if self._spread:
            if time.monotonic() >= self._lookup_after.get(topic, 0.0) or topic in self._found:
                self._update_route(topic, sender)
        elif inline and key is None:
            # a keyless send() leaves the queue to the broker: its lane then carries no
            # queue_id column, the broker's cheapest path; keyless messages have no order
            # to keep with the sticky lanes, and keyed ones never enter that lane once
            # the producer picks their queues
            return sender.send((topic, None, None), future, inline)
        choice = self._chooser.choose(topic, key)
        if choice is not None:
            return sender.send((topic, *choice), future, inline)
        # The topic's queues are not known yet: the broker picks. Every append to the
        # broker-picks lane and the switch away from it happen under _lookup_lock, and the
        # switch only while that lane holds no keyed message waiting for its answer, so a key
        # never has messages in two lanes.
        with self._lookup_lock:
            self._apply_found(topic, sender)
            choice = self._chooser.choose(topic, key)
            if choice is None:
                self._look_up_queues(topic)
                return sender.send((topic, None, None), future, inline)
        return sender.send((topic, *choice), future, inline)

    def _update_route(self, topic: str, sender: AsyncSender) -> None:
        """With a controller: apply a route looked up since the last send, or look it up."""
        with self._lookup_lock:
            self._apply_found(topic, sender)
            self._look_up_queues(topic)

    def _apply_found(self, topic: str, sender: AsyncSender) -> None:
        """Apply the route looked up for `topic`, unless a keyed message of one of its lanes
        waits for its answer (then at a later send). Caller holds _lookup_lock, so no send
        appends to the topic's lanes between the check and the switch."""
        found = self._found.pop(topic, None)
        if found is None:
            return
        current = self._chooser.route(topic)
        if found == current:
            return
        lanes = [(topic, None, None)] + [(topic, name, queue_id) for name, count in current or ()
                                         for queue_id in range(count)]
        if any(sender.lane_has_keys(lane) for lane in lanes):
            self._found[topic] = found  # try again on a later send
            return
        if current is not None:
            logger.info("topic %s: writes go to %s (was %s)", topic, _route_text(found),
                        _route_text(current))
        self._chooser.learn(topic, found)

    def _look_up_queues(self, topic: str) -> None:
        """Ask for the topic's writeQueueNums (with a controller: its route) on a thread of its
        own (never on the caller's: a controller that does not answer would hold the send),
        at most every QUEUE_LOOKUP_INTERVAL_S per topic. Caller holds _lookup_lock."""
        now_s = time.monotonic()
        if now_s < self._lookup_after.get(topic, 0.0) or topic in self._looking_up:
            return
        self._lookup_after[topic] = now_s + QUEUE_LOOKUP_INTERVAL_S
        self._looking_up.add(topic)

        def look_up() -> None:
            route: TopicRoute = ()
            try:
                if self._spread:
                    route = self._topic_route(topic)
                else:
                    count = int(Admin(self._lookup_config).get_topic(topic)["write_queue_nums"])
                    route = ((None, count),) if count >= 1 else ()
            except (RocketHAError, RoutesUnavailableError, KeyError, TypeError, ValueError,
                    OSError, flight.FlightError) as err:
                logger.debug("queues of %s unknown (%s): unchanged", topic, err)
            with self._lookup_lock:
                self._looking_up.discard(topic)
                if route:
                    self._found[topic] = route

        threading.Thread(target=look_up, name="rocketha-queues", daemon=True).start()

    def _topic_route(self, topic: str) -> TopicRoute:
        """(replica set, writeQueueNums) of every set the controller names that takes the
        topic's writes, in the sets' order; () when none does (the broker then picks)."""
        config = self.config
        routes = route_provider(config.brokers, config.controller, config.request_timeout_ms,
                                config.tls, config.credentials)
        route = []
        for replica_set in routes.replica_sets():
            count = writable_queue_counts(replica_set, config.request_timeout_ms, config.tls,
                                          config.credentials).get(topic, 0)
            if count >= 1:
                route.append((replica_set.broker_name, count))
        return tuple(route)

    def topic_route(self, topic: str) -> TopicRoute | None:
        """The (replica set, writeQueueNums) pairs the producer writes `topic` to now (the set
        None: the one its routes name, without a controller); None until it knows them."""
        with self._lookup_lock:
            return self._chooser.route(topic)

    def flush(self, timeout_ms: int | None = None) -> bool:
        """Send what `send_async` queued now (no linger) and wait until every message queued
        before this call has its result; False if `timeout_ms` passed first."""
        if self._sender is None:
            return True
        return self._sender.flush(None if timeout_ms is None else timeout_ms / 1000.0)

    def _start_sender(self) -> AsyncSender:
        with self._lock:
            if self._sender is None:
                core = ProducerCore(
                    self.batching, producer_id=self._producer_id,
                    retries_max=self.config.retries_max,
                    send_deadline_ms=self.config.send_deadline_ms,
                    backoff_ms=Backoff(self.config.backoff_initial_ms,
                                       self.config.backoff_max_ms).jittered_ms)
                self._sender = AsyncSender(core, self._run_batch)
            return self._sender

    def _run_batch(self, batch: Batch) -> PutReply | RocketHAError:
        """One attempt of a lane's batch, on that lane's channel (one thread at a time: the
        core keeps one batch per lane in flight)."""
        topic, broker_name, queue_id = batch.lane
        if batch.wire is None:
            marker = (None if batch.producer_id is None
                      else PutIdempotence(batch.producer_id, batch.sequence))
            batch.wire = _messages_to_batch(batch.messages, queue_id, marker)
        channel = self._lane_channel(batch.lane)
        reply = channel.attempt(topic, batch.wire)
        if self._spread and isinstance(reply, PutReply):  # the result names its set
            if broker_name is None:  # (the broker-picks lane: the set that answered)
                broker_name = self._routes.set_of_member.get(channel.answered_by, "")
            reply = SetPutReply.of(reply, broker_name)
        return reply

    def _lane_channel(self, lane: LaneKey) -> _PutChannel:
        """The channel of a lane (its master watch; the routes and streams are shared), in
        the lane's replica set when it names one."""
        channel = self._lane_channels.get(lane)
        if channel is None:
            with self._lock:
                channel = self._lane_channels.get(lane)
                if channel is None:
                    channel = self._lane_channels[lane] = _PutChannel(
                        self.config, idempotent=self.idempotent, routes=self._routes,
                        broker_name=lane[1], streams=self._streams)
        return channel

    # -- synchronous batches ----------------------------------------------------------------
    def send_batch(self, topic: str, batch: pa.RecordBatch | pa.Table
                   | Sequence[Mapping[str, Any]]) -> list[SendResult]:
        """Send rows (an Arrow batch/table with PRODUCE_SCHEMA columns, or dicts with `body`,
        `key`, `tags`, `properties`, `queue_id`); one result per row, in order."""
        if not isinstance(batch, (pa.RecordBatch, pa.Table)):
            batch = _rows_to_batch(batch)
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        results: list[SendResult] = []
        for record_batch in batches:
            results += self._send_one_batch(topic, record_batch)
        return results

    def _send_one_batch(self, topic: str, batch: pa.RecordBatch) -> list[SendResult]:
        with self._send_lock:  # the sequence and its round trip together (see __init__)
            if self._producer_id is not None:
                batch = with_marker(batch, PutIdempotence(self._producer_id, self._sequence))
                self._sequence += 1
            reply = self.put(topic, batch)
        return put_results(reply, batch.num_rows)  # (a duplicate's: the original's positions)

    def put(self, topic: str, batch: pa.RecordBatch) -> PutReply:
        """Send one Arrow batch (PRODUCE_SCHEMA columns) and return the broker's reply, with
        the retry policy; non-stored statuses that are not retriable come back as replies."""
        with self._send_lock:  # one round trip at a time on the shared channel (see __init__)
            return self._channel.put(topic, batch)

    def close(self, timeout_ms: int | None = None) -> None:
        """Wait for every pending `send_async` (up to `timeout_ms`: those still unsent then
        get ProducerClosedError), then close the streams."""
        if self._sender is not None:
            self._sender.close(None if timeout_ms is None else timeout_ms / 1000.0)
        self._channel.close()
        with self._lock:
            channels = list(self._lane_channels.values())
            self._lane_channels.clear()
        for channel in channels:
            channel.close()
        self._streams.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _route_text(route: TopicRoute) -> str:
    return ", ".join(f"{name}: {count} queues" for name, count in route)
