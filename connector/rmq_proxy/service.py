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
    ReceiveMessage      (pop_service.py) POP from every readable queue of the named replica
                        set (starting at the named queue): expired leases first
                        (delivery_attempt + 1), then new messages; each delivery is recorded
                        in the cluster (state_store) before the client sees it; long polling
                        up to the request's timeout
    AckMessage, ChangeInvisibleDuration  checked receipt handles (receipt.py); a forged,
                        superseded or expired one is INVALID_RECEIPT_HANDLE
    ForwardMessageToDeadLetterQueue, and a lease expiring at grpcMaxDeliveryAttempts: the
                        message goes to `%DLQ%<group>` on its replica set (RocketMQ's name),
                        then counts as acked
    QueryAssignment     one assignment per replica set (the PushConsumer then receives by POP)
Anything else (transactions, PullMessage, offsets, recall, lite topics) answers UNSUPPORTED or
gRPC UNIMPLEMENTED. Every RPC first checks the request's signature when authentication is on
(auth.py, against the controller's users): UNAUTHORIZED otherwise; the caller's Credentials
then sign the calls made for it (routes asked of the controller, puts, pulls), so the
controller and the brokers apply that user's ACLs (a refusal: FORBIDDEN).
"""

from __future__ import annotations

import ipaddress
import logging
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
from rocketmq.grpc_protocol import definition_pb2, service_pb2, service_pb2_grpc

from conf.signing import Credentials
from connector.client import with_marker
from connector.protocol import (
    PRODUCE_SCHEMA,
    PutIdempotence,
    RocketHAError,
)
from connector.rmq_proxy.auth import Authenticator, AuthError, AuthUnavailable
from connector.rmq_proxy.cluster_io import ClusterLinks, TopicRoute
from connector.rmq_proxy.codes import CODE, code_for_status
from connector.rmq_proxy.config import ProxyConfig
from connector.rmq_proxy.messages import InvalidMessage, to_produce_row
from connector.rmq_proxy.pop_service import PopService
from connector.rmq_proxy.receipt import ReceiptHandleCodec
from connector.rmq_proxy.replies import duration_ms, refusal_or_error, status, wall_ms
from connector.rmq_proxy.state_store import StateWriteError

__all__ = ["MessagingService"]

logger = logging.getLogger(__name__)

PERM_READ, PERM_WRITE = 4, 2
ACCEPTED_TYPES = (definition_pb2.NORMAL, definition_pb2.FIFO)
_PROPERTIES_TYPE = PRODUCE_SCHEMA.field("properties").type


class MessagingService(service_pb2_grpc.MessagingServiceServicer):
    def __init__(self, config: ProxyConfig, links: ClusterLinks, authenticator: Authenticator,
                 handle_key: bytes, now_ms: Callable[[], int] = wall_ms) -> None:
        self.config = config
        self.links = links
        self.auth = authenticator
        self.handles = ReceiptHandleCodec(handle_key)
        self.pops = PopService(config, links, self.handles, now_ms)
        self.state = self.pops.state
        self._now_ms = now_ms
        host, _, port = config.endpoint.rpartition(":")
        self._endpoints = definition_pb2.Endpoints(
            scheme=_scheme(host), addresses=[definition_pb2.Address(host=host, port=int(port))])
        self.sent_messages = 0
        self.refused_requests = 0

    # -- helpers ---------------------------------------------------------------------------
    def _caller(self, context: Any) -> tuple[Credentials | None, Any | None]:
        """(the caller's keys, None) or (None, the refusal status). Keys are None when
        authentication is off: the proxy's own identity then makes the calls."""
        try:
            return self.auth.check(context.invocation_metadata()), None
        except AuthUnavailable as err:
            return None, status("INTERNAL_SERVER_ERROR", str(err))
        except AuthError as err:
            self.refused_requests += 1
            logger.info("refused %s: %s", context.peer(), err)
            return None, status("UNAUTHORIZED", str(err))

    def _route(self, topic: str, user: Credentials | None = None) -> TopicRoute | None:
        """The topic's route; asked as `user` when there is one (the controller then checks
        the user's rights on the topic: FatalError NO_PERMISSION)."""
        if user is not None:
            return self.links.user_routes(topic, user)
        return self.links.routes(topic)

    # -- routes and session ----------------------------------------------------------------
    def QueryRoute(self, request: Any, context: Any) -> Any:  # gRPC names the methods
        user, refused = self._caller(context)
        if refused is not None:
            return service_pb2.QueryRouteResponse(status=refused)
        topic = request.topic.name
        try:
            route = self._route(topic, user)
        except RocketHAError as err:
            return service_pb2.QueryRouteResponse(status=refusal_or_error(err, "routes"))
        if route is None:
            return service_pb2.QueryRouteResponse(
                status=status("TOPIC_NOT_FOUND", f"topic {topic!r} not found"))
        response = service_pb2.QueryRouteResponse(status=status("OK"))
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
        _, refused = self._caller(context)
        return service_pb2.HeartbeatResponse(status=refused or status("OK"))

    def NotifyClientTermination(self, request: Any, context: Any) -> Any:
        _, refused = self._caller(context)
        return service_pb2.NotifyClientTerminationResponse(status=refused or status("OK"))

    def Telemetry(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        _, refused = self._caller(context)
        if refused is not None:
            yield service_pb2.TelemetryCommand(status=refused)
            return
        for command in request_iterator:  # ends when the client closes its side
            if command.HasField("settings"):
                yield service_pb2.TelemetryCommand(status=status("OK"),
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
        user, refused = self._caller(context)
        if refused is not None:
            return service_pb2.SendMessageResponse(status=refused)
        if not request.messages:
            return service_pb2.SendMessageResponse(status=status("BAD_REQUEST", "no message"))
        entries = [self._send_one(message, user) for message in request.messages]
        return service_pb2.SendMessageResponse(status=_overall(entries), entries=entries)

    def _send_one(self, message: Any, user: Credentials | None) -> Any:
        entry = service_pb2.SendResultEntry(message_id=message.system_properties.message_id)
        try:
            row = to_produce_row(message, self.config.message_body_bytes_max)
            route = self._route(row.topic)
        except InvalidMessage as err:
            entry.status.CopyFrom(status(err.code_name, str(err)))
            return entry
        except RocketHAError as err:
            entry.status.CopyFrom(status("INTERNAL_SERVER_ERROR", f"routes: {err}"))
            return entry
        if route is None:
            entry.status.CopyFrom(status("TOPIC_NOT_FOUND", f"topic {row.topic!r} not found"))
            return entry
        writable = [(name, queue_id) for name, _, write_nums, perm in route.queues
                    if perm & PERM_WRITE for queue_id in range(write_nums)]
        if not writable:
            entry.status.CopyFrom(status("FORBIDDEN", f"topic {row.topic!r} is not writable"))
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
            reply = self.links.put(broker_name, row.topic, batch, user)
        except RocketHAError as err:
            _, name = code_for_status(err.name)
            entry.status.CopyFrom(status(name, f"{err.name}: {err.message}"))
            return entry
        _, name = code_for_status(reply.status)
        if reply.status == "MESSAGE_ILLEGAL" and "maxMessageSize" in reply.error:
            name = "MESSAGE_BODY_TOO_LARGE"  # the brokers' limit is below grpcMaxBodyBytes
        offsets = reply.row_offsets(1) if name == "OK" else []
        if name == "OK" and not offsets:  # a receipt always names its offset (issue 43)
            name = "INTERNAL_SERVER_ERROR"
            entry.status.CopyFrom(status(name, "stored earlier; its offset is unknown"))
            return entry
        entry.status.CopyFrom(status(name, reply.error or reply.status))
        if name == "OK":
            self.sent_messages += 1
            entry.offset = offsets[0][1]  # a retry stored before: the original's offset
        return entry

    def EndTransaction(self, request: Any, context: Any) -> Any:
        return service_pb2.EndTransactionResponse(
            status=status("UNSUPPORTED", "transactional messages are not supported"))

    # -- consuming: POP ----------------------------------------------------------------------
    def QueryAssignment(self, request: Any, context: Any) -> Any:
        user, refused = self._caller(context)
        if refused is not None:
            return service_pb2.QueryAssignmentResponse(status=refused)
        try:
            route = self._route(request.topic.name, user)
        except RocketHAError as err:
            return service_pb2.QueryAssignmentResponse(status=refusal_or_error(err, "routes"))
        if route is None:
            return service_pb2.QueryAssignmentResponse(status=status("TOPIC_NOT_FOUND"))
        response = service_pb2.QueryAssignmentResponse(status=status("OK"))
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
        user, refused = self._caller(context)
        if refused is not None:
            yield service_pb2.ReceiveMessageResponse(status=refused)
            return
        try:
            delivered, reply = self.pops.receive(request, context, user)
        except RocketHAError as err:
            delivered, reply = [], refusal_or_error(err, "receive")
        except StateWriteError as err:
            delivered, reply = [], status("INTERNAL_SERVER_ERROR", str(err))
        yield service_pb2.ReceiveMessageResponse(status=reply)
        for message in delivered:
            yield service_pb2.ReceiveMessageResponse(message=message)
        stamp = service_pb2.ReceiveMessageResponse()
        stamp.delivery_timestamp.FromMilliseconds(self._now_ms())
        yield stamp

    def ForwardMessageToDeadLetterQueue(self, request: Any, context: Any) -> Any:
        user, refused = self._caller(context)
        reply = refused or self.pops.forward(request.group.name, request.topic.name,
                                             request.receipt_handle, user)
        return service_pb2.ForwardMessageToDeadLetterQueueResponse(status=reply)

    def AckMessage(self, request: Any, context: Any) -> Any:
        user, refused = self._caller(context)
        if refused is not None:
            return service_pb2.AckMessageResponse(status=refused)
        group, topic = request.group.name, request.topic.name
        entries = []
        for entry in request.entries:
            entries.append(service_pb2.AckMessageResultEntry(
                message_id=entry.message_id, receipt_handle=entry.receipt_handle,
                status=self.pops.ack(group, topic, entry.receipt_handle, user)))
        return service_pb2.AckMessageResponse(status=_overall(entries), entries=entries)

    def ChangeInvisibleDuration(self, request: Any, context: Any) -> Any:
        user, refused = self._caller(context)
        if refused is not None:
            return service_pb2.ChangeInvisibleDurationResponse(status=refused)
        invisible_ms = duration_ms(request.invisible_duration)
        # no lower bound here (receive has grpcInvisibleDurationMinMs): the PushConsumer
        # "nacks" a message it failed on with its retry backoff, 1 s at first
        if not 0 <= invisible_ms <= self.config.invisible_duration_max_ms:
            return service_pb2.ChangeInvisibleDurationResponse(status=status(
                "ILLEGAL_INVISIBLE_TIME", f"invisible duration {invisible_ms} ms"))
        reply, handle = self.pops.change(request.group.name, request.topic.name,
                                         request.receipt_handle, invisible_ms, user)
        return service_pb2.ChangeInvisibleDurationResponse(status=reply, receipt_handle=handle)

    def stats(self) -> dict[str, Any]:
        return {"sent_messages": self.sent_messages,
                "refused_requests": self.refused_requests,
                "delivered_messages": self.pops.delivered_messages,
                "dead_lettered_messages": self.pops.dead_lettered_messages,
                "lost_leases": self.pops.lost_leases,
                **self.pops.state.stats()}


def _overall(entries: list[Any]) -> Any:
    """The status of a reply with several entries: the entry's own when there is one."""
    if len(entries) == 1:
        return entries[0].status
    if all(entry.status.code == CODE["OK"] for entry in entries):
        return status("OK")
    return definition_pb2.Status(code=30000, message="MULTIPLE_RESULTS")




def _scheme(host: str) -> int:
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return definition_pb2.DOMAIN_NAME
    return definition_pb2.IPv4 if address.version == 4 else definition_pb2.IPv6
