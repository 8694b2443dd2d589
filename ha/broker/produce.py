"""The produce path of the broker's Flight endpoint: DoPut, one reply per Arrow batch.

A produce stream names its topic once (`{"topic": T}` in the descriptor: checked against the
ACL, the role and the topic's permission before any batch is read; an unknown topic is created
here if autoCreateTopicEnable, acknowledged before its first message is written), or names it
per batch (`{"topics": "per_batch"}`: each batch's app_metadata is its topic's UTF-8 name, and
a topic is checked the same way at its first batch on the stream, then kept for the stream's
life). One stream per producer for all its topics, as a Kafka producer keeps one connection
per broker: a stream per topic held a server thread per topic, and the client reopens each
stream every request_timeout_ms, so a producer writing 1,250 topics reopened ~125 streams a
second (docs/benchmarks/scale.md). Then each batch, as it arrives: its size against
putRowsMax/putBatchBytesMax (the first over a limit ends the stream), then, inside the store's
admission gate, the idempotence check
(ha/broker/idempotence.py: a batch stored before is answered from its first put), the queue
choice (explicit queue_id, else the key's hash, else one round-robin queue per batch) and the
replicated put (ha/broker/replication.py). The reply names where each row is (queue ranges)
and the put's status (connector/protocol/wire.py).

This is the latency-critical path (a single send's p50 is a headline figure): BrokerService's
methods, kept in their own module, with no call added between a batch and its put.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import logging
import time
import zlib
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyarrow import flight

from conf.signing import descriptor_target
from connector.protocol import (
    PER_BATCH_TOPICS,
    ProtocolError,
    PutReply,
    code_for,
    decode_json_object,
)
from ha.broker.arrow_codec import BadBatch, check_produce_schema, rows_from_batch
from ha.broker.metadata import TopicConfig
from ha.broker.request_errors import (
    RequestError,
    check_not_internal,
    check_topic_name,
    guarded,
    record_limits,
)
from storage_engine import MessageBatch, PutStatus

__all__ = ["ProducePath"]

# the broker service's handlers log under its name, wherever their code sits
logger = logging.getLogger("ha.broker.service")


class ProducePath:
    """The produce methods of BrokerService (not usable on its own: they use its config, auth,
    admission gate, replication, topics, idempotence table, traffic counters and stop flag)."""

    # -- topics -----------------------------------------------------------------------------
    def _topic_for_write(self, name: str) -> TopicConfig:
        check_not_internal(name)
        topic = self.topics.get(name)
        if topic is None:
            check_topic_name(name)
            if not self.config.auto_create_topic_enable:
                raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} does not exist and this "
                                   "broker creates none on a first produce "
                                   "(autoCreateTopicEnable=false): create it first, e.g. "
                                   f"`rocketha-admin topic create --topic {name}`")
            queues = self.config.default_topic_queue_nums
            self._auto_create(TopicConfig(name, queues, queues))
            topic = self.topics.get(name)
            if topic is None:  # deleted again between its create and this read
                raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} was just deleted")
        if not topic.writable:
            raise RequestError("NO_PERMISSION",
                               f"topic {name!r} is not writable (perm {topic.perm})")
        return topic

    def _auto_create(self, topic: TopicConfig) -> None:
        """A first put into an unknown topic: its record is acknowledged (PUT_OK) before the
        first message is written, so no message is acked into a topic a new master lacks.
        Anything else refuses the put before it stores a byte: retriable, not "stored"."""
        with record_limits():
            result = self.topics.put(topic, only_if_absent=True,
                                     queues_max=self.config.queues_max)
        if result is None:  # another put created it first
            return
        if result.status is not PutStatus.PUT_OK:
            raise RequestError(
                "SERVICE_NOT_AVAILABLE" if result.status.stored else result.status.name,
                f"auto-create of topic {topic.name!r} not acknowledged: {result.status.name}"
                + (f" ({result.error})" if result.error else "") + "; nothing was stored")
        logger.info("auto-created topic %s with %d queues", topic.name, topic.write_queue_nums)

    # -- produce ----------------------------------------------------------------------------
    @functools.partial(guarded, admitted=False)
    def do_put(self, context: Any, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader,
               writer: flight.FlightMetadataWriter) -> None:
        if descriptor.descriptor_type != flight.DescriptorType.CMD:
            raise ProtocolError('produce descriptor must be a command: {"topic": T}')
        request = decode_json_object(descriptor.command, "produce descriptor")
        name = request.get("topic")
        per_batch = name is None and request.get("topics") == PER_BATCH_TOPICS
        if not per_batch and not isinstance(name, str):
            raise ProtocolError('produce descriptor: field "topic" must be a string (or '
                                f'"topics": "{PER_BATCH_TOPICS}")')
        target = descriptor_target(descriptor.command, None)
        topic: TopicConfig | None = None
        if per_batch:  # authenticated now; each topic authorized at its first batch
            self.auth.principal_of(context, "DO_PUT", target)
            with self.admission.entered():
                self.replication.check_writable()
        else:
            self.auth.check(context, "DoPut", "DO_PUT", target, {"topic": name})
            with self.admission.entered():  # (a topic created on first produce is a put)
                self.replication.check_writable()
                topic = self._topic_for_write(name)
        try:  # the schema message comes first: a bad stream ends before any batch is read
            check_produce_schema(reader.schema)
        except BadBatch as err:
            raise RequestError("BAD_SCHEMA", str(err)) from err
        stream_topics: dict[bytes, TopicConfig] = {}  # a per-batch stream's topics so far
        with self._counted_stream():
            for chunk in reader:  # bounded by the client's stream; each batch bounded below
                batch = chunk.data
                if batch is None:
                    continue
                if self._closing.is_set():  # stopping: never stored, so never acknowledged
                    raise RequestError("SERVICE_NOT_AVAILABLE", "the broker is stopping")
                if per_batch:  # (a topic seen before on this stream: one dict look-up)
                    metadata = chunk.app_metadata
                    raw = b"" if metadata is None else metadata.to_pybytes()
                    topic = stream_topics.get(raw)
                    if topic is None:
                        topic = self._batch_topic(context, target, raw, stream_topics)
                assert topic is not None
                # Each batch is checked as it arrives, and the first one over a limit ends the
                # stream (the rest is never read). gRPC hands over one IPC message whole:
                # pyarrow offers no hook before that, so one message can still cost its size.
                self._check_batch_size(batch)
                with self.admission.entered():
                    reply = self.idempotence.put(  # drops batches stored before
                        batch, functools.partial(self._put_batch, topic, batch),
                        self.replication.settle, topic.name)
                writer.write(pa.py_buffer(self.replication.annotate_reply(reply.encode())))

    def _batch_topic(self, context: Any, target: bytes, raw: bytes,
                     seen: dict[bytes, TopicConfig]) -> TopicConfig:
        """The topic a batch of a per-batch stream names (its app_metadata), not yet in `seen`:
        checked as a stream's descriptor topic is (ACL, permission, auto-create), then kept in
        `seen` for the stream's life, as a per-topic stream keeps its one.
        A batch naming none, or a name that is not UTF-8, ends the stream."""
        if not raw:
            raise ProtocolError("a batch of a per-batch produce stream names no topic "
                                "(its app_metadata is the topic's name)")
        try:
            name = raw.decode()
        except UnicodeDecodeError:
            raise ProtocolError("a batch's topic (app_metadata) is not UTF-8") from None
        self.auth.check(context, "DoPut", "DO_PUT", target, {"topic": name})
        with self.admission.entered():  # (a topic created on first produce is a put)
            topic = self._topic_for_write(name)
        seen[raw] = topic
        return topic

    @contextlib.contextmanager
    def _counted_stream(self) -> Iterator[None]:
        """Count the produce streams open (what a stop reports it left open), and refuse one
        past putStreamsMax before reading any batch: each open stream holds a server thread."""
        limit = self.config.put_streams_max
        with self._counters.lock:
            if self._open_streams >= limit:
                raise RequestError("BUSY", f"{limit} produce streams are open (putStreamsMax); "
                                   "close idle producers or raise putStreamsMax")
            self._open_streams += 1
        try:
            yield
        finally:
            with self._counters.lock:
                self._open_streams -= 1

    def _check_batch_size(self, batch: pa.RecordBatch) -> None:
        if batch.num_rows > self.config.put_rows_max:
            raise RequestError("BATCH_TOO_LARGE", f"{batch.num_rows} rows > putRowsMax "
                               f"{self.config.put_rows_max}")
        if batch.nbytes > self.config.put_batch_bytes_max:
            raise RequestError("BATCH_TOO_LARGE", f"{batch.nbytes} bytes > putBatchBytesMax "
                               f"{self.config.put_batch_bytes_max}")

    def _put_batch(self, topic: TopicConfig, batch: pa.RecordBatch) -> PutReply:
        started_s = time.perf_counter()
        if batch.num_rows == 0:
            return PutReply("MESSAGE_ILLEGAL", code_for("MESSAGE_ILLEGAL"), [], None, -1,
                            "empty batch")  # (do_put checked the batch's size)
        try:
            rows = rows_from_batch(batch)
        except BadBatch as err:
            raise RequestError("BAD_SCHEMA", str(err)) from err
        queue_ids, uniform = self._choose_queues(topic, rows.queue_ids, rows.keys,
                                                 batch.num_rows)
        result = self.replication.put(MessageBatch(
            topic=topic.name, bodies=rows.bodies, queue_ids=queue_ids, tags=rows.tags,
            keys=rows.keys, properties=rows.properties,
            born_timestamp_ms=int(time.time() * 1000),
        ))
        status = result.status
        self.traffic.put_done(topic.name, batch.num_rows, batch.nbytes, status.name,
                              status.stored, time.perf_counter() - started_s)
        if not status.stored:
            return PutReply(status.name, code_for(status.name), [], None, -1, result.error)
        ranges = ([[queue_ids[0], result.queue_offsets[0], len(queue_ids)]] if uniform
                  else _queue_ranges(queue_ids, result.queue_offsets))
        return PutReply(status.name, code_for(status.name), ranges,
                        None if uniform else list(queue_ids), result.log_position_end,
                        result.error)

    def _choose_queues(self, topic: TopicConfig, explicit: list[int | None] | None,
                       keys: list[str | None] | None, rows: int) -> tuple[list[int], bool]:
        """Per row: explicit queue_id, else hash of key, else one round-robin queue."""
        queues = topic.write_queue_nums
        counter = self._round_robin.get(topic.name)
        if counter is None:  # (setdefault alone built a count() on every put)
            counter = self._round_robin.setdefault(topic.name, itertools.count())
        if explicit is None and keys is None:
            return [next(counter) % queues] * rows, True
        fallback = next(counter) % queues
        chosen = []
        for index in range(rows):
            queue_id = explicit[index] if explicit is not None else None
            if queue_id is None:
                key = keys[index] if keys is not None else None
                queue_id = fallback if key is None else zlib.crc32(key.encode()) % queues
            elif not 0 <= queue_id < queues:
                raise RequestError("BAD_REQUEST", f"queue_id {queue_id} not in [0, {queues}) "
                                   f"for topic {topic.name!r}")
            chosen.append(queue_id)
        return chosen, len(set(chosen)) == 1


def _queue_ranges(queue_ids: list[int], queue_offsets: Any) -> list[list[int]]:
    """[[queue_id, first_queue_offset, count]] in first-appearance order."""
    ranges: dict[int, list[int]] = {}
    for queue_id, queue_offset in zip(queue_ids, queue_offsets, strict=True):
        entry = ranges.get(queue_id)
        if entry is None:
            ranges[queue_id] = [queue_id, queue_offset, 1]
        else:
            entry[2] += 1
    return list(ranges.values())
