"""Between the store's records and the wire's Arrow batches (both directions).

`records_to_batch` and `block_to_batch` decode raw CommitLog records (storage_engine's layout)
into a batch of CONSUME_SCHEMA, or of the columns a consume ticket asked for
(`consume_schema(columns)`): a column not asked for is not built at all (no msg_id hex
formatting, no properties decoding unless key, tags or properties is asked); `rows_from_batch`
validates a produce batch against PRODUCE_COLUMNS and returns plain Python columns for a
MessageBatch. Bad input raises `BadBatch` with the column name in the message.
"""

from __future__ import annotations

import dataclasses
from itertools import repeat

import numpy as np
import pyarrow as pa

from connector.protocol import CONSUME_SCHEMA, PRODUCE_COLUMNS, PRODUCE_SCHEMA, consume_schema
from storage_engine import (
    RECORD_CHECKSUM_PAIR_BYTES,
    RECORD_HEADER,
    decode_properties,
    make_msg_id,
)

__all__ = [
    "BadBatch",
    "ProduceRows",
    "block_to_batch",
    "check_produce_schema",
    "empty_batch",
    "records_to_batch",
    "rows_from_any_batch",
    "rows_from_batch",
]


_BODY_AT = 88  # RECORD_HEADER.size: the body follows the header
_BARE_RECORD_BYTES = 91 + RECORD_CHECKSUM_PAIR_BYTES  # a record with no properties, less body+topic
assert RECORD_HEADER.size == _BODY_AT
_FROM_PROPERTIES = frozenset({"key", "tags", "properties"})  # decoded from the properties field


class BadBatch(ValueError):
    """A produce batch that does not follow PRODUCE_SCHEMA."""


def records_to_batch(records: list[bytes], topic: str,
                     columns: tuple[str, ...] | None = None) -> pa.RecordBatch:
    """Decode raw records of `topic` into one Arrow batch of `consume_schema(columns)`.

    The common case (records without properties, one store host) runs on C-level iterators:
    one header unpack per record, bodies sliced by map, message ids formatted by map; only
    records that carry properties are decoded one by one, and only when key, tags or
    properties is asked.
    """
    schema = consume_schema(columns)
    names = set(schema.names)
    count = len(records)
    headers = list(map(RECORD_HEADER.unpack_from, records))
    (totals, _, _, queue_ids, _, queue_offsets, positions, _, born, _, stored, hosts, _, _,
     body_sizes) = zip(*headers)
    built: dict[str, object] = {"queue_id": queue_ids, "queue_offset": queue_offsets,
                                "log_position": positions, "born_timestamp": born,
                                "store_timestamp": stored}
    if "topic" in names:
        built["topic"] = pa.array([topic] * count, pa.string())
    if "body" in names:
        built["body"] = list(map(bytes.__getitem__, records, map(
            slice, repeat(_BODY_AT), map(_BODY_AT.__add__, body_sizes))))
    if names & _FROM_PROPERTIES:
        built["key"], built["tags"], built["properties"] = _record_properties(
            records, totals, body_sizes, topic)
    if "msg_id" in names:
        if len(set(hosts)) == 1:
            built["msg_id"] = list(map((hosts[0].hex().upper() + "%016X").__mod__, positions))
        else:
            built["msg_id"] = list(map(make_msg_id, hosts, positions))
    arrays = [column if isinstance(column, pa.Array) else pa.array(column, type=field.type)
              for column, field in ((built[field.name], field) for field in schema)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def _record_properties(records: list[bytes], totals: tuple[int, ...],
                       body_sizes: tuple[int, ...], topic: str
                       ) -> tuple[list[str | None], list[str | None],
                                  list[list[tuple[str, str]] | None]]:
    """keys, tags and the other properties of each record (None where it has none)."""
    count = len(records)
    bare_size = _BARE_RECORD_BYTES + len(topic)
    keys: list[str | None] = [None] * count
    tags: list[str | None] = [None] * count
    properties: list[list[tuple[str, str]] | None] = [None] * count
    for index, (total, body_size) in enumerate(zip(totals, body_sizes)):
        if total - body_size == bare_size:
            continue
        props_at = _BODY_AT + body_size + 3 + len(topic)
        props = decode_properties(records[index][props_at:total - RECORD_CHECKSUM_PAIR_BYTES])
        keys[index] = props.pop("KEYS", None)
        tags[index] = props.pop("TAGS", None)
        properties[index] = list(props.items()) if props else None
    return keys, tags, properties


def empty_batch(columns: tuple[str, ...] | None = None) -> pa.RecordBatch:
    schema = consume_schema(columns)
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)


