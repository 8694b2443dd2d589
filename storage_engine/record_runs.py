"""Index a run of replicated records in bulk (the slave's dispatch path), with numpy.

A slave receives the master's CommitLog bytes and must write the ConsumeQueue entries of every
complete record in them. Parsing record by record in Python costs microseconds each, which at
100-byte messages caps replication far below the master's write rate. Here only the walk along
TOTALSIZE fields is a Python loop (two integers per record); the fields an entry needs are then
gathered for all records at once from fixed header offsets (and the walk itself strides over
runs of equal-size records, see `walk_records`):

    header offset  field           used for
    0              TOTALSIZE       the walk; entry size
    12             QUEUEID         grouping
    20             QUEUEOFFSET     contiguity check, first offset of each group
    84             BODYLENGTH      where the topic (1-byte length + bytes) and properties
                                   (2-byte length + bytes) start
    properties     TAGS value      tagsCode; a record whose properties hold only the CRC tail
                                   has tagsCode 0 without looking further

`scan_run` takes the leading records that share one topic (a replica's batches are almost
always one producer's topic); the caller repeats on the rest.

The bytes come from a master, so nothing in them is trusted: the walk raises CorruptRecordError
on a magic code that is neither a record's nor a BLANK's, or a TOTALSIZE below the smallest
record; `scan_run` checks, for every record it returns and before it reads a field at an offset
computed from another, that BODYLENGTH, TOPICLENGTH and PROPERTIESLENGTH add up to TOTALSIZE
and that the topic is a valid name (storage_engine.names). Positions in the error are relative
to `data`. (Checksums are verified only by recovery: a master that computes them can send any
well-formed record, which without peer identity cannot be told from a real one.)
"""

from __future__ import annotations

import dataclasses
import struct

import numpy as np

from storage_engine.errors import CorruptRecordError
from storage_engine.names import topic_name_error
from storage_engine.record_format import (
    BLANK_MAGIC_CODE,
    CRC_TAIL_SIZE_BYTES,
    HEADER_SIZE_BYTES,
    MESSAGE_MAGIC_CODE,
    RECORD_SIZE_MIN_BYTES,
    SYSFLAG_AT,
    SYSFLAG_PUT_CONTINUES,
    magic_reason,
    tags_code_of,
)

__all__ = [
    "RecordRun",
    "group_entries",
    "last_put_end",
    "last_put_end_few",
    "scan_run",
    "walk_few",
    "walk_records",
]

_PREFIX = struct.Struct(">iI")
_SYSFLAG = struct.Struct(">I")
STRIDE_RECORDS_MIN = 8
STEP_RECORDS = 64
_QUEUE_ID_AT = 12
_QUEUE_OFFSET_AT = 20
_BODY_SIZE_AT = 84
ENTRY_DTYPE = np.dtype([("log_position", ">i8"), ("size", ">i4"), ("tags_code", ">i8")])


@dataclasses.dataclass(frozen=True, slots=True)
class RecordRun:
    """Complete records of one topic: arrays in log order."""

    topic: str
    log_positions: np.ndarray  # int64
    sizes: np.ndarray  # int64
    queue_ids: np.ndarray  # int64
    queue_offsets: np.ndarray  # int64
    tags_codes: np.ndarray  # int64


def walk_records(data: object, start: int, end: int
                 ) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """Relative positions and sizes of the complete records in data[start:end), where the walk
    stopped, and whether it stopped on a BLANK (the segment's end marker).

    Records of one size (a batch of equal bodies) are found by striding: from a record of
    size S, the candidates at S, 2S, ... are checked at once (TOTALSIZE == S and the magic
    code), and the walk resumes after the last one that matched. When a stride accepts fewer
    than STRIDE_RECORDS_MIN, the next STEP_RECORDS go one by one before striding again."""
    raw = np.frombuffer(data, dtype=np.uint8)  # type: ignore[call-overload]
    chunks: list[np.ndarray] = []
    size_chunks: list[np.ndarray] = []
    singles: list[int] = []
    single_sizes: list[int] = []
    unpack = _PREFIX.unpack_from
    position = start
    blank = False
    step_until = 0  # walk one by one until this many singles were taken
    while position + 8 <= end:
        total, magic = unpack(data, position)  # type: ignore[arg-type]
        if magic == BLANK_MAGIC_CODE:
            blank = True
            break
        if magic != MESSAGE_MAGIC_CODE or total < RECORD_SIZE_MIN_BYTES:
            raise CorruptRecordError(f"{magic_reason(magic)}, TOTALSIZE {total}",
                                     log_position=position)
        if position + total > end:
            break
        count = (end - position) // total
        if len(singles) >= step_until and count >= STRIDE_RECORDS_MIN:
            at = position + total * np.arange(count, dtype=np.int64)
            heads = _rows(raw, at, 8).copy().view(">u4").reshape(-1, 2)
            ok = (heads[:, 0] == total) & (heads[:, 1] == MESSAGE_MAGIC_CODE)
            accepted = count if ok.all() else int(np.argmin(ok))
            if accepted >= STRIDE_RECORDS_MIN:
                _flush(singles, single_sizes, chunks, size_chunks)
                chunks.append(at[:accepted])
                size_chunks.append(np.full(accepted, total, dtype=np.int64))
                position += accepted * total
                continue
            step_until = len(singles) + STEP_RECORDS
        singles.append(position)
        single_sizes.append(total)
        position += total
    _flush(singles, single_sizes, chunks, size_chunks)
    if not chunks:
        return np.zeros(0, np.int64), np.zeros(0, np.int64), position, blank
    return np.concatenate(chunks), np.concatenate(size_chunks), position, blank


