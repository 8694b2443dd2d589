"""StreamPool: a Producer's idle DoPut streams shared by its channels (sans-IO: the streams
are fakes that count their closes; the pool never touches their IO otherwise)."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from connector.client import stream_pool
from connector.client.stream_pool import StreamPool, _Stream
from connector.protocol import error_for_code, status_for

SCHEMA = pa.schema([pa.field("body", pa.binary())])
WAIT_S = 30.0


class _Writer:
    def __init__(self) -> None:
        self.closed = threading.Event()

    def done_writing(self) -> None:
        pass

    def close(self) -> None:
        self.closed.set()


def _stream(rotate_in_s: float = 60.0) -> _Stream:
    return _Stream(_Writer(), None, time.monotonic() + rotate_in_s)


def _closed(stream: _Stream) -> bool:
    return bool(stream.writer.closed.wait(WAIT_S))


def test_a_stream_given_back_is_taken_again_by_any_channel_of_its_key() -> None:
    pool = StreamPool()
    shelf = pool.shelf("b:1", "t", SCHEMA)
    assert pool.take(shelf) is None  # nothing idle: the caller opens one
    stream = _stream()
    pool.give(shelf, stream)
    assert pool.shelf("b:1", "t", pa.schema([pa.field("body", pa.binary())])) is shelf
    assert pool.take(shelf) is stream
    assert pool.take(shelf) is None  # in use: never handed to a second thread
    assert pool.take(pool.shelf("b:2", "t", SCHEMA)) is None  # another broker, its own


def test_last_in_first_out_keeps_the_streams_in_use_few() -> None:
    pool = StreamPool()
    shelf = pool.shelf("b:1", "t", SCHEMA)
    older, newer = _stream(), _stream()
    pool.give(shelf, older)
    pool.give(shelf, newer)
    assert pool.take(shelf) is newer


def test_a_stream_past_its_rotation_time_is_closed_not_taken() -> None:
    pool = StreamPool()
    shelf = pool.shelf("b:1", "t", SCHEMA)
    aged, fresh = _stream(rotate_in_s=-1.0), _stream()
    pool.give(shelf, fresh)
    pool.give(shelf, aged)
    assert pool.take(shelf) is fresh
    assert _closed(aged)


def test_aged_streams_of_other_keys_are_swept_when_a_stream_is_opened(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The streams of a replaced master are never taken again: the next time a channel opens
    a stream, the pool closes them."""
    monkeypatch.setattr(stream_pool, "SWEEP_INTERVAL_S", 0.0)
    pool = StreamPool()
    old_master = pool.shelf("old:1", "t", SCHEMA)
    aged, fresh = _stream(rotate_in_s=-1.0), _stream()
    pool.give(old_master, aged)
    pool.give(old_master, fresh)
    assert pool.take(pool.shelf("new:1", "t", SCHEMA)) is None
    assert _closed(aged)
    assert old_master == [fresh]
    assert pool.idle_count() == 1


def test_close_closes_the_idle_ones_and_any_given_back_later() -> None:
    pool = StreamPool()
    shelf = pool.shelf("b:1", "t", SCHEMA)
    idle, busy = _stream(), _stream()
    pool.give(shelf, idle)
    pool.close()
    assert _closed(idle) and pool.idle_count() == 0
    pool.give(shelf, busy)  # its round trip ended after the producer closed
    assert _closed(busy) and pool.idle_count() == 0


def test_threads_never_share_a_stream() -> None:
    pool = StreamPool()
    shelf = pool.shelf("b:1", "t", SCHEMA)
    for _ in range(4):
        pool.give(shelf, _stream())
    in_use: set[int] = set()
    clash = threading.Event()
    guard = threading.Lock()

    def worker() -> None:
        for _ in range(2000):
            stream = pool.take(shelf) or _stream()
            with guard:
                if id(stream) in in_use:
                    clash.set()
                in_use.add(id(stream))
            with guard:
                in_use.discard(id(stream))
            pool.give(shelf, stream)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not clash.is_set()
    assert pool.idle_count() <= 4 + 8  # at most one opened per thread beyond the four


def test_an_endpoint_that_refused_a_per_batch_stream_gets_streams_per_topic() -> None:
    pool = StreamPool()
    assert pool.per_batch("b:1") and pool.per_batch("b:2")
    pool.note_single_topic("b:1")
    pool.note_single_topic("b:1")  # (a second channel meeting the same refusal)
    assert not pool.per_batch("b:1")
    assert pool.per_batch("b:2")  # only the endpoint that refused


def test_only_v0_1_0s_descriptor_refusal_counts_as_refusing_per_batch_streams() -> None:
    bad_request = status_for("BAD_REQUEST").code
    # the line a v0.1.0 broker answers `{"topics": "per_batch"}` with, before reading a batch
    old = error_for_code(bad_request, 'produce descriptor: field "topic" must be a string')
    assert stream_pool.refuses_per_batch(old)
    assert not stream_pool.refuses_per_batch(  # a refusal of a batch on a per-batch stream
        error_for_code(bad_request, "a batch of a per-batch produce stream names no topic"))
    assert not stream_pool.refuses_per_batch(error_for_code(
        status_for("NO_PERMISSION").code, 'produce descriptor: field "topic" must be a string'))
