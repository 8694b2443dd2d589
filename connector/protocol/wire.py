"""The client protocol over Arrow Flight: what each call carries.

produce — `DoPut`
    descriptor  FlightDescriptor.for_command(JSON {"topic": T})
    batches     PRODUCE_SCHEMA columns: `body` binary (required, non-null); optional `key`,
                `tags` (string), `properties` (map<string,string>), `queue_id` (int32)
    reply       one app-metadata buffer per batch, JSON (PutReply):
                {"status": "PUT_OK", "code": 0, "queues": [[queue_id, first_queue_offset, count]],
                 "row_queue_ids": [...] | null, "log_position_end": int, "error": ""}
                queue choice per row: `queue_id` if given, else hash of `key` (ordered per key),
                else the whole batch goes to the next queue round robin.
    idempotence optional, per batch: the batch's LAST row carries the property
                IDEMPOTENCE_PROPERTY = "<producer_id>/<sequence>" (PutIdempotence). The broker
                stores the batch only when `sequence` is above the last one it stored for
                `producer_id`, else answers {"status": "PUT_OK", "duplicate": true, "queues":
                []} without writing. A producer sends its sequences in increasing order and
                stops at its first failure, so what a broker stored is always a prefix. The
                marker sits on the last row because a batch is one append: if the last record
                survived a crash, the whole batch did; a restarted broker rebuilds its table
                from the markers in the tail of its queues (ha/broker/idempotence.py).

consume — `DoGet`
    ticket      JSON (GetTicket): {"topic", "queue_id", "queue_offset", "max_messages",
                "max_bytes", "tag_filter", "max_wait_ms"}
    stream      CONSUME_SCHEMA batches; each carries app metadata JSON (GetReply):
                {"status": "FOUND", "code": 40, "next_queue_offset", "min_queue_offset",
                 "max_queue_offset"}; an empty batch when nothing was found.

topics — `GetFlightInfo(for_path(topic))`: one endpoint per readable queue, each ticket a
GetTicket from the queue's minimum; `ListFlights`: one FlightInfo per topic.

admin — `DoAction(type, JSON body)` → one result, JSON. Types in ACTIONS.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pyarrow as pa

__all__ = [
    "ACTIONS",
    "CONSUME_SCHEMA",
    "GetReply",
    "GetTicket",
    "IDEMPOTENCE_PROPERTY",
    "PRODUCE_COLUMNS",
    "PRODUCE_SCHEMA",
    "ProtocolError",
    "PutIdempotence",
    "PutReply",
    "decode_json_object",
    "produce_descriptor_command",
]

PROPERTIES_TYPE = pa.map_(pa.string(), pa.string())
PRODUCE_COLUMNS: dict[str, tuple[pa.DataType, ...]] = {
    "body": (pa.binary(), pa.large_binary(), pa.string(), pa.large_string()),
    "key": (pa.string(), pa.large_string()),
    "tags": (pa.string(), pa.large_string()),
    "properties": (PROPERTIES_TYPE,),
    "queue_id": (pa.int32(), pa.int64(), pa.int16(), pa.int8()),
}
PRODUCE_SCHEMA = pa.schema([
    pa.field("body", pa.binary(), nullable=False),
    pa.field("key", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("properties", PROPERTIES_TYPE),
    pa.field("queue_id", pa.int32()),
])
CONSUME_SCHEMA = pa.schema([
    pa.field("topic", pa.string()),
    pa.field("queue_id", pa.int32()),
    pa.field("queue_offset", pa.int64()),
    pa.field("log_position", pa.int64()),
    pa.field("body", pa.binary()),
    pa.field("key", pa.string()),
    pa.field("tags", pa.string()),
    pa.field("properties", PROPERTIES_TYPE),
    pa.field("born_timestamp", pa.timestamp("ms")),
    pa.field("store_timestamp", pa.timestamp("ms")),
    pa.field("msg_id", pa.string()),
])

ACTIONS = (
    "broker_info",
    "broker_stats",
    "commit_offset",
    "create_topic",
    "delete_topic",
    "get_topic",
    "list_topics",
    "offset_for_timestamp",
    "query_offsets",
    "queue_offsets",
    "update_topic",
)

JSON_BYTES_MAX = 1 << 20  # a ticket, descriptor or action body
IDEMPOTENCE_PROPERTY = "__RH_IDEM"
PRODUCER_ID_CHARS_MAX = 64


class ProtocolError(ValueError):
    """A request does not follow this protocol; the message says which field and why."""


def decode_json_object(raw: bytes, what: str) -> dict[str, Any]:
    if len(raw) > JSON_BYTES_MAX:
        raise ProtocolError(f"{what} of {len(raw)} bytes exceeds {JSON_BYTES_MAX}")
    try:
        value = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as err:
        raise ProtocolError(f"{what} is not valid JSON: {err}") from err
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _field(obj: dict[str, Any], name: str, kind: type, what: str, default: Any = ...) -> Any:
    if name not in obj or obj[name] is None:
        if default is ...:
            raise ProtocolError(f"{what}: missing field {name!r}")
        return default
    value = obj[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
        raise ProtocolError(f"{what}: field {name!r} must be an integer, got {value!r}")
    if kind is str and not isinstance(value, str):
        raise ProtocolError(f"{what}: field {name!r} must be a string, got {value!r}")
    return value


def produce_descriptor_command(topic: str) -> bytes:
    return json.dumps({"topic": topic}).encode()


@dataclasses.dataclass(frozen=True, slots=True)
class GetTicket:
    topic: str
    queue_id: int
    queue_offset: int
    max_messages: int = 1024
    max_bytes: int = 8 << 20
    tag_filter: str | None = None
    max_wait_ms: int = 0

    def encode(self) -> bytes:
        return json.dumps(dataclasses.asdict(self), sort_keys=True).encode()

    @classmethod
    def decode(cls, raw: bytes) -> GetTicket:
        what = "ticket"
        obj = decode_json_object(raw, what)
        unknown = set(obj) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ProtocolError(f"ticket: unknown field(s) {sorted(unknown)}")
        ticket = cls(
            topic=_field(obj, "topic", str, what),
            queue_id=_field(obj, "queue_id", int, what),
            queue_offset=_field(obj, "queue_offset", int, what),
            max_messages=_field(obj, "max_messages", int, what, 1024),
            max_bytes=_field(obj, "max_bytes", int, what, 8 << 20),
            tag_filter=_field(obj, "tag_filter", str, what, None),
            max_wait_ms=_field(obj, "max_wait_ms", int, what, 0),
        )
        for name in ("queue_id", "queue_offset", "max_wait_ms"):
            if getattr(ticket, name) < 0:
                raise ProtocolError(f"ticket: {name} must be >= 0")
        for name in ("max_messages", "max_bytes"):
            if getattr(ticket, name) < 1:
                raise ProtocolError(f"ticket: {name} must be >= 1")
        return ticket


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class PutIdempotence:
    """Who sent a produce batch and its place in that producer's sequence (the marker)."""

    producer_id: str
    sequence: int

    def __post_init__(self) -> None:
        if not self.producer_id or len(self.producer_id) > PRODUCER_ID_CHARS_MAX or \
                not self.producer_id.isascii() or "/" in self.producer_id:
            raise ProtocolError(f"idempotence: producer_id {self.producer_id[:80]!r} must be "
                                f"1..{PRODUCER_ID_CHARS_MAX} ASCII characters without '/'")
        if self.sequence < 0:
            raise ProtocolError(f"idempotence: sequence {self.sequence} must be >= 0")

    def marker(self) -> str:
        return f"{self.producer_id}/{self.sequence}"

    @classmethod
    def from_marker(cls, text: str) -> PutIdempotence | None:
        """The marker's value, or None when `text` is not a well-formed marker."""
        producer_id, sep, sequence = text.rpartition("/")
        if not sep or not sequence.isdigit() or len(sequence) > 18:
            return None
        try:
            return cls(producer_id, int(sequence))
        except ProtocolError:
            return None


