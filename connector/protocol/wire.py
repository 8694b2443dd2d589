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
                `producer_id`, else answers without writing {"status": "PUT_OK", "duplicate":
                true, ...} naming the original's positions ("queues", "row_queue_ids",
                "log_position_end") exactly as the first answer did, or, when it no longer
                knows them (older than its last idempotenceBatchesKept batches of that
                producer), {"status": "DUPLICATE_POSITION_UNKNOWN", "duplicate": true,
                "queues": []}: stored earlier, as durable as PUT_OK, position unknown. A
                PUT_OK always names where each row is. A producer sends its sequences in
                increasing order and stops at its first failure, so what a broker stored is
                always a prefix. The
                marker sits on the last row because a batch is one append: if the last record
                survived a crash, the whole batch did; a restarted broker rebuilds its table
                from the markers in the tail of its queues (ha/broker/idempotence.py).

consume — `DoGet`
    ticket      JSON (GetTicket): {"topic", "queue_id", "queue_offset", "max_messages",
                "max_bytes", "tag_filter", "max_wait_ms"} and optionally "columns": a
                non-empty list of CONSUME_SCHEMA column names, without repeats (absent or null:
                every column). An unknown name is a BAD_REQUEST naming it. Optionally
                "group": the consumer group reading (authorization checks Sub on it too).
    stream      batches of CONSUME_SCHEMA restricted to the ticket's columns, in schema order
                whatever the ticket's order (`consume_schema(columns)`; the stream's declared
                schema is that one too). The broker builds only those: no msg_id formatting
                unless msg_id is asked, no properties decoding unless key, tags or properties
                is. tag_filter works whatever the columns (it is applied before). Each batch
                carries app metadata JSON (GetReply):
                {"status": "FOUND", "code": 40, "next_queue_offset", "min_queue_offset",
                 "max_queue_offset"}; an empty batch when nothing was found. Rows are the
                matching messages with queue offsets in [ticket queue_offset,
                next_queue_offset) of the last reply, in order; without tag_filter that is
                every message of that range, so a client that does not ask for queue_offset
                can still number the rows.

topics — `GetFlightInfo(for_path(topic))`: one endpoint per readable queue, each ticket a
GetTicket from the queue's minimum; `ListFlights`: one FlightInfo per topic.

admin — `DoAction(type, JSON body)` → one result, JSON. Types in ACTIONS.

Decoding: every JSON decoder here raises ProtocolError, whatever the bytes (too deep, a
5000-digit number, a missing key, an integer beyond 64 bits, a wrong type): never a
RecursionError, KeyError or OverflowError (tests/connector/test_decoder_properties.py).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from typing import Any

import pyarrow as pa

