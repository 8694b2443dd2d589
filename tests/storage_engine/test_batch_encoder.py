"""The vectorized batch encoder writes exactly the bytes of the per-message encoder.

Goal: the array path (no properties, >= _VECTOR_BATCH_MIN messages) is an optimisation only, so for any bodies
(same size or not, empty ones included), hosts with zero bytes, a start index and a segment
that fills up part-way, it must produce the same records, positions, sizes and stop index as
the per-message loop, and every record must verify. Method: hypothesis; the loop path is forced
by passing empty property payloads, which encode to the same record bytes.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=200, deadline=None)
@given(
    same_size=st.booleans(),
    body_sizes=st.lists(st.integers(0, 300), min_size=_VECTOR_BATCH_MIN, max_size=2 * _VECTOR_BATCH_MIN),
    start_fraction=st.floats(0, 0.5),
    space_bytes=st.integers(200, 60_000),
    port=st.sampled_from([0, 10911, 65535]),
)
def test_vector_path_equals_the_loop(same_size: bool, body_sizes: list[int],
                                     start_fraction: float, space_bytes: int,
                                     port: int) -> None:
    if same_size:
        body_sizes = [body_sizes[0]] * len(body_sizes)
    bodies = [bytes([index % 251]) * size for index, size in enumerate(body_sizes)]
    start_index = int(len(bodies) * start_fraction)
    if len(bodies) - start_index < _VECTOR_BATCH_MIN:
        start_index = 0
    host = encode_host("10.0.0.1", port)
    vector = _encode(bodies, None, start_index, space_bytes, host)
    loop = _encode(bodies, [b""] * len(bodies), start_index, space_bytes, host)
    assert vector == loop
    stop, data, positions, sizes = vector
    assert stop - start_index == len(positions) == len(sizes)
    assert sum(sizes) == len(data) <= space_bytes - 8
    cursor = 0
    for position, size in zip(positions, sizes):
        assert position == 4096 + cursor
        assert scan_record(data, cursor, len(data)) == size
        cursor += size
