"""MessagingService (apache.rocketmq.v2) served on rocketha: the RPCs RocketMQ 5 clients call.

    QueryRoute          the controllers' routes: per replica set serving the topic, one
                        MessageQueue per queue id (broker.id 0, READ_WRITE where the topic's
                        read/write queue counts and perm allow), endpoints = this proxy,
                        accepted types NORMAL and FIFO
    Heartbeat, NotifyClientTermination   OK (no per-client state is needed)
    Telemetry           answers every settings command with the server's settings
                        (publishing.max_body_size, exponential backoff_policy, ...)
    SendMessage         one put per message through the replica set's pooled Producer: the
                        same put path and quorum rules as a Flight produce; the queue is
                        crc32(message group) for FIFO, else crc32(message id), over the
                        topic's writable queues; the message id is the idempotence key
                        (marker "<message id>/0"), so the client's retries of one send are
                        stored once (ha/broker/idempotence.py)
    ReceiveMessage      POP from every readable queue of the named replica set (starting at
                        the named queue): expired leases first (delivery_attempt + 1), then
                        new messages; each delivery is recorded in the cluster (state_store)
                        before the client sees it; long polling up to the request's timeout
    AckMessage, ChangeInvisibleDuration  checked receipt handles (receipt.py); a forged,
                        superseded or expired one is INVALID_RECEIPT_HANDLE
    ForwardMessageToDeadLetterQueue, and a lease expiring at grpcMaxDeliveryAttempts: the
                        message goes to `%DLQ%<group>` on its replica set (RocketMQ's name),
                        then counts as acked
    QueryAssignment     one assignment per replica set (the PushConsumer then receives by POP)
Anything else (transactions, PullMessage, offsets, recall, lite topics) answers UNSUPPORTED or
gRPC UNIMPLEMENTED. Every RPC first checks the request's signature when authentication is on
(auth.py): UNAUTHORIZED otherwise.
"""

from __future__ import annotations

import hashlib
import ipaddress
import logging
import secrets
import threading
import time
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from connector.client import with_marker
from connector.protocol import (
    IDEMPOTENCE_PROPERTY,
    PRODUCE_SCHEMA,
    PutIdempotence,
    RocketHAError,
)
from connector.rmq_proxy.auth import Authenticator, AuthError
from connector.rmq_proxy.cluster_io import ClusterLinks, TopicRoute
from connector.rmq_proxy.codes import CODE, code_for_status
from connector.rmq_proxy.config import ProxyConfig
from connector.rmq_proxy.messages import InvalidMessage, to_pb_message, to_produce_row
from connector.rmq_proxy.pop_core import PopState, QueueKey
from connector.rmq_proxy.receipt import ReceiptHandle, ReceiptHandleCodec
from connector.rmq_proxy.state_store import StateStore, StateWriteError

__all__ = ["MessagingService"]

logger = logging.getLogger(__name__)

PERM_READ, PERM_WRITE = 4, 2
ACCEPTED_TYPES = (definition_pb2.NORMAL, definition_pb2.FIFO)
DEFAULT_INVISIBLE_MS = 30_000
DLQ_PREFIX = "%DLQ%"  # RocketMQ's dead-letter topic of a consumer group
WAKE_INTERVAL_MS = 500  # a waiting receive looks again at least this often
DELIVERY_COLUMNS = ("queue_id", "queue_offset", "body", "key", "tags", "properties",
                    "born_timestamp", "store_timestamp", "msg_id")
_PROPERTIES_TYPE = PRODUCE_SCHEMA.field("properties").type


def _status(name: str, message: str = "") -> Any:
    return definition_pb2.Status(code=CODE[name], message=message[:1000])


def _ms(duration: Any) -> int:
    return int(duration.seconds) * 1000 + int(duration.nanos) // 1_000_000


