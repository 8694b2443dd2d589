"""TierService: tiered storage wired to one MessageStore (what a broker starts and stops).

    start()  file_io + manifest -> TierReader attached to the store (cold reads, and from now
             on local retention deletes only segments the manifest lists);
             Uploader thread when this broker uploads (the replica set's master);
             thread `tier-maintenance`: every tieredRetentionIntervalMs local retention
             (fileReservedTime, only tiered segments) and tier retention
             (tieredStoreFileReservedTime: drop the oldest segments from the manifest, then
             delete their objects); every tieredManifestRefreshIntervalMs reload the manifest
             (a replica that does not upload sees what the master tiered)
    stop()   abort uploads in progress (nothing partial is listed), join the threads
    set_uploading(on)  a role change (controller mode): a promoted master starts an uploader
             (it resumes from the manifest and cleans up leftovers, as after a crash); a
             deposed one stops its own (aborting what it had in flight)

Nothing here runs on the store's write or read threads except the cold read itself; an object
store that is down shows up in `stats()` (last_error, failure counters) and the logs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from storage_engine.config import TieredStoreConfig
from storage_engine.message_store import MessageStore
from storage_engine.tiered.errors import TieredStorageError
from storage_engine.tiered.file_io import FileIO, FileIOOptions, resolve_tier_url
from storage_engine.tiered.layout import Manifest, SegmentEntry, segment_key
from storage_engine.tiered.manifest import ManifestStore
from storage_engine.tiered.reader import TierReader
from storage_engine.tiered.uploader import Uploader

__all__ = ["TierService"]

logger = logging.getLogger(__name__)


class TierService:
    def __init__(self, store: MessageStore, config: TieredStoreConfig, *,
                 broker_name: str, writer: str, upload: bool = True,
                 epoch: Callable[[], int] | None = None,
                 clock_ms: Callable[[], int] | None = None) -> None:
        self.store = store
        self.config = config
        self.url = resolve_tier_url(config, store.store_dir)
        self.file_io = FileIO(self.url, FileIOOptions.from_config(config))
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._epoch = epoch or (lambda: 0)
        self.manifests = ManifestStore(self.file_io, broker_name,
                                       versions_kept=config.manifest_versions_kept,
                                       segments_max=config.manifest_segments_max)
        self.reader = TierReader(self.file_io, self.manifests, config, clock_ms=self._clock_ms)
        self._writer = writer
        self.uploader = self._new_uploader() if upload else None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._counters = {"local_deleted_segments": 0, "tier_deleted_segments": 0,
                          "maintenance_failures": 0}
        self._last_error: dict[str, Any] | None = None

    def attach(self) -> None:
        """Load the manifest and attach the reader to the store (no threads)."""
        try:
            self.file_io.ensure_root()
            self.reader.refresh()
        except TieredStorageError as err:  # the tier is down: hot traffic goes on
            self._record(err)
        self.store.attach_tier(self.reader)

    def start(self) -> None:
        self.attach()
        if self.uploader is not None:
            self.uploader.start()
        self._thread = threading.Thread(target=self._loop, name="tier-maintenance",
                                        daemon=True)
        self._thread.start()
        logger.info("tiered storage on: %s (%s)", self.url,
                    "uploading" if self.uploader else "reading only")

    def _new_uploader(self) -> Uploader:
        return Uploader(self.store, self.file_io, self.manifests, self.config,
                        writer=self._writer, epoch=self._epoch, clock_ms=self._clock_ms,
                        on_commit=self.reader.use)

    def set_uploading(self, upload: bool) -> None:
        """Start or stop this broker's uploader (its role changed); idempotent."""
        with self._lock:
            current = self.uploader
            if upload == (current is not None) or self._stop.is_set():
                return
            self.uploader = started = self._new_uploader() if upload else None
        if started is not None:
            started.start()
        else:
            assert current is not None
            current.stop()
        logger.info("tiered storage: %s", "uploading" if upload else "reading only")

    def stop(self) -> None:
        self._stop.set()
        with self._lock:
            uploader = self.uploader
        if uploader is not None:
            uploader.stop()
        if self._thread is not None:
            self._thread.join()
        self.store.attach_tier(None)

    def _loop(self) -> None:
        step_s = min(self.config.retention_interval_ms,
                     self.config.manifest_refresh_interval_ms) / 1000.0
        next_retention = next_refresh = 0.0
        while not self._stop.wait(step_s):
            now = time.monotonic()
            try:
                if now >= next_refresh:
                    next_refresh = now + self.config.manifest_refresh_interval_ms / 1000.0
                    self.reader.refresh()
                if now >= next_retention:
                    next_retention = now + self.config.retention_interval_ms / 1000.0
                    self.run_retention(self._clock_ms())
            except Exception as err:  # noqa: BLE001 - reported; the next pass tries again
                self._record(err)

    def run_retention(self, now_ms: int) -> tuple[int, int]:
        """One local pass and one tier pass: (local segments deleted, tier segments deleted)."""
        confirm = self.store.stats().confirm_log_position
        local = self.store.delete_expired(now_ms=now_ms, floor_log_position=confirm)
        tier = self._retire_tier(now_ms) if self.uploader is not None else 0
        with self._lock:
            self._counters["local_deleted_segments"] += local
            self._counters["tier_deleted_segments"] += tier
        return local, tier

    def _retire_tier(self, now_ms: int) -> int:
        """Drop the oldest tiered segments older than tieredStoreFileReservedTime: first from
        the manifest (readers stop asking for them), then their objects."""
        cutoff_ms = now_ms - self.config.file_reserved_time_hours * 3_600_000
        expired: list[SegmentEntry] = []
        uploader = self.uploader  # a role change may stop it meanwhile
        writer = uploader.writer if uploader is not None else self._writer

        def drop(manifest: Manifest) -> Manifest:
            expired.clear()
            for segment in manifest.segments:  # oldest first, stop at the first young one
                if segment.last_store_ms >= cutoff_ms:
                    break
                expired.append(segment)
            if not expired:
                return manifest
            return manifest.without_segments([s.base_log_position for s in expired],
                                             epoch=self._epoch(), writer=writer, now_ms=now_ms)

        manifest = self.manifests.commit(drop, epoch=self._epoch())
        self.reader.use(manifest)
        for segment in expired:
            self.file_io.delete(segment_key(self.manifests.broker_name,
                                            segment.base_log_position, segment.epoch))
        if expired:
            logger.info("tier retention removed %d segment(s) below %d", len(expired),
                        manifest.retired_below_log_position)
        return len(expired)

    def _record(self, err: Exception) -> None:
        kind = getattr(err, "kind", type(err).__name__)
        with self._lock:
            self._counters["maintenance_failures"] += 1
            self._last_error = {"kind": kind, "message": str(err), "at_ms": self._clock_ms()}
        if isinstance(err, TieredStorageError):
            logger.warning("tiered storage (%s): %s", kind, err)
        else:
            logger.error("tiered storage maintenance failed", exc_info=err)

    def stats(self) -> dict[str, Any]:
        """Everything an operator needs: where, how far, what failed last."""
        with self._lock:
            counters, last_error = dict(self._counters), self._last_error
        uploader = self.uploader
        upload: dict[str, Any] = uploader.stats() if uploader is not None else {"state": "off"}
        reader = self.reader.stats()
        errors = [e for e in (upload.get("last_error"), reader.pop("read_last_error"),
                              last_error) if e]
        return {"enabled": True, "url": self.url, **counters, **reader,
                "upload": upload,
                "last_error": max(errors, key=lambda e: e["at_ms"]) if errors else None}
