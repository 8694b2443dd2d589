"""Checking many CommitLog records at once: `valid_run_end`, the recovery scan's fast path.

`record_format.scan_record` checks one record in Python: about 14 µs for a 1 KiB record, so
14 s for a full 1 GiB segment, which recovery checks whole at every open (commit_log.py says
why it trusts none of it). `valid_run_end` gives the same verdict on every record, in bulk:

1. It walks the chain of TOTALSIZE and magic codes (one unpack per record) and keeps the
   records that are V1 messages fitting in the buffer, up to SCAN_CHUNK_RECORDS at a time.
2. numpy gathers their headers and the bytes at their lengths, topic, checksum key and digits
   from the mapped buffer, and checks every length and byte rule of `_check_record` for all of
   them at once.
3. zlib.crc32 computes both checksums of each record over slices of the buffer (C speed; the
   per-record cost left is a few calls, not Python arithmetic over the bytes).

It stops at the first record that fails any check, or that is not a V1 message (a BLANK,
zeros, another format's record): what that record is, and whether it is cut or refused, is
still scan_record's and the caller's to decide, one record at a time. So the fast path only
ever skips scan_record over records it accepted, and it accepts a record exactly when
scan_record does (tests/storage_engine/test_record_scan.py checks both on damaged segments).
"""

from __future__ import annotations

import itertools
import struct
import zlib

import numpy as np

from storage_engine.fs import Buffer
from storage_engine.names import TOPIC_PATTERN
from storage_engine.record_format import (
    CRC_PROPERTY_KEY,
    CRC_TAIL_SIZE_BYTES,
    CRC_UNCOVERED_TAIL_BYTES,
    HEADER_DTYPE,
    HEADER_SIZE_BYTES,
    MESSAGE_MAGIC_CODE,
    PROPERTIES_SIZE_MAX_BYTES,
    RECORD_SIZE_MIN_BYTES,
)

__all__ = ["CHAIN_PROBE_RECORDS", "SCAN_CHUNK_RECORDS", "TAIL_COMPARE_SIZE_MAX_BYTES",
           "equal_size_run", "valid_run_end"]

SCAN_CHUNK_RECORDS = 1 << 14  # records checked per numpy pass (16 MiB of 1 KiB records)
CHAIN_PROBE_RECORDS = 8  # the first probe of a run of records of one size
TAIL_COMPARE_SIZE_MAX_BYTES = 256  # tails up to this long are compared to the first in bulk

_PREFIX = struct.Struct(">iI")  # TOTALSIZE, MAGICCODE
_MASK_31 = 0x7FFFFFFF
_PREFIX_BYTES = np.arange(_PREFIX.size, dtype=np.int64)
_KEY_BYTES = np.arange(len(CRC_PROPERTY_KEY), dtype=np.int64) - CRC_TAIL_SIZE_BYTES  # from end
_KEY = np.frombuffer(CRC_PROPERTY_KEY, dtype=np.uint8)
_DIGIT_BYTES = np.arange(10, dtype=np.int64) - CRC_UNCOVERED_TAIL_BYTES  # from the record's end
_DECIMAL_PLACES = 10 ** np.arange(10, dtype=np.int64)  # least-significant digit first
# The bytes a topic may hold. TOPIC_PATTERN is one character class repeated, so a topic matches
# when it is not empty and each of its bytes (decoded as latin-1, as _check_record does) does.
assert TOPIC_PATTERN.pattern == r"^[%|a-zA-Z0-9_-]+$", "rebuild _TOPIC_BYTE_OK for the new rule"
_TOPIC_BYTE_OK = np.array([TOPIC_PATTERN.fullmatch(chr(byte)) is not None for byte in range(256)])

Positions = np.ndarray  # int64 byte positions


def valid_run_end(buf: Buffer, pos: int, end: int) -> int:
    """The end of the run of valid V1 message records from `pos` (a record boundary), bytes
    before `end` readable: every record in [pos, result) is one `scan_record` accepts, and the
    record at `result`, when result < end, is one it does not (a BLANK, zeros, a torn, flipped
    or foreign record: the caller asks scan_record what it is). Never raises on any input."""
    raw = np.frombuffer(buf, dtype=np.uint8)
    view = memoryview(buf)
    while True:
        starts, totals = _chain(buf, raw, pos, end)
        if not starts:
            return pos
        starts_array = np.array(starts, dtype=np.int64)
        valid = _valid_count(buf, raw, view, starts_array, np.array(totals, dtype=np.int64))
        if valid < len(starts):
            return starts[valid]
        pos = starts[-1] + totals[-1]