def _now_ms() -> int:
    return int(time.time() * 1000)


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, config: ProxyConfig, links: ClusterLinks, authenticator: Authenticator,
                 handle_key: bytes, now_ms: Callable[[], int] = _now_ms) -> None:
        self.config = config
        self.links = links
        self.auth = authenticator
        self.handles = ReceiptHandleCodec(handle_key)
        self.pop = PopState()
        self.state = StateStore(links, self.pop, config.snapshot_interval_ms)
        self._now_ms = now_ms
        self._group_locks: dict[tuple[str, str, str], threading.Lock] = {}
        self._locks_lock = threading.Lock()
        host, _, port = config.endpoint.rpartition(":")
        self._endpoints = definition_pb2.Endpoints(
            scheme=_scheme(host), addresses=[definition_pb2.Address(host=host, port=int(port))])
        self._dlq_topics: set[tuple[str, str]] = set()
        self.sent_messages = 0
        self.delivered_messages = 0
        self.dead_lettered_messages = 0

    # -- helpers ---------------------------------------------------------------------------
    def _unauthorized(self, context: Any) -> Any | None:
        try:
            self.auth.check(context.invocation_metadata())
        except AuthError as err:
            logger.info("refused %s: %s", context.peer(), err)
            return _status("UNAUTHORIZED", str(err))
        return None

    def _group_lock(self, group: str, topic: str, broker_name: str) -> threading.Lock:
        with self._locks_lock:
            return self._group_locks.setdefault((group, topic, broker_name), threading.Lock())

    def _route(self, topic: str) -> TopicRoute | None:
        return self.links.routes(topic)

    # -- routes and session ----------------------------------------------------------------
    def QueryRoute(self, request: Any, context: Any) -> Any:  # gRPC names the methods
        refused = self._unauthorized(context)
        if refused is not None:
            return service_pb2.QueryRouteResponse(status=refused)
        topic = request.topic.name
        try:
            route = self._route(topic)
        except RocketHAError as err:
            return service_pb2.QueryRouteResponse(
                status=_status("INTERNAL_SERVER_ERROR", f"routes: {err}"))
        if route is None:
            return service_pb2.QueryRouteResponse(
                status=_status("TOPIC_NOT_FOUND", f"topic {topic!r} not found"))
        response = service_pb2.QueryRouteResponse(status=_status("OK"))
        for broker_name, read_nums, write_nums, perm in route.queues:
            for queue_id in range(max(read_nums, write_nums)):
                readable = queue_id < read_nums and perm & PERM_READ
                writable = queue_id < write_nums and perm & PERM_WRITE
                queue = response.message_queues.add()
                queue.topic.CopyFrom(request.topic)
                queue.id = queue_id
                queue.permission = (definition_pb2.READ_WRITE if readable and writable else
                                    definition_pb2.READ if readable else
                                    definition_pb2.WRITE if writable else definition_pb2.NONE)
                queue.broker.name = broker_name
                queue.broker.id = 0
                queue.broker.endpoints.CopyFrom(self._endpoints)
                queue.accept_message_types.extend(ACCEPTED_TYPES)
        return response

    def Heartbeat(self, request: Any, context: Any) -> Any:
        refused = self._unauthorized(context)
        return service_pb2.HeartbeatResponse(status=refused or _status("OK"))

    def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        refused = self._unauthorized(context)
        return service_pb2.NotifyClientTerminationResponse(status=refused or _status("OK"))

    def Telemetry(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        refused = self._unauthorized(context)
        if refused is not None:
            yield service_pb2.TelemetryCommand(status=refused)
            return
        for command in request_iterator:  # ends when the client closes its side
            if command.HasField("settings"):
                yield service_pb2.TelemetryCommand(status=_status("OK"),
                                                   settings=self._settings(command.settings))

    def _settings(self, asked: Any) -> Any:
        settings = definition_pb2.Settings()
        settings.CopyFrom(asked)
        settings.access_point.CopyFrom(self._endpoints)
        policy = settings.backoff_policy
        backoff = policy.exponential_backoff
        if asked.client_type == definition_pb2.PRODUCER:
            policy.max_attempts = 3
            backoff.initial.FromMilliseconds(10)
            backoff.max.FromMilliseconds(1000)
        else:
            policy.max_attempts = self.config.max_delivery_attempts
            backoff.initial.FromMilliseconds(1000)
            backoff.max.FromMilliseconds(60_000)
        backoff.multiplier = 2.0
        if asked.HasField("publishing"):
            settings.publishing.max_body_size = self.config.message_body_bytes_max
            settings.publishing.validate_message_type = True
        if asked.HasField("subscription"):
            settings.subscription.receive_batch_size = self.config.receive_batch_max
            settings.subscription.fifo = False
            if not settings.subscription.HasField("long_polling_timeout"):
                settings.subscription.long_polling_timeout.FromMilliseconds(20_000)
        return settings

    # -- producing ---------------------------------------------------------------------------
    def SendMessage(self, request: Any, context: Any) -> Any:
        refused = self._unauthorized(context)
        if refused is not None:
            return service_pb2.SendMessageResponse(status=refused)
        if not request.messages:
            return service_pb2.SendMessageResponse(status=_status("BAD_REQUEST", "no message"))
        entries = [self._send_one(message) for message in request.messages]
        if len(entries) == 1:
            status = entries[0].status
        elif all(entry.status.code == CODE["OK"] for entry in entries):
            status = _status("OK")
        else:
            status = definition_pb2.Status(code=30000, message="MULTIPLE_RESULTS")
        return service_pb2.SendMessageResponse(status=status, entries=entries)

    def _send_one(self, message: Any) -> Any:
        entry = service_pb2.SendResultEntry(message_id=message.system_properties.message_id)
        try:
            row = to_produce_row(message, self.config.message_body_bytes_max)
            route = self._route(row.topic)
        except InvalidMessage as err:
            entry.status.CopyFrom(_status(err.code_name, str(err)))
            return entry
        except RocketHAError as err:
            entry.status.CopyFrom(_status("INTERNAL_SERVER_ERROR", f"routes: {err}"))
            return entry
        if route is None:
            entry.status.CopyFrom(_status("TOPIC_NOT_FOUND", f"topic {row.topic!r} not found"))
            return entry
        writable = [(name, queue_id) for name, _, write_nums, perm in route.queues
                    if perm & PERM_WRITE for queue_id in range(write_nums)]
        if not writable:
            entry.status.CopyFrom(_status("FORBIDDEN", f"topic {row.topic!r} is not writable"))
            return entry
        hashed = (row.message_group or row.message_id).encode()
        broker_name, queue_id = writable[zlib.crc32(hashed) % len(writable)]
        columns: dict[str, pa.Array] = {"body": pa.array([row.body], pa.binary())}
        if row.key is not None:
            columns["key"] = pa.array([row.key], pa.string())
        if row.tags is not None:
            columns["tags"] = pa.array([row.tags], pa.string())
        columns["properties"] = pa.array([list(row.properties.items())], _PROPERTIES_TYPE)
        columns["queue_id"] = pa.array([queue_id], pa.int32())
        batch = with_marker(pa.record_batch(columns), PutIdempotence(row.message_id, 0))
        try:
            reply = self.links.put(broker_name, row.topic, batch)
        except RocketHAError as err:
            _, name = code_for_status(err.name)
            entry.status.CopyFrom(_status(name, f"{err.name}: {err.message}"))
            return entry
        _, name = code_for_status(reply.status)
        if reply.status == "MESSAGE_ILLEGAL" and "maxMessageSize" in reply.error:
            name = "MESSAGE_BODY_TOO_LARGE"  # the brokers' limit is below grpcMaxBodyBytes
        entry.status.CopyFrom(_status(name, reply.error or reply.status))
        if name == "OK":
            self.sent_messages += 1
            offsets = reply.row_offsets(1)
            entry.offset = offsets[0][1] if offsets else -1  # -1: a retry, stored before
        return entry

    def EndTransaction(self, request: Any, context: Any) -> Any:
        return service_pb2.EndTransactionResponse(
            status=_status("UNSUPPORTED", "transactional messages are not supported"))

    # -- consuming: POP ----------------------------------------------------------------------
    def QueryAssignment(self, request: Any, context: Any) -> Any:
        refused = self._unauthorized(context)
        if refused is not None:
            return service_pb2.QueryAssignmentResponse(status=refused)
        try:
            route = self._route(request.topic.name)
        except RocketHAError as err:
            return service_pb2.QueryAssignmentResponse(
                status=_status("INTERNAL_SERVER_ERROR", f"routes: {err}"))
        if route is None:
            return service_pb2.QueryAssignmentResponse(status=_status("TOPIC_NOT_FOUND"))
        response = service_pb2.QueryAssignmentResponse(status=_status("OK"))
        for broker_name, read_nums, _, perm in route.queues:
            if read_nums and perm & PERM_READ:
                queue = response.assignments.add().message_queue
                queue.topic.CopyFrom(request.topic)
                queue.id = 0
                queue.permission = definition_pb2.READ_WRITE
                queue.broker.name = broker_name
                queue.broker.endpoints.CopyFrom(self._endpoints)
                queue.accept_message_types.extend(ACCEPTED_TYPES)
        return response

    def ReceiveMessage(self, request: Any, context: Any) -> Iterator[Any]:
        refused = self._unauthorized(context)
        if refused is not None:
            yield service_pb2.ReceiveMessageResponse(status=refused)
            return
        try:
            delivered, status = self._receive(request, context)
        except (RocketHAError, StateWriteError) as err:
            delivered, status = [], _status("INTERNAL_SERVER_ERROR", str(err))
        yield service_pb2.ReceiveMessageResponse(status=status)
        for message in delivered:
            yield service_pb2.ReceiveMessageResponse(message=message)
        stamp = service_pb2.ReceiveMessageResponse()
        stamp.delivery_timestamp.FromMilliseconds(self._now_ms())
        yield stamp

    def _receive(self, request: Any, context: Any) -> tuple[list[Any], Any]:
        group, topic = request.group.name, request.message_queue.topic.name
        broker_name = request.message_queue.broker.name
        invisible_ms = (_ms(request.invisible_duration) if request.HasField("invisible_duration")
                        else DEFAULT_INVISIBLE_MS)
        if not (self.config.invisible_duration_min_ms <= invisible_ms
                <= self.config.invisible_duration_max_ms):
            return [], _status("ILLEGAL_INVISIBLE_TIME", f"invisible duration {invisible_ms} ms "
                               f"outside {self.config.invisible_duration_min_ms}.."
                               f"{self.config.invisible_duration_max_ms} ms")
        if not group:
            return [], _status("ILLEGAL_CONSUMER_GROUP", "no consumer group")
        expression = request.filter_expression
        if expression.type == definition_pb2.SQL:
            return [], _status("ILLEGAL_FILTER_EXPRESSION", "SQL92 filters are not supported")
        tag_filter = expression.expression.strip() or None
        if tag_filter == "*":
            tag_filter = None
        if tag_filter is not None and any(not t.strip() for t in tag_filter.split("||")):
            return [], _status("ILLEGAL_FILTER_EXPRESSION", f"tag expression {tag_filter!r}")
        route = self._route(topic)
        queue_ids = [] if route is None else [
            queue_id for name, read_nums, _, perm in route.queues
            if name == broker_name and perm & PERM_READ for queue_id in range(read_nums)]
        if not queue_ids:
            return [], _status("TOPIC_NOT_FOUND", f"topic {topic!r} has no readable queue on "
                               f"{broker_name!r}")
        self.state.open_set(broker_name)
        batch = max(1, min(request.batch_size or 1, self.config.receive_batch_max))
        polling_ms = (_ms(request.long_polling_timeout)
                      if request.HasField("long_polling_timeout") else 0)
        polling_ms = min(polling_ms, self.config.long_polling_max_ms)
        remaining_s = context.time_remaining()
        if remaining_s is not None:  # answer before the client's deadline
            polling_ms = max(0, min(polling_ms, int(remaining_s * 1000) - 1000))
        deadline_ms = self._now_ms() + polling_ms
        first = request.message_queue.id % len(queue_ids)
        order = queue_ids[first:] + queue_ids[:first]
        namespace = request.group.resource_namespace
        while True:  # bounded by deadline_ms
            found = self._pop(group, topic, broker_name, order, batch, invisible_ms, tag_filter)
            if found or self._now_ms() >= deadline_ms or not context.is_active():
                break
            self._wait(group, topic, broker_name, order[0], deadline_ms)
        messages = [to_pb_message(row, topic, namespace, receipt_handle=handle,
                                  delivery_attempt=attempt, invisible_ms=invisible_ms,
                                  broker_name=broker_name)
                    for row, handle, attempt in found]
        self.delivered_messages += len(messages)
        return messages, _status("OK") if messages else _status("MESSAGE_NOT_FOUND",
                                                                "no new message")

    def _wait(self, group: str, topic: str, broker_name: str, queue_id: int,
              deadline_ms: int) -> None:
        """Until a message may have arrived on `queue_id`, a lease may have expired, or the
        deadline (a long-polling pull that asks for offsets only)."""
        now_ms = self._now_ms()
        key = QueueKey(group, topic, broker_name, queue_id)
        wait_ms = min(deadline_ms - now_ms, WAKE_INTERVAL_MS)
        due_ms = self.pop.next_due_ms(key)
        if due_ms is not None:
            wait_ms = min(wait_ms, max(0, due_ms - now_ms))
        state = self.pop.get(key)
        if state is None or wait_ms <= 0:
            time.sleep(max(0, min(wait_ms, 50)) / 1000.0)
            return
        self.links.pull(broker_name, topic, queue_id, state.cursor, max_messages=1,
                        max_wait_ms=wait_ms, columns=("queue_offset",))

    def _pop(self, group: str, topic: str, broker_name: str, queue_ids: list[int],
             batch: int, invisible_ms: int, tag_filter: str | None
             ) -> list[tuple[dict[str, Any], str, int]]:
        """Lease up to `batch` messages of the set's queues; the leases are in the cluster
        before this returns them as (row, receipt handle, delivery attempt)."""
        with self._group_lock(group, topic, broker_name):
            now_ms = self._now_ms()
            until_ms = now_ms + invisible_ms
            records: list[dict[str, Any]] = []
            found: list[tuple[dict[str, Any], ReceiptHandle, int]] = []
            for queue_id in queue_ids:
                if len(found) >= batch:
                    break
                key = QueueKey(group, topic, broker_name, queue_id)
                record, rows = self._pop_queue(key, batch - len(found), until_ms, now_ms,
                                               tag_filter)
                if record is not None:
                    records.append(record)
                found += rows
            if records:
                with self.state.lock(broker_name):
                    self.state.write(broker_name, records)
        return [(row, self.handles.encode(group, topic, handle), attempt)
                for row, handle, attempt in found]

    def _pop_queue(self, key: QueueKey, limit: int, until_ms: int, now_ms: int,
                   tag_filter: str | None
                   ) -> tuple[dict[str, Any] | None, list[tuple[dict[str, Any], ReceiptHandle,
                                                                int]]]:
        state = self.pop.get(key)
        start = None if state is not None else self._initial_offset(key)
        cursor = state.cursor if state is not None else start
        assert cursor is not None
        leases: list[list[int]] = []
        dropped: list[int] = []
        rows: list[tuple[dict[str, Any], ReceiptHandle, int]] = []
        for queue_offset, lease in self.pop.due(key, now_ms, limit):
            row = self._read_one(key, queue_offset)
            if row is None:
                dropped.append(queue_offset)  # retention removed it
                continue
            if lease.attempt >= self.config.max_delivery_attempts and \
                    self._dead_letter(key, row):
                dropped.append(queue_offset)  # on %DLQ%<group> now: done here
                continue
            nonce = secrets.randbits(62)
            leases.append([queue_offset, lease.attempt + 1, until_ms, nonce])
            rows.append((row, ReceiptHandle(key.broker_name, key.queue_id, queue_offset, nonce,
                                            until_ms), lease.attempt + 1))
        room = min(limit - len(rows), self.pop.room(key, self.config.inflight_messages_max))
        new_cursor = cursor
        if room > 0:
            result = self.links.pull(key.broker_name, key.topic, key.queue_id, cursor,
                                     max_messages=room, tag_filter=tag_filter,
                                     columns=DELIVERY_COLUMNS)
            if result.status == "OFFSET_TOO_SMALL":  # retention passed the cursor
                start = new_cursor = result.next_queue_offset
            elif result.status == "OFFSET_OVERFLOW_BADLY":
                logger.warning("%s: cursor %d is past the queue's end %d", key, cursor,
                               result.reply.max_queue_offset)
            else:
                for row in result.table.to_pylist():
                    nonce = secrets.randbits(62)
                    leases.append([row["queue_offset"], 1, until_ms, nonce])
                    rows.append((row, ReceiptHandle(key.broker_name, key.queue_id,
                                                    row["queue_offset"], nonce, until_ms), 1))
                new_cursor = max(cursor, result.next_queue_offset)
        if not leases and not dropped and start is None and new_cursor == cursor:
            return None, []
        return ({"t": "pop", "k": key.to_json(), "start": start, "cursor": new_cursor,
                 "leases": leases, "dropped": dropped}, rows)

    def _dead_letter(self, key: QueueKey, row: dict[str, Any]) -> bool:
        """Put the message on RocketMQ's dead-letter topic `%DLQ%<group>` of its replica set
        (True once PUT_OK). Its idempotence marker names the (group, topic, queue, offset), so
        forwarding it again after a crash stores it once."""
        topic = DLQ_PREFIX + key.group
        properties = [(k, v) for k, v in row.get("properties") or [] if k != IDEMPOTENCE_PROPERTY]
        origin_id = dict(properties).get("UNIQ_KEY") or row.get("msg_id") or ""
        properties += [("DLQ_ORIGIN_TOPIC", key.topic), ("DLQ_ORIGIN_MESSAGE_ID", origin_id)]
        columns: dict[str, pa.Array] = {"body": pa.array([row["body"]], pa.binary())}
        if row.get("key") is not None:
            columns["key"] = pa.array([row["key"]], pa.string())
        if row.get("tags") is not None:
            columns["tags"] = pa.array([row["tags"]], pa.string())
        columns["properties"] = pa.array([properties], _PROPERTIES_TYPE)
        columns["queue_id"] = pa.array([0], pa.int32())
        name = "\0".join([key.group, key.topic, key.broker_name, str(key.queue_id),
                           str(row["queue_offset"])])
        marker = PutIdempotence("dlq" + hashlib.sha1(name.encode()).hexdigest(), 0)
        try:
            if (key.broker_name, topic) not in self._dlq_topics:
                admin = self.links.admin(key.broker_name)
                try:
                    admin.get_topic(topic)
                except RocketHAError as err:
                    if err.name != "TOPIC_NOT_EXIST":
                        raise
                    admin.create_topic(topic, queues=1)
                self._dlq_topics.add((key.broker_name, topic))
            reply = self.links.put(key.broker_name, topic,
                                   with_marker(pa.record_batch(columns), marker))
        except RocketHAError as err:
            logger.warning("%s@%d: not dead-lettered (%s); delivered again", key,
                           row["queue_offset"], err)
            return False
        if reply.status != "PUT_OK":
            logger.warning("%s@%d: dead-letter put answered %s; delivered again", key,
                           row["queue_offset"], reply.status)
            return False
        self.dead_lettered_messages += 1
        return True

    def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        refused = self._unauthorized(context)
        if refused is not None:
            return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=refused)
        group, topic = request.group.name, request.topic.name
        handle = self.handles.decode(group, topic, request.receipt_handle)
        if handle is None:
            return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=_status(
                "INVALID_RECEIPT_HANDLE", "not a receipt handle of this group and topic"))
        try:
            with self._group_lock(group, topic, handle.broker_name):
                checked = self._checked_handle(group, topic, request.receipt_handle)
                if not isinstance(checked, tuple):
                    return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=checked)
                key, handle = checked
                row = self._read_one(key, handle.queue_offset)
                if row is not None and not self._dead_letter(key, row):
                    return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=_status(
                        "INTERNAL_SERVER_ERROR", "the dead-letter topic did not take it"))
                with self.state.lock(key.broker_name):
                    self.state.write(key.broker_name, [{
                        "t": "ack", "k": key.to_json(),
                        "offsets": [[handle.queue_offset, handle.nonce]]}])
        except (RocketHAError, StateWriteError) as err:
            return service_pb2.ForwardMessageToDeadLetterQueueResponse(
                status=_status("INTERNAL_SERVER_ERROR", f"not recorded: {err}"))
        return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=_status("OK"))

    def _read_one(self, key: QueueKey, queue_offset: int) -> dict[str, Any] | None:
        result = self.links.pull(key.broker_name, key.topic, key.queue_id, queue_offset,
                                 max_messages=1, columns=DELIVERY_COLUMNS)
        for row in result.table.to_pylist():
            if row["queue_offset"] == queue_offset:
                return row
        return None

    def _initial_offset(self, key: QueueKey) -> int:
        """Where a group's POP starts on a queue it never consumed: its offset committed on
        the broker (a group that consumed through Flight), else the queue's first message."""
        admin = self.links.admin(key.broker_name)
        committed = admin.query_offsets(key.group, key.topic).get(key.queue_id)
        if committed is not None:
            return int(committed)
        for queue in admin.queue_offsets(key.topic):
            if int(queue["queue_id"]) == key.queue_id:
                return int(queue["min_queue_offset"])
        return 0

    def AckMessage(self, request: Any, context: Any) -> Any:
        refused = self._unauthorized(context)
        if refused is not None:
            return service_pb2.AckMessageResponse(status=refused)
        group, topic = request.group.name, request.topic.name
        entries = []
        for entry in request.entries:
            status = self._ack_one(group, topic, entry.receipt_handle)
            entries.append(service_pb2.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                status=status))
        if len(entries) == 1:
            status = entries[0].status
        elif all(e.status.code == CODE["OK"] for e in entries):
            status = _status("OK")
        else:
            status = definition_pb2.Status(code=30000, message="MULTIPLE_RESULTS")
        return service_pb2.AckMessageResponse(status=status, entries=entries)

    def _checked_handle(self, group: str, topic: str, text: str
                        ) -> tuple[QueueKey, ReceiptHandle] | Any:
        """(key, handle) of a current lease, or the INVALID_RECEIPT_HANDLE status."""
        handle = self.handles.decode(group, topic, text)
        if handle is None:
            return _status("INVALID_RECEIPT_HANDLE", "not a receipt handle of this group and "
                           "topic")
        key = QueueKey(group, topic, handle.broker_name, handle.queue_id)
        self.state.open_set(handle.broker_name)
        problem = self.pop.lease_problem(key, handle.queue_offset, handle.nonce,
                                         self._now_ms())
        if problem is not None:
            return _status("INVALID_RECEIPT_HANDLE", f"stale receipt handle: {problem}")
        return key, handle

    def _ack_one(self, group: str, topic: str, text: str) -> Any:
        handle = self.handles.decode(group, topic, text)
        if handle is None:
            return _status("INVALID_RECEIPT_HANDLE", "not a receipt handle of this group and "
                           "topic")
        try:
            with self._group_lock(group, topic, handle.broker_name):
                checked = self._checked_handle(group, topic, text)
                if not isinstance(checked, tuple):
                    return checked
                key, handle = checked
                with self.state.lock(key.broker_name):
                    self.state.write(key.broker_name, [{
                        "t": "ack", "k": key.to_json(),
                        "offsets": [[handle.queue_offset, handle.nonce]]}])
        except (RocketHAError, StateWriteError) as err:
            return _status("INTERNAL_SERVER_ERROR", f"ack not recorded: {err}")
        return _status("OK")

    def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        refused = self._unauthorized(context)
        if refused is not None:
            return service_pb2.ChangeInvisibleDurationResponse(status=refused)
        group, topic = request.group.name, request.topic.name
        invisible_ms = _ms(request.invisible_duration)
        # no lower bound here (receive has grpcInvisibleDurationMinMs): the PushConsumer
        # "nacks" a message it failed on with its retry backoff, 1 s at first
        if not 0 <= invisible_ms <= self.config.invisible_duration_max_ms:
            return service_pb2.ChangeInvisibleDurationResponse(status=_status(
                "ILLEGAL_INVISIBLE_TIME", f"invisible duration {invisible_ms} ms"))
        handle = self.handles.decode(group, topic, request.receipt_handle)
        if handle is None:
            return service_pb2.ChangeInvisibleDurationResponse(
                status=_status("INVALID_RECEIPT_HANDLE", "not a receipt handle of this group "
                               "and topic"))
        try:
            with self._group_lock(group, topic, handle.broker_name):
                checked = self._checked_handle(group, topic, request.receipt_handle)
                if not isinstance(checked, tuple):
                    return service_pb2.ChangeInvisibleDurationResponse(status=checked)
                key, handle = checked
                nonce, until_ms = secrets.randbits(62), self._now_ms() + invisible_ms
                with self.state.lock(key.broker_name):
                    self.state.write(key.broker_name, [{
                        "t": "change", "k": key.to_json(), "offset": handle.queue_offset,
                        "nonce": handle.nonce, "new_nonce": nonce, "until": until_ms}])
        except (RocketHAError, StateWriteError) as err:
            return service_pb2.ChangeInvisibleDurationResponse(
                status=_status("INTERNAL_SERVER_ERROR", f"not recorded: {err}"))
        new_handle = ReceiptHandle(key.broker_name, key.queue_id, handle.queue_offset, nonce,
                                   until_ms)
        return service_pb2.ChangeInvisibleDurationResponse(
            status=_status("OK"), receipt_handle=self.handles.encode(group, topic, new_handle))

    def stats(self) -> dict[str, Any]:
        return {"sent_messages": self.sent_messages,
                "delivered_messages": self.delivered_messages,
                "dead_lettered_messages": self.dead_lettered_messages, **self.state.stats()}


def _scheme(host: str) -> int:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return definition_pb2.DOMAIN_NAME
    return definition_pb2.IPv4 if address.version == 4 else definition_pb2.IPv6