__all__ = [
    "ACTIONS",
    "CONSUME_SCHEMA",
    "IDEMPOTENCE_PROPERTY",
    "PER_BATCH_TOPICS",
    "PRODUCE_COLUMNS",
    "PRODUCE_SCHEMA",
    "GetReply",
    "GetTicket",
    "ProtocolError",
    "PutIdempotence",
    "PutReply",
    "consume_schema",
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
CONSUME_COLUMNS = tuple(CONSUME_SCHEMA.names)
CONSUME_SCHEMAS_CACHED = 256  # distinct column selections remembered by consume_schema


@functools.lru_cache(maxsize=CONSUME_SCHEMAS_CACHED)
def consume_schema(columns: tuple[str, ...] | None) -> pa.Schema:
    """CONSUME_SCHEMA restricted to `columns` (None: all), in CONSUME_SCHEMA's order. Cached:
    a broker builds one batch per read block, and the schema was ~7% of a pull's CPU."""
    if columns is None:
        return CONSUME_SCHEMA
    wanted = set(columns)
    assert wanted <= set(CONSUME_COLUMNS), sorted(wanted - set(CONSUME_COLUMNS))
    return pa.schema([field for field in CONSUME_SCHEMA if field.name in wanted])

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
INT_LIMIT = 2**63  # integers in tickets and replies are signed 64-bit
IDEMPOTENCE_PROPERTY = "__RH_IDEM"
PRODUCER_ID_CHARS_MAX = 64


class ProtocolError(ValueError):
    """A request does not follow this protocol; the message says which field and why."""


def decode_json_object(raw: bytes, what: str) -> dict[str, Any]:
    if len(raw) > JSON_BYTES_MAX:
        raise ProtocolError(f"{what} of {len(raw)} bytes exceeds {JSON_BYTES_MAX}")
    try:  # (UTF-8 only: json.loads of bytes first guesses among UTF-8/16/32, ~3 us a reply)
        value = json.loads(raw.decode() if isinstance(raw, (bytes, bytearray)) else raw)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        raise ProtocolError(f"{what} is not valid JSON: {str(err)[:200]}") from None
    if not isinstance(value, dict):
        raise ProtocolError(f"{what} must be a JSON object, got {type(value).__name__}")
    return value


def _field(obj: dict[str, Any], name: str, kind: type, what: str, default: Any = ...) -> Any:
    if name not in obj or obj[name] is None:
        if default is ...:
            raise ProtocolError(f"{what}: missing field {name!r}")
        return default
    value = obj[name]
    if kind is int and (isinstance(value, bool) or not isinstance(value, int)
                        or not -INT_LIMIT < value < INT_LIMIT):
        raise ProtocolError(f"{what}: field {name!r} must be a 64-bit integer, got "
                            f"{value!r:.40}")
    if kind is str and not isinstance(value, str):
        raise ProtocolError(f"{what}: field {name!r} must be a string, got {value!r:.40}")
    return value


# `{"topics": "per_batch"}`: each batch's app_metadata names its topic
PER_BATCH_TOPICS = "per_batch"


def produce_descriptor_command(topic: str | None) -> bytes:
    """A produce stream's descriptor: one topic, or (None) a topic per batch, named by the
    batch's app_metadata (brokers of protocol 0.2 on; v0.1.0 refuses it, see
    connector/client/stream_pool.py)."""
    if topic is None:
        return json.dumps({"topics": PER_BATCH_TOPICS}).encode()
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
    columns: tuple[str, ...] | None = None  # CONSUME_SCHEMA names wanted; None: all
    # the consumer group reading (optional): with authorization on, the broker then checks
    # Sub on the group as well as on the topic
    group: str | None = None

    def encode(self) -> bytes:
        obj = dataclasses.asdict(self)
        if self.group is None:
            del obj["group"]
        if self.columns is None:  # the ticket of a full read is the same as before columns
            del obj["columns"]
        else:
            obj["columns"] = list(self.columns)
        return json.dumps(obj, sort_keys=True).encode()

    def schema(self) -> pa.Schema:
        """The schema of the batches this ticket's stream carries."""
        return consume_schema(self.columns)

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
            columns=_columns(obj.get("columns")),
            group=_field(obj, "group", str, what, None),
        )
        for name in ("queue_id", "queue_offset", "max_wait_ms"):
            if getattr(ticket, name) < 0:
                raise ProtocolError(f"ticket: {name} must be >= 0")
        for name in ("max_messages", "max_bytes"):
            if getattr(ticket, name) < 1:
                raise ProtocolError(f"ticket: {name} must be >= 1")
        return ticket


