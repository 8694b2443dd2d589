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
    merged_properties,
    to_produce_batch,
    with_marker,
)
from connector.spark.source import strip_markers

OPTIONS = parse_sink_options({"brokers": "h:1", "topic": "t"})
NO_TOPIC = parse_sink_options({"brokers": "h:1"})
PROPS = pa.map_(pa.string(), pa.string())


HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
KAFKA_HEADERS = "array<struct<key:string,value:binary>>"


@pytest.mark.parametrize("fields, options, message", [
    ([("body", "binary"), ("tag", "string")], OPTIONS, (r"unknown column 'tag'; did you mean "
     r"'tags'\? The sink takes .*ignores bornTimestamp, brokerName")),
    ([("body", "binary"), ("headers", "string")], OPTIONS, "'headers' has type string"),
    ([("body", "binary"), ("queueId", "int"), ("partition", "int")], OPTIONS,
     "queueId and partition"),
    ([("body", "binary"), ("key", "int")], OPTIONS, ("'key' has type int; allowed: string, "
     "binary")),
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


def test_kafka_shaped_columns() -> None:
    """What a Kafka job writes: binary key, value, headers, partition, topic; the read-side
    columns of a Kafka or rocketha DataFrame are ignored."""
    fields = [("key", "binary"), ("value", "binary"), ("topic", "string"),
              ("partition", "int"), ("offset", "bigint"), ("timestamp", "timestamp"),
              ("timestampType", "int"), ("headers", KAFKA_HEADERS),
              ("queueOffset", "bigint"), ("brokerName", "string")]
    columns = check_input_columns(fields, NO_TOPIC)
    assert columns == SinkColumns("value", ("key", "headers", "partition"), True)
    batch = pa.record_batch({
        "key": pa.array([b"k1", None]), "value": pa.array([b"v1", b"v2"]),
        "offset": pa.array([7, 8]), "partition": pa.array([1, 0], pa.int32()),
        "headers": pa.array([[{"key": "h", "value": b"1"}, {"key": "h", "value": b"2"}],
                             None], HEADERS)})
    produced = to_produce_batch(batch, columns)
    assert produced.schema.names == ["body", "key", "properties", "queue_id"]
    assert produced.column("key").to_pylist() == ["k1", None]
    assert produced.column("properties").to_pylist() == [[("h", "2")], None]  # last wins
    assert produced.column("queue_id").to_pylist() == [1, 0]


def test_non_utf8_key_or_header_names_partition_and_row() -> None:
    columns = SinkColumns("value", ("key",), False)
    batch = pa.record_batch({"value": pa.array([b"a", b"b"]),
                             "key": pa.array([b"ok", b"\xff\xfe"])})
    with pytest.raises(SinkSchemaError, match=r"^rocketha sink: partition 4: column 'key', "
                       r"row 101: b'\\xff\\xfe' is not UTF-8"):
        to_produce_batch(batch, columns, partition_id=4, first_row=100)
    headers = pa.record_batch({"value": pa.array([b"a", b"b"]), "headers": pa.array(
        [None, [{"key": "ok", "value": b"1"}, {"key": "bad", "value": b"\xc3"}]], HEADERS)})
    with pytest.raises(SinkSchemaError, match=r"partition 2: column 'headers', row 1: "):
        to_produce_batch(headers, SinkColumns("value", ("headers",), False), partition_id=2)
    null_key = pa.record_batch({"value": pa.array([b"a"]), "headers": pa.array(
        [[{"key": None, "value": b"1"}]], HEADERS)})
    with pytest.raises(SinkSchemaError, match="row 0: a header has a null key"):
        to_produce_batch(null_key, SinkColumns("value", ("headers",), False))


HEADER = st.one_of(st.none(), st.fixed_dictionaries({
    "key": st.sampled_from(["a", "b", "c"]),
    "value": st.one_of(st.none(), st.sampled_from([b"1", b"2", "\u00e9".encode()]))}))
PROPERTY = st.tuples(st.sampled_from(["a", "b", "d"]), st.sampled_from(["p", "q"]))


@settings(deadline=None)
@given(st.lists(st.tuples(st.one_of(st.none(), st.lists(HEADER, max_size=4)),
                          st.one_of(st.none(), st.lists(PROPERTY, max_size=3, unique_by=lambda
                                                        e: e[0]))),
                min_size=1, max_size=10),
       st.integers(0, 9), st.integers(0, 10))
def test_headers_merge_like_the_row_by_row_rule(rows, start: int, length: int) -> None:  # type: ignore
    """Vectorized merge == in header order later wins, null values set nothing, properties
    last; a row left with nothing is null. Also on sliced arrays (Spark hands slices)."""
    start = min(start, len(rows) - 1)
    headers = pa.array([h for h, _ in rows], HEADERS).slice(start, length)
    properties = pa.array([p for _, p in rows], PROPS).slice(start, length)
    expected = []
    for row_headers, row_properties in rows[start:start + length]:
        merged: dict[str, str] = {}
        for header in row_headers or []:
            if header is not None and header["value"] is not None:
                merged.pop(header["key"], None)
                merged[header["key"]] = header["value"].decode()
        for key, value in row_properties or []:
            merged.pop(key, None)
            merged[key] = value
        expected.append(sorted(merged.items()) or None)
    got = merged_properties(headers, properties, where="w").to_pylist()
    assert [None if row is None else sorted(row) for row in got] == expected
    alone = merged_properties(headers, None, where="w").to_pylist()
    assert len(alone) == len(expected)


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
