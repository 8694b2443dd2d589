"""Between the store's records and the wire's Arrow batches (both directions).

`records_to_batch` decodes raw CommitLog records (storage_engine's layout) into a
CONSUME_SCHEMA batch; `rows_from_batch` validates a produce batch against PRODUCE_COLUMNS and
returns plain Python columns for a MessageBatch. Bad input raises `BadBatch` with the column
name in the message.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from connector.protocol import CONSUME_SCHEMA, PRODUCE_COLUMNS
from storage_engine import (
    RECORD_CHECKSUM_PAIR_BYTES,
    RECORD_HEADER,
    decode_properties,
    make_msg_id,
)

__all__ = ["BadBatch", "ProduceRows", "empty_batch", "records_to_batch", "rows_from_batch"]



class BadBatch(ValueError):
    """A produce batch that does not follow PRODUCE_SCHEMA."""


def records_to_batch(records: list[bytes]) -> pa.RecordBatch:
    """Decode raw records into one Arrow batch of CONSUME_SCHEMA."""
    topics, queue_ids, queue_offsets, positions, bodies = [], [], [], [], []
    keys, tags, properties, born, stored, msg_ids = [], [], [], [], [], []
    unpack = RECORD_HEADER.unpack_from
    for record in records:
        (total, _, _, queue_id, _, queue_offset, log_position, _, born_ms, _, store_ms,
         store_host, _, _, body_size) = unpack(record)
        topic_at = 88 + body_size
        topic_size = record[topic_at]
        props_raw = record[topic_at + 3 + topic_size:total - RECORD_CHECKSUM_PAIR_BYTES]
        topics.append(record[topic_at + 1:topic_at + 1 + topic_size].decode("ascii"))
        queue_ids.append(queue_id)
        queue_offsets.append(queue_offset)
        positions.append(log_position)
        bodies.append(record[88:topic_at])
        born.append(born_ms)
        stored.append(store_ms)
        msg_ids.append(make_msg_id(store_host, log_position))
        if props_raw:
            props = decode_properties(props_raw)
            keys.append(props.pop("KEYS", None))
            tags.append(props.pop("TAGS", None))
            properties.append(list(props.items()) if props else None)
        else:
            keys.append(None)
            tags.append(None)
            properties.append(None)
    columns = [topics, queue_ids, queue_offsets, positions, bodies, keys, tags, properties,
               born, stored, msg_ids]
    arrays = [pa.array(column, type=field.type) for column, field in zip(columns, CONSUME_SCHEMA)]
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
