"""The consume path of the broker's Flight endpoint: DoGet streams, long polls, and the
FlightInfo that points readers at each queue.

A DoGet ticket (connector/protocol/wire.py) names topic, queue, start queue offset and limits
(messages, bytes, columns, tag filter). The stream reads the store in steps, each inside the
admission gate, and never past the confirm position (the store's reads stop there: docs/design.md
§5.2);
plain reads take the block path (records copied as they are on disk, decoded to Arrow in one
pass), tag-filtered reads go record by record.

Long polling: a DoGet that finds nothing new waits (at most `max_wait_ms`, capped by
`longPollingWaitMaxMs`, and at most `longPollingMax` waiters at once) on a condition that the
store's confirm listener signals, so a tailing consumer sees a message milliseconds after it
becomes visible without busy polling.

Discovery: GetFlightInfo(topic) lists one endpoint per readable queue (a ticket from the queue's
minimum), so any Flight client can read a topic in parallel; ListFlights lists the topics the
caller may see.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
from pyarrow import flight

from conf.signing import descriptor_target
from connector.protocol import CONSUME_SCHEMA, GetReply, GetTicket, ProtocolError, code_for
from ha.broker.admission import ClosedError
from ha.broker.arrow_codec import block_to_batch, empty_batch, records_to_batch
from ha.broker.long_poll import poll_until
from ha.broker.metadata import TopicConfig
from ha.broker.replication import NotMasterError
from ha.broker.request_errors import RequestError, flight_error, guarded
from storage_engine import GetResult, GetStatus, RecordBlock, TagFilter

__all__ = ["ConsumePath"]

# the broker service's handlers log under its name, wherever their code sits
logger = logging.getLogger("ha.broker.service")

_WAITABLE = (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE)


class ConsumePath:
    """The read methods of BrokerService (not usable on its own: they use its config, auth,
    admission gate, replication, topics, store, traffic counters, request counters, arrivals
    and long-poll slots)."""

    # -- topics -----------------------------------------------------------------------------
    def _topic_for_read(self, name: str) -> TopicConfig:
        topic = self.topics.get(name)
        if topic is None:
            raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} does not exist")
        if not topic.readable:
            raise RequestError("NO_PERMISSION",
                               f"topic {name!r} is not readable (perm {topic.perm})")
        return topic

    # -- consume ----------------------------------------------------------------------------
    @guarded
    def do_get(self, context: Any, ticket: flight.Ticket) -> flight.FlightDataStream:
        request = GetTicket.decode(ticket.ticket)
        self.auth.check(context, "DoGet", "DO_GET", ticket.ticket,
                        {"topic": request.topic, "group": request.group})
        self.replication.check_readable()
        topic = self._topic_for_read(request.topic)
        if request.queue_id >= topic.read_queue_nums:
            raise RequestError("BAD_REQUEST", f"queue_id {request.queue_id} not in "
                               f"[0, {topic.read_queue_nums}) for topic {topic.name!r}")
        try:
            tag_filter = TagFilter.parse(request.tag_filter)
        except ValueError as err:
            raise RequestError("BAD_REQUEST", f"ticket: tag_filter: {err}") from err
        self._count("get_requests")
        # the stream's declared schema is the one every batch of _read has: the ticket's columns
        return flight.GeneratorStream(request.schema(),
                                      self._typed_errors(self._read(request, tag_filter)))

    def _typed_errors(self, stream: Iterator[tuple[pa.RecordBatch, pa.Buffer]]
                      ) -> Iterator[tuple[pa.RecordBatch, pa.Buffer]]:
        """A stream's errors as typed Flight errors (it runs after `guarded` has returned:
        an exception left as it is would reach the client with its Python traceback)."""
        try:
            while True:  # each step reads the store: inside the admission gate
                with self.admission.entered():
                    item = next(stream, None)
                if item is None:
                    return
                yield item
        except flight.FlightError:
            raise
        except ClosedError as err:
            raise flight_error("SERVICE_NOT_AVAILABLE", str(err)) from None
        except (RequestError, NotMasterError) as err:
            raise flight_error(err.name, str(err)) from None
        except Exception as err:  # shell boundary: this call fails alone
            logger.exception("a read stream failed")
            raise flight_error("INTERNAL_ERROR", type(err).__name__) from None

    def _read(self, request: GetTicket, tag_filter: TagFilter | None
              ) -> Iterator[tuple[pa.RecordBatch, pa.Buffer]]:
        queue_offset = request.queue_offset
        remaining_count, remaining_bytes = request.max_messages, request.max_bytes
        result = self._get(request, queue_offset, remaining_count, remaining_bytes, tag_filter)
        if result.status in _WAITABLE and request.max_wait_ms > 0:
            result = self._long_poll(request, tag_filter)
        while True:
            reply = GetReply(result.status.name, code_for(result.status.name),
                             result.next_queue_offset, result.min_queue_offset,
                             result.max_queue_offset)
            batch, size_bytes = _to_batch(result, request.topic, request.columns)
            self.traffic.get_done(request.topic, batch.num_rows, size_bytes)
            yield batch, pa.py_buffer(reply.encode())
            remaining_count -= batch.num_rows
            remaining_bytes -= size_bytes
            if (result.status is not GetStatus.FOUND or remaining_count <= 0
                    or remaining_bytes <= 0 or result.next_queue_offset >= result.max_queue_offset):
                return
            result = self._get(request, result.next_queue_offset, remaining_count,
                               remaining_bytes, tag_filter)

    def _get(self, request: GetTicket, queue_offset: int, count: int, size: int,
             tag_filter: TagFilter | None) -> GetResult | RecordBlock:
        """Tag-filtered reads need records one by one; plain reads take the block path."""
        if tag_filter is None:
            return self.store.get_message_block(request.topic, request.queue_id, queue_offset,
                                                max_count=count, max_bytes=size)
        return self.store.get_messages(request.topic, request.queue_id, queue_offset,
                                       max_count=count, max_bytes=size, tag_filter=tag_filter)

    def _long_poll(self, request: GetTicket, tag_filter: TagFilter | None
                   ) -> GetResult | RecordBlock:
        wait_ms = min(request.max_wait_ms, self.config.long_polling_wait_max_ms)
        deadline = time.monotonic() + wait_ms / 1000.0

        def read() -> GetResult | RecordBlock:
            return self._get(request, request.queue_offset, request.max_messages,
                             request.max_bytes, tag_filter)

        if not self._long_poll_slots.acquire(blocking=False):
            self._count("long_poll_rejected")
            return read()
        self._count("long_polls")
        try:
            return poll_until(read, lambda result: (result.status in _WAITABLE
                                                    and not self._closing.is_set()),
                              self._arrivals, deadline)
        finally:
            self._long_poll_slots.release()
            self._count("long_polls_done")

    # -- discovery --------------------------------------------------------------------------
    @guarded
    def get_flight_info(self, context: Any, descriptor: flight.FlightDescriptor
                        ) -> flight.FlightInfo:
        if descriptor.descriptor_type != flight.DescriptorType.PATH or len(descriptor.path) != 1:
            raise ProtocolError("GetFlightInfo takes a path descriptor naming one topic")
        name = descriptor.path[0].decode("utf-8", "replace")
        self.auth.check(context, "GetFlightInfo", "GET_FLIGHT_INFO",
                        descriptor_target(None, descriptor.path), {"topic": name})
        self.replication.check_readable()
        topic = self._topic_for_read(name)
        return self._flight_info(topic)

    def _flight_info(self, topic: TopicConfig) -> flight.FlightInfo:
        location = (flight.Location.for_grpc_tls if self.config.tls.enabled
                    else flight.Location.for_grpc_tcp)(self.config.broker_ip, self.port)
        endpoints = []
        for queue_id in range(topic.read_queue_nums):
            start = self.store.min_queue_offset(topic.name, queue_id)
            ticket = GetTicket(topic.name, queue_id, start)
            endpoints.append(flight.FlightEndpoint(ticket.encode(), [location]))
        descriptor = flight.FlightDescriptor.for_path(topic.name)
        return flight.FlightInfo(CONSUME_SCHEMA, descriptor, endpoints, -1, -1)

    @guarded
    def list_flights(self, context: Any, criteria: bytes) -> Iterator[flight.FlightInfo]:
        principal = self.auth.check(context, "ListFlights", "LIST_FLIGHTS", criteria or b"", {})
        return iter([self._flight_info(topic) for topic in self.topics.all()
                     if topic.readable and self.auth.visible(principal, topic.name)])


def _to_batch(result: GetResult | RecordBlock, topic: str, columns: tuple[str, ...] | None
              ) -> tuple[pa.RecordBatch, int]:
    """The Arrow batch (of the ticket's `columns`) of a read result and the record bytes it
    came from."""
    if isinstance(result, RecordBlock):
        if len(result.sizes) == 0:
            return empty_batch(columns), 0
        return block_to_batch(result.data, result.sizes, topic, columns), len(result.data)
    if not result.records:
        return empty_batch(columns), 0
    return (records_to_batch(list(result.records), topic, columns),
            sum(map(len, result.records)))