def walk_few(data: object, start: int, end: int, count_max: int) -> tuple[int, int, bool] | None:
    """`walk_records` for a handful of records, in plain Python: (how many complete records
    data[start:end) holds, where the walk stopped, whether on a BLANK), or None once it finds
    `count_max` of them (the bulk walk is then cheaper). Same checks as `walk_records`. Why:
    a single acknowledged put ships one record, and numpy's set-up (arrays, gathers) cost a
    slave ~70 us per record where this walk costs a few (README, "Where the time of one
    acknowledged put goes")."""
    unpack = _PREFIX.unpack_from
    position = start
    count = 0
    while position + 8 <= end:
        total, magic = unpack(data, position)  # type: ignore[arg-type]
        if magic == BLANK_MAGIC_CODE:
            return count, position, True
        if magic != MESSAGE_MAGIC_CODE or total < RECORD_SIZE_MIN_BYTES:
            raise CorruptRecordError(f"{magic_reason(magic)}, TOTALSIZE {total}",
                                     log_position=position)
        if position + total > end:
            break
        count += 1
        if count >= count_max:
            return None
        position += total
    return count, position, False


def last_put_end(data: object, positions: np.ndarray, sizes: np.ndarray) -> int:
    """The relative end of the last record at `positions` that ends its put (SYSFLAG without
    SYSFLAG_PUT_CONTINUES), or -1 when every one continues into a later record."""
    if not len(positions):
        return -1
    raw = np.frombuffer(data, dtype=np.uint8)  # type: ignore[call-overload]
    flags = _gather(raw, positions + SYSFLAG_AT, 4, ">u4")
    last = np.flatnonzero((flags & SYSFLAG_PUT_CONTINUES) == 0)
    if not len(last):
        return -1
    index = int(last[-1])
    return int(positions[index] + sizes[index])


def last_put_end_few(data: object, start: int, count: int) -> int:
    """`last_put_end` of the `count` complete records from `start` (a handful: walk_few's)."""
    found = -1
    position = start
    for _ in range(count):
        total = _PREFIX.unpack_from(data, position)[0]  # type: ignore[arg-type]
        position += total
        flag_at = position - total + SYSFLAG_AT
        sys_flag = _SYSFLAG.unpack_from(data, flag_at)[0]  # type: ignore[arg-type]
        if not sys_flag & SYSFLAG_PUT_CONTINUES:
            found = position
    return found


def _flush(singles: list[int], sizes: list[int], chunks: list[np.ndarray],
           size_chunks: list[np.ndarray]) -> None:
    if singles:
        chunks.append(np.asarray(singles, dtype=np.int64))
        size_chunks.append(np.asarray(sizes, dtype=np.int64))
        singles.clear()
        sizes.clear()


def _rows(raw: np.ndarray, at: np.ndarray, width: int) -> np.ndarray:
    """raw[at[i]:at[i] + width] for every i, as rows (a read-only view: copy before
    reinterpreting). Records of one size sit at equal distances: then the rows are a strided
    view of `raw` instead of a gather through an index array of len(at) x width positions
    (the bulk walk, scan and grouping of 4 MiB of 1 KiB records: 0.50-0.92 instead of
    0.98-1.16 ms of CPU, docs/benchmarks/ha.md, 2026-12-02). Rows that would leave `raw`
    take the gather, which raises IndexError as before."""
    count = len(at)
    if count > 1:
        first, step = int(at[0]), int(at[1] - at[0])
        if (step > 0 and first >= 0 and first + step * (count - 1) + width <= len(raw)
                and bool((np.diff(at) == step).all())):
            return np.lib.stride_tricks.as_strided(raw[first:], shape=(count, width),
                                                   strides=(step, 1), writeable=False)
    return raw[at[:, None] + np.arange(width)]


