"""POP consumption for the RocketMQ SimpleConsumer and PushConsumer (service.py delegates).

    receive   lease up to a batch from the named replica set's queues (expired leases first,
              delivery_attempt + 1; then new messages; FIFO: not past a message whose group
              has one in flight), long-polling every queue of the set at once (`_wait`);
              each lease is recorded in the cluster (state_store.py), and won there, before
              the client sees the message
    ack       a current lease's handle -> an ack record -> OK
    change    ChangeInvisibleDuration: a change record with a new nonce -> the new handle
    forward   ForwardMessageToDeadLetterQueue: the message onto `%DLQ%<group>`, then an ack
A lease ending at grpcMaxDeliveryAttempts sends its message to `%DLQ%<group>` instead of
delivering it again. With authentication, every read of a consumer's messages is a pull
signed by that user and naming the group (the broker checks Sub on topic and group); an ack
or change first proves the same right once per ACCESS_CHECK_TTL_S with a one-message pull;
state records and dead letters are the proxy's own writes. Locks: one per (group, topic, replica
set) around every decision on its queues (read state, read messages, write the record, apply it),
then the set's state lock around the write (state_store.py); always in that order.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from rocketmq.grpc_protocol import definition_pb2

from conf.signing import Credentials
from connector.client import with_marker
from connector.protocol import IDEMPOTENCE_PROPERTY, PRODUCE_SCHEMA, PutIdempotence, RocketHAError
from connector.rmq_proxy.cluster_io import ClusterLinks
from connector.rmq_proxy.config import ProxyConfig
from connector.rmq_proxy.messages import SHARDING_KEY, to_pb_message
from connector.rmq_proxy.pop_core import GROUP_CHARS_MAX, PopState, QueueKey
from connector.rmq_proxy.receipt import ReceiptHandle, ReceiptHandleCodec
from connector.rmq_proxy.replies import duration_ms, refusal_or_error, status
from connector.rmq_proxy.state_store import StateStore, StateWriteError

__all__ = ["DLQ_PREFIX", "PopService"]

logger = logging.getLogger(__name__)

PERM_READ = 4
DEFAULT_INVISIBLE_MS = 30_000
DLQ_PREFIX = "%DLQ%"  # RocketMQ's dead-letter topic of a consumer group
WAKE_INTERVAL_MS = 500  # a waiting receive without a wait slot looks again this often
WAIT_SLICE_MS = 2000  # one long-polling wait of a receive (then it looks again)
WAIT_PULLS_MAX = 64  # long-polling pulls of waiting receives at once (the wait pool)
ACCESS_CHECK_TTL_S = 2.0  # a user's proven Sub right on (topic, group) is trusted this long
ACCESS_CHECKS_MAX = 100_000
HANDLE_CATCH_UP_S = 3.0  # a handle newer than this view: read the state topic this long
HANDLE_CATCH_UP_WAIT_MS = 300  # ... in long polls this long
DELIVERY_COLUMNS = ("queue_id", "queue_offset", "body", "key", "tags", "properties",
                    "born_timestamp", "store_timestamp", "msg_id")
_PROPERTIES_TYPE = PRODUCE_SCHEMA.field("properties").type


class PopService:
    def __init__(self, config: ProxyConfig, links: ClusterLinks, handles: ReceiptHandleCodec,
                 now_ms: Callable[[], int]) -> None:
        self.config = config
        self.links = links
        self.handles = handles
        self.pop = PopState()
        self.state = StateStore(links, self.pop, config.snapshot_interval_ms)
        self._now_ms = now_ms
        self._group_locks: dict[tuple[str, str, str], threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._dlq_topics: set[tuple[str, str]] = set()
        self._access: dict[tuple[str, str, str, str], float] = {}  # -> proven until (monotonic)
        self._wait_pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=WAIT_PULLS_MAX, thread_name_prefix="rmq-wait")
        self._wait_slots = threading.BoundedSemaphore(WAIT_PULLS_MAX)
        # queues whose last pass stopped at a message it could not lease -> the queue's end
        # then (-1: not read, the in-flight window was full)
        self._held: dict[QueueKey, int] = {}
        self.delivered_messages = 0
        self.lost_leases = 0  # leases another proxy's earlier record had taken
        self.dead_lettered_messages = 0

    def _group_lock(self, group: str, topic: str, broker_name: str) -> threading.Lock:
        with self._locks_lock:
            return self._group_locks.setdefault((group, topic, broker_name), threading.Lock())

    def receive(self, request: Any, context: Any, user: Credentials | None = None
                ) -> tuple[list[Any], Any]:
        group, topic = request.group.name, request.message_queue.topic.name
        broker_name = request.message_queue.broker.name
        invisible_ms = (duration_ms(request.invisible_duration)
                        if request.HasField("invisible_duration") else DEFAULT_INVISIBLE_MS)
        if not (self.config.invisible_duration_min_ms <= invisible_ms
                <= self.config.invisible_duration_max_ms):
            return [], status("ILLEGAL_INVISIBLE_TIME", f"invisible duration {invisible_ms} ms "
                              f"outside {self.config.invisible_duration_min_ms}.."
                              f"{self.config.invisible_duration_max_ms} ms")
        if not group:
            return [], status("ILLEGAL_CONSUMER_GROUP", "no consumer group")
        expression = request.filter_expression
        if expression.type == definition_pb2.SQL:
            return [], status("ILLEGAL_FILTER_EXPRESSION", "SQL92 filters are not supported")
        tag_filter = expression.expression.strip() or None
        if tag_filter == "*":
            tag_filter = None
        if tag_filter is not None and any(not t.strip() for t in tag_filter.split("||")):
            return [], status("ILLEGAL_FILTER_EXPRESSION", f"tag expression {tag_filter!r}")
        route = self.links.routes(topic)
        queue_ids = [] if route is None else [
            queue_id for name, read_nums, _, perm in route.queues
            if name == broker_name and perm & PERM_READ for queue_id in range(read_nums)]
        if not queue_ids:
            return [], status("TOPIC_NOT_FOUND", f"topic {topic!r} has no readable queue on "
                              f"{broker_name!r}")
        self.state.open_set(broker_name)
        if self.pop.get(QueueKey(group, topic, broker_name, queue_ids[0])) is None and \
                len(self.pop) + len(queue_ids) > self.config.consumer_queues_max:
            return [], status("TOO_MANY_REQUESTS", "grpcConsumerQueuesMax (group, topic, "
                              f"queue) states reached ({self.config.consumer_queues_max})")
        batch = max(1, min(request.batch_size or 1, self.config.receive_batch_max))
        polling_ms = (duration_ms(request.long_polling_timeout)
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
            found = self._pop(group, topic, broker_name, order, batch, invisible_ms, tag_filter,
                              user)
            if found or self._now_ms() >= deadline_ms or not context.is_active():
                break
            self._wait(group, topic, broker_name, order, deadline_ms, user)
        messages = [to_pb_message(row, topic, namespace, receipt_handle=handle,
                                  delivery_attempt=attempt, invisible_ms=invisible_ms,
                                  broker_name=broker_name)
                    for row, handle, attempt in found]
        self.delivered_messages += len(messages)
        return messages, status("OK") if messages else status("MESSAGE_NOT_FOUND",
                                                              "no new message")

    def _wait(self, group: str, topic: str, broker_name: str, queue_ids: list[int],
              deadline_ms: int, user: Credentials | None) -> None:
        """Until a message may have arrived on one of `queue_ids`, a lease of theirs may have
        expired, or the deadline: a long-polling pull per queue (offsets only), in parallel
        on the wait pool, returning when the first one does. Each wait lasts at most
        WAIT_SLICE_MS (a pull still running after the return holds its pool slot that long);
        with the pool full, a queue is looked at again after WAKE_INTERVAL_MS instead."""
        now_ms = self._now_ms()
        keys = [QueueKey(group, topic, broker_name, queue_id) for queue_id in queue_ids]
        wait_ms = min(deadline_ms - now_ms, WAIT_SLICE_MS)
        for key in keys:
            due_ms = self.pop.next_due_ms(key)
            if due_ms is not None:
                wait_ms = min(wait_ms, max(0, due_ms - now_ms))
        waits = []
        for key in keys:
            state = self.pop.get(key)
            if state is None or wait_ms <= 0:
                break
            if not self._wait_slots.acquire(blocking=False):
                wait_ms = min(wait_ms, WAKE_INTERVAL_MS)
                break
            waits.append(self._wait_pool.submit(self._wait_one, key, state.cursor,
                                                self._held.get(key), wait_ms, user))
        if not waits:
            time.sleep(max(0, min(wait_ms, 50)) / 1000.0)
            return
        done, _ = concurrent.futures.wait(waits, timeout=wait_ms / 1000.0 + 1.0,
                                          return_when=concurrent.futures.FIRST_COMPLETED)
        for future in done:
            future.result()  # a refusal (the user's rights) ends the receive here

    def _wait_one(self, key: QueueKey, cursor: int, held_end: int | None, wait_ms: int,
                  user: Credentials | None) -> None:
        """One queue's long-polling wait (on the wait pool; releases its slot). `held_end`:
        the last pass stopped at a message it could not lease (FIFO-held, or the in-flight
        window is full: -1, end unknown): wait for messages past the queue's end then, not
        for the one at the cursor (that would spin)."""
        try:
            started_ms = self._now_ms()
            wait_from = cursor
            if held_end is not None:
                wait_from = held_end
                if held_end < 0:
                    wait_from = self.links.pull(
                        key.broker_name, key.topic, key.queue_id, cursor, max_messages=1,
                        columns=("queue_offset",), user=user,
                        group=key.group).reply.max_queue_offset
            result = self.links.pull(key.broker_name, key.topic, key.queue_id, wait_from,
                                     max_messages=1, max_wait_ms=wait_ms,
                                     columns=("queue_offset",), user=user, group=key.group)
            left_ms = wait_ms - (self._now_ms() - started_ms)
            if not result.table.num_rows and left_ms > 0:
                # answered at once with nothing: the broker does not long-poll this queue
                # (no message was ever written to it): look again after WAKE_INTERVAL_MS,
                # without waking the receive now
                time.sleep(min(left_ms, WAKE_INTERVAL_MS) / 1000.0)
        finally:
            self._wait_slots.release()

    def close(self) -> None:
        self._wait_pool.shutdown(wait=False, cancel_futures=True)

    def _pop(self, group: str, topic: str, broker_name: str, queue_ids: list[int],
             batch: int, invisible_ms: int, tag_filter: str | None, user: Credentials | None
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
                                               tag_filter, user)
                if record is not None:
                    records.append(record)
                found += rows
            if records:
                with self.state.lock(broker_name):
                    self.state.write(broker_name, records)
                    # another proxy's record before ours may have taken some: only leases
                    # whose nonce is current after our record are ours to hand out
                    won = [(row, handle, attempt) for row, handle, attempt in found
                           if self._lease_is(group, topic, handle, handle.nonce)]
                self.lost_leases += len(found) - len(won)
                found = won
        return [(row, self.handles.encode(group, topic, handle), attempt)
                for row, handle, attempt in found]

    def _lease_is(self, group: str, topic: str, handle: ReceiptHandle, nonce: int) -> bool:
        state = self.pop.get(QueueKey(group, topic, handle.broker_name, handle.queue_id))
        lease = state.leases.get(handle.queue_offset) if state is not None else None
        return lease is not None and lease.nonce == nonce

    def _pop_queue(self, key: QueueKey, limit: int, until_ms: int, now_ms: int,
                   tag_filter: str | None, user: Credentials | None
                   ) -> tuple[dict[str, Any] | None, list[tuple[dict[str, Any], ReceiptHandle,
                                                                int]]]:
        state = self.pop.get(key)
        start = None if state is not None else self._initial_offset(key)
        cursor = state.cursor if state is not None else start
        assert cursor is not None
        leases: list[list[int]] = []
        redeliver: list[list[int]] = []
        dropped: list[list[int]] = []
        groups: list[list[Any]] = []
        rows: list[tuple[dict[str, Any], ReceiptHandle, int]] = []
        # FIFO: a message group with a message in flight (leased, expired or not: an expired
        # one is redelivered first, below) holds its later messages back
        in_flight = self.pop.groups_in_flight(key) if self.config.fifo_consumption else set()
        for queue_offset, lease in self.pop.due(key, now_ms, limit):
            row = self._read_one(key, queue_offset, user)
            if row is None:
                dropped.append([queue_offset, lease.nonce])  # retention removed it
                continue
            if lease.attempt >= self.config.max_delivery_attempts and \
                    self._dead_letter(key, row):
                dropped.append([queue_offset, lease.nonce])  # on %DLQ%<group> now: done
                continue
            nonce = secrets.randbits(62)
            redeliver.append([queue_offset, lease.attempt + 1, until_ms, nonce, lease.nonce])
            rows.append((row, ReceiptHandle(key.broker_name, key.queue_id, queue_offset, nonce,
                                            until_ms), lease.attempt + 1))
        room = min(limit - len(rows), self.pop.room(key, self.config.inflight_messages_max))
        new_cursor = cursor
        self._held.pop(key, None)
        if self.pop.room(key, self.config.inflight_messages_max) <= 0:
            self._held[key] = -1
        if room > 0:
            result = self.links.pull(key.broker_name, key.topic, key.queue_id, cursor,
                                     max_messages=room, tag_filter=tag_filter,
                                     columns=DELIVERY_COLUMNS, user=user, group=key.group)
            if result.status == "OFFSET_TOO_SMALL":  # retention passed the cursor
                start = new_cursor = result.next_queue_offset
            elif result.status == "OFFSET_OVERFLOW_BADLY":
                logger.warning("%s: cursor %d is past the queue's end %d", key, cursor,
                               result.reply.max_queue_offset)
            else:
                new_cursor = max(cursor, result.next_queue_offset)
                for row in result.table.to_pylist():
                    group = _message_group(row) if self.config.fifo_consumption else None
                    if group is not None and group in in_flight:
                        new_cursor = row["queue_offset"]  # waits for the group's earlier one
                        self._held[key] = result.reply.max_queue_offset
                        break
                    nonce = secrets.randbits(62)
                    leases.append([row["queue_offset"], 1, until_ms, nonce])
                    if group is not None:
                        groups.append([row["queue_offset"], group])
                        in_flight.add(group)
                    rows.append((row, ReceiptHandle(key.broker_name, key.queue_id,
                                                    row["queue_offset"], nonce, until_ms), 1))
        if not leases and not redeliver and not dropped and start is None and \
                new_cursor == cursor:
            return None, []
        return ({"t": "pop", "k": key.to_json(), "start": start, "cursor": new_cursor,
                 "leases": leases, "redeliver": redeliver, "dropped": dropped,
                 "groups": groups}, rows)

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

    def _read_one(self, key: QueueKey, queue_offset: int, user: Credentials | None = None
                  ) -> dict[str, Any] | None:
        """The message at `queue_offset`, read as `user` (None: the proxy itself)."""
        result = self.links.pull(key.broker_name, key.topic, key.queue_id, queue_offset,
                                 max_messages=1, columns=DELIVERY_COLUMNS, user=user,
                                 group=key.group if user is not None else None)
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

    def _may_consume(self, key: QueueKey, queue_offset: int, user: Credentials | None) -> None:
        """Raise the broker's refusal (FatalError NO_PERMISSION...) unless `user` may consume
        `key`'s topic as its group: a one-message pull as that user, its success trusted for
        ACCESS_CHECK_TTL_S."""
        if user is None:
            return
        access = (user.access_key, key.broker_name, key.topic, key.group)
        now_s = time.monotonic()
        if self._access.get(access, 0.0) > now_s:
            return
        self.links.pull(key.broker_name, key.topic, key.queue_id, queue_offset, max_messages=1,
                        columns=("queue_offset",), user=user, group=key.group)
        if len(self._access) >= ACCESS_CHECKS_MAX:
            self._access.clear()
        self._access[access] = now_s + ACCESS_CHECK_TTL_S

    def _checked_handle(self, group: str, topic: str, text: str, user: Credentials | None
                        ) -> tuple[QueueKey, ReceiptHandle] | Any:
        """(key, handle) of a current lease, or the INVALID_RECEIPT_HANDLE status; raises
        the broker's refusal when `user` may not consume the topic as `group`."""
        handle = self.handles.decode(group, topic, text)
        if handle is None:
            return status("INVALID_RECEIPT_HANDLE", "not a receipt handle of this group and "
                          "topic")
        key = QueueKey(group, topic, handle.broker_name, handle.queue_id)
        self._may_consume(key, handle.queue_offset, user)
        self.state.open_set(handle.broker_name)
        problem = self.pop.lease_problem(key, handle.queue_offset, handle.nonce,
                                         self._now_ms())
        deadline_s = time.monotonic() + HANDLE_CATCH_UP_S
        # a lease newer than this view (another proxy's, whose record may not be past the
        # confirm position yet: the handle's MAC proves the proxies issued it): read on
        while problem is not None and self._newer_than_view(key, handle) and \
                time.monotonic() < deadline_s:
            self.state.catch_up(handle.broker_name, wait_ms=HANDLE_CATCH_UP_WAIT_MS)
            problem = self.pop.lease_problem(key, handle.queue_offset, handle.nonce,
                                             self._now_ms())
        if problem is not None:
            return status("INVALID_RECEIPT_HANDLE", f"stale receipt handle: {problem}")
        return key, handle

    def _newer_than_view(self, key: QueueKey, handle: ReceiptHandle) -> bool:
        """May `handle` name a lease this view has not applied yet? (Not delivered here, or
        leased here until an earlier time than the handle says.)"""
        state = self.pop.get(key)
        if state is None:
            return True
        lease = state.leases.get(handle.queue_offset)
        if lease is None:
            return handle.queue_offset >= state.cursor
        return lease.nonce != handle.nonce and \
            lease.invisible_until_ms < handle.invisible_until_ms

    def ack(self, group: str, topic: str, text: str, user: Credentials | None = None) -> Any:
        """Ack one receipt handle: the ack record is PUT_OK before OK is answered."""
        handle = self.handles.decode(group, topic, text)
        if handle is None:
            return status("INVALID_RECEIPT_HANDLE", "not a receipt handle of this group and "
                          "topic")
        try:
            with self._group_lock(group, topic, handle.broker_name):
                checked = self._checked_handle(group, topic, text, user)
                if not isinstance(checked, tuple):
                    return checked
                key, handle = checked
                with self.state.lock(key.broker_name):
                    self.state.write(key.broker_name, [{
                        "t": "ack", "k": key.to_json(),
                        "offsets": [[handle.queue_offset, handle.nonce]]}])
                    superseded = self._lease_is_other(key, handle)
        except RocketHAError as err:
            return refusal_or_error(err, "ack not recorded")
        except StateWriteError as err:
            return status("INTERNAL_SERVER_ERROR", f"ack not recorded: {err}")
        if superseded:  # another proxy redelivered it first (log order)
            return status("INVALID_RECEIPT_HANDLE", "stale receipt handle: superseded by a "
                          "later delivery")
        return status("OK")

    def _lease_is_other(self, key: QueueKey, handle: ReceiptHandle) -> bool:
        """Is the message leased under another nonce than `handle`'s?"""
        state = self.pop.get(key)
        lease = state.leases.get(handle.queue_offset) if state is not None else None
        return lease is not None and lease.nonce != handle.nonce

    def change(self, group: str, topic: str, text: str, invisible_ms: int,
               user: Credentials | None = None) -> tuple[Any, str]:
        """ChangeInvisibleDuration: (status, the new handle or "")."""
        handle = self.handles.decode(group, topic, text)
        if handle is None:
            return status("INVALID_RECEIPT_HANDLE", "not a receipt handle of this group and "
                          "topic"), ""
        try:
            with self._group_lock(group, topic, handle.broker_name):
                checked = self._checked_handle(group, topic, text, user)
                if not isinstance(checked, tuple):
                    return checked, ""
                key, handle = checked
                nonce, until_ms = secrets.randbits(62), self._now_ms() + invisible_ms
                with self.state.lock(key.broker_name):
                    self.state.write(key.broker_name, [{
                        "t": "change", "k": key.to_json(), "offset": handle.queue_offset,
                        "nonce": handle.nonce, "new_nonce": nonce, "until": until_ms}])
                    changed = self._lease_is(group, topic, handle, nonce)
                if not changed:  # another proxy's record came first (log order)
                    return status("INVALID_RECEIPT_HANDLE", "stale receipt handle: "
                                  "superseded by a later delivery"), ""
        except RocketHAError as err:
            return refusal_or_error(err, "not recorded"), ""
        except StateWriteError as err:
            return status("INTERNAL_SERVER_ERROR", f"not recorded: {err}"), ""
        new_handle = ReceiptHandle(key.broker_name, key.queue_id, handle.queue_offset, nonce,
                                   until_ms)
        return status("OK"), self.handles.encode(group, topic, new_handle)

    def forward(self, group: str, topic: str, text: str, user: Credentials | None = None
                ) -> Any:
        """ForwardMessageToDeadLetterQueue: the message onto `%DLQ%<group>`, then an ack."""
        handle = self.handles.decode(group, topic, text)
        if handle is None:
            return status("INVALID_RECEIPT_HANDLE", "not a receipt handle of this group and "
                          "topic")
        try:
            with self._group_lock(group, topic, handle.broker_name):
                checked = self._checked_handle(group, topic, text, user)
                if not isinstance(checked, tuple):
                    return checked
                key, handle = checked
                row = self._read_one(key, handle.queue_offset, user)
                if row is not None and not self._dead_letter(key, row):
                    return status("INTERNAL_SERVER_ERROR", "the dead-letter topic did not "
                                  "take it")
                with self.state.lock(key.broker_name):
                    self.state.write(key.broker_name, [{
                        "t": "ack", "k": key.to_json(),
                        "offsets": [[handle.queue_offset, handle.nonce]]}])
        except RocketHAError as err:
            return refusal_or_error(err, "not recorded")
        except StateWriteError as err:
            return status("INTERNAL_SERVER_ERROR", f"not recorded: {err}")
        return status("OK")


def _message_group(row: dict[str, Any]) -> str | None:
    """A row's RocketMQ message group (FIFO), as tracked in the state records: names longer
    than GROUP_CHARS_MAX (a Flight producer may set any) by their SHA-1."""
    group = dict(row.get("properties") or []).get(SHARDING_KEY)
    if not group:
        return None
    if len(group) > GROUP_CHARS_MAX:
        return "sha1:" + hashlib.sha1(group.encode()).hexdigest()
    return str(group)
