"""The tier's object layout and manifest format (pure: no IO).

Objects under the tier URL, one directory per replica set (brokerName), so every replica of a
set — the master of the day, a new master after failover, a Spark executor — finds the same
objects:

    <tieredStoreUrl>/<brokerName>/
        segments/<20-digit base log_position>.<10-digit epoch>.seg
                                                      one object per tiered CommitLog segment,
                                                      named with the epoch of the master that
                                                      wrote it
        manifest/<20-digit version>.json              manifest versions, each created once

The epoch in the name keeps writers apart: a deposed master that still writes can only
create an object no manifest lists, never replace the one a newer master listed (the manifest
entry's epoch names its object). Segment object (`.seg`), immutable once listed:

    [0, data_size)                      the segment's CommitLog bytes from its base position up
                                        to the end of its last record (the BLANK record and the
                                        zero tail are not uploaded): records keep their
                                        log_position = base + byte position in the object
    [data_size, data_size + 20 * n)     the index: for each queue of the manifest entry, in the
                                        entry's order, that queue's ConsumeQueue entries for the
                                        records of this segment (20 bytes each, the local CQ
                                        layout: log_position(8) size(4) tags_code(8), big-endian)

    A reader by (topic, queue_id, queue_offset) finds the entry whose queue range holds the
    offset, reads 20 * count bytes at data_size + 20 * (entries of the queues listed before +
    queue_offset - first_queue_offset), then the records those entries point at: two ranged
    reads, no local file, no listing.

Manifest version (JSON, UTF-8), the only thing that makes an object "present":

    {"format": 1, "broker_name": "broker-a", "version": 7, "epoch": 2, "checksum": "<sha256>",
     "writer": "broker-a-0@127.0.0.1:10911", "committed_ms": ...,
     "retired_below_log_position": 0,          tier retention removed everything below this
     "segments": [{"base_log_position": 0, "segment_size_bytes": 1073741824,
                   "data_size_bytes": ..., "object_size_bytes": ..., "sha256": "...",
                   "epoch": 2, "uploaded_ms": ..., "first_store_ms": ..., "last_store_ms": ...,
                   "queues": [["TopicA", 0, first_queue_offset, count], ...]}, ...]}

    Segments are sorted by base_log_position, each base at most once. `epoch` of the manifest
    is the highest master epoch that committed it: a writer with a lower epoch is fenced.
    `checksum` is the SHA-256 of the canonical encoding (sorted keys, no spaces) of every other
    field: a damaged or hand-edited version is refused (TierManifestError), never half-read.
"""

from __future__ import annotations

import bisect
import dataclasses
import hashlib
import json
from collections.abc import Iterable
from typing import Any

from storage_engine.tiered.errors import TierManifestError

__all__ = [
    "CQ_ENTRY_SIZE_BYTES",
    "MANIFEST_FORMAT",
    "Manifest",
    "QueueRange",
    "SegmentEntry",
    "manifest_key",
    "manifest_prefix",
    "parse_manifest_version",
    "parse_segment_name",
    "segment_key",
    "segment_name",
    "segments_prefix",
]

MANIFEST_FORMAT = 1
CQ_ENTRY_SIZE_BYTES = 20
SEGMENT_SUFFIX = ".seg"
MANIFEST_SUFFIX = ".json"


def segments_prefix(broker_name: str) -> str:
    return f"{broker_name}/segments"


def manifest_prefix(broker_name: str) -> str:
    return f"{broker_name}/manifest"


def segment_name(base_log_position: int, epoch: int) -> str:
    return f"{base_log_position:020d}.{epoch:010d}{SEGMENT_SUFFIX}"


def segment_key(broker_name: str, base_log_position: int, epoch: int) -> str:
    return f"{segments_prefix(broker_name)}/{segment_name(base_log_position, epoch)}"


def manifest_key(broker_name: str, version: int) -> str:
    return f"{manifest_prefix(broker_name)}/{version:020d}{MANIFEST_SUFFIX}"


def parse_segment_name(name: str) -> tuple[int, int] | None:
    """(base position, epoch) of a final segment object name; None for temps and strangers."""
    stem = name[:-len(SEGMENT_SUFFIX)] if name.endswith(SEGMENT_SUFFIX) else ""
    base, _, epoch = stem.partition(".")
    if len(base) == 20 and base.isdigit() and len(epoch) == 10 and epoch.isdigit():
        return int(base), int(epoch)
    return None


def parse_manifest_version(name: str) -> int | None:
    stem = name[:-len(MANIFEST_SUFFIX)] if name.endswith(MANIFEST_SUFFIX) else ""
    return int(stem) if len(stem) == 20 and stem.isdigit() else None


@dataclasses.dataclass(frozen=True, slots=True)
class QueueRange:
    """A queue's entries in one segment object: queue offsets [first, first + count)."""

    topic: str
    queue_id: int
    first_queue_offset: int
    count: int

    @property
    def end_queue_offset(self) -> int:
        return self.first_queue_offset + self.count