def _gather(raw: np.ndarray, at: np.ndarray, width: int, dtype: str) -> np.ndarray:
    return _rows(raw, at, width).copy().view(dtype).reshape(-1).astype(np.int64)


def scan_run(data: object, positions: np.ndarray, sizes: np.ndarray, base_position: int
             ) -> RecordRun:
    """Fields of the leading records at `positions` (relative to `data`; log positions are
    `base_position` + relative) that share the first record's topic: at least one."""
    raw = np.frombuffer(data, dtype=np.uint8)  # type: ignore[call-overload]
    body_sizes = _gather(raw, positions + _BODY_SIZE_AT, 4, ">i4")
    _check(positions, (body_sizes < 0) | (body_sizes > sizes - RECORD_SIZE_MIN_BYTES),
           "BODYLENGTH does not fit in TOTALSIZE")
    topic_at = positions + HEADER_SIZE_BYTES + body_sizes
    topic_sizes = raw[topic_at].astype(np.int64)
    properties_ends = topic_at + 3 + topic_sizes
    _check(positions, properties_ends > positions + sizes, "TOPICLENGTH does not fit")
    properties_sizes_all = _gather(raw, properties_ends - 2, 2, ">u2")
    _check(positions, (properties_ends + properties_sizes_all != positions + sizes)
           | (properties_sizes_all < CRC_TAIL_SIZE_BYTES),
           "BODYLENGTH + TOPICLENGTH + PROPERTIESLENGTH != TOTALSIZE")
    first = int(topic_at[0])
    topic_size = int(topic_sizes[0])
    topic_bytes = bytes(raw[first + 1:first + 1 + topic_size])
    reason = topic_name_error(topic_bytes.decode("latin-1"))
    if reason is not None:
        raise CorruptRecordError(reason, log_position=int(positions[0]))
    same = topic_sizes == topic_size
    if topic_size:
        candidates = np.nonzero(same)[0]
        names = _rows(raw, topic_at[candidates] + 1, topic_size)
        same[candidates] = (names == np.frombuffer(topic_bytes, np.uint8)).all(axis=1)
    count = len(positions) if same.all() else int(np.argmin(same))
    at = positions[:count]
    topic_at = topic_at[:count]
    queue_ids = _gather(raw, at + _QUEUE_ID_AT, 4, ">i4")
    queue_offsets = _gather(raw, at + _QUEUE_OFFSET_AT, 8, ">i8")
    properties_at = topic_at + 1 + topic_size
    properties_sizes = properties_sizes_all[:count]
    tags_codes = np.zeros(count, dtype=np.int64)
    for index in np.nonzero(properties_sizes != CRC_TAIL_SIZE_BYTES)[0].tolist():
        start = int(properties_at[index]) + 2
        tags_codes[index] = tags_code_of(bytes(raw[start:start + int(properties_sizes[index])]))
    return RecordRun(topic_bytes.decode("ascii"), at + base_position, sizes[:count], queue_ids,
                     queue_offsets, tags_codes)


def _check(positions: np.ndarray, bad: np.ndarray, reason: str) -> None:
    if bad.any():
        raise CorruptRecordError(reason, log_position=int(positions[int(np.argmax(bad))]))


def group_entries(run: RecordRun) -> list[tuple[int, np.ndarray, np.ndarray]]:
    """Per queue id, in first-appearance order: (queue_id, its queue offsets, its packed
    ConsumeQueue entries as a uint8 array)."""
    groups = []
    unique, first_index = np.unique(run.queue_ids, return_index=True)
    for queue_id in unique[np.argsort(first_index)].tolist():
        mask = run.queue_ids == queue_id
        entries = np.empty(int(mask.sum()), dtype=ENTRY_DTYPE)
        entries["log_position"] = run.log_positions[mask]
        entries["size"] = run.sizes[mask]
        entries["tags_code"] = run.tags_codes[mask]
        groups.append((int(queue_id), run.queue_offsets[mask], entries.view(np.uint8)))
    return groups
