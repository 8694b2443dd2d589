"""CommitLog record layout: RocketMQ's v1 message format, plus a whole-record checksum.

Every integer is big-endian (Java order). Positions are for IPv4 born/store hosts (8 bytes each:
4-byte IP, 4-byte port), the only kind we write (SYSFLAG bits 4 and 5 stay 0).

    pos  size  field               notes
    0    4     TOTALSIZE           the whole record, this field included
    4    4     MAGICCODE           0xDAA320A7 (RocketMQ MESSAGE_MAGIC_CODE V1)
    8    4     BODYCRC             zlib.crc32(body) & 0x7FFFFFFF (java.util.zip.CRC32, masked)
    12   4     QUEUEID
    16   4     FLAG                user flag
    20   8     QUEUEOFFSET         index of the message in its ConsumeQueue, assigned at append
    28   8     PHYSICALOFFSET      log_position of this record in the CommitLog
    36   4     SYSFLAG
    40   8     BORNTIMESTAMP       producer clock, ms
    48   8     BORNHOST            IPv4(4) + port(4)
    56   8     STORETIMESTAMP      broker clock at append, ms
    64   8     STOREHOSTADDRESS    IPv4(4) + port(4)
    72   4     RECONSUMETIMES
    76   8     PREPARED_TX_OFFSET
    84   4     BODYLENGTH = b
    88   b     BODY
    88+b 1     TOPICLENGTH = t     (v1: one byte, so topics are at most 127 bytes)
    ..   t     TOPIC               ASCII ([%|a-zA-Z0-9_-])
    ..   2     PROPERTIESLENGTH = p   (at most 32767)
    ..   p     PROPERTIES          UTF-8 `key\\x01value\\x02` pairs; always ends with the
                                   20-byte checksum pair `__CRC32#\\x01DDDDDDDDDD\\x02`

    TOTALSIZE = 91 + b + t + p

Why a whole-record checksum: RocketMQ checks only BODYCRC on recovery by default, so a flipped
bit in a header (a queue offset, a length) or a torn header passes. We always append RocketMQ's
optional `__CRC32#` property (the shape of `enabledAppendPropCRC`: ten ASCII decimal digits,
least-significant first). Its coverage is ours: zlib.crc32 over the bytes from TOPICLENGTH up to
and including the 0x01 after `__CRC32#`, continued over the 88 header bytes (header last, so a
batch without properties computes the tail's CRC once). Left out are the body, which BODYCRC
(inside the covered header) protects, and the last 11 bytes (the ten digits and the final
0x02). Skipping the body halves the checksum cost of large bodies; together the two checksums
cover every byte of the record.

A segment ends with a BLANK record when the next record does not fit:

    0    4     TOTALSIZE           bytes left in the segment (>= 8)
    4    4     MAGICCODE           0xCBD43194 (BLANK_MAGIC_CODE)

Records never span segments. Zeroed bytes (a preallocated, never-written tail) read as magic 0,
which ends a recovery scan.

The magic code is the record format's version. RocketMQ 4.9+ also writes MESSAGE_MAGIC_CODE_V2
(0xDAA320AB: TOPICLENGTH of two bytes), which this release does not read. Recovery treats a
record of a known other format (OTHER_FORMAT_MAGIC_CODES) unlike a torn one: it refuses the open
(StoreFormatError) and cuts nothing, where any other bad magic code is a torn or corrupt tail and
is cut. Why they differ: a crash tears a record this release wrote (a V1 prefix, then zeros or
stale bytes), so it never leaves another format's magic code; such a record was written whole
by another release (a downgrade, the wrong binary), and cutting it would silently drop
acknowledged messages. `other_format_at` takes the code for a record only when the record is
plausible too: TOTALSIZE at least that format's smallest record and within the segment, and
PHYSICALOFFSET (at the same place in V2) equal to the record's log_position. Residual risk:
rubbish that holds the V2 code and an exact copy of its own position (about 2**-96 for random
bytes) stops the open instead of being cut; the operator then sees the position and decides.

SYSFLAG bit 24 (SYSFLAG_PUT_CONTINUES, ours: RocketMQ's flags use bits 0-10) is set on every
record of a put but its last. Why: a replica's log can end inside a put (the master died between
two transfers), and a new master that keeps such a prefix stores the producer's retry of the whole
put after it, so the prefix's rows are there twice (the idempotence marker travels in the put's
last row, which the prefix lacks). With the bit, a take-over finds where the last whole put ends
and cuts the prefix (storage_engine/replica_log.py). Records written before the bit existed read
as puts of one record each, which is what a take-over did with them before.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import struct
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from storage_engine.errors import CorruptRecordError
from storage_engine.names import TOPIC_PATTERN

__all__ = [
    "BLANK_MAGIC_CODE",
    "BLANK_RECORD_SIZE_BYTES",
    "BODY_LENGTH_AT",
    "HEADER_DTYPE",
    "HEADER_FIELDS",
    "HEADER_SIZE_BYTES",
    "LOG_POSITION_AT",
    "MESSAGE_MAGIC_CODE",
    "MESSAGE_MAGIC_CODE_V2",
    "OTHER_FORMAT_MAGIC_CODES",
    "PROPERTIES_LENGTH_SIZE_BYTES",
    "RECORD_SIZE_MIN_BYTES",
    "STORE_HOST_AT",
    "STORE_TIMESTAMP_AT",
    "SYSFLAG_AT",
    "SYSFLAG_PUT_CONTINUES",
    "TOPIC_LENGTH_SIZE_BYTES",
    "TOPIC_PATTERN",
    "StoredMessage",
    "decode_properties",
    "decode_record",
    "encode_batch",
    "encode_blank",
    "encode_host",
    "encode_properties",
    "encode_record",
    "java_string_hash",
    "magic_reason",
    "make_msg_id",
    "other_format_at",
    "scan_record",
    "tags_code_of",
]

MESSAGE_MAGIC_CODE = 0xDAA320A7
MESSAGE_MAGIC_CODE_V2 = 0xDAA320AB  # RocketMQ 4.9+: TOPICLENGTH of 2 bytes; not read here
BLANK_MAGIC_CODE = 0xCBD43194
BLANK_RECORD_SIZE_BYTES = 8
HEADER = struct.Struct(">iIiiiqqiq8sq8siqi")
HEADER_SIZE_BYTES = HEADER.size  # 88: everything before the body, BODYLENGTH included
assert HEADER_SIZE_BYTES == 88
CRC_PROPERTY_KEY = b"__CRC32#\x01"
CRC_TAIL_SIZE_BYTES = len(CRC_PROPERTY_KEY) + 10 + 1  # 20
CRC_UNCOVERED_TAIL_BYTES = 11  # the ten digits and the closing 0x02
TOPIC_LENGTH_SIZE_BYTES = 1  # TOPICLENGTH, after the body
PROPERTIES_LENGTH_SIZE_BYTES = 2  # PROPERTIESLENGTH, after the topic
RECORD_SIZE_MIN_BYTES = (HEADER_SIZE_BYTES + TOPIC_LENGTH_SIZE_BYTES
                         + PROPERTIES_LENGTH_SIZE_BYTES + CRC_TAIL_SIZE_BYTES)  # empty body, topic
SYSFLAG_AT = 36  # header offset of SYSFLAG
SYSFLAG_PUT_CONTINUES = 1 << 24  # not the last record of its put (module docstring)
PROPERTIES_SIZE_MAX_BYTES = 32767
PROPERTIES_PAYLOAD_MAX_BYTES = PROPERTIES_SIZE_MAX_BYTES - CRC_TAIL_SIZE_BYTES
_MASK_31 = 0x7FFFFFFF
HEADER_DTYPE = np.dtype([  # HEADER as a numpy record: the batch encoder, vector decoders
    ("total", ">i4"), ("magic", ">u4"), ("body_crc", ">i4"), ("queue_id", ">i4"),
    ("flag", ">i4"), ("queue_offset", ">i8"), ("log_position", ">i8"), ("sys_flag", ">i4"),
    ("born_ms", ">i8"), ("born_host", "S8"), ("store_ms", ">i8"), ("store_host", "S8"),
    ("reconsume", ">i4"), ("prepared", ">i8"), ("body_size", ">i4"),
])
assert HEADER_DTYPE.itemsize == HEADER_SIZE_BYTES
assert HEADER_DTYPE.fields is not None
HEADER_FIELDS = HEADER_DTYPE.fields  # name -> (dtype, byte position in the header)
assert HEADER_FIELDS["sys_flag"][1] == SYSFLAG_AT
LOG_POSITION_AT = HEADER_FIELDS["log_position"][1]  # PHYSICALOFFSET: 28
STORE_TIMESTAMP_AT = HEADER_FIELDS["store_ms"][1]  # STORETIMESTAMP: 56
STORE_HOST_AT = HEADER_FIELDS["store_host"][1]  # STOREHOSTADDRESS: 64
BODY_LENGTH_AT = HEADER_FIELDS["body_size"][1]  # BODYLENGTH: 84
_DECIMAL_PLACES = 10 ** np.arange(10, dtype=np.int64)  # checksum digits, least significant first

_PREFIX = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE
_BODY_CRC_AND_LEN = struct.Struct(">i")
_U16 = struct.Struct(">H")
_HOST = struct.Struct(">4sI")
_BLANK = struct.Struct(">iI")


# Record formats this release knows of but does not read: magic code -> (name, smallest record).
# V2's smallest: the 88 header bytes, TOPICLENGTH (2), PROPERTIESLENGTH (2), all else empty.
OTHER_FORMAT_MAGIC_CODES: Mapping[int, tuple[str, int]] = {
    MESSAGE_MAGIC_CODE_V2: ("V2", HEADER_SIZE_BYTES + 2 + 2),
}
_LOG_POSITION = struct.Struct(">q")


def other_format_at(buf: bytes | memoryview, pos: int, end: int, log_position: int
                    ) -> tuple[str, int] | None:
    """(format name, magic code) when the bytes at `pos` (readable up to `end`) are a record of
    a known other format (OTHER_FORMAT_MAGIC_CODES) written at `log_position`, else None.
    Plausible means: TOTALSIZE from that format's smallest record to `end`, and PHYSICALOFFSET
    equal to `log_position` (module docstring: why, and the residual risk). Never raises."""
    if end - pos < HEADER_SIZE_BYTES:
        return None
    total, magic = _PREFIX.unpack_from(buf, pos)
    known = OTHER_FORMAT_MAGIC_CODES.get(magic)
    if known is None or not known[1] <= total <= end - pos:
        return None
    if _LOG_POSITION.unpack_from(buf, pos + LOG_POSITION_AT)[0] != log_position:
        return None
    return known[0], magic


def magic_reason(magic: int) -> str:
    """How an error names a magic code that is not V1's: with its format's name when it is a
    known other format (a replica's master or a read met a record this release cannot read)."""
    known = OTHER_FORMAT_MAGIC_CODES.get(magic)
    if known is None:
        return f"magic code {magic:#010x}"
    return f"magic code {magic:#010x} (record format {known[0]}; this release reads V1)"


@functools.lru_cache(maxsize=1024)
def encode_host(ip: str, port: int) -> bytes:
    """8-byte IPv4 host as RocketMQ stores it (BORNHOST, STOREHOSTADDRESS)."""
    parts = [int(part) for part in ip.split(".")]
    assert len(parts) == 4 and all(0 <= part <= 255 for part in parts), ip
    assert 0 <= port <= 65535, port
    return _HOST.pack(bytes(parts), port)


def encode_blank(remaining_bytes: int) -> bytes:
    assert remaining_bytes >= BLANK_RECORD_SIZE_BYTES
    return _BLANK.pack(remaining_bytes, BLANK_MAGIC_CODE)


def encode_record(
    *,
    body: bytes,
    topic_meta: bytes,
    properties: bytes,
    queue_id: int,
    queue_offset: int,
    log_position: int,
    store_timestamp_ms: int,
    store_host: bytes,
    born_timestamp_ms: int,
    born_host: bytes,
    flag: int = 0,
) -> bytes:
    """Encode one record (a batch of one through `encode_batch`, the only encoder)."""
    parts: list[bytes] = []
    encoded = encode_batch(
        topic_meta=topic_meta, bodies=[body], properties=[properties], queue_ids=[queue_id],
        queue_offsets=[queue_offset], start_index=0, log_position=log_position,
        space_bytes=1 << 62, store_timestamp_ms=store_timestamp_ms, store_host=store_host,
        born_timestamp_ms=born_timestamp_ms, born_host=born_host, flag=flag,
        out_parts=parts, out_positions=[], out_sizes=[],
    )
    assert encoded == 1
    return b"".join(parts)


# The ten checksum digits, least-significant first, as two table look-ups: the low five digits
# reversed, then the high five reversed plus the closing 0x02.
_LOW_DIGITS = [(b"%05d" % n)[::-1] for n in range(100_000)]
_HIGH_DIGITS = [(b"%05d" % n)[::-1] + b"\x02" for n in range(42_950)]  # 2**32 // 100000 + 1


_VECTOR_BATCH_MIN = 64  # below this the per-batch set-up of the array path costs more (measured)


def _checksum_tail(crc: int) -> bytes:
    return _LOW_DIGITS[crc % 100_000] + _HIGH_DIGITS[crc // 100_000]


def encode_batch(
    *,
    topic_meta: bytes,
    bodies: Sequence[bytes],
    properties: Sequence[bytes] | None,
    queue_ids: Sequence[int],
    queue_offsets: Sequence[int],
    start_index: int,
    log_position: int,
    space_bytes: int,
    store_timestamp_ms: int,
    store_host: bytes,
    born_timestamp_ms: int,
    born_host: bytes,
    flag: int,
    out_parts: list[bytes],
    out_positions: list[int],
    out_sizes: list[int],
) -> int:
    """Encode messages from `start_index` while they fit in `space_bytes` (always leaving room
    for a BLANK record). Returns the index of the first message not encoded.

    `topic_meta` is TOPICLENGTH + TOPIC; `properties` holds encoded payloads without the
    checksum pair (None: no properties); queue ids and offsets are per message. Appends each
    record's pieces to `out_parts` (join them to get the bytes), its log_position to
    `out_positions` and its size to `out_sizes`. `bodies` is one put: every record but the one
    of its last message carries SYSFLAG_PUT_CONTINUES.

    This is the hot path of every put. Messages go by runs of equal property payloads (the
    whole batch without properties; with the Spark sink's idempotence marker, every row but the
    last): within a run the record tail (topic, properties, checksum key) is the same, so a run
    of at least `_VECTOR_BATCH_MIN` messages takes the array path, shorter ones the loop.
    """
    limit_position = log_position + space_bytes - BLANK_RECORD_SIZE_BYTES
    end, index = len(bodies), start_index
    while index < end:
        props = b"" if properties is None else properties[index]
        run_end = end if properties is None else _run_end(properties, index, end)
        meta = topic_meta + _U16.pack(len(props) + CRC_TAIL_SIZE_BYTES) + props + CRC_PROPERTY_KEY
        encode = _encode_uniform_tail if run_end - index >= _VECTOR_BATCH_MIN else _encode_loop
        stopped = encode(meta, bodies, queue_ids, queue_offsets, index, run_end, log_position,
                         limit_position, store_timestamp_ms, store_host, born_timestamp_ms,
                         born_host, flag, end - 1, out_parts, out_positions, out_sizes)
        if stopped < run_end:
            return stopped
        if stopped > index:
            log_position = out_positions[-1] + out_sizes[-1]
        index = run_end
    return end


def _run_end(properties: Sequence[bytes], start: int, end: int) -> int:
    """The end of the run of payloads equal to properties[start]."""
    first = properties[start]
    for index in range(start + 1, end):
        if properties[index] != first:
            return index
    return end


def _encode_loop(
    meta: bytes, bodies: Sequence[bytes], queue_ids: Sequence[int], queue_offsets: Sequence[int],
    start_index: int, stop_index: int, log_position: int, limit_position: int,
    store_timestamp_ms: int, store_host: bytes, born_timestamp_ms: int, born_host: bytes,
    flag: int, last_index: int, out_parts: list[bytes], out_positions: list[int],
    out_sizes: list[int],
) -> int:
    """Messages [start_index, stop_index) sharing the tail `meta`, one at a time: per message
    one header pack and two CRC calls (the body's, then the header's chained onto the tail's).
    Returns the index of the first message that did not fit below `limit_position`."""
    pack_header = HEADER.pack
    crc32 = zlib.crc32
    meta_crc = crc32(meta)
    fixed_size = HEADER_SIZE_BYTES + len(meta) + CRC_UNCOVERED_TAIL_BYTES
    for index in range(start_index, stop_index):
        body = bodies[index]
        total = fixed_size + len(body)
        if log_position + total > limit_position:
            return index
        head = pack_header(
            total, MESSAGE_MAGIC_CODE, crc32(body) & 0x7FFFFFFF, queue_ids[index], flag,
            queue_offsets[index], log_position,
            0 if index == last_index else SYSFLAG_PUT_CONTINUES, born_timestamp_ms, born_host,
            store_timestamp_ms, store_host, 0, 0, len(body),
        )
        out_parts += (head, body, meta, _checksum_tail(crc32(head, meta_crc)))
        out_positions.append(log_position)
        out_sizes.append(total)
        log_position += total
    return stop_index


def _encode_uniform_tail(
    meta: bytes, bodies: Sequence[bytes], queue_ids: Sequence[int], queue_offsets: Sequence[int],
    start_index: int, stop_index: int, log_position: int, limit_position: int,
    store_timestamp_ms: int, store_host: bytes, born_timestamp_ms: int, born_host: bytes,
    flag: int, last_index: int, out_parts: list[bytes], out_positions: list[int],
    out_sizes: list[int],
) -> int:
    """_encode_loop's array twin for runs of `_VECTOR_BATCH_MIN` or more: the tail is the same
    for every record, so headers and tails are built as arrays: the headers are one big-endian
    structured array filled column by column and the checksum digits are computed for all
    records at once. What stays per record is the two CRC32 calls and two slices; bodies are not
    copied until the caller joins the parts (copying them into an array first was slower for
    1 KiB bodies).
    """
    bodies, queue_ids = bodies[start_index:stop_index], queue_ids[start_index:stop_index]
    queue_offsets = queue_offsets[start_index:stop_index]
    count = len(bodies)
    body_sizes = np.fromiter(map(len, bodies), np.int64, count)
    sizes = body_sizes + (HEADER_SIZE_BYTES + len(meta) + CRC_UNCOVERED_TAIL_BYTES)
    ends = np.cumsum(sizes)
    fitting = int(np.searchsorted(ends, limit_position - log_position, side="right"))
    if fitting < count:
        bodies, queue_ids = bodies[:fitting], queue_ids[:fitting]
        queue_offsets, count = queue_offsets[:fitting], fitting
        body_sizes, sizes, ends = body_sizes[:fitting], sizes[:fitting], ends[:fitting]
    if count == 0:
        return start_index
    positions = ends - sizes + log_position
    headers = np.zeros(count, HEADER_DTYPE)
    headers["total"] = sizes
    headers["magic"] = MESSAGE_MAGIC_CODE
    headers["body_crc"] = np.fromiter(map(zlib.crc32, bodies), np.int64, count) & _MASK_31
    headers["queue_id"] = queue_ids
    headers["flag"] = flag
    headers["queue_offset"] = queue_offsets
    headers["log_position"] = positions
    headers["sys_flag"] = SYSFLAG_PUT_CONTINUES
    if start_index + count - 1 == last_index:
        headers["sys_flag"][-1] = 0
    headers["born_ms"] = born_timestamp_ms
    headers["born_host"] = born_host
    headers["store_ms"] = store_timestamp_ms
    headers["store_host"] = store_host
    headers["body_size"] = body_sizes
    heads = _split_rows(headers.tobytes(), HEADER_SIZE_BYTES, count)
    record_crcs = np.fromiter(map(zlib.crc32, heads, itertools.repeat(zlib.crc32(meta))),
                              np.int64, count)
    tail_size = len(meta) + CRC_UNCOVERED_TAIL_BYTES
    tails = np.empty((count, tail_size), np.uint8)
    tails[:, :len(meta)] = np.frombuffer(meta, np.uint8)
    tails[:, len(meta):-1] = record_crcs[:, None] // _DECIMAL_PLACES % 10 + ord("0")
    tails[:, -1] = 2
    out_parts += itertools.chain.from_iterable(
        zip(heads, bodies, _split_rows(tails.tobytes(), tail_size, count), strict=True))
    out_positions += positions.tolist()
    out_sizes += sizes.tolist()
    return start_index + count


def _split_rows(data: bytes, row_size: int, count: int) -> list[bytes]:
    cuts = range(0, (count + 1) * row_size, row_size)
    return list(map(data.__getitem__, map(slice, cuts[:-1], cuts[1:])))


def scan_record(buf: bytes | memoryview, pos: int, end: int) -> int:
    """Check the record at `pos` (bytes before `end` are readable) without decoding it.

    Returns its size when valid, 0 for a BLANK end-of-segment record, -1 for anything else
    (zeros, a torn or flipped record). Never raises on any input.
    """
    if end - pos < BLANK_RECORD_SIZE_BYTES:
        return -1
    total, magic = _PREFIX.unpack_from(buf, pos)
    if magic == BLANK_MAGIC_CODE:
        return 0 if total == end - pos else -1
    if magic != MESSAGE_MAGIC_CODE or total < RECORD_SIZE_MIN_BYTES or total > end - pos:
        return -1
    return total if _check_record(buf, pos, total) is None else -1


def _check_record(buf: bytes | memoryview, pos: int, total: int) -> str | None:
    """Validate a record of `total` bytes at `pos`; return the reason it is bad, or None."""
    fields = HEADER.unpack_from(buf, pos)
    body_size = fields[14]
    if body_size < 0 or HEADER_SIZE_BYTES + body_size + 3 > total:
        return f"body length {body_size} does not fit in TOTALSIZE {total}"
    topic_at = pos + HEADER_SIZE_BYTES + body_size
    topic_size = buf[topic_at]
    props_at = topic_at + 1 + topic_size + 2
    if props_at > pos + total:
        return f"topic length {topic_size} does not fit in TOTALSIZE {total}"
    if not TOPIC_PATTERN.fullmatch(bytes(buf[topic_at + 1:topic_at + 1 + topic_size]).decode(
            "latin-1")):
        return "topic is not a valid name ([%|a-zA-Z0-9_-]{1,127})"
    (props_size,) = _U16.unpack_from(buf, props_at - 2)
    if 91 + body_size + topic_size + props_size != total:
        return f"lengths sum to {91 + body_size + topic_size + props_size}, TOTALSIZE {total}"
    if props_size < CRC_TAIL_SIZE_BYTES or props_size > PROPERTIES_SIZE_MAX_BYTES:
        return f"properties length {props_size} cannot hold the checksum pair"
    end = pos + total
    key_at = end - CRC_TAIL_SIZE_BYTES
    if bytes(buf[key_at:key_at + len(CRC_PROPERTY_KEY)]) != CRC_PROPERTY_KEY or buf[end - 1] != 2:
        return "checksum pair missing"
    digits = bytes(buf[end - CRC_UNCOVERED_TAIL_BYTES:end - 1])
    if not digits.isdigit():
        return "checksum digits are not decimal"
    expected = int(digits[::-1])
    view = memoryview(buf)
    crc = zlib.crc32(view[topic_at:end - CRC_UNCOVERED_TAIL_BYTES])
    crc = zlib.crc32(view[pos:pos + HEADER_SIZE_BYTES], crc)
    if crc != expected:
        return f"record checksum {crc} != stored {expected}"
    body_crc = zlib.crc32(view[pos + HEADER_SIZE_BYTES:topic_at]) & 0x7FFFFFFF
    if body_crc != fields[2]:
        return f"body checksum {body_crc} != stored {fields[2]}"
    return None


@dataclasses.dataclass(frozen=True, slots=True)
class StoredMessage:
    """A decoded CommitLog record."""

    topic: str
    queue_id: int
    queue_offset: int
    log_position: int
    size_bytes: int
    flag: int
    sys_flag: int
    born_timestamp_ms: int
    born_host: bytes
    store_timestamp_ms: int
    store_host: bytes
    reconsume_times: int
    body: bytes
    properties: dict[str, str]

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> str | None:
        return self.properties.get("KEYS")

    @property
    def msg_id(self) -> str:
        return make_msg_id(self.store_host, self.log_position)


def decode_record(buf: bytes | memoryview, pos: int = 0, *,
                  end: int | None = None) -> StoredMessage:
    """Decode and verify the record at `pos`. Raises CorruptRecordError on any bad input."""
    end = len(buf) if end is None else end
    if end - pos < RECORD_SIZE_MIN_BYTES:
        raise CorruptRecordError(f"{end - pos} bytes cannot hold a record", log_position=pos)
    total, magic = _PREFIX.unpack_from(buf, pos)
    if magic != MESSAGE_MAGIC_CODE:
        raise CorruptRecordError(magic_reason(magic), log_position=pos)
    if total < RECORD_SIZE_MIN_BYTES or total > end - pos:
        raise CorruptRecordError(f"TOTALSIZE {total} with {end - pos} bytes left", log_position=pos)
    reason = _check_record(buf, pos, total)
    if reason is not None:
        raise CorruptRecordError(reason, log_position=pos)
    return _decode_checked(buf, pos, total)


def _decode_checked(buf: bytes | memoryview, pos: int, total: int) -> StoredMessage:
    (_, _, _, queue_id, flag, queue_offset, log_position, sys_flag, born_ms, born_host, store_ms,
     store_host, reconsume, _, body_size) = HEADER.unpack_from(buf, pos)
    body_at = pos + HEADER_SIZE_BYTES
    topic_at = body_at + body_size
    topic_size = buf[topic_at]
    props_at = topic_at + 3 + topic_size
    try:
        topic = bytes(buf[topic_at + 1:topic_at + 1 + topic_size]).decode("ascii")
        properties = decode_properties(bytes(buf[props_at:pos + total - CRC_TAIL_SIZE_BYTES]))
    except (UnicodeDecodeError, ValueError) as err:
        raise CorruptRecordError(f"undecodable topic or properties: {err}",
                                 log_position=pos) from err
    return StoredMessage(
        topic=topic, queue_id=queue_id, queue_offset=queue_offset, log_position=log_position,
        size_bytes=total, flag=flag, sys_flag=sys_flag, born_timestamp_ms=born_ms,
        born_host=born_host, store_timestamp_ms=store_ms, store_host=store_host,
        reconsume_times=reconsume, body=bytes(buf[body_at:topic_at]), properties=properties,
    )


def encode_properties(properties: Mapping[str, str]) -> bytes:
    """`key\\x01value\\x02` pairs, UTF-8. Raises ValueError on a separator inside a key/value."""
    if not properties:
        return b""
    parts = []
    for key, value in properties.items():
        if not key or any(ch in key for ch in "\x01\x02") or any(ch in value for ch in "\x01\x02"):
            raise ValueError(f"property {key!r} is empty or contains a 0x01/0x02 separator")
        parts.append(f"{key}\x01{value}\x02")
    return "".join(parts).encode("utf-8")


def decode_properties(payload: bytes) -> dict[str, str]:
    """Inverse of encode_properties. Raises ValueError (or UnicodeDecodeError) on bad input."""
    if not payload:
        return {}
    text = payload.decode("utf-8")
    if not text.endswith("\x02"):
        raise ValueError("properties do not end with 0x02")
    result: dict[str, str] = {}
    for pair in text[:-1].split("\x02"):
        key, sep, value = pair.partition("\x01")
        if not sep or not key:
            raise ValueError(f"malformed property pair {pair!r}")
        result[key] = value
    return result


def tags_code_of(properties: bytes) -> int:
    """tagsCode of an encoded properties payload: the hash of its TAGS value, 0 without one."""
    if properties.startswith(b"TAGS\x01"):
        start = 5
    else:
        found = properties.find(b"\x02TAGS\x01")
        if found < 0:
            return 0
        start = found + 6
    end = properties.find(b"\x02", start)
    if end < 0:
        return 0
    return java_string_hash(properties[start:end].decode("utf-8", "replace"))


def make_msg_id(store_host: bytes, log_position: int) -> str:
    """RocketMQ's offset message id: store host (8 bytes) + log position (8 bytes), hex."""
    return (store_host + log_position.to_bytes(8, "big")).hex().upper()


_TAG_HASH_CACHE: dict[str, int] = {}
_TAG_HASH_CACHE_MAX = 4096


def java_string_hash(text: str) -> int:
    """Java's String.hashCode (UTF-16 code units, 32-bit wrap): RocketMQ's tagsCode."""
    cached = _TAG_HASH_CACHE.get(text)
    if cached is not None:
        return cached
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & 0xFFFFFFFF
    result = h - (1 << 32) if h >= 1 << 31 else h
    if len(_TAG_HASH_CACHE) < _TAG_HASH_CACHE_MAX:
        _TAG_HASH_CACHE[text] = result
    return result
