"""Sink pieces with no Spark and no broker: column checks, chunking, markers, commit tallies.

Goal: bad input columns are refused with the column named; the chunk cut depends only on the
rows, never on how Spark happened to batch them (a retried task must produce the same chunks,
or the broker could not recognise them); the marker sits on the last row only and keeps the
user's properties. Method: direct calls, hypothesis over incoming batch boundaries.
"""

from __future__ import annotations

import itertools
import pickle

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from connector.errors import SinkSchemaError
from connector.protocol import IDEMPOTENCE_PROPERTY, PutIdempotence
from connector.spark.options import parse_sink_options
from connector.spark.partitions import QueueWriteStats, SinkCommitMessage
from connector.spark.sink import (
    SinkColumns,
    check_input_columns,
    chunk_rows,
    to_produce_batch,
    with_marker,
)
from connector.spark.source import strip_markers

OPTIONS = parse_sink_options({"brokers": "h:1", "topic": "t"})
NO_TOPIC = parse_sink_options({"brokers": "h:1"})
PROPS = pa.map_(pa.string(), pa.string())


@pytest.mark.parametrize("fields, options, message", [
    ([("body", "binary"), ("headers", "string")], OPTIONS, "unknown column.*headers"),
    ([("body", "int")], OPTIONS, "'body' has type int"),
    ([("body", "binary"), ("value", "string")], OPTIONS, "exactly one of"),
    ([("key", "string")], OPTIONS, "exactly one of"),
    ([("body", "binary")], NO_TOPIC, "no topic"),
    ([("body", "binary"), ("queueId", "bigint")], OPTIONS, "'queueId' has type bigint"),
    ([("body", "binary"), ("properties", "map<string,int>")], OPTIONS, "'properties'"),
])
def test_bad_columns_are_named(fields, options, message) -> None:  # type: ignore
    with pytest.raises(SinkSchemaError, match=message):
        check_input_columns(fields, options)


def test_good_columns() -> None:
    columns = check_input_columns([("value", "string"), ("key", "string"), ("topic", "string"),
                                   ("queueId", "int")], NO_TOPIC)
    assert columns == SinkColumns("value", ("key", "queueId"), True)
    batch = pa.record_batch({"value": pa.array(["a"]), "key": pa.array(["k"]),
                             "queueId": pa.array([3], pa.int32())})
    produced = to_produce_batch(batch, columns)
    assert produced.schema.names == ["body", "key", "queue_id"]
    assert produced.column("body").to_pylist() == [b"a"]
    with pytest.raises(SinkSchemaError, match="null"):
        to_produce_batch(pa.record_batch({"value": pa.array([None], pa.string())}),
                         SinkColumns("value", (), False))


def as_batches(values: list[int], cuts: list[int]) -> list[pa.RecordBatch]:
    table = pa.table({"body": pa.array([b"%06d" % v for v in values])})
    points = sorted({0, len(values), *[c % (len(values) + 1) for c in cuts]})
    return [table.slice(a, b - a).combine_chunks().to_batches()[0]
            for a, b in itertools.pairwise(points) if b > a]


@settings(deadline=None)  # a loaded 2-core CI machine: no per-example deadline
@given(st.integers(1, 300), st.lists(st.integers(0, 1000), max_size=8),
       st.lists(st.integers(0, 1000), max_size=8), st.integers(1, 64))
def test_chunks_do_not_depend_on_incoming_boundaries(count: int, cuts_a: list[int],
                                                     cuts_b: list[int], rows_max: int) -> None:
    values = list(range(count))
    first = [c.column("body").to_pylist()
             for c in chunk_rows(as_batches(values, cuts_a), rows_max, 1 << 20)]
    second = [c.column("body").to_pylist()
              for c in chunk_rows(as_batches(values, cuts_b), rows_max, 1 << 20)]
    assert first == second
    assert [len(c) for c in first[:-1]] == [rows_max] * (len(first) - 1)
    assert [row for chunk in first for row in chunk] == [b"%06d" % v for v in values]


def test_chunks_split_by_bytes() -> None:
    big = pa.record_batch({"body": pa.array([b"x" * 1000] * 10)})
    chunks = list(chunk_rows([big], 10, 4096))
    assert all(c.nbytes <= 4096 for c in chunks)
    assert sum(c.num_rows for c in chunks) == 10


def test_marker_on_the_last_row_keeps_user_properties() -> None:
    batch = pa.record_batch({"body": pa.array([b"a", b"b"]),
                             "properties": pa.array([[("x", "1")], [("y", "2")]], PROPS)})
    marked = with_marker(batch, PutIdempotence("q.0.1", 4))
    assert marked.column("properties").to_pylist() == [
        [("x", "1")], [("y", "2"), (IDEMPOTENCE_PROPERTY, "q.0.1/4")]]
    bare = with_marker(pa.record_batch({"body": pa.array([b"a"])}), PutIdempotence("p", 0))
    assert bare.column("properties").to_pylist() == [[(IDEMPOTENCE_PROPERTY, "p/0")]]


def test_commit_message_pickles() -> None:
    message = SinkCommitMessage(3, 10, (QueueWriteStats("t", "broker-a", 0, 10, 5, 14),),
                                (("PUT_OK", 10),), 0)
    assert pickle.loads(pickle.dumps(message)) == message


ENTRY = st.tuples(st.sampled_from(["a", "b", IDEMPOTENCE_PROPERTY]), st.sampled_from(["1", "p/2"]))


@settings(deadline=None)
@given(st.lists(st.one_of(st.none(), st.lists(ENTRY, max_size=3)), min_size=1, max_size=12),
       st.integers(0, 12), st.integers(0, 12))
def test_readsstrip_markers_like_the_row_by_row_rule(rows, start: int, length: int) -> None:
    """The vectorized strip (source.py) equals the plain rule, also on sliced arrays."""
    array = pa.array(rows, PROPS).slice(min(start, len(rows) - 1), length)
    expected = []
    for value in array.to_pylist():
        kept = [(k, v) for k, v in value or () if k != IDEMPOTENCE_PROPERTY]
        expected.append(kept or None)
    assert strip_markers(array).to_pylist() == expected
