"""The Consumer: pulls by (topic, queue, queue_offset), with long polling, from one replica
set's master or, while it has none, its slaves (routes from connector/client/discovery.py)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyarrow import flight

from connector.client.broker_calls import _Base
from connector.client.config import ClientConfig
from connector.client.connections import _connection
from connector.client.discovery import controller_members
from connector.protocol import GetReply, GetTicket, RetriableError, status_for

__all__ = ["Consumer", "PullResult"]


@dataclasses.dataclass(frozen=True, slots=True)
class PullResult:
    table: pa.Table
    reply: GetReply

    @property
    def status(self) -> str:
        return self.reply.status

    @property
    def next_queue_offset(self) -> int:
        return self.reply.next_queue_offset


class Consumer(_Base):
    """Pulls by (topic, queue, queue_offset), with long polling.

    With `controller`, a consumer reads from one replica set (`broker_name`; None when the
    cluster has only one): its master first, and its slaves after the master fails, so reads
    go on during a failover (a slave serves up to its confirm position, never past it); the
    members are fetched again after each failure, so the new master is found.

    `group` (optional) names the consumer group in each ticket: with authorization on, the
    broker then requires Sub on the group as well as on the topic."""

    def __init__(self, config: ClientConfig, *, broker_name: str | None = None,
                 group: str | None = None) -> None:
        super().__init__(config)
        self.broker_name = broker_name
        self.group = group

    def _controller_endpoints(self, controller: str) -> tuple[str, ...]:
        return controller_members(controller, self.config.request_timeout_ms, self.broker_name,
                                  self.config.tls, self.config.credentials)

    def pull(self, topic: str, queue_id: int, queue_offset: int, *, max_messages: int = 1024,
             max_bytes: int = 8 << 20, tag_filter: str | None = None,
             max_wait_ms: int = 0, columns: Sequence[str] | None = None) -> PullResult:
        """Messages from `queue_offset` on. `columns` (CONSUME_SCHEMA names, None: all) are
        the only columns the broker builds and sends, in CONSUME_SCHEMA's order; an unknown
        name raises FatalError BAD_REQUEST."""
        ticket = GetTicket(topic, queue_id, queue_offset, max_messages, max_bytes, tag_filter,
                           max_wait_ms, None if columns is None else tuple(columns), self.group)
        timeout_s = (self.config.request_timeout_ms + max_wait_ms) / 1000.0

        def call(endpoint: str) -> PullResult:
            encoded = ticket.encode()
            reader = _connection(endpoint, self.config.tls).do_get(
                flight.Ticket(encoded), self._options("DO_GET", encoded, timeout_s))
            batches, reply = [], None
            for chunk in reader:
                batches.append(chunk.data)
                reply = GetReply.decode(chunk.app_metadata.to_pybytes())
            if reply is None:
                raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"), "empty DoGet stream")
            return PullResult(pa.Table.from_batches(batches), reply)

        return self._retry(call, f"pull {topic}/{queue_id}@{queue_offset}")

    def iter_queue(self, topic: str, queue_id: int, queue_offset: int, *,
                   until_idle_ms: int = 1000, max_messages_total: int = 1 << 40,
                   tag_filter: str | None = None) -> Iterator[pa.Table]:
        """Tables of messages from `queue_offset` on, until none arrives for `until_idle_ms`
        or `max_messages_total` were read."""
        read = 0
        idle_since = time.monotonic()
        while read < max_messages_total:
            result = self.pull(topic, queue_id, queue_offset, tag_filter=tag_filter,
                               max_messages=min(4096, max_messages_total - read),
                               max_wait_ms=min(until_idle_ms, 1000))
            if result.status in ("OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY"):
                queue_offset = result.next_queue_offset
                continue
            if result.table.num_rows:
                read += result.table.num_rows
                idle_since = time.monotonic()
                yield result.table
            queue_offset = result.next_queue_offset
            if result.table.num_rows == 0 and \
                    (time.monotonic() - idle_since) * 1000 >= until_idle_ms:
                return
