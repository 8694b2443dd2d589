"""The HA link's socket layer (ha/replication/link.py) reads frames however the byte stream is cut.

Goal: a FrameSocket returns exactly the frames sent, in order, whether they arrive one per
receive, several in one (read ahead and served from its buffer), cut inside the header or the
body, larger than its read-ahead, or one byte at a time; it cuts a frame that stops arriving
(haFrameTimeoutMs), says when the peer closes, refuses an oversized header before growing its
buffer, and its writes survive a peer that drains slowly (partial writev). Method: a real TCP
pair on 127.0.0.1; the far end writes raw bytes (chunks chosen by hypothesis or by hand) with
pauses, or reads slowly.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ha.replication.errors import FrameError, LinkClosedError
from ha.replication.frames import Ack, Metadata, Refuse, Transfer, encode_frame
from ha.replication.link import READ_AHEAD_BYTES, FrameSocket

LIMIT = 4 << 20


# haFrameTimeoutMs of the test link: 0.5 s cut frames that a trickling writer thread had not
# finished when the machine was at load 50 (a full-suite run beside two chaos campaigns)
IO_TIMEOUT_S = 3.0


@pytest.fixture
def pair() -> Iterator[tuple[FrameSocket, socket.socket]]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        far = socket.create_connection(server.getsockname())
        near, _ = server.accept()
    link = FrameSocket(near, body_bytes_max=LIMIT, peer="test", io_timeout_s=IO_TIMEOUT_S)
    try:
        yield link, far
    finally:
        link.close()
        far.close()


def _same(frame: object) -> object:
    if isinstance(frame, Transfer):
        return ("T", frame.master_epoch, frame.confirm_log_position, frame.log_position,
                bytes(frame.data))
    return frame


FRAMES = [Ack(7), Transfer(3, 3, 0, 10, 20, b"r" * 300), Refuse("no"),
          Metadata(2, b'{"topics": []}'), Transfer(3, 3, 0, 10, 320, b""), Ack(1 << 40)]


def _receive_all(link: FrameSocket, count: int) -> list[object]:
    received = []
    while len(received) < count:
        frame = link.recv_frame(idle_timeout_s=2.0)
        assert frame is not None, f"only {len(received)} of {count} frames"
        received.append(_same(frame))  # (a Transfer's data is valid until the next receive)
    return received


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.integers(1, 400), min_size=1, max_size=30))
def test_frames_come_out_whole_however_the_stream_is_cut(
        pair: tuple[FrameSocket, socket.socket], cuts: list[int]) -> None:
    link, far = pair
    stream = b"".join(encode_frame(frame) for frame in FRAMES)
    chunks, at, turn = [], 0, 0
    while at < len(stream):
        chunks.append(stream[at:at + cuts[turn % len(cuts)]])
        at += len(chunks[-1])
        turn += 1

    def write() -> None:
        for chunk in chunks:
            far.sendall(chunk)
            time.sleep(0.0005)

    writer = threading.Thread(target=write)
    writer.start()
    assert _receive_all(link, len(FRAMES)) == [_same(frame) for frame in FRAMES]
    writer.join()


def test_several_frames_in_one_receive_and_one_larger_than_the_read_ahead(
        pair: tuple[FrameSocket, socket.socket]) -> None:
    link, far = pair
    big = Transfer(4, 4, 0, 0, 0, bytes(range(256)) * ((3 * READ_AHEAD_BYTES) // 256 + 7))
    frames = [Ack(1), Ack(2), big, Ack(3), big, Refuse("end")]
    far.sendall(b"".join(encode_frame(frame) for frame in frames))
    assert _receive_all(link, len(frames)) == [_same(frame) for frame in frames]
    assert link.recv_frame(idle_timeout_s=0.05) is None


def test_a_frame_one_byte_at_a_time_is_read_while_it_keeps_coming(
        pair: tuple[FrameSocket, socket.socket]) -> None:
    link, far = pair
    raw = encode_frame(Transfer(1, 1, 0, 0, 0, b"x" * 40))

    def trickle() -> None:
        for index in range(len(raw)):
            far.sendall(raw[index:index + 1])
            time.sleep(0.001)

    writer = threading.Thread(target=trickle)
    writer.start()
    assert _receive_all(link, 1) == [_same(Transfer(1, 1, 0, 0, 0, b"x" * 40))]
    writer.join()


def test_a_frame_that_stops_arriving_is_cut(pair: tuple[FrameSocket, socket.socket]) -> None:
    link, far = pair
    far.sendall(encode_frame(Metadata(1, b"m" * 100))[:20])  # 20 of 120 bytes, then silence
    started = time.monotonic()
    with pytest.raises(FrameError, match="haFrameTimeoutMs"):
        link.recv_frame(idle_timeout_s=2.0)
    assert time.monotonic() - started < 2 * IO_TIMEOUT_S


def test_a_frame_sent_slower_than_the_deadline_is_cut(
        pair: tuple[FrameSocket, socket.socket]) -> None:
    link, far = pair
    raw = encode_frame(Metadata(1, b"m" * 100))
    stop = threading.Event()

    def trickle() -> None:  # a byte every 0.1 s: each receive is in time, the frame is not
        for index in range(len(raw)):
            if stop.wait(0.1):
                return
            far.sendall(raw[index:index + 1])

    writer = threading.Thread(target=trickle)
    writer.start()
    try:
        with pytest.raises(FrameError, match="not complete"):
            link.recv_frame(idle_timeout_s=2.0)
    finally:
        stop.set()
        writer.join()


def test_the_peer_closing_is_named_between_and_inside_frames(
        pair: tuple[FrameSocket, socket.socket]) -> None:
    link, far = pair
    far.sendall(encode_frame(Ack(5)) + encode_frame(Ack(6))[:7])
    assert link.recv_frame(idle_timeout_s=1.0) == Ack(5)
    far.close()
    with pytest.raises(LinkClosedError, match="inside a frame"):
        link.recv_frame(idle_timeout_s=1.0)


def test_an_oversized_header_is_refused_before_the_buffer_grows(
        pair: tuple[FrameSocket, socket.socket]) -> None:
    link, far = pair
    raw = bytearray(encode_frame(Metadata(1, b"x")))
    raw[4:8] = (LIMIT + 1).to_bytes(4, "big")
    far.sendall(bytes(raw))
    with pytest.raises(FrameError, match="exceeds the limit"):
        link.recv_frame(idle_timeout_s=1.0)
    assert len(link._buffer) == READ_AHEAD_BYTES


def test_idle_is_none_and_sends_survive_a_slow_reader(
        pair: tuple[FrameSocket, socket.socket]) -> None:
    link, far = pair
    assert link.recv_frame(idle_timeout_s=0.02) is None
    data = bytes(range(256)) * (32 << 10)  # 8 MiB: more than both socket buffers
    expected = encode_frame(Transfer(2, 2, 0, 0, 0, data)) + encode_frame(Ack(9))
    got = bytearray()

    def slow_reader() -> None:
        while len(got) < len(expected):
            chunk = far.recv(1 << 20)
            if not chunk:
                return
            got.extend(chunk)
            time.sleep(0.002)

    reader = threading.Thread(target=slow_reader)
    reader.start()
    link.send_transfer(Transfer(2, 2, 0, 0, 0), memoryview(data))  # partial writes inside
    link.send_frame(Ack(9))
    reader.join(10)
    assert bytes(got) == expected


def test_a_closed_link_refuses_to_write(pair: tuple[FrameSocket, socket.socket]) -> None:
    link, _far = pair
    link.close()
    with pytest.raises(OSError):
        link.send_frame(Ack(1))
