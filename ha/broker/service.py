"""The broker's client endpoint: an Arrow Flight server over one MessageStore.

See connector/protocol/wire.py for what each call carries. Handlers run on the Flight server's
threads and call the (thread-safe) store directly. A request that breaks the protocol gets a
typed Flight error (`rocketha error <code> <NAME>: ...`) and only that call fails; put statuses
(MESSAGE_ILLEGAL, FLUSH_DISK_TIMEOUT...) are replies, not errors, so a produce stream continues.

Long polling: a DoGet that finds nothing new waits (at most `max_wait_ms`, capped by
`longPollingWaitMaxMs`, and at most `longPollingMax` waiters at once) on a condition that the
store's confirm listener signals, so a tailing consumer sees a message milliseconds after it
becomes visible without busy polling.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import itertools
import json
import logging
import os
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from pyarrow import flight

from conf import read_credentials_file
from conf.signing import action_target, descriptor_target
from conf.tls import flight_location, flight_server_options
from connector.protocol import (
    CONSUME_SCHEMA,
    GetReply,
    GetTicket,
    ProtocolError,
    PutReply,
    code_for,
    decode_json_object,
    encode_error_info,
)
from controller.api import AuthData
from ha.broker.addresses import join_host_port
from ha.broker.admission import Admission, ClosedError
from ha.broker.arrow_codec import (
    BadBatch,
    block_to_batch,
    check_produce_schema,
    empty_batch,
    records_to_batch,
    rows_from_batch,
)
from ha.broker.auth import AuditLog, AuthGate, load_acl_file
from ha.broker.batch_places import locate_in_log
from ha.broker.config import RUNTIME_KEYS, BrokerConfig, runtime_update, top_level_properties
from ha.broker.idempotence import IdempotenceConfig, IdempotentPuts, rebuild_table
from ha.broker.long_poll import Arrivals, poll_until
from ha.broker.metadata import TOPICS_TOPIC, TopicConfig
from ha.broker.offset_log import OFFSETS_TOPIC, OffsetLog
from ha.broker.replication import NotMasterError, Replication
from ha.broker.system_log import SystemLog, SystemLogLimitError
from ha.broker.telemetry import Traffic
from ha.broker.topic_log import TopicLimitError, TopicLog
from storage_engine import (
    ConfigError,
    GetResult,
    GetStatus,
    MessageBatch,
    MessageStore,
    PutResult,
    PutStatus,
    RecordBlock,
    TagFilter,
    atomic_write_bytes,
    topic_name_error,
)

__all__ = ["BrokerService"]

logger = logging.getLogger(__name__)

_WAITABLE = (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE)
_TOPIC_NAME_MAX = 127
_STORED_NAMES = frozenset(status.name for status in PutStatus if status.stored)
AUTH_CACHE_FILE = "auth.json"
_MASTER_ONLY_ACTIONS = frozenset({"create_topic", "update_topic", "delete_topic", "commit_offset",
                                  "delete_group"})


class RequestError(Exception):
    """Raised inside a handler; turned into a typed Flight error at the boundary."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(message)
        self.name = name


def _flight_error(name: str, message: str) -> flight.FlightError:
    text, info = encode_error_info(name, message)
    if name in ("BUSY", "SERVICE_NOT_AVAILABLE", "NOT_MASTER", "INTERNAL_ERROR"):
        return flight.FlightUnavailableError(text, info)
    return flight.FlightServerError(text, info)


def _guarded(method: Callable[..., Any], *, admitted: bool = True) -> Callable[..., Any]:
    """Map RequestError/ProtocolError to typed Flight errors; log unexpected ones. The call
    runs inside the store's admission gate (ha/broker/admission.py) unless `admitted` is
    False (a produce stream enters it per batch: it waits for batches outside)."""

    def wrapper(self: BrokerService, *args: Any) -> Any:
        if not getattr(self, "_ready", False):  # Flight serves before __init__ has finished
            raise _flight_error("SERVICE_NOT_AVAILABLE", "the broker is starting")
        try:
            if not admitted:
                return method(self, *args)
            with self.admission.entered():
                return method(self, *args)
        except ClosedError as err:
            raise _flight_error("SERVICE_NOT_AVAILABLE", str(err)) from None
        except (RequestError, NotMasterError) as err:
            self._count_error(err.name)
            raise _flight_error(err.name, str(err)) from err
        except ProtocolError as err:
            self._count_error("BAD_REQUEST")
            raise _flight_error("BAD_REQUEST", str(err)) from err
        except flight.FlightError:
            raise
        except Exception as err:  # shell boundary: report with context, fail this call only
            logger.exception("%s failed", method.__name__)
            self._count_error("INTERNAL_ERROR")
            raise _flight_error("INTERNAL_ERROR", type(err).__name__) from None

    wrapper.__name__ = method.__name__
    return wrapper


