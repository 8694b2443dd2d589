"""The recovery scan's bulk check gives the same verdict as the one-record check, on any damage.

Goal (issue 42: restart bounded without trusting any record): `_scan_segment` checks runs of
records in bulk (record_scan.valid_run_end) and only the record a run stops at one at a time.
That must change nothing recovery decides: on segments damaged in every way recovery meets
(flipped bits, a torn or zeroed tail, zeros or rubbish in the middle, a wrong magic code, a
BLANK, a record of another format, and lengths, topic bytes, checksum key or digits altered
with both checksums made right again so that only the structural checks can catch them), the
cut point, its reason and the StoreFormatError refusal must be those of the reference (the
scan as it was, scan_record on every record). And valid_run_end must accept exactly the
records scan_record accepts: a bulk check that rejected a valid record would only be slow
(scan_record takes over), so it is checked apart, as is a chunk size that splits runs.
Method: deterministic seeds; random records of random sizes, topics (some with bytes no topic
may hold) and properties, built with the real encoder; the reference kept here.
"""

from __future__ import annotations

import random
import zlib
from unittest import mock

import pytest

from storage_engine import record_scan
from storage_engine.commit_log import _scan_segment
from storage_engine.errors import StoreFormatError
from storage_engine.record_format import (
    BLANK_MAGIC_CODE,
    CRC_UNCOVERED_TAIL_BYTES,
    HEADER_SIZE_BYTES,
    MESSAGE_MAGIC_CODE_V2,
    encode_batch,
    encode_blank,
    encode_host,
    encode_properties,
    other_format_at,
    scan_record,
)
from storage_engine.record_scan import valid_run_end

SEEDS = 300
HOST = encode_host("10.0.0.7", 10911)
TOPIC_BYTES = b"abcXYZ019_-%|"
NOT_TOPIC_BYTES = b". /\x00\xff\n:"


class FakeSegment:
    """What _scan_segment reads of a Segment."""

    def __init__(self, data: bytes, base_position: int) -> None:
        self.map = data
        self.size_bytes = len(data)
        self.base_position = base_position


def reference_scan(segment: FakeSegment, start: int = 0) -> tuple[int, str]:
    """_scan_segment before record_scan: scan_record on every record."""
    data = segment.map
    size = segment.size_bytes
    position = start
    while position < size:
        total = scan_record(data, position, size)
        if total == 0:
            return size, "segment sealed"
        if total < 0:
            if data[position:position + 8] == bytes(8):
                return position, "zero-filled tail"
            log_position = segment.base_position + position
            other = other_format_at(data, position, size, log_position)
            if other is not None:
                raise StoreFormatError(*other, log_position)
            return position, f"invalid record at segment offset {position}"
        position += total
    return position, "segment full"


def outcome(scan: object, segment: FakeSegment, start: int) -> tuple[int, str] | str:
    try:
        return scan(segment, start)  # type: ignore[operator,no-any-return]
    except StoreFormatError as err:
        return str(err)


def first_rejected(data: bytes, start: int) -> int:
    """Where scan_record, record by record from `start`, first accepts no message record."""
    position = start
    while position < len(data):
        total = scan_record(data, position, len(data))
        if total <= 0:
            return position
        position += total
    return position


def random_topic(rng: random.Random) -> bytes:
    size = rng.choice((0, 1, 2, 5, 12, 40, 127, 128, 200))  # 0: no topic, checksums right
    topic = bytes(rng.choice(TOPIC_BYTES) for _ in range(size))
    if size and rng.random() < 0.1:  # a byte no topic may hold, checksums right
        at = rng.randrange(size)
        topic = topic[:at] + bytes((rng.choice(NOT_TOPIC_BYTES),)) + topic[at + 1:]
    return topic


