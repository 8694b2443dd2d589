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
    message_size_bytes,
    put_results,
)
from connector.client.put_channel import _PutChannel
from connector.protocol import PutIdempotence, PutReply, RocketHAError

__all__ = ["QUEUE_LOOKUP_INTERVAL_S", "Producer"]

logger = logging.getLogger(__name__)


QUEUE_LOOKUP_INTERVAL_S = 1.0  # a producer asks a topic's writeQueueNums at most this often


class Producer:
    """Sends messages: `send_async` (batched in the background, a future per message),
    `send` (the same, waited for), `send_batch` / `put` (a batch the caller built).

    `send_async` appends the message to its lane's batch, (topic, queue: the given queue_id,
    else crc32(key) % writeQueueNums or a sticky queue for keyless messages, see
    connector/client/producer_core.py), and returns at once; batches leave when full
    (`ProducerConfig.batch_messages` / `batch_bytes`), `linger_ms` after their first message, or on
    `flush()`, at most `max_in_flight` at a time and one per lane, so order holds per queue and per
    key (connector/client/producer_core.py says why, and what the broker's idempotence allows).
    Messages waiting for an answer hold at most `buffer_bytes`; past that `send_async` blocks up to
    `max_block_ms`, then raises ProducerBufferFullError. `send` marks its lane urgent (no linger)
    and runs the round trip on the calling thread when the lane is idle, so its latency is a round
    trip's.

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
        self._channel = _PutChannel(config, idempotent=idempotent, routes=self._routes)
        self._lane_channels: dict[LaneKey, _PutChannel] = {}
        self._lock = threading.Lock()
        # `send_batch` and `put` are thread-safe: their round trips share self._channel's DoPut
        # stream, and two threads writing one stream abort the process (gRPC
        # GRPC_CALL_ERROR_TOO_MANY_OPERATIONS); an idempotent sequence must also be taken and
        # sent by one thread at a time (two batches with one sequence: the second would be
        # answered as a duplicate without being stored). `send` goes through the lanes, one
        # batch in flight per lane (connector/client/async_sender.py).
        self._send_lock = threading.RLock()
        self._sender: AsyncSender | None = None
        self._chooser = QueueChooser(self.batching.batch_messages)
        self._lookup_config = dataclasses.replace(config, retries_max=0)
        self._lookup_lock = threading.Lock()
        self._lookup_after: dict[str, float] = {}
        self._found_counts: dict[str, int] = {}  # looked up, not applied yet

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
        if queue_id is None:
            if inline and key is None:
                # a keyless send() leaves the queue to the broker: its lane then carries no
                # queue_id column, the broker's cheapest path; keyless messages have no order
                # to keep with the sticky lanes, and keyed ones never enter that lane once
                # the producer picks their queues
                return sender.send((topic, None), future, inline)
            queue_id = self._chooser.choose(topic, key)
        if queue_id is not None:
            return sender.send((topic, queue_id), future, inline)
        # The topic's queue count is not known yet: the broker picks. Every append to the
        # broker-picks lane and the switch away from it happen under _lookup_lock, and the
        # switch only while that lane holds no keyed message waiting for its answer, so a key
        # never has messages in two lanes.
        with self._lookup_lock:
            found = self._found_counts.pop(topic, 0)
            if found and self._chooser.queue_count(topic) is None:
                if not sender.lane_has_keys((topic, None)):
                    self._chooser.learn(topic, found)
                else:
                    self._found_counts[topic] = found  # try again on a later send
            queue_id = self._chooser.choose(topic, key)
            if queue_id is None:
                self._look_up_queues(topic)
                return sender.send((topic, None), future, inline)
        return sender.send((topic, queue_id), future, inline)

    def _look_up_queues(self, topic: str) -> None:
        """Ask for the topic's writeQueueNums on a thread of its own (never on the caller's:
        a controller that does not answer would hold the send), at most every
        QUEUE_LOOKUP_INTERVAL_S per topic. Caller holds _lookup_lock."""
        now_s = time.monotonic()
        if now_s < self._lookup_after.get(topic, 0.0):
            return
        self._lookup_after[topic] = now_s + QUEUE_LOOKUP_INTERVAL_S

        def look_up() -> None:
            try:
                count = int(Admin(self._lookup_config).get_topic(topic)["write_queue_nums"])
            except (RocketHAError, KeyError, TypeError, ValueError, OSError,
                    flight.FlightError) as err:
                logger.debug("queue count of %s unknown (%s): the broker picks", topic, err)
                return
            if count >= 1:
                with self._lookup_lock:
                    self._found_counts[topic] = count

        threading.Thread(target=look_up, name="rocketha-queues", daemon=True).start()

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
        topic, queue_id = batch.lane
        if batch.wire is None:
            marker = (None if batch.producer_id is None
                      else PutIdempotence(batch.producer_id, batch.sequence))
            batch.wire = _messages_to_batch(batch.messages, queue_id, marker)
        return self._lane_channel(batch.lane).attempt(topic, batch.wire)

    def _lane_channel(self, lane: LaneKey) -> _PutChannel:
        """The channel of a lane (its streams and master watch; the routes are shared)."""
        channel = self._lane_channels.get(lane)
        if channel is None:
            with self._lock:
                channel = self._lane_channels.get(lane)
                if channel is None:
                    channel = self._lane_channels[lane] = _PutChannel(
                        self.config, idempotent=self.idempotent, routes=self._routes)
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
        with self._send_lock:  # one round trip at a time on the shared stream (see __init__)
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

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
