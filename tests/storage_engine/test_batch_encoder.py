"""The vectorized batch encoder writes exactly the bytes of the per-message encoder.

Goal: the array path (runs of >= _VECTOR_BATCH_MIN messages with equal property payloads) is an
optimisation only, so for any bodies (same size or not, empty ones included), any properties
(none, all empty, a marker on the last row as the Spark sink sends, random runs), hosts with
zero bytes, a start index and a segment that fills up part-way, it must produce the same
records, positions, sizes and stop index as the per-message loop, and every record must verify.
Method: hypothesis; the reference forces the loop by raising _VECTOR_BATCH_MIN past any batch.
"""

from __future__ import annotations

from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from storage_engine import record_format
from storage_engine.record_format import (
    _VECTOR_BATCH_MIN,
    encode_batch,
    encode_host,
    scan_record,
)

TOPIC_META = bytes([5]) + b"orders"[:5]


def _encode(bodies: list[bytes], properties: list[bytes] | None, start_index: int,
            space_bytes: int, host: bytes) -> tuple[int, bytes, list[int], list[int]]:
    parts: list[bytes] = []
    positions: list[int] = []
    sizes: list[int] = []
    stop = encode_batch(
        topic_meta=TOPIC_META, bodies=bodies, properties=properties,
        queue_ids=[index % 3 for index in range(len(bodies))],
        queue_offsets=range(1000, 1000 + len(bodies)), start_index=start_index,
        log_position=4096, space_bytes=space_bytes, store_timestamp_ms=1_700_000_000_123,
        store_host=host, born_timestamp_ms=1_700_000_000_001, born_host=host, flag=7,
        out_parts=parts, out_positions=positions, out_sizes=sizes)
    return stop, b"".join(parts), positions, sizes


PROPERTY_SHAPES = ("none", "all_empty", "marker_last", "runs")


def _properties(shape: str, count: int, run_sizes: list[int]) -> list[bytes] | None:
    if shape == "none":
        return None
    if shape == "all_empty":
        return [b""] * count
    if shape == "marker_last":
        return [b""] * (count - 1) + [b"__IDEM\x01task-7/3\x02"]
    payloads, index = [], 0
    while len(payloads) < count:
        size = run_sizes[index % len(run_sizes)]
        payloads += [b"K\x01v%d\x02" % (index % 3)] * size
        index += 1
    return payloads[:count]


@settings(max_examples=200, deadline=None)
@given(
    same_size=st.booleans(),
    body_sizes=st.lists(st.integers(0, 300), min_size=_VECTOR_BATCH_MIN,
                        max_size=3 * _VECTOR_BATCH_MIN),
    start_fraction=st.floats(0, 0.5),
    space_bytes=st.integers(200, 60_000),
    port=st.sampled_from([0, 10911, 65535]),
    shape=st.sampled_from(PROPERTY_SHAPES),
    run_sizes=st.lists(st.integers(1, 2 * _VECTOR_BATCH_MIN), min_size=1, max_size=4),
)
def test_vector_path_equals_the_loop(same_size: bool, body_sizes: list[int],
                                     start_fraction: float, space_bytes: int, port: int,
                                     shape: str, run_sizes: list[int]) -> None:
    if same_size:
        body_sizes = [body_sizes[0]] * len(body_sizes)
    bodies = [bytes([index % 251]) * size for index, size in enumerate(body_sizes)]
    start_index = int(len(bodies) * start_fraction)
    host = encode_host("10.0.0.1", port)
    properties = _properties(shape, len(bodies), run_sizes)
    vector = _encode(bodies, properties, start_index, space_bytes, host)
    with mock.patch.object(record_format, "_VECTOR_BATCH_MIN", 1 << 30):
        loop = _encode(bodies, properties, start_index, space_bytes, host)
    assert vector == loop
    stop, data, positions, sizes = vector
    assert stop - start_index == len(positions) == len(sizes)
    assert sum(sizes) == len(data) <= space_bytes - 8
    cursor = 0
    for position, size in zip(positions, sizes, strict=True):
        assert position == 4096 + cursor
        assert scan_record(data, cursor, len(data)) == size
        cursor += size
