"""Reads from the tier: the store's cold path (TierReader) and direct range reads (Spark).

A read by (topic, queue_id, queue_offset), with the manifest in memory:

    queue map (built per manifest version): (topic, queue_id) -> [(first, end, segment, i)]
    bisect the queue_offset -> the segment object and the queue's place in its index
    ranged read 1: 20-byte index entries [queue_offset, queue_offset + n) at
                   data_size + 20 * (entries of queues before + queue_offset - first)
    ranged read 2: the records' bytes (object position = log_position - base)

Both reads go through BlockCache: the object is cut into tieredReadBlockBytes blocks; a miss
fetches the missing run plus tieredReadAheadBlocks more in one ranged read, and the cache drops
least recently used blocks beyond tieredReadCacheBytesMax. A sequential consumer therefore
costs one request per (1 + read-ahead) blocks.

Visibility: entries past `confirm_log_position` are never returned (tiered segments are all
below it when uploaded; the check keeps the rule local). The manifest in memory is replaced by
the uploader on each commit and reloaded every tieredManifestRefreshIntervalMs by the
maintenance thread, never on the read path: a read does IO only when the tier holds its
offset. An object that vanished (tier retention) reloads the manifest and fails this read
(the caller retries).

For Spark executors: `plan_tier_ranges` cuts a queue_offset range into per-object TierRanges
(picklable), `read_tier_range` reads one as RecordBlocks with no broker and no local file, and
`storage_engine.block_to_arrow` turns a block into an Arrow batch of the schema asked for;
`load_manifest` gives the plan's input. A Spark source would do, per queue range:

    manifest = load_manifest(FileIO(url, options), broker_name)        # driver
    ranges = plan_tier_ranges(manifest, topic, queue_id, start, end)  # driver: partitions
    for block in read_tier_range(file_io, tier_range): block_to_arrow(...)   # executor
"""

from __future__ import annotations

import bisect
import collections
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from storage_engine.config import TieredStoreConfig
from storage_engine.messages import RecordBlock
from storage_engine.record_format import (
    STORE_TIMESTAMP_AT,
)
from storage_engine.statuses import GetStatus
from storage_engine.tiered.errors import TieredStorageError, TierNotFoundError
from storage_engine.tiered.file_io import FileIO
from storage_engine.tiered.layout import CQ_ENTRY_SIZE_BYTES, Manifest, SegmentEntry, segment_key
from storage_engine.tiered.manifest import ManifestStore

__all__ = ["BlockCache", "TierRange", "TierReader", "load_manifest", "plan_tier_ranges",
           "read_tier_range"]
FAILURE_LOG_INTERVAL_MS = 10_000
logger = logging.getLogger(__name__)

_ENTRY_DTYPE = np.dtype([("log_position", ">i8"), ("size_bytes", ">i4"), ("tags_code", ">i8")])