@dataclasses.dataclass(frozen=True, slots=True)
class ProduceRows:
    bodies: list[bytes]
    keys: list[str | None] | None
    tags: list[str | None] | None
    properties: list[dict[str, str] | None] | None
    queue_ids: list[int | None] | None


def check_produce_schema(schema: pa.Schema) -> None:
    """Raise BadBatch unless `schema` has PRODUCE_COLUMNS only, with their types, and `body`.
    A produce stream's schema arrives before any batch: it is checked before data is read."""
    names = schema.names
    unknown = [name[:40] for name in names if name not in PRODUCE_COLUMNS]
    if unknown:
        raise BadBatch(f"unknown column(s) {unknown[:8]}; allowed: {sorted(PRODUCE_COLUMNS)}")
    if len(set(names)) != len(names):
        raise BadBatch(f"duplicate columns in {names}")
    if "body" not in names:
        raise BadBatch("column 'body' (binary) is required")
    for field in schema:
        if field.type not in PRODUCE_COLUMNS[field.name]:
            allowed = ", ".join(str(t) for t in PRODUCE_COLUMNS[field.name])
            raise BadBatch(f"column {field.name!r} has type {field.type}; allowed: {allowed}")


# The schema of a keyless send() (connector/client/encoding.py): check_produce_schema passes it, and
# it has no column but `body`, so `rows_from_batch` takes it without the general walk
_BODY_ONLY_SCHEMA = pa.schema([PRODUCE_SCHEMA.field("body")])
check_produce_schema(_BODY_ONLY_SCHEMA)


def rows_from_batch(batch: pa.RecordBatch) -> ProduceRows:
    """Validate the schema and pull the columns out as Python lists."""
    schema = batch.schema
    if schema.equals(_BODY_ONLY_SCHEMA):  # (tests/ha/test_produce_rows_fast.py)
        body_column = batch.column(0)
        if body_column.null_count:
            raise BadBatch("column 'body' has null values")
        return ProduceRows(body_column.to_pylist(), None, None, None, None)
    return rows_from_any_batch(batch)


def rows_from_any_batch(batch: pa.RecordBatch) -> ProduceRows:
    """`rows_from_batch` without its fast path (any schema)."""
    check_produce_schema(batch.schema)
    names = batch.schema.names
    body_column = batch.column("body")
    if body_column.null_count:
        raise BadBatch("column 'body' has null values")
    bodies = body_column.to_pylist()
    if bodies and isinstance(bodies[0], str):
        bodies = [body.encode("utf-8") for body in bodies]

    def optional(name: str) -> list | None:  # type: ignore[type-arg]
        return batch.column(name).to_pylist() if name in names else None

    raw_properties = optional("properties")
    properties = None if raw_properties is None else [
        None if value is None else dict(value) for value in raw_properties]
    queue_ids = optional("queue_id")
    return ProduceRows(bodies, optional("key"), optional("tags"), properties, queue_ids)


