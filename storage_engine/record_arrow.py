"""Stored records as Arrow columns: the decoding side of record_format, vectorized.

Which Arrow schema a caller wants is the caller's (the broker serves the wire's consume schema,
connector.protocol); this module knows where each field sits in a record and builds only the
columns the given schema names, with the schema's types. Every byte offset comes from
record_format (HEADER_DTYPE and the sizes of the variable part), none is restated here.

    column            from                        column            from
    topic             the caller (one topic)      body              BODY
    queue_id          QUEUEID                     key, tags         PROPERTIES (KEYS, TAGS)
    queue_offset      QUEUEOFFSET                 properties        PROPERTIES (the others)
    log_position      PHYSICALOFFSET              msg_id            STOREHOSTADDRESS +
    born_timestamp    BORNTIMESTAMP (ms)                            PHYSICALOFFSET, hex
    store_timestamp   STORETIMESTAMP (ms)

`records_to_arrow` takes a list of records (the per-record read path); `block_to_arrow` takes
records stored back to back in one buffer (`MessageStore.get_message_block`, a tier range) and
runs on numpy arrays, decoding only records that carry properties one by one.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np
import pyarrow as pa

from storage_engine.record_format import (
    CRC_TAIL_SIZE_BYTES,
    HEADER,
    HEADER_DTYPE,
    HEADER_FIELDS,
    HEADER_SIZE_BYTES,
    LOG_POSITION_AT,
    PROPERTIES_LENGTH_SIZE_BYTES,
    RECORD_SIZE_MIN_BYTES,
    STORE_HOST_AT,
    TOPIC_LENGTH_SIZE_BYTES,
    decode_properties,
    make_msg_id,
)

__all__ = ["RECORD_ARROW_COLUMNS", "block_to_arrow", "records_to_arrow"]

RECORD_ARROW_COLUMNS = frozenset({
    "topic", "queue_id", "queue_offset", "log_position", "body", "key", "tags", "properties",
    "born_timestamp", "store_timestamp", "msg_id"})

_BODY_AT = HEADER_SIZE_BYTES  # the body follows the header
_BARE_RECORD_BYTES = RECORD_SIZE_MIN_BYTES  # a record with no properties, less body and topic
_AROUND_TOPIC_BYTES = TOPIC_LENGTH_SIZE_BYTES + PROPERTIES_LENGTH_SIZE_BYTES
_FROM_PROPERTIES = frozenset({"key", "tags", "properties"})  # decoded from the properties field
# (column, header field, native dtype): the columns read from the header
_HEADER_COLUMNS = (
    ("queue_id", "queue_id", np.int32),
    ("queue_offset", "queue_offset", np.int64),
    ("log_position", "log_position", np.int64),
    ("born_timestamp", "born_ms", np.int64),
    ("store_timestamp", "store_ms", np.int64),
)
_HOST_BYTES = HEADER_FIELDS["store_host"][0].itemsize  # 8
_POSITION_BYTES = HEADER_FIELDS["log_position"][0].itemsize  # 8
_HEX_PAIRS = np.array([f"{value:02X}".encode() for value in range(256)], dtype="S2")
_MSG_ID_CHARS = 2 * (_HOST_BYTES + _POSITION_BYTES)  # store host + log position, hex


def records_to_arrow(records: list[bytes], topic: str, schema: pa.Schema) -> pa.RecordBatch:
    """Decode raw records of `topic` into one Arrow batch of `schema` (its fields: a subset
    of RECORD_ARROW_COLUMNS, in any order).

    The common case (records without properties, one store host) runs on C-level iterators:
    one header unpack per record, bodies sliced by map, message ids formatted by map; only
    records that carry properties are decoded one by one, and only when key, tags or
    properties is asked.
    """
    names = set(schema.names)
    count = len(records)
    headers = list(map(HEADER.unpack_from, records))
    (totals, _, _, queue_ids, _, queue_offsets, positions, _, born, _, stored, hosts, _, _,
     body_sizes) = zip(*headers, strict=True)
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
    for index, (total, body_size) in enumerate(zip(totals, body_sizes, strict=True)):
        if total - body_size == bare_size:
            continue
        props_at = _BODY_AT + body_size + _AROUND_TOPIC_BYTES + len(topic)
        props = decode_properties(records[index][props_at:total - CRC_TAIL_SIZE_BYTES])
        keys[index] = props.pop("KEYS", None)
        tags[index] = props.pop("TAGS", None)
        properties[index] = list(props.items()) if props else None
    return keys, tags, properties


def block_to_arrow(data: bytes, sizes: np.ndarray, topic: str,
                   schema: pa.Schema) -> pa.RecordBatch:
    """Decode records stored back to back in `data` (int64 sizes in `sizes`) into `schema`
    (its fields: a subset of RECORD_ARROW_COLUMNS, in any order).

    Every fixed field comes from the 88-byte headers viewed as a big-endian structured array;
    bodies land in one values buffer; message ids are hex-formatted by table look-up. Only
    records with properties are decoded one by one. When every record has the same size (a
    batch of same-size bodies without properties, the common bulk case) the block is a 2-D
    array and headers and bodies are plain column slices; otherwise they are gathered by index.
    Columns not asked for are not built.
    """
    names = set(schema.names)
    count = len(sizes)
    if count == 0:
        return pa.RecordBatch.from_pylist([], schema=schema)
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
    for name, header_field, dtype in header_columns:
        arrow_type = schema.field(name).type
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
        properties_type = schema.field("properties").type if "properties" in names else None
        built["key"], built["tags"], properties = _decode_properties_column(
            data, starts, headers.field("total"), body_sizes, topic, properties_type)
        if properties is not None:
            built["properties"] = properties
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
        self._all = (np.ascontiguousarray(header_bytes).view(HEADER_DTYPE).reshape(self._count)
                     if copy_all else None)

    def field(self, name: str) -> np.ndarray:
        if self._all is not None:
            return self._all[name]
        dtype, at = HEADER_FIELDS[name][:2]
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
                              body_sizes: np.ndarray, topic: str,
                              properties_type: pa.DataType | None
                              ) -> tuple[pa.Array, pa.Array, pa.Array | None]:
    """keys, tags and (when `properties_type` is given) the other properties, as arrays."""
    count = starts.size
    topic_size = len(topic.encode())
    totals = total_sizes.astype(np.int64)
    with_properties = np.nonzero(totals - body_sizes - topic_size != _BARE_RECORD_BYTES)[0]
    if with_properties.size == 0:
        return (pa.nulls(count, pa.string()), pa.nulls(count, pa.string()),
                None if properties_type is None else pa.nulls(count, properties_type))
    keys: list[str | None] = [None] * count
    tags: list[str | None] = [None] * count
    properties: list[list[tuple[str, str]] | None] = [None] * count
    for index in with_properties.tolist():
        start = int(starts[index])
        props_at = start + _BODY_AT + int(body_sizes[index]) + _AROUND_TOPIC_BYTES + topic_size
        end = start + int(totals[index]) - CRC_TAIL_SIZE_BYTES
        props = decode_properties(data[props_at:end])
        keys[index] = props.pop("KEYS", None)
        tags[index] = props.pop("TAGS", None)
        properties[index] = list(props.items()) if props else None
    return (pa.array(keys, pa.string()), pa.array(tags, pa.string()),
            None if properties_type is None else pa.array(properties, properties_type))


def _msg_ids(header_bytes: np.ndarray) -> pa.Array:
    """RocketMQ offset message ids: hex of STOREHOSTADDRESS (8 bytes) + PHYSICALOFFSET."""
    count = header_bytes.shape[0]
    id_bytes = np.concatenate([header_bytes[:, STORE_HOST_AT:STORE_HOST_AT + _HOST_BYTES],
                               header_bytes[:, LOG_POSITION_AT:LOG_POSITION_AT + _POSITION_BYTES]],
                              axis=1)
    hex_chars = _HEX_PAIRS[id_bytes].view(np.uint8).reshape(count, _MSG_ID_CHARS)
    offsets = np.arange(0, (count + 1) * _MSG_ID_CHARS, _MSG_ID_CHARS, dtype=np.int32)
    return pa.Array.from_buffers(pa.string(), count, [None, pa.py_buffer(offsets),
                                                      pa.py_buffer(np.ascontiguousarray(
                                                          hex_chars))])