def _chain(buf: Buffer, raw: np.ndarray, pos: int, end: int
           ) -> tuple[list[int], list[int]]:
    """Positions and sizes of up to SCAN_CHUNK_RECORDS records chained from `pos`, as far as
    each has V1's magic code and a TOTALSIZE from a record's smallest to the bytes left. A run
    of records of one size (a put of equal bodies) is read in bulk (`equal_size_run`)."""
    unpack = _PREFIX.unpack_from
    starts: list[int] = []
    totals: list[int] = []
    last = end - HEADER_SIZE_BYTES  # a record that fits has its header before this
    while pos <= last and len(starts) < SCAN_CHUNK_RECORDS:
        total, magic = unpack(buf, pos)
        if magic != MESSAGE_MAGIC_CODE or not RECORD_SIZE_MIN_BYTES <= total <= end - pos:
            break
        run = equal_size_run(buf, raw, pos, total,
                         min((end - pos) // total, SCAN_CHUNK_RECORDS - len(starts)))
        starts.extend(range(pos, pos + run * total, total))
        totals.extend(itertools.repeat(total, run))
        pos += run * total
    return starts, totals


def equal_size_run(buf: Buffer, raw: np.ndarray, pos: int, total: int, room: int) -> int:
    """How many records from `pos`, where a V1 record of `total` bytes is, start with the same
    TOTALSIZE and magic code, each right after the one before: 1 when `room` (the records of
    that size that fit) is below 2, else at most `room`. Probes
    CHAIN_PROBE_RECORDS records past the first, then four times as many each round."""
    prefix = _PREFIX.pack(total, MESSAGE_MAGIC_CODE)
    if room < 2 or buf[pos + total:pos + total + _PREFIX.size] != prefix:
        return 1
    expected = np.frombuffer(prefix, dtype=np.uint8)
    matched, probe = 2, CHAIN_PROBE_RECORDS
    while matched < room:
        count = min(probe, room - matched)
        at = pos + total * np.arange(matched, matched + count, dtype=np.int64)
        ok = (raw[at[:, None] + _PREFIX_BYTES] == expected).all(axis=1)
        accepted = _passing(count, ok)
        matched += accepted
        if accepted < count:
            break
        probe *= 4
    return matched


def _valid_count(buf: Buffer, raw: np.ndarray, view: memoryview,
                 starts: Positions, totals: Positions) -> int:
    """How many of the records at `starts` (V1, of `totals` bytes, each inside `raw`) pass
    every check of record_format._check_record, counted from the first until one fails.
    Each step keeps only the records before the first failure, so every later gather reads
    inside records whose lengths were found consistent."""
    head_rows: list[bytes] = list(map(buf.__getitem__, map(
        slice, starts.tolist(), (starts + HEADER_SIZE_BYTES).tolist())))  # mmap: bytes, cheap
    heads = np.frombuffer(b"".join(head_rows), dtype=HEADER_DTYPE)
    body_sizes = heads["body_size"].astype(np.int64)
    count = _passing(len(starts), (body_sizes >= 0)
                     & (body_sizes + (HEADER_SIZE_BYTES + 3) <= totals))
    starts, totals, body_sizes = starts[:count], totals[:count], body_sizes[:count]
    topic_at = starts + HEADER_SIZE_BYTES + body_sizes
    topic_sizes = raw[topic_at].astype(np.int64)
    ends = starts + totals
    props_at = topic_at + 3 + topic_sizes
    count = _passing(count, props_at <= ends)
    topic_at, topic_sizes, ends, props_at = (
        topic_at[:count], topic_sizes[:count], ends[:count], props_at[:count])
    props_sizes = raw[props_at - 2].astype(np.int64) << 8 | raw[props_at - 1]
    digits = raw[ends[:, None] + _DIGIT_BYTES].astype(np.int64) - ord("0")
    ok = ((HEADER_SIZE_BYTES + 3 + body_sizes[:count] + topic_sizes + props_sizes
           == totals[:count])
          & (props_sizes >= CRC_TAIL_SIZE_BYTES) & (props_sizes <= PROPERTIES_SIZE_MAX_BYTES)
          & (raw[ends[:, None] + _KEY_BYTES] == _KEY).all(axis=1)
          & (raw[ends - 1] == 2)
          & ((digits >= 0) & (digits <= 9)).all(axis=1)
          & (topic_sizes >= 1))
    for size in np.unique(topic_sizes).tolist():
        rows = np.flatnonzero(ok & (topic_sizes == size))
        names = raw[topic_at[rows, None] + 1 + np.arange(size, dtype=np.int64)]
        ok[rows] &= _TOPIC_BYTE_OK[names].all(axis=1)
    count = _passing(count, ok)
    record_crcs = np.fromiter(map(zlib.crc32, head_rows[:count], _tail_crcs(
        raw, view, topic_at[:count], ends[:count] - CRC_UNCOVERED_TAIL_BYTES)), np.int64, count)
    count = _passing(count, record_crcs == digits[:count] @ _DECIMAL_PLACES)
    body_crcs = np.fromiter(map(zlib.crc32, map(view.__getitem__, map(
        slice, (starts[:count] + HEADER_SIZE_BYTES).tolist(), topic_at[:count].tolist()))),
        np.int64, count) & _MASK_31
    return _passing(count, body_crcs == heads["body_crc"][:count])


def _tail_crcs(raw: np.ndarray, view: memoryview, starts: Positions,
               stops: Positions) -> list[int]:
    """zlib.crc32 of each tail raw[start:stop] (TOPICLENGTH to the checksum digits). Tails
    equal to the first (one topic, the same properties: most records of a put) reuse its
    checksum; the others are computed one by one."""
    crc32 = zlib.crc32
    sizes = stops - starts
    if len(starts) == 0 or sizes[0] > TAIL_COMPARE_SIZE_MAX_BYTES:
        return list(map(crc32, map(view.__getitem__, map(slice, starts.tolist(),
                                                         stops.tolist()))))
    rows = np.flatnonzero(sizes == sizes[0])
    tails = raw[starts[rows, None] + np.arange(sizes[0], dtype=np.int64)]
    same = np.zeros(len(starts), dtype=bool)
    same[rows] = (tails == tails[0]).all(axis=1)
    crcs = np.full(len(starts), crc32(tails[0].tobytes()), dtype=np.int64)
    other = np.flatnonzero(~same)
    crcs[other] = np.fromiter(map(crc32, map(view.__getitem__, map(
        slice, starts[other].tolist(), stops[other].tolist()))), np.int64, len(other))
    return crcs.tolist()


def _passing(count: int, ok: np.ndarray) -> int:
    """The number of leading True values among the first `count` of `ok`."""
    return count if bool(ok[:count].all()) else int(np.argmin(ok[:count]))