# -- vectorized decoding of a block of back-to-back records (the consume fast path) -----------
_HEADER_DTYPE = np.dtype([
    ("total", ">i4"), ("magic", ">u4"), ("body_crc", ">i4"), ("queue_id", ">i4"),
    ("flag", ">i4"), ("queue_offset", ">i8"), ("log_position", ">i8"), ("sys_flag", ">i4"),
    ("born_ms", ">i8"), ("born_host", "V8"), ("store_ms", ">i8"), ("store_host", "V8"),
    ("reconsume", ">i4"), ("prepared", ">i8"), ("body_size", ">i4"),
])
assert _HEADER_DTYPE.itemsize == RECORD_HEADER.size
# (consume column, header field, native dtype, Arrow type): the columns read from the header
_HEADER_COLUMNS = (
    ("queue_id", "queue_id", np.int32, pa.int32()),
    ("queue_offset", "queue_offset", np.int64, pa.int64()),
    ("log_position", "log_position", np.int64, pa.int64()),
    ("born_timestamp", "born_ms", np.int64, pa.timestamp("ms")),
    ("store_timestamp", "store_ms", np.int64, pa.timestamp("ms")),
)
assert all(CONSUME_SCHEMA.field(name).type == arrow_type for name, _, _, arrow_type
           in _HEADER_COLUMNS)
_HEX_PAIRS = np.array([f"{value:02X}".encode() for value in range(256)], dtype="S2")
_MSG_ID_CHARS = 32  # store host (8 bytes) + log position (8 bytes), hex


def block_to_batch(data: bytes, sizes: np.ndarray, topic: str,
                   columns: tuple[str, ...] | None = None) -> pa.RecordBatch:
    """Decode records stored back to back in `data` (int64 sizes in `sizes`) into
    `consume_schema(columns)` (None: every column of CONSUME_SCHEMA).

    Every fixed field comes from the 88-byte headers viewed as a big-endian structured array;
    bodies land in one values buffer; message ids are hex-formatted by table look-up. Only
    records with properties are decoded one by one. When every record has the same size (a
    batch of same-size bodies without properties, the common bulk case) the block is a 2-D
    array and headers and bodies are plain column slices; otherwise they are gathered by index.
    Columns not asked for are not built.
    """
    schema = consume_schema(columns)
    names = set(schema.names)
    count = len(sizes)
    raw = np.frombuffer(data, dtype=np.uint8)
    size_array = np.asarray(sizes, dtype=np.int64)
    starts = np.zeros(count, dtype=np.int64)
    np.cumsum(size_array[:-1], out=starts[1:])
    record_size = int(size_array[0])
    uniform = bool((size_array == record_size).all())
    if uniform:
        header_bytes = raw.reshape(count, record_size)[:, :_BODY_AT]
    else:
        header_bytes = raw[starts[:, None] + np.arange(_BODY_AT)]
    header_columns = [column for column in _HEADER_COLUMNS if column[0] in names]
    headers = _HeaderFields(header_bytes, copy_all=not uniform or bool(header_columns))
    body_sizes = headers.field("body_size").astype(np.int64)
    built: dict[str, pa.Array] = {}
    if "topic" in names:
        built["topic"] = pa.array([topic] * count, pa.string())
    for name, header_field, dtype, arrow_type in header_columns:
        array = pa.array(headers.field(header_field).astype(dtype))
        built[name] = array if array.type == arrow_type else array.cast(arrow_type)
    if "body" in names:
        if uniform and (body_sizes == body_sizes[0]).all():
            body_size = int(body_sizes[0])
            values = raw.reshape(count, record_size)[:, _BODY_AT:_BODY_AT + body_size]
            built["body"] = _binary_array(np.ascontiguousarray(values).reshape(-1), body_sizes)
        else:
            built["body"] = _gather_bodies(raw, starts + _BODY_AT, body_sizes)
    if names & _FROM_PROPERTIES:
        built["key"], built["tags"], built["properties"] = _decode_properties_column(
            data, starts, headers.field("total"), body_sizes, topic)
    if "msg_id" in names:
        built["msg_id"] = _msg_ids(header_bytes)
    return pa.RecordBatch.from_arrays([built[name] for name in schema.names], schema=schema)