def _columns(value: Any) -> tuple[str, ...] | None:
    """A ticket's `columns`: None, or a non-empty list of distinct CONSUME_SCHEMA names."""
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        raise ProtocolError(f"ticket: field 'columns' must be a non-empty list of column "
                            f"names (omit it for every column), got {value!r:.80}")
    for name in value:
        if not isinstance(name, str) or name not in CONSUME_COLUMNS:
            raise ProtocolError(f"ticket: columns: unknown column {name!r:.80}; known: "
                                f"{', '.join(CONSUME_COLUMNS)}")
    if len(set(value)) != len(value):
        raise ProtocolError(f"ticket: columns: a column is named twice in {value!r:.200}")
    return tuple(value)


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
        # The reply of a stored single-queue batch (every acknowledged send) by formatting:
        # the bytes json.dumps gives (tests/connector/test_put_reply_fast.py holds them equal),
        # without its encoder's dict and list walk. Everything else goes through json.dumps.
        queues = self.queues
        if (self.row_queue_ids is None and self.error == "" and len(queues) == 1
                and _PLAIN_NAME.fullmatch(self.status) is not None
                and type(self.code) is int and type(self.log_position_end) is int
                and type(self.duplicate) is bool):
            queue = queues[0]
            if (type(queue) is list and len(queue) == 3 and type(queue[0]) is int
                    and type(queue[1]) is int and type(queue[2]) is int):
                return (_ONE_QUEUE_REPLY % (self.status, self.code, queue[0], queue[1],
                                            queue[2], self.log_position_end,
                                            "true" if self.duplicate else "false")).encode()
        # the fields by hand: dataclasses.asdict deep-copies, ~12 us of a single put's reply
        return json.dumps({
            "status": self.status, "code": self.code, "queues": self.queues,
            "row_queue_ids": self.row_queue_ids, "log_position_end": self.log_position_end,
            "error": self.error, "duplicate": self.duplicate}).encode()

    @classmethod
    def decode(cls, raw: bytes) -> PutReply:
        # The reply `encode` formats for a single-queue batch (with the broker's
        # "replication" field or without), read by one regular expression that accepts only
        # text json.loads reads as the same values (integers below 2**63, no escapes, no
        # repeated keys); anything else takes the general path, which the property test holds
        # equal to this one on hostile bytes too (tests/connector/test_put_reply_fast.py).
        match = _ONE_QUEUE_REPLY_RE.fullmatch(raw) if type(raw) is bytes else None
        if match is None:
            return cls.decode_json(raw)
        (status, code, queue_id, first, count, end, duplicate) = match.groups()
        return cls(status.decode(), int(code), [[int(queue_id), int(first), int(count)]],
                   None, int(end), "", duplicate == b"true")

    @classmethod
    def decode_json(cls, raw: bytes) -> PutReply:
        """The general decoder (any valid reply; ProtocolError for anything else)."""
        what = "put reply"
        obj = decode_json_object(raw, what)
        queues = obj.get("queues") or []
        row_queue_ids = obj.get("row_queue_ids")
        if not isinstance(queues, list):
            raise ProtocolError(f"{what}: queues must be [[queue_id, first, count], ...]")
        for item in queues:  # (a loop: generators in all() cost ~4 us a single send)
            if not (type(item) is list and len(item) == 3 and _is_int(item[0])
                    and _is_int(item[1]) and _is_int(item[2])):
                raise ProtocolError(f"{what}: queues must be [[queue_id, first, count], ...]")
        if row_queue_ids is not None and (not isinstance(row_queue_ids, list) or not all(
                _is_int(v) for v in row_queue_ids)):
            raise ProtocolError(f"{what}: row_queue_ids must be a list of integers")
        return cls(
            status=_field(obj, "status", str, what), code=_field(obj, "code", int, what),
            queues=queues, row_queue_ids=row_queue_ids,
            log_position_end=_field(obj, "log_position_end", int, what, -1),
            error=_field(obj, "error", str, what, ""),
            duplicate=bool(obj.get("duplicate", False)),
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
        what = "get reply"
        obj = decode_json_object(raw, what)
        return cls(_field(obj, "status", str, what), _field(obj, "code", int, what),
                   _field(obj, "next_queue_offset", int, what),
                   _field(obj, "min_queue_offset", int, what),
                   _field(obj, "max_queue_offset", int, what))


# PutReply's fast paths: a status name that json.dumps writes as it is; the single-queue reply
# as json.dumps (default separators) writes it; the same as read, signed integers of at most 18
# digits without leading zeros (below 2**63: what _field accepts), an optional
# "replication" field (ha/broker/replication.py annotate_reply) that decode ignores.
_PLAIN_NAME = re.compile(r"[A-Z_]{1,64}")
_ONE_QUEUE_REPLY = ('{"status": "%s", "code": %d, "queues": [[%d, %d, %d]], "row_queue_ids": '
                    'null, "log_position_end": %d, "error": "", "duplicate": %s}')
_INT_RE = rb"(0|-?[1-9][0-9]{0,17})"
_ONE_QUEUE_REPLY_RE = re.compile(
    rb'\{"status": "([A-Z_]{1,64})", "code": ' + _INT_RE + rb', "queues": \[\['
    + _INT_RE + rb", " + _INT_RE + rb", " + _INT_RE + rb'\]\], "row_queue_ids": null, '
    rb'"log_position_end": ' + _INT_RE + rb', "error": "", "duplicate": (true|false)'
    rb'(?:, "replication": "[A-Z_]{1,64}")?\}')


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and -INT_LIMIT < value < INT_LIMIT
