"""HA link frames: what a master and a slave say to each other, and their byte layout.

Every frame is a 12-byte header and a body (big-endian):

    pos  size  field
    0    2     magic 0x5248 ("RH")
    2    1     version (1)
    3    1     kind (below)
    4    4     body_size_bytes       checked against the link's limit before any allocation
    8    4     CRC32 (zlib) over header bytes [0, 8) and then the whole body

Bodies (q = 8-byte signed, i = 4-byte unsigned, N epoch entries of (epoch q, start q)):

    kind  frame          direction        body
    1     SlaveHello     slave -> master  broker_id q, max_log_position q, confirm q,
                                          master_epoch_seen q, segment_size q, N i, N x (q q)
    2     MasterHello    master -> slave  broker_id q, master_epoch q, min_log_position q,
                                          max_log_position q, confirm q, segment_size q,
                                          endpoint_size i + UTF-8 endpoint, N i, N x (q q)
    3     Transfer       master -> slave  master_epoch q, data_epoch q, data_epoch_start q,
                                          confirm q, log_position q, then raw CommitLog bytes
                                          (none: a heartbeat)
    4     Ack            slave -> master  log_position q (the slave holds every byte below it)
    5     Refuse         either           UTF-8 reason (the sender closes the link next)
    6     Metadata       master -> slave  version q, then UTF-8 JSON {"topics", "offsets"}

Version block (since 0.2): SlaveHello and MasterHello may end with `size B + ASCII text`, the
sender's protocol version "<major>.<minor> <release>" (conf/protocol.py). A hello without it
comes from v0.1.0 (protocol 0.1), whose decoder wants the exact body above: so a master
answers a hello in kind (a versioned MasterHello only to a versioned SlaveHello), and a slave
whose versioned hello was met by a close without a word sends one plain hello next
(ha/replication/slave_core.py, "Talking to a 0.1 master").

Why CRC the data again when every record has its own checksum: a frame can be cut or garbled in
ways that still leave valid-looking records (a shifted start, a stale buffer), and the check is
cheap (zlib.crc32 runs at several GB/s here). Why a version byte: the two ends of a link may run
different builds during a rolling upgrade; an unknown version is a FrameError, not a guess.
A garbage frame raises FrameError: the shell closes that link and only that link.
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from collections.abc import Sequence

from ha.replication.errors import FrameError
from storage_engine import EpochEntry

__all__ = [
    "FRAME_HEADER",
    "Ack",
    "Frame",
    "FrameHeader",
    "MasterHello",
    "Metadata",
    "Refuse",
    "SlaveHello",
    "Transfer",
    "decode_body",
    "decode_header",
    "decode_stream",
    "encode_frame",
    "encode_transfer_fields",
    "encode_transfer_prefix",
]

MAGIC = 0x5248
VERSION = 1
FRAME_HEADER = struct.Struct(">HBBII")
REASON_BYTES_MAX = 4096
VERSION_TEXT_BYTES_MAX = 80  # the hellos' version block
ENDPOINT_BYTES_MAX = 256

KIND_SLAVE_HELLO = 1
KIND_MASTER_HELLO = 2
KIND_TRANSFER = 3
KIND_ACK = 4
KIND_REFUSE = 5
KIND_METADATA = 6

_SLAVE_HELLO = struct.Struct(">qqqqqI")
_MASTER_HELLO = struct.Struct(">qqqqqq")
_COUNT = struct.Struct(">I")
_EPOCH = struct.Struct(">qq")
_TRANSFER = struct.Struct(">qqqqq")
_Q = struct.Struct(">q")


@dataclasses.dataclass(frozen=True, slots=True)
class SlaveHello:
    broker_id: int
    max_log_position: int
    confirm_log_position: int
    master_epoch_seen: int
    segment_size_bytes: int
    epochs: tuple[EpochEntry, ...]
    version: str = ""  # the sender's protocol version text; "": none (a 0.1 slave)


@dataclasses.dataclass(frozen=True, slots=True)
class MasterHello:
    broker_id: int
    master_epoch: int
    min_log_position: int
    max_log_position: int
    confirm_log_position: int
    segment_size_bytes: int
    endpoint: str  # the master's client (Arrow Flight) endpoint, for NOT_MASTER replies
    epochs: tuple[EpochEntry, ...]
    version: str = ""  # the sender's protocol version text; "": none (a 0.1 master)


@dataclasses.dataclass(frozen=True, slots=True)
class Transfer:
    master_epoch: int
    data_epoch: int
    data_epoch_start: int
    confirm_log_position: int
    log_position: int
    data: bytes | memoryview = b""


@dataclasses.dataclass(frozen=True, slots=True)
class Ack:
    log_position: int


@dataclasses.dataclass(frozen=True, slots=True)
class Refuse:
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class Metadata:
    version: int
    payload: bytes  # UTF-8 JSON


Frame = SlaveHello | MasterHello | Transfer | Ack | Refuse | Metadata


@dataclasses.dataclass(frozen=True, slots=True)
class FrameHeader:
    kind: int
    body_size_bytes: int
    crc: int


# -- encoding ---------------------------------------------------------------------------------
def _pack_epochs(epochs: Sequence[EpochEntry]) -> bytes:
    return _COUNT.pack(len(epochs)) + b"".join(
        _EPOCH.pack(entry.epoch, entry.start_log_position) for entry in epochs)


def _body_of(frame: Frame) -> tuple[int, bytes]:
    if isinstance(frame, SlaveHello):
        return KIND_SLAVE_HELLO, _SLAVE_HELLO.pack(
            frame.broker_id, frame.max_log_position, frame.confirm_log_position,
            frame.master_epoch_seen, frame.segment_size_bytes, len(frame.epochs),
        ) + b"".join(_EPOCH.pack(e.epoch, e.start_log_position) for e in frame.epochs
                     ) + _version_block(frame.version)
    if isinstance(frame, MasterHello):
        endpoint = frame.endpoint.encode()
        assert len(endpoint) <= ENDPOINT_BYTES_MAX, frame.endpoint
        return KIND_MASTER_HELLO, _MASTER_HELLO.pack(
            frame.broker_id, frame.master_epoch, frame.min_log_position, frame.max_log_position,
            frame.confirm_log_position, frame.segment_size_bytes,
        ) + _COUNT.pack(len(endpoint)) + endpoint + _pack_epochs(frame.epochs) + _version_block(
            frame.version)
    if isinstance(frame, Transfer):
        return KIND_TRANSFER, encode_transfer_fields(frame) + bytes(frame.data)
    if isinstance(frame, Ack):
        return KIND_ACK, _Q.pack(frame.log_position)
    if isinstance(frame, Refuse):
        return KIND_REFUSE, frame.reason.encode()[:REASON_BYTES_MAX]
    if isinstance(frame, Metadata):
        return KIND_METADATA, _Q.pack(frame.version) + frame.payload
    raise AssertionError(f"not a frame: {frame!r}")


def _version_block(version: str) -> bytes:
    if not version:
        return b""
    text = version.encode("ascii")
    assert len(text) <= VERSION_TEXT_BYTES_MAX, version
    return bytes([len(text)]) + text


def encode_frame(frame: Frame) -> bytes:
    """Header + body of a frame (small frames; a Transfer's data is copied)."""
    kind, body = _body_of(frame)
    prefix = FRAME_HEADER.pack(MAGIC, VERSION, kind, len(body), 0)[:8]
    crc = zlib.crc32(body, zlib.crc32(prefix))
    return prefix + struct.pack(">I", crc) + body


def encode_transfer_fields(frame: Transfer) -> bytes:
    return _TRANSFER.pack(frame.master_epoch, frame.data_epoch, frame.data_epoch_start,
                          frame.confirm_log_position, frame.log_position)


def encode_transfer_prefix(frame: Transfer, data: bytes | memoryview) -> bytes:
    """Header + fixed fields of a Transfer whose `data` the caller sends right after (so the
    CommitLog bytes go to the socket without being copied into a frame)."""
    fields = encode_transfer_fields(frame)
    prefix = FRAME_HEADER.pack(MAGIC, VERSION, KIND_TRANSFER, len(fields) + len(data), 0)[:8]
    crc = zlib.crc32(data, zlib.crc32(fields, zlib.crc32(prefix)))
    return prefix + struct.pack(">I", crc) + fields


# -- decoding ---------------------------------------------------------------------------------
def decode_header(raw: bytes | memoryview, body_bytes_max: int) -> FrameHeader:
    """Check a 12-byte header; FrameError names what is wrong. Call before reading the body,
    so a hostile size never causes an allocation."""
    if len(raw) != FRAME_HEADER.size:
        raise FrameError(f"frame header of {len(raw)} bytes, expected {FRAME_HEADER.size}")
    magic, version, kind, size, crc = FRAME_HEADER.unpack(raw)
    if magic != MAGIC:
        raise FrameError(f"bad frame magic {magic:#06x} (expected {MAGIC:#06x})")
    if version != VERSION:
        raise FrameError(f"unsupported frame version {version} (this build speaks {VERSION})")
    if not KIND_SLAVE_HELLO <= kind <= KIND_METADATA:
        raise FrameError(f"unknown frame kind {kind}")
    if size > body_bytes_max:
        raise FrameError(f"frame body of {size} bytes exceeds the limit of {body_bytes_max}")
    return FrameHeader(kind, size, crc)


def decode_body(header: FrameHeader, prefix: bytes | memoryview, body: memoryview) -> Frame:
    """Verify the CRC (over the header's first 8 bytes and the body) and decode. A Transfer's
    data is a view into `body`: consume it before the buffer is reused."""
    if len(body) != header.body_size_bytes:
        raise FrameError(f"frame body of {len(body)} bytes, header says "
                         f"{header.body_size_bytes}")
    if zlib.crc32(body, zlib.crc32(prefix[:8])) != header.crc:
        raise FrameError(f"frame CRC mismatch (kind {header.kind}, {len(body)} bytes)")
    try:
        return _decode_kind(header.kind, body)
    except (struct.error, UnicodeDecodeError, ValueError) as err:
        raise FrameError(f"malformed frame of kind {header.kind}: {err}") from err


def _decode_epochs(body: memoryview, at: int) -> tuple[tuple[EpochEntry, ...], int]:
    (count,) = _COUNT.unpack_from(body, at)
    at += _COUNT.size
    if at + count * _EPOCH.size > len(body):
        raise FrameError(f"{count} epoch entries do not fit in the frame")
    entries = tuple(EpochEntry(*_EPOCH.unpack_from(body, at + i * _EPOCH.size))
                    for i in range(count))
    return entries, at + count * _EPOCH.size


def _decode_kind(kind: int, body: memoryview) -> Frame:
    if kind == KIND_TRANSFER:
        fields = _TRANSFER.unpack_from(body, 0)
        return Transfer(*fields, data=body[_TRANSFER.size:])
    if kind == KIND_ACK:
        _exact(body, _Q.size)
        return Ack(_Q.unpack_from(body, 0)[0])
    if kind == KIND_SLAVE_HELLO:
        *fields, _ = _SLAVE_HELLO.unpack_from(body, 0)
        epochs, end = _decode_epochs(body, _SLAVE_HELLO.size - _COUNT.size)
        return SlaveHello(*fields, epochs=epochs, version=_decode_version(body, end))
    if kind == KIND_MASTER_HELLO:
        fields = _MASTER_HELLO.unpack_from(body, 0)
        at = _MASTER_HELLO.size
        (endpoint_size,) = _COUNT.unpack_from(body, at)
        if endpoint_size > ENDPOINT_BYTES_MAX:
            raise FrameError(f"endpoint of {endpoint_size} bytes")
        endpoint = bytes(body[at + 4:at + 4 + endpoint_size]).decode()
        epochs, end = _decode_epochs(body, at + 4 + endpoint_size)
        return MasterHello(*fields, endpoint=endpoint, epochs=epochs,
                           version=_decode_version(body, end))
    if kind == KIND_REFUSE:
        if len(body) > REASON_BYTES_MAX:
            raise FrameError(f"refusal reason of {len(body)} bytes")
        return Refuse(bytes(body).decode(errors="replace"))
    if kind == KIND_METADATA:
        return Metadata(_Q.unpack_from(body, 0)[0], bytes(body[_Q.size:]))
    raise AssertionError(kind)  # decode_header rejected other kinds


def _decode_version(body: memoryview, at: int) -> str:
    """The version block from `at` to the end of a hello ("" when the hello ends at `at`)."""
    if len(body) == at:
        return ""
    size = body[at]
    if size == 0 or size > VERSION_TEXT_BYTES_MAX:
        raise FrameError(f"version block of {size} bytes")
    _exact(body, at + 1 + size)
    return bytes(body[at + 1:at + 1 + size]).decode("ascii")


def _exact(body: memoryview, size: int) -> None:
    if len(body) != size:
        raise FrameError(f"frame body of {len(body)} bytes, this kind needs {size}")


def decode_stream(data: bytes, body_bytes_max: int) -> tuple[list[Frame], int]:
    """Every complete frame in `data`, and how many bytes they used (tests, small tools)."""
    frames: list[Frame] = []
    at = 0
    view = memoryview(data)
    while len(data) - at >= FRAME_HEADER.size:
        header = decode_header(view[at:at + FRAME_HEADER.size], body_bytes_max)
        end = at + FRAME_HEADER.size + header.body_size_bytes
        if end > len(data):
            break
        frames.append(decode_body(header, view[at:at + 8], view[at + FRAME_HEADER.size:end]))
        at = end
    return frames, at
