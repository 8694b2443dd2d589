"""What goes into and comes out of the store: batches, put results, get results, tag filters."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from storage_engine.record_format import StoredMessage, decode_record, java_string_hash
from storage_engine.statuses import GetStatus, PutStatus

__all__ = ["GetResult", "Message", "MessageBatch", "PutResult", "RecordBlock", "TagFilter"]


@dataclasses.dataclass(frozen=True, slots=True)
class MessageBatch:
    """Messages of one topic, appended under one lock. Per-message sequences have equal length.

    `properties` are user properties; `tags` and `keys` become RocketMQ's TAGS and KEYS
    properties (TAGS also feeds the ConsumeQueue's tags_code).
    """

    topic: str
    bodies: Sequence[bytes]
    queue_ids: Sequence[int]
    tags: Sequence[str | None] | None = None
    keys: Sequence[str | None] | None = None
    properties: Sequence[dict[str, str] | None] | None = None
    born_timestamp_ms: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    flag: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Message:
    """One message; `put_message` turns it into a batch of one."""

    topic: str
    body: bytes
    queue_id: int = 0
    tags: str | None = None
    keys: str | None = None
    properties: dict[str, str] | None = None
    born_timestamp_ms: int = 0
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    flag: int = 0

    def as_batch(self) -> MessageBatch:
        return MessageBatch(
            topic=self.topic, bodies=[self.body], queue_ids=[self.queue_id],
            tags=None if self.tags is None else [self.tags],
            keys=None if self.keys is None else [self.keys],
            properties=None if self.properties is None else [self.properties],
            born_timestamp_ms=self.born_timestamp_ms, born_host=self.born_host, flag=self.flag,
        )


@dataclasses.dataclass(frozen=True, slots=True)
class PutResult:
    """Outcome of a put. Sequences are per message, in input order (empty when not stored)."""

    status: PutStatus
    log_position_end: int = -1
    queue_ids: Sequence[int] = ()
    queue_offsets: Sequence[int] = ()
    log_positions: Sequence[int] = ()
    error: str = ""

    @property
    def count(self) -> int:
        return len(self.queue_offsets)


@dataclasses.dataclass(frozen=True, slots=True)
class GetResult:
    """Outcome of a read. `records` are raw CommitLog records (decode with `messages()`)."""

    status: GetStatus
    next_queue_offset: int
    min_queue_offset: int
    max_queue_offset: int
    records: Sequence[bytes] = ()

    def messages(self) -> list[StoredMessage]:
        return [decode_record(record) for record in self.records]


@dataclasses.dataclass(frozen=True, slots=True)
class RecordBlock:
    """Outcome of `get_message_block`: records back to back in `data`, their sizes in
    `sizes` (a 1-D int64 numpy array, so the caller can decode the block with vector ops)."""

    status: GetStatus
    next_queue_offset: int
    min_queue_offset: int
    max_queue_offset: int
    data: bytes = b""
    sizes: npt.NDArray[np.int64] = dataclasses.field(
        default_factory=lambda: np.empty(0, np.int64))


@dataclasses.dataclass(frozen=True, slots=True)
class TagFilter:
    """RocketMQ's tag expression: `*` (everything) or `TagA || TagB`."""

    tags: frozenset[str]

    @property
    def codes(self) -> frozenset[int]:
        return frozenset(java_string_hash(tag) for tag in self.tags)

    @classmethod
    def parse(cls, expression: str | None) -> TagFilter | None:
        """None for `*`, empty or None; ValueError for an expression with an empty tag."""
        if expression is None or expression.strip() in ("", "*"):
            return None
        tags = [part.strip() for part in expression.split("||")]
        if any(not tag for tag in tags):
            raise ValueError(f"tag expression {expression!r} has an empty tag")
        return cls(frozenset(tags))