@dataclasses.dataclass
class _Counters:
    values: dict[str, int] = dataclasses.field(default_factory=dict)
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class BrokerService(flight.FlightServerBase):
    def __init__(self, config: BrokerConfig, store: MessageStore, *,
                 tier_stats: Callable[[], dict[str, Any]] | None = None) -> None:
        # authentication and authorization (ha/broker/auth.py): static mode reads aclFile,
        # controller mode gets the table from the controller (controller_link)
        settings = config.auth
        # controller mode: the last table the controller served, kept for a restart while no
        # controller answers (DESIGN §5.6: the controller down never stops the data plane)
        self._auth_cache = config.store_dir / "config" / AUTH_CACHE_FILE
        cached = (load_acl_file(str(self._auth_cache)) if not settings.acl_file
                  and config.enable_controller_mode and self._auth_cache.exists() else None)
        # innerClientCredentialsFile: how this broker signs its calls to the controller and to
        # other brokers (a member's TLS certificate may stand in for it)
        self.inner_credentials = (read_credentials_file(settings.inner_credentials_file,
                                                        "innerClientCredentialsFile")
                                  if settings.inner_credentials_file else None)
        self.auth = AuthGate(settings, load_acl_file(settings.acl_file) if settings.acl_file
                             else cached, audit=AuditLog(settings.audit_log_file,
                                                       settings.audit_log_bytes_max,
                                                       settings.audit_logs_kept, "broker"))
        # bind to bindAddress; hand out brokerIP1 (self.endpoint, the FlightInfo locations)
        # TLS per tls.* (conf/tls.py); the auth middleware, not an auth
        # handler, so peer_identity() stays the client certificate's identity
        super().__init__(flight_location(join_host_port(config.client_bind_host,
                                                        config.listen_port), config.tls.enabled),
                         middleware=self.auth.middleware(), **flight_server_options(config.tls))
        self.config = config
        self.store = store
        self._tier_stats = tier_stats or (lambda: {"enabled": False})
        self.controller_info: Callable[[], dict[str, Any]] | None = None  # controller mode
        # topic configs and consumer-group offsets: records in the CommitLog, written through
        # replication.put (ha/broker/system_log.py)
        self.topics = TopicLog(config.store_dir / "config", store, put=self._put_system_record,
                               write_timeout_ms=store.config.sync_flush_timeout_ms)
        self.offsets = OffsetLog(config.store_dir / "config", store,
                                 flush_interval_ms=config.flush_consumer_offset_interval_ms,
                                 put=self._put_system_record,
                                 write_timeout_ms=store.config.sync_flush_timeout_ms)
        self._round_robin: dict[str, itertools.count[int]] = {}
        self._arrivals = Arrivals()  # confirm moves wake long polls (ha/broker/long_poll.py)
        self._long_poll_slots = threading.BoundedSemaphore(config.long_polling_max)
        self._counters = _Counters()
        # stopping (`shutdown`): produce streams refuse their next batch, long polls end
        self._closing = threading.Event()
        self.admission = Admission()  # handlers inside the store (closed before it closes)
        self._open_streams = 0  # produce streams (under _counters.lock)
        self.traffic = Traffic()  # per-batch counts for /metrics (ha/broker/telemetry.py)
        self._started_ms = int(time.time() * 1000)
        store.add_confirm_listener(self._on_confirm)
        self.replication = Replication(config, store, endpoint=self.endpoint,
                                       topics=self.topics, offsets=self.offsets)
        self.topics.start()
        self.offsets.start()
        self.idempotence = IdempotentPuts(rebuild_table(store, IdempotenceConfig(
            producers_max=config.idempotence_producers_max,
            window_messages=config.idempotence_rebuild_messages,
            window_ms=config.idempotence_rebuild_window_ms,
            batches_max=config.idempotence_batches_kept), now_ms=int(time.time() * 1000)),
            functools.partial(locate_in_log, store))  # a duplicate's positions (issue 43)
        self._actions: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "broker_info": self._broker_info,
            "broker_stats": self._broker_stats,
            "commit_offset": self._commit_offset,
            "consumer_groups": self._consumer_groups,
            "delete_group": self._delete_group,
            "get_config": self._get_config,
            "set_config": self._set_config,
            "create_topic": self._create_topic,
            "delete_topic": self._delete_topic,
            "get_topic": self._get_topic,
            "list_topics": self._list_topics,
            "offset_for_timestamp": self._offset_for_timestamp,
            "query_offsets": self._query_offsets,
            "queue_offsets": self._queue_offsets,
            "update_topic": self._update_topic,
        }
        self._ready = True

    @property
    def endpoint(self) -> str:
        return f"{self.config.broker_ip}:{self.port}"

    def shutdown(self, grace_s: float | None = None) -> bool:
        """Stop serving; returns whether every call ended within `grace_s` (None: wait for
        all, as Flight's own shutdown does).

        Every open produce stream refuses its next batch (the client retries elsewhere or
        after the restart) and long polls answer at once, so busy calls end within a round
        trip. What is left after the grace are idle produce streams (`open_streams`), blocked
        reading a batch their client may never send before its deadline; they hold nothing of
        the store. The store's admission gate is closed either way: once this returns, no
        handler is inside the store and none enters it, so the store can close."""
        self._closing.set()
        self._arrivals.notify()  # long polls re-check, see the closing flag and answer
        stopper = threading.Thread(target=super().shutdown, name="flight-shutdown",
                                   daemon=True)
        stopper.start()
        stopper.join(grace_s)
        self.admission.close()  # handlers inside finish their step (each is bounded)
        return not stopper.is_alive()

    @property
    def open_streams(self) -> int:
        """Produce streams open now (idle ones, once a stop has refused the busy ones)."""
        with self._counters.lock:
            return self._open_streams

    def set_auth_data(self, auth: AuthData) -> None:
        """The users/ACL table the controller serves (controller mode), replaced whole, and
        kept under the store (mode 0600: it holds secrets) for a restart."""
        self.auth.auth_data = auth
        self._auth_cache.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self._auth_cache, json.dumps(auth.to_json()).encode(), 0o600)

    def _count(self, name: str, amount: int = 1) -> None:
        with self._counters.lock:
            self._counters.values[name] = self._counters.values.get(name, 0) + amount

    def _count_error(self, name: str) -> None:
        """A request refused with wire error `name` (rejected requests by code, /metrics)."""
        with self._counters.lock:
            values = self._counters.values
            values["request_errors"] = values.get("request_errors", 0) + 1
            key = f"error:{name}"
            values[key] = values.get(key, 0) + 1

    def counters_snapshot(self) -> dict[str, int]:
        """Request counters (`error:<CODE>` per refused call, long polls) for /metrics."""
        with self._counters.lock:
            return dict(self._counters.values)

    def tier_stats(self) -> dict[str, Any]:
        return self._tier_stats()

    def _put_system_record(self, batch: MessageBatch) -> PutResult:
        return self.replication.put(batch)

    def _on_confirm(self, log_position: int) -> None:
        self._arrivals.notify()

    # -- topics -----------------------------------------------------------------------------
    def _topic_for_write(self, name: str) -> TopicConfig:
        _check_not_internal(name)
        topic = self.topics.get(name)
        if topic is None:
            _check_topic_name(name)
            if not self.config.auto_create_topic_enable:
                raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} does not exist "
                                   "(autoCreateTopicEnable=false)")
            queues = self.config.default_topic_queue_nums
            self._auto_create(TopicConfig(name, queues, queues))
            topic = self.topics.get(name)
            if topic is None:  # deleted again between its create and this read
                raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} was just deleted")
        if not topic.writable:
            raise RequestError("NO_PERMISSION", f"topic {name!r} is not writable (perm {topic.perm})")
        return topic

    def _auto_create(self, topic: TopicConfig) -> None:
        """A first put into an unknown topic: its record is acknowledged (PUT_OK) before the
        first message is written, so no message is acked into a topic a new master lacks.
        Anything else refuses the put before it stores a byte: retriable, not "stored"."""
        with _record_limits():
            result = self.topics.put(topic, only_if_absent=True)
        if result is None:  # another put created it first
            return
        if result.status is not PutStatus.PUT_OK:
            raise RequestError(
                "SERVICE_NOT_AVAILABLE" if result.status.stored else result.status.name,
                f"auto-create of topic {topic.name!r} not acknowledged: {result.status.name}"
                + (f" ({result.error})" if result.error else "") + "; nothing was stored")
        logger.info("auto-created topic %s with %d queues", topic.name, topic.write_queue_nums)

    def _topic_for_read(self, name: str) -> TopicConfig:
        topic = self.topics.get(name)
        if topic is None:
            raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} does not exist")
        if not topic.readable:
            raise RequestError("NO_PERMISSION", f"topic {name!r} is not readable (perm {topic.perm})")
        return topic

    # -- produce ----------------------------------------------------------------------------
    @functools.partial(_guarded, admitted=False)
    def do_put(self, context: Any, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader,
               writer: flight.FlightMetadataWriter) -> None:
        if descriptor.descriptor_type != flight.DescriptorType.CMD:
            raise ProtocolError('produce descriptor must be a command: {"topic": T}')
        request = decode_json_object(descriptor.command, "produce descriptor")
        name = request.get("topic")
        if not isinstance(name, str):
            raise ProtocolError('produce descriptor: field "topic" must be a string')
        self.auth.check(context, "DoPut", "DO_PUT", descriptor_target(descriptor.command, None),
                        {"topic": name})
        with self.admission.entered():  # (a topic created on first produce is a put)
            self.replication.check_writable()
            topic = self._topic_for_write(name)
        try:  # the schema message comes first: a bad stream ends before any batch is read
            check_produce_schema(reader.schema)
        except BadBatch as err:
            raise RequestError("BAD_SCHEMA", str(err)) from err
        with self._counted_stream():
            for chunk in reader:  # bounded by the client's stream; each batch bounded below
                batch = chunk.data
                if batch is None:
                    continue
                if self._closing.is_set():  # stopping: never stored, so never acknowledged
                    raise RequestError("SERVICE_NOT_AVAILABLE", "the broker is stopping")
                # Each batch is checked as it arrives, and the first one over a limit ends the
                # stream (the rest is never read). gRPC hands over one IPC message whole:
                # pyarrow offers no hook before that, so one message can still cost its size.
                self._check_batch_size(batch)
                with self.admission.entered():
                    reply = self.idempotence.put(  # drops batches stored before
                        batch, functools.partial(self._put_batch, topic, batch),
                        self.replication.settle, topic.name)
                writer.write(pa.py_buffer(self.replication.annotate_reply(reply.encode())))

    @contextlib.contextmanager
    def _counted_stream(self) -> Iterator[None]:
        """Count the produce streams open (what a stop reports it left open)."""
        with self._counters.lock:
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

    # -- consume ----------------------------------------------------------------------------
    @_guarded
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
        """A stream's errors as typed Flight errors (it runs after `_guarded` has returned:
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
            raise _flight_error("SERVICE_NOT_AVAILABLE", str(err)) from None
        except (RequestError, NotMasterError) as err:
            raise _flight_error(err.name, str(err)) from None
        except Exception as err:  # shell boundary: this call fails alone
            logger.exception("a read stream failed")
            raise _flight_error("INTERNAL_ERROR", type(err).__name__) from None

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
    @_guarded
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

    @_guarded
    def list_flights(self, context: Any, criteria: bytes) -> Iterator[flight.FlightInfo]:
        principal = self.auth.check(context, "ListFlights", "LIST_FLIGHTS", criteria or b"", {})
        return iter([self._flight_info(topic) for topic in self.topics.all()
                     if topic.readable and self.auth.visible(principal, topic.name)])

    # -- admin ------------------------------------------------------------------------------
    @_guarded
    def do_action(self, context: Any, action: flight.Action) -> Iterator[bytes]:
        body = action.body.to_pybytes() if action.body is not None else b""
        target = action_target(action.type, body)
        handler = self._actions.get(action.type)
        if handler is None:
            self.auth.principal_of(context, "DO_ACTION", target)  # strangers learn nothing
            raise RequestError("UNKNOWN_ACTION", f"unknown action {action.type!r}; known: "
                               f"{sorted(self._actions)}")
        request = decode_json_object(body or b"{}", f"action {action.type} body")
        principal = self.auth.check(context, action.type, "DO_ACTION", target, request)
        if action.type in _MASTER_ONLY_ACTIONS:
            self.replication.check_writable()
        elif action.type == "query_offsets":
            self.replication.check_offsets_readable()
        self._count("actions")
        reply = handler(request)
        if action.type == "list_topics":  # only the topics this caller may use
            reply["topics"] = [topic for topic in reply["topics"]
                               if self.auth.visible(principal, topic["name"])]
        return iter([json.dumps(reply).encode()])

    def list_actions(self, context: Any) -> list[tuple[str, str]]:
        self.auth.check(context, "ListActions", "LIST_ACTIONS", b"", {})
        return [(name, (handler.__doc__ or "").strip()) for name, handler in
                sorted(self._actions.items())]

    def _topic_from_request(self, request: dict[str, Any], *, existing: bool) -> TopicConfig:
        name = _string(request, "topic")
        _check_topic_name(name)
        _check_not_internal(name)
        current = self.topics.get(name)
        if existing and current is None:
            raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} does not exist")
        default = self.config.default_topic_queue_nums
        base = current or TopicConfig(name, default, default)
        topic = TopicConfig(
            name,
            _int(request, "read_queue_nums", base.read_queue_nums, 1, 1024),
            _int(request, "write_queue_nums", base.write_queue_nums, 1, 1024),
            _int(request, "perm", base.perm, 0, 7),
        )
        return topic

    def _create_topic(self, request: dict[str, Any]) -> dict[str, Any]:
        """Create (or reconfigure) a topic: topic, read_queue_nums, write_queue_nums, perm
        (answered once the replica set holds it as it would a message: PUT_OK)."""
        return self._put_topic(self._topic_from_request(request, existing=False))

    def _update_topic(self, request: dict[str, Any]) -> dict[str, Any]:
        """Change an existing topic's queue counts or permission (answered on PUT_OK)."""
        return self._put_topic(self._topic_from_request(request, existing=True))

    def _put_topic(self, topic: TopicConfig) -> dict[str, Any]:
        with _record_limits():
            result = self.topics.put(topic)
        if result is not None:  # None: the table already had this config
            _check_record_put(result, f"change of topic {topic.name}")
        return {"topic": topic.to_json()}

    def _delete_topic(self, request: dict[str, Any]) -> dict[str, Any]:
        """Delete a topic's config and queues (records age out with retention)."""
        name = _string(request, "topic")
        _check_topic_name(name)
        _check_not_internal(name)
        with _record_limits():
            result = self.topics.delete(name)
        if result is None:
            raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} does not exist")
        _check_record_put(result, f"delete of topic {name}")
        self.store.delete_topic(name)
        return {"deleted": True}

    def _list_topics(self, request: dict[str, Any]) -> dict[str, Any]:
        """All topic configs."""
        return {"topics": [topic.to_json() for topic in self.topics.all()]}

    def _get_topic(self, request: dict[str, Any]) -> dict[str, Any]:
        """One topic's config."""
        name = _string(request, "topic")
        topic = self.topics.get(name)
        if topic is None:
            raise RequestError("TOPIC_NOT_EXIST", f"topic {name!r} does not exist")
        return {"topic": topic.to_json()}

    def _queue_offsets(self, request: dict[str, Any]) -> dict[str, Any]:
        """Min and max (next) queue offset of every queue of a topic."""
        topic = self._topic_for_read(_string(request, "topic"))
        queues = [{"queue_id": queue_id,
                   "min_queue_offset": self.store.min_queue_offset(topic.name, queue_id),
                   "max_queue_offset": self.store.max_queue_offset(topic.name, queue_id)}
                  for queue_id in range(topic.read_queue_nums)]
        return {"topic": topic.name, "queues": queues}

    def _offset_for_timestamp(self, request: dict[str, Any]) -> dict[str, Any]:
        """First queue offset stored at or after timestamp_ms."""
        topic = self._topic_for_read(_string(request, "topic"))
        queue_id = _int(request, "queue_id", None, 0, topic.read_queue_nums - 1)
        timestamp_ms = _int(request, "timestamp_ms", None, 0, 1 << 62)
        return {"queue_offset": self.store.queue_offset_for_timestamp(
            topic.name, queue_id, timestamp_ms)}

    def _commit_offset(self, request: dict[str, Any]) -> dict[str, Any]:
        """Commit a consumer group's offset for one queue (answered once the replica set
        holds it as it would a message: PUT_OK; else the put's status as the error)."""
        group = _string(request, "group")
        _check_topic_name(group)
        topic = self._topic_for_read(_string(request, "topic"))
        queue_id = _int(request, "queue_id", None, 0, topic.read_queue_nums - 1)
        queue_offset = _int(request, "queue_offset", None, 0, 1 << 62)
        with _record_limits():
            result = self.offsets.commit(group, topic.name, queue_id, queue_offset)
        _check_record_put(result, f"commit of group {group}")
        return {}

    def _consumer_groups(self, request: dict[str, Any]) -> dict[str, Any]:
        """Every consumer group's committed offsets with each queue's end: lag per queue."""
        groups: dict[str, Any] = {}
        for group, topics in self.offsets.snapshot().items():
            groups[group] = {topic: {queue_id: {
                "committed": committed,
                "max_queue_offset": self.store.max_queue_offset(topic, int(queue_id))}
                for queue_id, committed in queues.items()} for topic, queues in topics.items()}
        return {"groups": groups}

    def _delete_group(self, request: dict[str, Any]) -> dict[str, Any]:
        """Forget a consumer group's committed offsets (GROUP_NOT_FOUND if it has none)."""
        group = _string(request, "group")
        with _record_limits():
            result = self.offsets.delete_group(group)
        if result is None:
            raise RequestError("GROUP_NOT_FOUND", f"consumer group {group!r} has no offsets here")
        _check_record_put(result, f"delete of group {group}")
        return {"deleted": True}

    def _get_config(self, request: dict[str, Any]) -> dict[str, Any]:
        """The broker's own keys and values, and which of them `set_config` may change."""
        return {"values": top_level_properties(self.config), "runtime_keys": list(RUNTIME_KEYS)}

    def _set_config(self, request: dict[str, Any]) -> dict[str, Any]:
        """Change one runtime key (in memory; the conf file is not rewritten)."""
        key, value = _string(request, "key"), request.get("value")
        if not isinstance(value, str):
            raise RequestError("BAD_REQUEST", 'field "value" must be a string')
        try:
            self.config = runtime_update(self.config, key, value)
        except ConfigError as err:
            raise RequestError("BAD_REQUEST", str(err)) from err
        logger.warning("runtime configuration: %s=%s (not written to the conf file)", key, value)
        return {"key": key, "value": top_level_properties(self.config)[key]}

    def _query_offsets(self, request: dict[str, Any]) -> dict[str, Any]:
        """A consumer group's committed offsets for a topic."""
        group, topic = _string(request, "group"), _string(request, "topic")
        return {"group": group, "topic": topic, "offsets": self.offsets.query(group, topic)}

    def _broker_info(self, request: dict[str, Any]) -> dict[str, Any]:
        """Identity, role and log positions."""
        stats = self.store.stats()
        return {
            "broker_cluster_name": self.config.broker_cluster_name,
            "broker_name": self.config.broker_name,
            "broker_id": self.config.broker_id,
            "endpoint": self.endpoint,
            "bind_address": self.config.client_bind_host,
            "pid": os.getpid(),
            "tiered": self._tier_stats(),
            "min_log_position": stats.min_log_position,
            "max_log_position": stats.log_position_end,
            "confirm_log_position": stats.confirm_log_position,
            "flushed_log_position": stats.flushed_log_position,
            **self.replication.info(),
            "controller": self.controller_info() if self.controller_info else None,
        }

    def _broker_stats(self, request: dict[str, Any]) -> dict[str, Any]:
        """Request counters and store statistics."""
        with self._counters.lock:
            counters = dict(self._counters.values)
        traffic = self.traffic.snapshot()
        counters["put_batches"] = sum(traffic.put_batches.values())
        counters["put_messages"] = sum(traffic.messages_in.values())
        counters["put_rejected"] = sum(count for status, count in traffic.put_batches.items()
                                       if status not in _STORED_NAMES)
        counters["get_messages"] = sum(traffic.messages_out.values())
        stats = self.store.stats()
        return {
            "counters": counters,
            "uptime_ms": int(time.time() * 1000) - self._started_ms,
            "store": {
                "min_log_position": stats.min_log_position,
                "end_log_position": stats.log_position_end,
                "flushed_log_position": stats.flushed_log_position,
                "confirm_log_position": stats.confirm_log_position,
                "commit_log_segments": stats.commit_log_segments,
                "queue_count": stats.queue_count,
                "flush_count": stats.flush_count,
                "recovered_after_crash": stats.recovered_after_crash,
            },
            "topics": len(self.topics.all()),
            "idempotence": {"producers": len(self.idempotence.table),
                            "duplicates_dropped": self.idempotence.duplicates_dropped},
            "groups": len(self.offsets.groups()),
            "offset_records": _record_stats(self.offsets),
            "topic_records": _record_stats(self.topics),
            "tiered": self._tier_stats(),
        }


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