def random_records(rng: random.Random, base_position: int, size_bytes: int
                   ) -> tuple[bytearray, list[int]]:
    """A segment of random puts, zeros after them (or a BLANK to its end); the positions."""
    data = bytearray()
    positions: list[int] = []
    while True:
        count = rng.choice((1, 1, 3, 20, 90))
        same_body = rng.random() < 0.5  # a put of equal-size records: the bulk walk's stride
        body_size = rng.choice((0, 1, 100, 1024, 3000))
        bodies = [rng.randbytes(body_size if same_body else rng.choice((0, 7, 300, 1024)))
                  for _ in range(count)]
        topic = random_topic(rng)
        props = rng.choice((None, [b""] * count, [b"K\x01" + bytes(33_000) + b"\x02"] * count,
                            [encode_properties(
            {"KEYS": f"k{rng.randrange(99)}"})] * count, [encode_properties(
                {"UNIQ": str(index)}) for index in range(count)]))
        parts: list[bytes] = []
        sizes: list[int] = []
        encoded = encode_batch(
            topic_meta=bytes((len(topic),)) + topic, bodies=bodies, properties=props,
            queue_ids=[rng.randrange(8)] * count, queue_offsets=range(count), start_index=0,
            log_position=base_position + len(data), space_bytes=size_bytes - len(data),
            store_timestamp_ms=1_700_000_000_000, store_host=HOST,
            born_timestamp_ms=1_700_000_000_000, born_host=HOST, flag=0, out_parts=parts,
            out_positions=positions, out_sizes=sizes)
        data += b"".join(parts)
        if encoded < count:
            break
    if rng.random() < 0.3:  # sealed: a BLANK record to the segment's end
        data += encode_blank(size_bytes - len(data))
    elif rng.random() < 0.5:  # the segment is not full: fewer records, zeros after them
        keep = rng.randrange(len(positions) + 1)
        if keep < len(positions):
            del data[positions[keep] - base_position:]
            del positions[keep:]
    data += bytes(size_bytes - len(data))
    return data, [position - base_position for position in positions]


def reseal(data: bytearray, pos: int) -> None:
    """Make both checksums of the record at `pos` right again for its (altered) lengths,
    where they can be located: only the structural checks can then reject it."""
    total = int.from_bytes(data[pos:pos + 4], "big", signed=True)
    body_size = int.from_bytes(data[pos + 84:pos + 88], "big", signed=True)
    end = pos + total
    topic_at = pos + HEADER_SIZE_BYTES + body_size
    if not (pos + 111 <= end <= len(data) and body_size >= 0 and topic_at < end - 11):
        return
    data[pos + 8:pos + 12] = (zlib.crc32(data[pos + HEADER_SIZE_BYTES:topic_at])
                              & 0x7FFFFFFF).to_bytes(4, "big")
    crc = zlib.crc32(data[topic_at:end - CRC_UNCOVERED_TAIL_BYTES])
    crc = zlib.crc32(data[pos:pos + HEADER_SIZE_BYTES], crc)
    if data[end - 11:end - 1].isdigit():  # digits left altered stay so
        data[end - 11:end - 1] = b"%010d" % crc
        data[end - 11:end - 1] = data[end - 11:end - 1][::-1]


def damage(rng: random.Random, data: bytearray, positions: list[int], base: int) -> str:
    written = positions[-1] + int.from_bytes(data[positions[-1]:positions[-1] + 4], "big")
    at = rng.randrange(written)
    pos = rng.choice(positions)
    total = int.from_bytes(data[pos:pos + 4], "big")
    how = rng.choice(("flip", "flips", "zero_tail", "zeros", "garbage", "magic", "v2",
                      "blank", "field", "field", "field", "digits", "none"))
    if how == "flip":
        data[at] ^= 1 << rng.randrange(8)
    elif how == "flips":
        for _ in range(rng.randrange(2, 6)):
            data[rng.randrange(written)] ^= 1 << rng.randrange(8)
    elif how == "zero_tail":
        data[at:] = bytes(len(data) - at)
    elif how == "zeros":
        size = rng.choice((1, 4, 8, 50, 400))
        data[at:at + size] = bytes(len(data[at:at + size]))
    elif how == "garbage":
        size = rng.choice((1, 8, 100, 2000))
        data[at:at + size] = rng.randbytes(len(data[at:at + size]))
    elif how == "magic":
        data[pos + 4:pos + 8] = rng.randbytes(4)
    elif how == "v2":  # a whole record of another format: refused, never cut
        data[pos + 4:pos + 8] = MESSAGE_MAGIC_CODE_V2.to_bytes(4, "big")
        if rng.random() < 0.3:  # implausible (position wrong): a torn tail like any other
            data[pos + 28:pos + 36] = (base + pos + 1).to_bytes(8, "big")
    elif how == "blank":
        left = len(data) - pos if rng.random() < 0.7 else rng.randrange(8, 1 << 20)
        data[pos:pos + 8] = left.to_bytes(4, "big") + BLANK_MAGIC_CODE.to_bytes(4, "big")
    elif how == "digits":  # a digit + 10 and the next one - 1: same value, not decimal
        digits = data[pos + total - 11:pos + total - 1]
        at = rng.choice([k for k in range(9) if digits[k + 1] > 0x30] or [0])
        digits[at] += 10
        digits[at + 1] -= 1
        data[pos + total - 11:pos + total - 1] = digits
    elif how == "field":  # a length, topic, key, digit or end byte, then checksums right
        body_size = int.from_bytes(data[pos + 84:pos + 88], "big")
        topic_at = pos + HEADER_SIZE_BYTES + body_size
        end = pos + total
        where = rng.choice((0, 1, 2, 3, 84, 85, 86, 87)) + pos if rng.random() < 0.3 else \
            rng.choice((topic_at, topic_at + 1, topic_at + data[topic_at],
                        topic_at + data[topic_at] + 1, topic_at + data[topic_at] + 2,
                        end - 20, end - 14, end - 12, end - 11, end - 5, end - 1))
        data[where] = rng.choice((0, 1, 2, 0x30, 0x39, 0x7F, 0x80, 0xFF, ord("."),
                                  ord("%"), data[where] ^ 1, data[where] + 1 & 0xFF))
        reseal(data, pos)
    return how


