"""Between the store's records and the wire's Arrow batches (both directions).

`records_to_batch` and `block_to_batch` decode raw CommitLog records into a batch of
CONSUME_SCHEMA, or of the columns a consume ticket asked for (`consume_schema(columns)`): the
decoding itself, which knows the record layout, is storage_engine's (`records_to_arrow`,
`block_to_arrow`); what is the wire's is the schema, chosen here. A column not asked for is
not built at all (no msg_id hex formatting, no properties decoding unless key, tags or
properties is asked). `rows_from_batch` validates a produce batch against PRODUCE_COLUMNS and
returns plain Python columns for a MessageBatch. Bad input raises `BadBatch` with the column
name in the message.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pyarrow as pa

from connector.protocol import CONSUME_SCHEMA, PRODUCE_COLUMNS, PRODUCE_SCHEMA, consume_schema
from storage_engine import RECORD_ARROW_COLUMNS, block_to_arrow, records_to_arrow

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

assert set(CONSUME_SCHEMA.names) == RECORD_ARROW_COLUMNS  # the store decodes every wire column


class BadBatch(ValueError):
    """A produce batch that does not follow PRODUCE_SCHEMA."""


def records_to_batch(records: list[bytes], topic: str,
                     columns: tuple[str, ...] | None = None) -> pa.RecordBatch:
    """Decode raw records of `topic` into one Arrow batch of `consume_schema(columns)`."""
    return records_to_arrow(records, topic, consume_schema(columns))


def block_to_batch(data: bytes, sizes: np.ndarray, topic: str,
                   columns: tuple[str, ...] | None = None) -> pa.RecordBatch:
    """Decode records stored back to back in `data` (int64 sizes in `sizes`) into
    `consume_schema(columns)` (None: every column of CONSUME_SCHEMA), vectorized."""
    return block_to_arrow(data, sizes, topic, consume_schema(columns))


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