@dataclasses.dataclass(frozen=True, slots=True)
class PutReply:
    status: str
    code: int
    queues: list[list[int]]
    row_queue_ids: list[int] | None
    log_position_end: int
    error: str = ""
    duplicate: bool = False  # an idempotent batch the broker had already stored

    def encode(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    @classmethod
    def decode(cls, raw: bytes) -> PutReply:
        obj = decode_json_object(raw, "put reply")
        return cls(
            status=obj["status"], code=obj["code"], queues=obj.get("queues") or [],
            row_queue_ids=obj.get("row_queue_ids"), log_position_end=obj.get("log_position_end", -1),
            error=obj.get("error", ""), duplicate=bool(obj.get("duplicate", False)),
        )

    def row_offsets(self, row_count: int) -> list[tuple[int, int]]:
        """(queue_id, queue_offset) per input row, rebuilt from the per-queue ranges."""
        if not self.queues:
            return []
        if self.row_queue_ids is None:
            queue_id, first, count = self.queues[0]
            assert count == row_count, (count, row_count)
            return [(queue_id, first + index) for index in range(count)]
        next_offset = {queue_id: first for queue_id, first, _ in self.queues}
        result = []
        for queue_id in self.row_queue_ids:
            result.append((queue_id, next_offset[queue_id]))
            next_offset[queue_id] += 1
        return result


@dataclasses.dataclass(frozen=True, slots=True)
class GetReply:
    status: str
    code: int
    next_queue_offset: int
    min_queue_offset: int
    max_queue_offset: int

    def encode(self) -> bytes:
        return json.dumps(dataclasses.asdict(self)).encode()

    @classmethod
    def decode(cls, raw: bytes) -> GetReply:
        obj = decode_json_object(raw, "get reply")
        return cls(obj["status"], obj["code"], obj["next_queue_offset"], obj["min_queue_offset"],
                   obj["max_queue_offset"])
