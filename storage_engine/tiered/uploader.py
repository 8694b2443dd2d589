"""Uploader: copy sealed CommitLog segments (with their index) to the tier, in the background.

    pass (every tieredUploadIntervalMs, thread `tier-uploader`)
      sealed segments below confirm + newest manifest + listing of segments/
        -> plan_uploads (policy.py): bases to upload, leftovers to remove
        -> up to tieredUploadConcurrency uploads at once (a worker pool)

    one upload (a worker)                                        state of the object
      read the segment's ConsumeQueue entries from the store     -
      stream data bytes, then index bytes, through the throttle  temp name / open multipart:
        (tieredUploadBytesPerSecMax, shared), hashing them        invisible
      write_atomic -> the final key appears whole                 present, not listed
      verify: size and SHA-256 read back from the tier           present, not listed
      manifest commit (create-only next version)                 listed: readable, and the
                                                                  local copy may be deleted
      failure anywhere -> nothing listed; retry after backoff (tieredUploadRetryBackoff*Ms,
                          doubling); TierFencedError -> stop (a newer master owns the tier)

A crash at any point leaves at most an unlisted object (rewritten by the next upload of that
segment) or a temp file (removed by the next pass). Errors never reach the store's writers or
readers: they are counted, kept as `last_error` in stats and logged.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import numpy as np

from storage_engine.config import TieredStoreConfig
from storage_engine.record_format import STORE_TIMESTAMP_AT
from storage_engine.tiered.errors import TieredStorageError, TierFencedError
from storage_engine.tiered.file_io import FileIO
from storage_engine.tiered.layout import (
    CQ_ENTRY_SIZE_BYTES,
    Manifest,
    QueueRange,
    SegmentEntry,
    segment_key,
    segments_prefix,
)
from storage_engine.tiered.manifest import ManifestStore
from storage_engine.tiered.policy import LocalSegment, Throttle, backoff_ms, plan_uploads

__all__ = ["SegmentSource", "Uploader"]

logger = logging.getLogger(__name__)

_ENTRY_DTYPE = np.dtype([("log_position", ">i8"), ("size_bytes", ">i4"), ("tags_code", ">i8")])


class SegmentSource(Protocol):
    """What the uploader reads from the store (MessageStore implements it)."""

    def tier_segments(self) -> list[tuple[int, int, float]]: ...

    def tier_queue_ranges(self, log_start: int, log_end: int
                          ) -> list[tuple[str, int, int, int]]: ...

    def read_queue_entries(self, topic: str, queue_id: int, queue_offset: int,
                           count: int) -> bytes: ...

    def read_log(self, log_position: int, size_bytes_max: int) -> bytes: ...


class _Stopped(Exception):
    """The uploader is stopping: abort the write in progress (nothing becomes visible)."""


class Uploader:
    """Uploads one store's sealed segments. `start()` / `stop()`; `run_pass()` for tests."""

    def __init__(self, source: SegmentSource, file_io: FileIO, manifests: ManifestStore,
                 config: TieredStoreConfig, *, writer: str, epoch: Callable[[], int],
                 clock_ms: Callable[[], int] | None = None,
                 on_commit: Callable[[Manifest], None] | None = None) -> None:
        self.source = source
        self._on_commit = on_commit or (lambda manifest: None)
        self.file_io = file_io
        self.manifests = manifests
        self.config = config
        self.writer = writer
        self.epoch = epoch
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._throttle = Throttle(config.upload_bytes_per_sec_max,
                                  max(config.upload_chunk_bytes, config.upload_bytes_per_sec_max))
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._in_flight: set[int] = set()
        self._failures: dict[int, int] = {}
        self._retry_at_ms: dict[int, int] = {}
        self._counters = {"uploaded_segments": 0, "uploaded_bytes": 0, "upload_failures": 0,
                          "removed_leftovers": 0, "passes": 0}
        self._last_error: dict[str, Any] | None = None
        self._state = "idle"
        self._listed = False  # the first pass always lists (temp objects left by a crash)
        self._pending = 0  # sealed segments below confirm not yet in the manifest (upload lag)
        self._pool = concurrent.futures.ThreadPoolExecutor(
            config.upload_concurrency, thread_name_prefix="tier-upload")
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        self._state = "running"
        self._thread = threading.Thread(target=self._loop, name="tier-uploader", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Abort uploads in progress (nothing partial becomes visible) and join the threads."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._state != "fenced":
            self._state = "stopped"

    def _loop(self) -> None:
        failures = 0  # passes failed in a row (listing or manifest load): back off like uploads
        while not self._stop.is_set():
            wait_ms = self.config.upload_interval_ms
            try:
                self.run_pass()
                failures = 0
            except Exception as err:  # noqa: BLE001 - the thread must survive anything
                self._record_error(None, err)
                failures += 1
                wait_ms = max(wait_ms, backoff_ms(
                    failures, min_ms=self.config.upload_retry_backoff_min_ms,
                    max_ms=self.config.upload_retry_backoff_max_ms))
            if self._state == "fenced":
                return
            self._stop.wait(wait_ms / 1000.0)

    # -- one pass ---------------------------------------------------------------------------
    def run_pass(self, *, wait: bool = False) -> int:
        """Plan and start uploads; with `wait`, wait for them. Returns uploads started."""
        with self._lock:
            self._counters["passes"] += 1
            if self._state == "fenced":
                return 0
        now_ms = self._clock_ms()
        local = [LocalSegment(base, size, int(mtime_s * 1000))
                 for base, size, mtime_s in self.source.tier_segments()]
        with self._lock:
            busy = self._in_flight | {base for base, at in self._retry_at_ms.items()
                                      if at > now_ms}
        known = self.manifests.latest
        waiting = [s.base_log_position for s in local
                   if known.find(s.base_log_position) is None
                   and s.base_log_position >= known.retired_below_log_position]
        self._pending = len(waiting)
        if self._listed and all(base in busy for base in waiting):
            return 0  # nothing new to start: no request to the object store
        manifest = self.manifests.load()
        names = self.file_io.list(segments_prefix(self.manifests.broker_name))
        plan = plan_uploads(manifest, local, names, now_ms=now_ms,
                            delay_ms=self.config.upload_delay_ms, busy=busy)
        self._listed = True
        for name in plan.remove_objects:
            self.file_io.delete(f"{segments_prefix(self.manifests.broker_name)}/{name}")
            with self._lock:
                self._counters["removed_leftovers"] += 1
        sizes = {segment.base_log_position: segment.size_bytes for segment in local}
        futures = []
        for base in plan.upload:
            with self._lock:
                if len(self._in_flight) >= self.config.upload_concurrency or self._stop.is_set():
                    break
                self._in_flight.add(base)
            futures.append(self._pool.submit(self._upload_guarded, base, sizes[base]))
        if wait:
            concurrent.futures.wait(futures)
        return len(futures)

    def drain(self, passes_max: int = 1000) -> int:
        """Run passes (waiting for their uploads) until one starts nothing: the segments
        uploaded. For tests, benchmarks and tools; the broker uses the thread."""
        total = 0
        for _ in range(passes_max):
            started = self.run_pass(wait=True)
            if not started:
                break
            total += started
        return total

    def _upload_guarded(self, base: int, segment_size: int) -> None:
        try:
            entry = self.upload_segment(base, segment_size)
        except _Stopped:
            logger.info("upload of segment %d aborted: stopping", base)
        except Exception as err:  # noqa: BLE001 - reported, retried after a backoff
            self._record_error(base, err)
        else:
            with self._lock:
                self._failures.pop(base, None)
                self._retry_at_ms.pop(base, None)
                self._counters["uploaded_segments"] += 1
                self._counters["uploaded_bytes"] += entry.object_size_bytes
        finally:
            with self._lock:
                self._in_flight.discard(base)

    def _record_error(self, base: int | None, err: Exception) -> None:
        kind = getattr(err, "kind", type(err).__name__)
        with self._lock:
            self._counters["upload_failures"] += 1
            self._last_error = {"kind": kind, "message": str(err), "at_ms": self._clock_ms(),
                                "segment": base}
            if isinstance(err, TierFencedError):
                self._state = "fenced"
            if base is not None:
                failures = self._failures.get(base, 0) + 1
                self._failures[base] = failures
                delay = backoff_ms(failures, min_ms=self.config.upload_retry_backoff_min_ms,
                                   max_ms=self.config.upload_retry_backoff_max_ms)
                self._retry_at_ms[base] = self._clock_ms() + delay
        if isinstance(err, TieredStorageError):
            logger.warning("tier upload%s failed (%s): %s",
                           "" if base is None else f" of segment {base}", kind, err)
        else:
            logger.error("tier upload%s failed", "" if base is None else f" of segment {base}",
                         exc_info=err)

    # -- one segment ------------------------------------------------------------------------
    def upload_segment(self, base: int, segment_size: int) -> SegmentEntry:
        """Upload, verify and list one sealed segment (the steps in the module docstring)."""
        epoch = self.epoch()  # names the object and the entry; fences the commit
        if self.manifests.latest.epoch > epoch:
            raise TierFencedError(f"manifest epoch {self.manifests.latest.epoch} > ours {epoch}",
                                  url=self.file_io.url, operation="upload")
        queues = tuple(QueueRange(topic, queue_id, first, end - first) for topic, queue_id,
                       first, end in self.source.tier_queue_ranges(base, base + segment_size))
        data_size, first_ms, last_ms = self._extent(base, queues)
        assert 0 <= data_size <= segment_size, (base, data_size, segment_size)
        index_size = CQ_ENTRY_SIZE_BYTES * sum(queue.count for queue in queues)
        key = segment_key(self.manifests.broker_name, base, epoch)
        digest = _Sha256()
        chunks = itertools.chain(self._data_chunks(base, data_size), self._index_chunks(queues))
        written = self.file_io.write_atomic(key, digest.wrap(chunks),
                                            part_bytes=self.config.upload_chunk_bytes)
        if written != data_size + index_size:  # the local index changed under us
            raise TieredStorageError(f"segment {base}: wrote {written} bytes, expected "
                                     f"{data_size + index_size}", operation="upload")
        self.file_io.verify(key, written, digest.hexdigest())
        entry = SegmentEntry(base, segment_size, data_size, written, digest.hexdigest(),
                             epoch, self._clock_ms(), first_ms, last_ms, queues)

        def add(manifest: Manifest) -> Manifest:
            if manifest.find(base) is not None:  # another writer listed it: same bytes
                return manifest
            return manifest.with_segment(entry, epoch=epoch, writer=self.writer,
                                         now_ms=self._clock_ms())

        self._on_commit(self.manifests.commit(add, epoch=epoch))
        logger.info("tiered segment %d (%d bytes, %d index entries)", base, written,
                    index_size // CQ_ENTRY_SIZE_BYTES)
        return entry

    def _entry(self, queue: QueueRange, queue_offset: int) -> tuple[int, int]:
        raw = self.source.read_queue_entries(queue.topic, queue.queue_id, queue_offset, 1)
        if len(raw) != CQ_ENTRY_SIZE_BYTES:
            raise TieredStorageError(f"{queue.topic}/{queue.queue_id}: no index entry at "
                                     f"{queue_offset}", operation="upload")
        entry = np.frombuffer(raw, dtype=_ENTRY_DTYPE)[0]
        return int(entry["log_position"]), int(entry["size_bytes"])

    def _extent(self, base: int, queues: tuple[QueueRange, ...]) -> tuple[int, int, int]:
        """(data_size, first_store_ms, last_store_ms) from each queue's first and last entry
        (a queue's records are in log order): the data ends with the last record indexed."""
        if not queues:
            return 0, 0, 0
        firsts = [self._entry(queue, queue.first_queue_offset)[0] for queue in queues]
        lasts = [self._entry(queue, queue.end_queue_offset - 1) for queue in queues]
        end = max(position + size for position, size in lasts)
        return (end - base, self._store_ms(min(firsts)),
                self._store_ms(max(position for position, _ in lasts)))

    def _store_ms(self, log_position: int) -> int:
        raw = self.source.read_log(log_position + STORE_TIMESTAMP_AT, 8)
        return int.from_bytes(raw, "big") if len(raw) == 8 else 0

    def _data_chunks(self, base: int, data_size: int) -> Iterator[bytes]:
        position = 0
        step = self.config.upload_chunk_bytes
        while position < data_size:
            piece = self.source.read_log(base + position, min(step, data_size - position))
            if not piece:
                raise TieredStorageError(f"local segment {base} ended at {position} of "
                                         f"{data_size} bytes", operation="upload")
            self._pace(len(piece))
            yield piece
            position += len(piece)

    def _index_chunks(self, queues: tuple[QueueRange, ...]) -> Iterator[bytes]:
        """The index part, streamed (a segment of small messages has millions of entries)."""
        step = max(1, self.config.upload_chunk_bytes // CQ_ENTRY_SIZE_BYTES)
        for queue in queues:
            cursor = queue.first_queue_offset
            while cursor < queue.end_queue_offset:
                piece = self.source.read_queue_entries(
                    queue.topic, queue.queue_id, cursor,
                    min(step, queue.end_queue_offset - cursor))
                if not piece:
                    raise TieredStorageError(f"{queue.topic}/{queue.queue_id}: index ended at "
                                             f"{cursor}", operation="upload")
                self._pace(len(piece))
                yield piece
                cursor += len(piece) // CQ_ENTRY_SIZE_BYTES

    def _pace(self, size_bytes: int) -> None:
        if self._stop.is_set():
            raise _Stopped()
        with self._lock:
            wait_s = self._throttle.reserve(size_bytes, time.monotonic())
        if wait_s > 0 and self._stop.wait(wait_s):
            raise _Stopped()

    # -- reporting --------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        with self._lock:
            return {**self._counters, "state": self._state, "pending_segments": self._pending,
                    "uploading": sorted(self._in_flight),
                    "retrying": sorted(self._retry_at_ms), "last_error": self._last_error}


class _Sha256:
    """SHA-256 of the bytes passing through `wrap`."""

    def __init__(self) -> None:
        self._digest = hashlib.sha256()

    def wrap(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        for chunk in chunks:
            self._digest.update(chunk)
            yield chunk

    def hexdigest(self) -> str:
        return self._digest.hexdigest()