@pytest.mark.parametrize("chunk", [record_scan.SCAN_CHUNK_RECORDS, 7])
def test_the_bulk_scan_cuts_where_the_record_by_record_scan_cuts(chunk: int) -> None:
    kinds: dict[str, int] = {}
    differing_verdicts = 0
    with mock.patch.object(record_scan, "SCAN_CHUNK_RECORDS", chunk):
        for seed in range(SEEDS):
            rng = random.Random(seed)
            base = rng.choice((0, 1 << 20, 5 << 30))
            data, positions = random_records(rng, base, rng.choice((4096, 65536, 200_000)))
            how = damage(rng, data, positions, base) if positions else "empty"
            kinds[how] = kinds.get(how, 0) + 1
            segment = FakeSegment(bytes(data), base)
            start = rng.choice(positions[:len(positions) // 2 + 1]) if positions else 0
            for begin in {0, start}:
                expected = outcome(reference_scan, segment, begin)
                assert outcome(_scan_segment, segment, begin) == expected, (seed, how, begin)
                assert valid_run_end(segment.map, begin, len(data)) == first_rejected(
                    segment.map, begin), (seed, how, begin)
                differing_verdicts += expected != outcome(reference_scan, FakeSegment(
                    bytes(data[:first_rejected(segment.map, 0)]) + bytes(
                        len(data) - first_rejected(segment.map, 0)), base), 0)
    # every kind of damage was tried, and damage changed the verdict often enough to matter
    assert set(kinds) >= {"flip", "flips", "zero_tail", "zeros", "garbage", "magic", "v2",
                          "blank", "field", "digits"}, kinds
    assert differing_verdicts > SEEDS // 3


def test_structural_damage_with_right_checksums_is_still_rejected() -> None:
    # a record whose lengths or topic were altered and whose checksums were then recomputed:
    # only the length, topic and checksum-pair rules can reject it, in bulk as one by one
    rejected = 0
    for seed in range(200):
        rng = random.Random(seed)
        data, positions = random_records(rng, 0, 65536)
        if not positions:
            continue
        pos = rng.choice(positions)
        before = scan_record(bytes(data), pos, len(data))
        body_size = int.from_bytes(data[pos + 84:pos + 88], "big")
        topic_at = pos + HEADER_SIZE_BYTES + body_size
        data[rng.choice((topic_at, topic_at + 1, pos + 87))] ^= 1 << rng.randrange(8)
        reseal(data, pos)
        after = scan_record(bytes(data), pos, len(data))
        assert valid_run_end(bytes(data), pos, len(data)) == first_rejected(bytes(data), pos)
        rejected += before > 0 and after < 0
    assert rejected > 50


def test_the_topic_byte_table_is_the_topic_rule() -> None:
    from storage_engine.names import TOPIC_PATTERN
    for byte in range(256):
        for text in (chr(byte), "a" + chr(byte), chr(byte) * 3):
            expected = TOPIC_PATTERN.fullmatch(text) is not None
            assert all(record_scan._TOPIC_BYTE_OK[ord(ch)] for ch in text) == expected, byte