@dataclasses.dataclass(frozen=True, slots=True)
class SegmentEntry:
    """One uploaded, verified segment object."""

    base_log_position: int
    segment_size_bytes: int
    data_size_bytes: int
    object_size_bytes: int
    sha256: str
    epoch: int
    uploaded_ms: int
    first_store_ms: int
    last_store_ms: int
    queues: tuple[QueueRange, ...]

    @property
    def object_name(self) -> str:
        return segment_name(self.base_log_position, self.epoch)

    @property
    def log_position_end(self) -> int:
        """The end of the segment's log range (its successor's base)."""
        return self.base_log_position + self.segment_size_bytes

    def queue_index(self, topic: str, queue_id: int) -> int | None:
        """The position of (topic, queue_id) in `queues`, or None when it has no records here."""
        for index, queue in enumerate(self.queues):
            if queue.queue_id == queue_id and queue.topic == topic:
                return index
        return None

    def index_position(self, queue_index: int, queue_offset: int) -> int:
        """Byte position in the object of the index entry of `queue_offset` of queue #i."""
        before = sum(queue.count for queue in self.queues[:queue_index])
        first = self.queues[queue_index].first_queue_offset
        return self.data_size_bytes + CQ_ENTRY_SIZE_BYTES * (before + queue_offset - first)

    def to_json(self) -> dict[str, Any]:
        return {
            "base_log_position": self.base_log_position,
            "segment_size_bytes": self.segment_size_bytes,
            "data_size_bytes": self.data_size_bytes,
            "object_size_bytes": self.object_size_bytes,
            "sha256": self.sha256, "epoch": self.epoch, "uploaded_ms": self.uploaded_ms,
            "first_store_ms": self.first_store_ms, "last_store_ms": self.last_store_ms,
            "queues": [[q.topic, q.queue_id, q.first_queue_offset, q.count] for q in self.queues],
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SegmentEntry:
        queues = tuple(QueueRange(str(t), int(q), int(f), int(c)) for t, q, f, c in raw["queues"])
        entry = cls(int(raw["base_log_position"]), int(raw["segment_size_bytes"]),
                    int(raw["data_size_bytes"]), int(raw["object_size_bytes"]),
                    str(raw["sha256"]), int(raw["epoch"]), int(raw["uploaded_ms"]),
                    int(raw["first_store_ms"]), int(raw["last_store_ms"]), queues)
        expected = entry.data_size_bytes + CQ_ENTRY_SIZE_BYTES * sum(q.count for q in queues)
        if expected != entry.object_size_bytes or entry.data_size_bytes > entry.segment_size_bytes:
            raise ValueError(f"segment {entry.base_log_position}: sizes do not add up")
        return entry


@dataclasses.dataclass(frozen=True, slots=True)
class Manifest:
    """One manifest version. Immutable: changes produce the next version."""

    broker_name: str
    version: int = 0
    epoch: int = 0
    writer: str = ""
    committed_ms: int = 0
    retired_below_log_position: int = 0
    segments: tuple[SegmentEntry, ...] = ()

    def __post_init__(self) -> None:
        bases = [segment.base_log_position for segment in self.segments]
        assert bases == sorted(set(bases)), "segments sorted, each base once"

    @property
    def bases(self) -> list[int]:
        return [segment.base_log_position for segment in self.segments]

    def find(self, base_log_position: int) -> SegmentEntry | None:
        bases = self.bases
        index = bisect.bisect_left(bases, base_log_position)
        if index < len(bases) and bases[index] == base_log_position:
            return self.segments[index]
        return None

    @property
    def size_bytes(self) -> int:
        return sum(segment.object_size_bytes for segment in self.segments)

    def with_segment(self, entry: SegmentEntry, *, epoch: int, writer: str,
                     now_ms: int) -> Manifest:
        assert self.find(entry.base_log_position) is None, entry.base_log_position
        segments = sorted((*self.segments, entry), key=lambda s: s.base_log_position)
        return dataclasses.replace(self, version=self.version + 1, epoch=max(self.epoch, epoch),
                                   writer=writer, committed_ms=now_ms, segments=tuple(segments))

    def without_segments(self, bases: Iterable[int], *, epoch: int, writer: str,
                         now_ms: int) -> Manifest:
        removed = set(bases)
        kept = tuple(s for s in self.segments if s.base_log_position not in removed)
        retired = max([self.retired_below_log_position] + [
            s.log_position_end for s in self.segments if s.base_log_position in removed])
        return dataclasses.replace(self, version=self.version + 1, epoch=max(self.epoch, epoch),
                                   writer=writer, committed_ms=now_ms,
                                   retired_below_log_position=retired, segments=kept)

    def encode(self) -> bytes:
        body = {
            "format": MANIFEST_FORMAT, "broker_name": self.broker_name, "version": self.version,
            "epoch": self.epoch, "writer": self.writer, "committed_ms": self.committed_ms,
            "retired_below_log_position": self.retired_below_log_position,
            "segments": [segment.to_json() for segment in self.segments],
        }
        return _canonical({**body, "checksum": _checksum(body)})

    @classmethod
    def decode(cls, data: bytes, *, source: str) -> Manifest:
        try:
            raw = json.loads(data)
            if not isinstance(raw, dict) or raw.get("format") != MANIFEST_FORMAT:
                found = raw.get("format") if isinstance(raw, dict) else type(raw).__name__
                raise ValueError(f"format {found!r}, expected {MANIFEST_FORMAT}")
            checksum = raw.pop("checksum", None)
            if checksum != _checksum(raw):
                raise ValueError(f"checksum mismatch (stored {checksum!r})")
            segments = tuple(SegmentEntry.from_json(item) for item in raw["segments"])
            bases = [segment.base_log_position for segment in segments]
            if bases != sorted(set(bases)):
                raise ValueError("segments not sorted by base_log_position or repeated")
            return cls(str(raw["broker_name"]), int(raw["version"]), int(raw["epoch"]),
                       str(raw["writer"]), int(raw["committed_ms"]),
                       int(raw["retired_below_log_position"]), segments)
        except (ValueError, KeyError, TypeError, AttributeError) as err:
            raise TierManifestError(f"unreadable manifest: {err}", key=source,
                                    operation="decode") from err


def _canonical(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def _checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical(body)).hexdigest()
