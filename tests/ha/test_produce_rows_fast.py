"""`rows_from_batch`'s fast path (a body-only batch, what a keyless send() sends) gives exactly
what the general path gives, rows or BadBatch, on any batch.

Goal: the fast path skips the schema walk only for the one schema the walk accepts anyway; a
batch with any other shape (body as string or int, nullable or not, with nulls, extra or
repeated or unknown columns, schema metadata) must meet the general checks. Method: hypothesis
batches built from a pool of fields, each fed to `rows_from_batch` and `rows_from_any_batch`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from ha.broker.arrow_codec import BadBatch, rows_from_any_batch, rows_from_batch

_FIELDS = [
    pa.field("body", pa.binary(), nullable=False), pa.field("body", pa.binary()),
    pa.field("body", pa.string()), pa.field("body", pa.large_binary()),
    pa.field("body", pa.int32()), pa.field("key", pa.string()), pa.field("tags", pa.string()),
    pa.field("queue_id", pa.int32()), pa.field("other", pa.binary()),
    pa.field("body", pa.binary(), nullable=False, metadata={"a": "b"}),
]


def _values(field: pa.Field, rows: int, data: st.DataObject) -> pa.Array:
    if pa.types.is_integer(field.type):
        item: Any = st.one_of(st.none(), st.integers(min_value=0, max_value=7))
    elif pa.types.is_string(field.type):
        item = st.one_of(st.none(), st.text(max_size=5))
    else:
        item = st.one_of(st.none(), st.binary(max_size=5))
    return pa.array(data.draw(st.lists(item, min_size=rows, max_size=rows)), field.type)


def _outcome(rows_of: Any, batch: pa.RecordBatch) -> Any:
    try:
        return rows_of(batch)
    except BadBatch as err:
        return ("BadBatch", str(err))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_FIELDS), min_size=1, max_size=3),
       st.integers(min_value=0, max_value=3), st.booleans(), st.data())
def test_fast_path_matches_the_general_path(fields: list[pa.Field], rows: int,
                                            with_metadata: bool, data: st.DataObject) -> None:
    schema = pa.schema(fields, metadata={"m": "1"} if with_metadata else None)
    batch = pa.RecordBatch.from_arrays([_values(f, rows, data) for f in fields], schema=schema)
    assert _outcome(rows_from_batch, batch) == _outcome(rows_from_any_batch, batch)


def test_a_keyless_send_takes_the_fast_path() -> None:
    schema = pa.schema([pa.field("body", pa.binary(), nullable=False)])
    batch = pa.RecordBatch.from_arrays([pa.array([b"x" * 100], pa.binary())], schema=schema)
    rows = rows_from_batch(batch)
    assert rows == rows_from_any_batch(batch)
    assert rows.bodies == [b"x" * 100] and rows.keys is None and rows.queue_ids is None
    with_null = pa.RecordBatch.from_arrays([pa.array([None], pa.binary())], schema=schema)
    assert _outcome(rows_from_batch, with_null) == ("BadBatch", "column 'body' has null values")
