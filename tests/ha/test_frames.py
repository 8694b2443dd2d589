"""HA frame codec: every frame kind round-trips; garbage is a typed FrameError.

Method: encode each kind, decode it back (whole and through the split header/body path the
shells use); then corrupt headers and bodies byte by byte, oversize and truncate them, and check
that each is rejected with FrameError before any large allocation.
"""

from __future__ import annotations

import struct
import zlib

import pytest

from ha.replication.errors import FrameError
from ha.replication.frames import (
    FRAME_HEADER,
    Ack,
    MasterHello,
    Metadata,
    Refuse,
    SlaveHello,
    Transfer,
    decode_body,
    decode_header,
    decode_stream,
    encode_frame,
    encode_transfer_prefix,
)
from storage_engine import EpochEntry

EPOCHS = (EpochEntry(6, 200), EpochEntry(7, 1200), EpochEntry(8, 2500))
FRAMES = [
    SlaveHello(3, 2500, 2000, 7, 1 << 30, EPOCHS),
    SlaveHello(1, 0, 0, 0, 4096, ()),
    MasterHello(0, 8, 300, 2500, 2400, 1 << 30, "127.0.0.1:10911", EPOCHS),
    Transfer(8, 8, 2500, 2400, 2500, b"\x01" * 1000),
    Transfer(8, 7, 1200, 2400, 2500, b""),
    Ack(123456789),
    Refuse("no common epoch: slave {<9,10>}"),
    Metadata(5, b'{"topics": []}'),
]
LIMIT = 1 << 20


def _normalize(frame):  # type: ignore[no-untyped-def]
    if isinstance(frame, Transfer):
        return (frame.master_epoch, frame.data_epoch, frame.data_epoch_start,
                frame.confirm_log_position, frame.log_position, bytes(frame.data))
    return frame


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: type(f).__name__)
def test_round_trip(frame) -> None:  # type: ignore[no-untyped-def]
    raw = encode_frame(frame)
    decoded, used = decode_stream(raw + raw[:5], LIMIT)
    assert used == len(raw) and len(decoded) == 1
    assert _normalize(decoded[0]) == _normalize(frame)


def test_transfer_prefix_plus_data_equals_whole_frame() -> None:
    frame = FRAMES[3]
    assert encode_transfer_prefix(frame, frame.data) + bytes(frame.data) == encode_frame(frame)


def test_every_flipped_byte_is_rejected() -> None:
    raw = bytearray(encode_frame(FRAMES[2]))
    for index in range(len(raw)):
        for bit in (0x01, 0x80):
            damaged = bytearray(raw)
            damaged[index] ^= bit
            with pytest.raises(FrameError):
                _frames, used = decode_stream(bytes(damaged), LIMIT)
                # A damaged size may make the frame look incomplete: that is not a frame either.
                if used == 0:
                    raise FrameError("incomplete")


@pytest.mark.parametrize("mutate, message", [
    (lambda h: b"XX" + h[2:], "magic"),
    (lambda h: h[:2] + b"\x09" + h[3:], "version"),
    (lambda h: h[:3] + b"\x63" + h[4:], "kind"),
    (lambda h: h[:4] + (1 << 31).to_bytes(4, "big") + h[8:], "exceeds the limit"),
])
def test_bad_headers_name_the_problem(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    header = encode_frame(Ack(1))[:FRAME_HEADER.size]
    with pytest.raises(FrameError, match=message):
        decode_header(mutate(header), LIMIT)


def _checksummed(kind: int, body: bytes) -> bytes:
    prefix = FRAME_HEADER.pack(0x5248, 1, kind, len(body), 0)[:8]
    return prefix + struct.pack(">I", zlib.crc32(body, zlib.crc32(prefix))) + body


def test_body_checks() -> None:
    raw = encode_frame(Ack(7))
    header = decode_header(raw[:12], LIMIT)
    with pytest.raises(FrameError, match="header says"):
        decode_body(header, raw[:8], memoryview(raw[12:-1]))
    # Correct checksums around wrong contents: still not frames.
    with pytest.raises(FrameError, match="needs 8"):
        decode_stream(_checksummed(4, b"\x00" * 7), LIMIT)
    hello = struct.pack(">qqqqqI", 1, 0, 0, 0, 4096, 10 ** 6)
    with pytest.raises(FrameError):
        decode_stream(_checksummed(1, hello), LIMIT)
    with pytest.raises(FrameError, match="malformed"):
        decode_stream(_checksummed(3, b"\x00" * 10), LIMIT)