def _record_stats(log: SystemLog[Any]) -> dict[str, int]:
    return {"written": log.records_written, "applied": log.records_applied,
            "applied_queue_offset": log.applied_queue_offset, "lost": log.records_lost,
            "unreadable": log.records_unreadable, "rollbacks": log.rollbacks}


def _queue_ranges(queue_ids: list[int], queue_offsets: Any) -> list[list[int]]:
    """[[queue_id, first_queue_offset, count]] in first-appearance order."""
    ranges: dict[int, list[int]] = {}
    for queue_id, queue_offset in zip(queue_ids, queue_offsets):
        entry = ranges.get(queue_id)
        if entry is None:
            ranges[queue_id] = [queue_id, queue_offset, 1]
        else:
            entry[2] += 1
    return list(ranges.values())


@contextlib.contextmanager
def _record_limits() -> Iterator[None]:
    """A topic or offset change the system log refused before writing, as a wire error: a full
    table is the request's fault, records piling up unacknowledged a reason to retry later."""
    try:
        yield
    except TopicLimitError as err:
        raise RequestError("BAD_REQUEST", str(err)) from err
    except SystemLogLimitError as err:
        raise RequestError("BUSY", str(err)) from err


def _check_record_put(result: PutResult, what: str) -> None:
    """A topic or offset record's put that is not PUT_OK fails the request with the put's
    status (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE...: the record may still take effect
    later)."""
    if result.status is not PutStatus.PUT_OK:
        raise RequestError(result.status.name, f"{what}: {result.status.name}"
                           + (f" ({result.error})" if result.error else ""))


def _check_not_internal(name: str) -> None:
    if name in (OFFSETS_TOPIC, TOPICS_TOPIC):
        raise RequestError("NO_PERMISSION", f"topic {name!r} is internal (consumer offsets, "
                           "topic configs)")


def _check_topic_name(name: str) -> None:
    if topic_name_error(name) is not None:  # the store's rule (storage_engine.names)
        raise RequestError("BAD_REQUEST", f"topic/group name {name[:40]!r} must match "
                           "^[%|a-zA-Z0-9_-]+$ and be at most 127 characters")


def _string(request: dict[str, Any], key: str) -> str:
    value = request.get(key)
    if not isinstance(value, str) or not value:
        raise RequestError("BAD_REQUEST", f"field {key!r} must be a non-empty string")
    return value


def _int(request: dict[str, Any], key: str, default: int | None, low: int, high: int) -> int:
    value = request.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise RequestError("BAD_REQUEST", f"field {key!r} must be an integer in [{low}, {high}]")
    return value