class BlockCache:
    """A bounded LRU of fixed-size blocks of immutable objects. Thread-safe."""

    def __init__(self, block_bytes: int, read_ahead_blocks: int, bytes_max: int) -> None:
        self.block_bytes = block_bytes
        self.read_ahead_blocks = read_ahead_blocks
        self.bytes_max = bytes_max
        self._blocks: collections.OrderedDict[tuple[str, int], bytes] = collections.OrderedDict()
        self._size_bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = self.fetched_bytes = 0

    def read(self, file_io: FileIO, key: str, object_size: int, start: int, end: int) -> bytes:
        """Bytes [start, end) of the object `key` (of `object_size` bytes)."""
        assert 0 <= start <= end <= object_size, (key, start, end, object_size)
        if start == end:
            return b""
        first, last = start // self.block_bytes, (end - 1) // self.block_bytes
        blocks: dict[int, bytes] = {}
        with self._lock:
            for number in range(first, last + 1):
                block = self._blocks.get((key, number))
                if block is not None:
                    self._blocks.move_to_end((key, number))
                    blocks[number] = block
        missing = [number for number in range(first, last + 1) if number not in blocks]
        self.hits += (last - first + 1) - len(missing)
        if missing:
            self.misses += len(missing)
            blocks.update(self._fetch(file_io, key, object_size, missing[0], missing[-1]))
        joined = b"".join(blocks[number] for number in range(first, last + 1))
        offset = first * self.block_bytes
        return joined[start - offset:end - offset]

    def _fetch(self, file_io: FileIO, key: str, object_size: int, first: int,
               last: int) -> dict[int, bytes]:
        final = min(last + self.read_ahead_blocks, (object_size - 1) // self.block_bytes)
        start = first * self.block_bytes
        data = file_io.read_range(key, start, min(object_size, (final + 1) * self.block_bytes))
        self.fetched_bytes += len(data)
        fetched = {number: data[(number - first) * self.block_bytes:
                                (number - first + 1) * self.block_bytes]
                   for number in range(first, final + 1)}
        with self._lock:
            for number, block in fetched.items():
                if (key, number) not in self._blocks:
                    self._blocks[(key, number)] = block
                    self._size_bytes += len(block)
            while self._size_bytes > self.bytes_max and self._blocks:
                _, dropped = self._blocks.popitem(last=False)
                self._size_bytes -= len(dropped)
        return fetched

    @property
    def size_bytes(self) -> int:
        return self._size_bytes


@dataclasses.dataclass(frozen=True, slots=True)
class _QueueSpan:
    first_queue_offset: int
    end_queue_offset: int
    segment: SegmentEntry
    queue_index: int


def _queue_map(manifest: Manifest) -> dict[tuple[str, int], list[_QueueSpan]]:
    spans: dict[tuple[str, int], list[_QueueSpan]] = {}
    for segment in manifest.segments:
        for index, queue in enumerate(segment.queues):
            spans.setdefault((queue.topic, queue.queue_id), []).append(_QueueSpan(
                queue.first_queue_offset, queue.end_queue_offset, segment, index))
    for items in spans.values():
        items.sort(key=lambda span: span.first_queue_offset)
    return spans


def _first_of(span: _QueueSpan) -> int:
    return span.first_queue_offset


def _find_span(spans: list[_QueueSpan], queue_offset: int) -> _QueueSpan | None:
    at = bisect.bisect_right(spans, queue_offset, key=_first_of) - 1
    if at < 0 or queue_offset >= spans[at].end_queue_offset:
        return None
    return spans[at]


def _read_span(file_io: FileIO, cache: BlockCache, broker_name: str, span: _QueueSpan,
               queue_offset: int, *, max_count: int, max_bytes: int,
               confirm_log_position: int) -> tuple[bytes, np.ndarray]:
    """(records back to back, their sizes) from `queue_offset` within one segment object."""
    segment = span.segment
    key = segment_key(broker_name, segment.base_log_position, segment.epoch)
    count = min(max_count, span.end_queue_offset - queue_offset)
    index_at = segment.index_position(span.queue_index, queue_offset)
    raw = cache.read(file_io, key, segment.object_size_bytes, index_at,
                     index_at + CQ_ENTRY_SIZE_BYTES * count)
    entries = np.frombuffer(raw, dtype=_ENTRY_DTYPE)
    positions = entries["log_position"].astype(np.int64)
    sizes = entries["size_bytes"].astype(np.int64)
    visible = int(np.searchsorted(positions + sizes > confirm_log_position, True))
    keep = int(np.searchsorted(np.cumsum(sizes[:visible]), max_bytes, side="right"))
    keep = min(visible, max(keep, 1))
    if keep == 0:
        return b"", sizes[:0]
    positions, sizes = positions[:keep] - segment.base_log_position, sizes[:keep]
    low, high = int(positions[0]), int(positions[-1] + sizes[-1])
    span_bytes = cache.read(file_io, key, segment.object_size_bytes, low, high)
    ends = positions + sizes
    if high - low == int(sizes.sum()):  # contiguous: the common case
        return span_bytes, sizes
    return b"".join(span_bytes[p - low:e - low]
                    for p, e in zip(positions.tolist(), ends.tolist(), strict=True)), sizes


class TierReader:
    """The store's cold path (storage_engine.tier_hooks.ColdTier). Thread-safe."""

    def __init__(self, file_io: FileIO, manifests: ManifestStore, config: TieredStoreConfig,
                 *, clock_ms: Callable[[], int] | None = None) -> None:
        self.file_io = file_io
        self.manifests = manifests
        self.config = config
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self.cache = BlockCache(config.read_block_bytes, config.read_ahead_blocks,
                                config.read_cache_bytes_max)
        self._manifest = Manifest(manifests.broker_name)
        self._spans: dict[tuple[str, int], list[_QueueSpan]] = {}
        self._loaded_ms = -1 << 62
        self._lock = threading.Lock()
        self._counters = {"cold_reads": 0, "cold_read_messages": 0, "cold_read_failures": 0,
                          "manifest_refresh_failures": 0}
        self._last_error: dict[str, Any] | None = None
        self._logged_ms = -1 << 62
        self._suppressed = 0

    def refresh(self) -> Manifest:
        """Reload the manifest (IO); keep the previous one on failure (counted, raised)."""
        try:
            manifest = self.manifests.load()
        except TieredStorageError as err:
            self._failed("manifest_refresh_failures", err)
            raise
        self.use(manifest)
        return manifest

    def use(self, manifest: Manifest) -> None:
        """Serve from `manifest` (the uploader hands over each version it commits)."""
        spans = _queue_map(manifest)
        with self._lock:
            if manifest.version >= self._manifest.version:
                self._manifest, self._spans = manifest, spans
            self._loaded_ms = self._clock_ms()

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    def holds_segment(self, base_log_position: int, log_position_end: int) -> bool:
        """May the local copy go? Yes when the tier lists it (verified upload), or when tier
        retention already retired that range (local retention must not stall behind it)."""
        manifest = self._manifest
        if log_position_end <= manifest.retired_below_log_position:
            return True
        entry = manifest.find(base_log_position)
        return entry is not None and entry.log_position_end == log_position_end

    def min_queue_offset(self, topic: str, queue_id: int) -> int | None:
        spans = self._spans.get((topic, queue_id))
        return spans[0].first_queue_offset if spans else None

    def queue_offset_for_timestamp(self, topic: str, queue_id: int,
                                   timestamp_ms: int) -> int | None:
        """The first tiered queue_offset stored at or after `timestamp_ms`, or None: a binary
        search over the index and the records' store timestamps (ranged reads, cached), in the
        first object whose newest record is recent enough."""
        for span in self._spans.get((topic, queue_id), []):
            if span.segment.last_store_ms < timestamp_ms:
                continue
            key = segment_key(self.manifests.broker_name, span.segment.base_log_position,
                              span.segment.epoch)
            low, high = span.first_queue_offset, span.end_queue_offset
            while low < high:
                mid = (low + high) // 2
                if self._store_ms(key, span, mid) < timestamp_ms:
                    low = mid + 1
                else:
                    high = mid
            if low < span.end_queue_offset:
                return low
        return None

    def _store_ms(self, key: str, span: _QueueSpan, queue_offset: int) -> int:
        segment = span.segment
        at = segment.index_position(span.queue_index, queue_offset)
        entry = self.cache.read(self.file_io, key, segment.object_size_bytes, at, at + 8)
        position = int.from_bytes(entry, "big") - segment.base_log_position + STORE_TIMESTAMP_AT
        raw = self.cache.read(self.file_io, key, segment.object_size_bytes, position,
                              position + 8)
        return int.from_bytes(raw, "big")

    def read_block(self, topic: str, queue_id: int, queue_offset: int, *, max_count: int,
                   max_bytes: int, confirm_log_position: int) -> RecordBlock | None:
        spans = self._spans.get((topic, queue_id))  # no IO unless the tier holds the offset
        span = None if not spans else _find_span(spans, queue_offset)
        if not spans:
            return None
        low, high = spans[0].first_queue_offset, spans[-1].end_queue_offset
        if queue_offset < low:
            return RecordBlock(GetStatus.OFFSET_TOO_SMALL, low, low, high)
        if span is None:
            return None
        try:
            data, sizes = _read_span(self.file_io, self.cache, self.manifests.broker_name, span,
                                     queue_offset, max_count=max_count, max_bytes=max_bytes,
                                     confirm_log_position=confirm_log_position)
        except TierNotFoundError as err:  # retired under us: newer manifest, caller retries
            self._failed("cold_read_failures", err)
            with contextlib.suppress(TieredStorageError):
                self.refresh()
            raise
        except TieredStorageError as err:
            self._failed("cold_read_failures", err)
            raise
        with self._lock:
            self._counters["cold_reads"] += 1
            self._counters["cold_read_messages"] += int(sizes.size)
        if sizes.size == 0:
            return RecordBlock(GetStatus.NO_MATCHED_MESSAGE, queue_offset, low, high, b"", sizes)
        return RecordBlock(GetStatus.FOUND, queue_offset + int(sizes.size), low, high, data,
                           sizes)

    def _failed(self, counter: str, err: TieredStorageError) -> None:
        """Count and keep the error; log it at most every FAILURE_LOG_INTERVAL_MS (a consumer
        polling during an outage must not flood the log)."""
        now_ms = self._clock_ms()
        with self._lock:
            self._counters[counter] += 1
            self._last_error = {"kind": err.kind, "message": str(err), "at_ms": now_ms}
            quiet = now_ms - self._logged_ms < FAILURE_LOG_INTERVAL_MS
            if not quiet:
                self._logged_ms = now_ms
            suppressed, self._suppressed = (self._suppressed + 1, self._suppressed + 1) \
                if quiet else (self._suppressed, 0)
        if not quiet:
            logger.warning("tier read failed (%s; %d similar not logged): %s", err.kind,
                           suppressed, err)

    def stats(self) -> dict[str, Any]:
        manifest = self._manifest
        with self._lock:
            counters = dict(self._counters)
        return {**counters, "manifest_version": manifest.version,
                "manifest_loaded_ms": self._loaded_ms if self._loaded_ms > 0 else None,
                "tier_segments": len(manifest.segments), "tier_bytes": manifest.size_bytes,
                "tier_min_log_position": manifest.bases[0] if manifest.segments else None,
                "cache_bytes": self.cache.size_bytes, "cache_hits": self.cache.hits,
                "cache_misses": self.cache.misses, "read_last_error": self._last_error}


# -- direct reads (Spark executors) -----------------------------------------------------------
def load_manifest(file_io: FileIO, broker_name: str) -> Manifest:
    """The newest manifest of a replica set (`broker_name`) under a tier URL, for planning.
    The URL is in `broker_info()["tiered"]["url"]`; credentials come from FileIOOptions or the
    AWS environment of the process."""
    return ManifestStore(file_io, broker_name, versions_kept=2, segments_max=1 << 62).load()


@dataclasses.dataclass(frozen=True, slots=True)
class TierRange:
    """Queue offsets [first, end) of one queue inside one segment object (picklable)."""

    broker_name: str
    topic: str
    queue_id: int
    first_queue_offset: int
    end_queue_offset: int
    segment: SegmentEntry
    queue_index: int


def plan_tier_ranges(manifest: Manifest, topic: str, queue_id: int, start_queue_offset: int,
                     end_queue_offset: int) -> list[TierRange]:
    """The tier's part of [start, end) for one queue, cut at object boundaries."""
    ranges = []
    for span in _queue_map(manifest).get((topic, queue_id), []):
        first = max(start_queue_offset, span.first_queue_offset)
        end = min(end_queue_offset, span.end_queue_offset)
        if first < end:
            ranges.append(TierRange(manifest.broker_name, topic, queue_id, first, end,
                                    span.segment, span.queue_index))
    return ranges


def read_tier_range(file_io: FileIO, tier_range: TierRange, *, rows_per_block: int = 4096,
                    bytes_per_block: int = 16 << 20,
                    cache: BlockCache | None = None) -> Iterator[RecordBlock]:
    """Read one TierRange as RecordBlocks (FOUND, next_queue_offset = the offset after the
    block's last row), straight from the object store."""
    assert rows_per_block > 0 and bytes_per_block > 0
    cache = cache or BlockCache(4 << 20, 2, 64 << 20)
    span = _QueueSpan(tier_range.segment.queues[tier_range.queue_index].first_queue_offset,
                      tier_range.end_queue_offset, tier_range.segment, tier_range.queue_index)
    cursor = tier_range.first_queue_offset
    while cursor < tier_range.end_queue_offset:
        data, sizes = _read_span(file_io, cache, tier_range.broker_name, span, cursor,
                                 max_count=rows_per_block, max_bytes=bytes_per_block,
                                 confirm_log_position=1 << 62)
        cursor += int(sizes.size)
        yield RecordBlock(GetStatus.FOUND, cursor, tier_range.first_queue_offset,
                          tier_range.end_queue_offset, data, sizes)
