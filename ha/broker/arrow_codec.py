"""Between the store's records and the wire's Arrow batches (both directions).

`records_to_batch` decodes raw CommitLog records (storage_engine's layout) into a
CONSUME_SCHEMA batch; `rows_from_batch` validates a produce batch against PRODUCE_COLUMNS and
returns plain Python columns for a MessageBatch. Bad input raises `BadBatch` with the column
name in the message.
"""

from __future__ import annotations

import dataclasses
from itertools import repeat

import pyarrow as pa

from connector.protocol import CONSUME_SCHEMA, PRODUCE_COLUMNS
from storage_engine import (
    RECORD_CHECKSUM_PAIR_BYTES,
    RECORD_HEADER,
    decode_properties,
    make_msg_id,
)

__all__ = ["BadBatch", "ProduceRows", "empty_batch", "records_to_batch", "rows_from_batch"]



_BODY_AT = 88  # RECORD_HEADER.size: the body follows the header
_BARE_RECORD_BYTES = 91 + RECORD_CHECKSUM_PAIR_BYTES  # a record with no properties, less body+topic
assert RECORD_HEADER.size == _BODY_AT


class BadBatch(ValueError):
    """A produce batch that does not follow PRODUCE_SCHEMA."""


def records_to_batch(records: list[bytes], topic: str) -> pa.RecordBatch:
    """Decode raw records of `topic` into one Arrow batch of CONSUME_SCHEMA.

    The common case (records without properties, one store host) runs on C-level iterators:
    one header unpack per record, bodies sliced by map, message ids formatted by map; only
    records that carry properties are decoded one by one.
    """
    count = len(records)
    headers = list(map(RECORD_HEADER.unpack_from, records))
    (totals, _, _, queue_ids, _, queue_offsets, positions, _, born, _, stored, hosts, _, _,
     body_sizes) = zip(*headers)
    bodies = list(map(bytes.__getitem__, records, map(slice, repeat(_BODY_AT),
                                                      map(_BODY_AT.__add__, body_sizes))))
    bare_size = _BARE_RECORD_BYTES + len(topic)
    with_properties = [index for index, (total, body_size) in enumerate(zip(totals, body_sizes))
                       if total - body_size != bare_size]
    keys: list[str | None] = [None] * count
    tags: list[str | None] = [None] * count
    properties: list[list[tuple[str, str]] | None] = [None] * count
    for index in with_properties:
        record = records[index]
        props_at = _BODY_AT + body_sizes[index] + 3 + len(topic)
        props = decode_properties(record[props_at:totals[index] - RECORD_CHECKSUM_PAIR_BYTES])
        keys[index] = props.pop("KEYS", None)
        tags[index] = props.pop("TAGS", None)
        properties[index] = list(props.items()) if props else None
    if len(set(hosts)) == 1:
        msg_ids = list(map((hosts[0].hex().upper() + "%016X").__mod__, positions))
    else:
        msg_ids = list(map(make_msg_id, hosts, positions))
    columns = [pa.array([topic] * count, pa.string()), queue_ids, queue_offsets, positions,
               bodies, keys, tags, properties, born, stored, msg_ids]
    arrays = [column if isinstance(column, pa.Array) else pa.array(column, type=field.type)
              for column, field in zip(columns, CONSUME_SCHEMA)]
    return pa.RecordBatch.from_arrays(arrays, schema=CONSUME_SCHEMA)


def empty_batch() -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array([], f.type) for f in CONSUME_SCHEMA],
                                      schema=CONSUME_SCHEMA)


@dataclasses.dataclass(frozen=True, slots=True)
class ProduceRows:
    bodies: list[bytes]
    keys: list[str | None] | None
    tags: list[str | None] | None
    properties: list[dict[str, str] | None] | None
    queue_ids: list[int | None] | None


def rows_from_batch(batch: pa.RecordBatch) -> ProduceRows:
    """Validate the schema and pull the columns out as Python lists."""
    names = batch.schema.names
    unknown = [name for name in names if name not in PRODUCE_COLUMNS]
    if unknown:
        raise BadBatch(f"unknown column(s) {unknown}; allowed: {sorted(PRODUCE_COLUMNS)}")
    if len(set(names)) != len(names):
        raise BadBatch(f"duplicate columns in {names}")
    if "body" not in names:
        raise BadBatch("column 'body' (binary) is required")
    for field in batch.schema:
        if field.type not in PRODUCE_COLUMNS[field.name]:
            allowed = ", ".join(str(t) for t in PRODUCE_COLUMNS[field.name])
            raise BadBatch(f"column {field.name!r} has type {field.type}; allowed: {allowed}")
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