class _HeaderFields:
    """Fields of the records' 88-byte headers, given as a (count, 88) uint8 array (a strided
    view into the block, or a gathered copy). `copy_all` makes one contiguous structured copy
    up front: right when several fields are read (one pass beats one strided pass per field)
    or the headers were gathered anyway. Otherwise each field is copied out of the strided
    view alone, so a pull of `body` only copies the 4-byte body size, not 88 bytes a record."""

    def __init__(self, header_bytes: np.ndarray, *, copy_all: bool) -> None:
        self._bytes = header_bytes
        self._count = header_bytes.shape[0]
        self._all = (np.ascontiguousarray(header_bytes).view(_HEADER_DTYPE).reshape(self._count)
                     if copy_all else None)

    def field(self, name: str) -> np.ndarray:
        if self._all is not None:
            return self._all[name]  # type: ignore[no-any-return]
        dtype, at = _HEADER_DTYPE.fields[name][:2]
        column = np.ascontiguousarray(self._bytes[:, at:at + dtype.itemsize])
        return column.view(dtype).reshape(self._count)


def _gather_bodies(raw: np.ndarray, body_starts: np.ndarray, body_sizes: np.ndarray
                   ) -> pa.Array:
    """Bodies of different sizes: one index gather (source byte of every body byte)."""
    offsets = np.zeros(body_sizes.size + 1, dtype=np.int64)
    np.cumsum(body_sizes, out=offsets[1:])
    source = np.repeat(body_starts - offsets[:-1], body_sizes) + np.arange(offsets[-1])
    return _binary_array(raw[source], body_sizes)


def _binary_array(values: np.ndarray, sizes: np.ndarray) -> pa.Array:
    offsets = np.zeros(sizes.size + 1, dtype=np.int32)
    np.cumsum(sizes, out=offsets[1:])
    return pa.Array.from_buffers(pa.binary(), sizes.size,
                                 [None, pa.py_buffer(offsets), pa.py_buffer(values)])


def _decode_properties_column(data: bytes, starts: np.ndarray, total_sizes: np.ndarray,
                              body_sizes: np.ndarray, topic: str
                              ) -> tuple[pa.Array, pa.Array, pa.Array]:
    count = starts.size
    topic_size = len(topic.encode())
    totals = total_sizes.astype(np.int64)
    with_properties = np.nonzero(totals - body_sizes - topic_size != _BARE_RECORD_BYTES)[0]
    if with_properties.size == 0:
        return (pa.nulls(count, pa.string()), pa.nulls(count, pa.string()),
                pa.nulls(count, CONSUME_SCHEMA.field("properties").type))
    keys: list[str | None] = [None] * count
    tags: list[str | None] = [None] * count
    properties: list[list[tuple[str, str]] | None] = [None] * count
    for index in with_properties.tolist():
        start = int(starts[index])
        props_at = start + _BODY_AT + int(body_sizes[index]) + 3 + topic_size
        end = start + int(totals[index]) - RECORD_CHECKSUM_PAIR_BYTES
        props = decode_properties(data[props_at:end])
        keys[index] = props.pop("KEYS", None)
        tags[index] = props.pop("TAGS", None)
        properties[index] = list(props.items()) if props else None
    return (pa.array(keys, pa.string()), pa.array(tags, pa.string()),
            pa.array(properties, CONSUME_SCHEMA.field("properties").type))


def _msg_ids(header_bytes: np.ndarray) -> pa.Array:
    """RocketMQ offset message ids: hex of STOREHOSTADDRESS (8 bytes) + PHYSICALOFFSET."""
    count = header_bytes.shape[0]
    id_bytes = np.concatenate([header_bytes[:, 64:72], header_bytes[:, 28:36]], axis=1)
    hex_chars = _HEX_PAIRS[id_bytes].view(np.uint8).reshape(count, _MSG_ID_CHARS)
    offsets = np.arange(0, (count + 1) * _MSG_ID_CHARS, _MSG_ID_CHARS, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(np.ascontiguousarray(
                                                          hex_chars))])
