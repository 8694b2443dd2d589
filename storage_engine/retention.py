"""Local retention without tiering: a background thread that deletes expired segments.

With tiered storage on, `storage_engine.tiered.TierService` runs retention itself (only
segments the tier holds may go). Without it, this thread calls `MessageStore.delete_expired`
every `cleanResourceInterval` ms with the confirm position as the floor, so a broker's disk is
bounded by `fileReservedTime` and `diskMaxUsedSpaceRatio` as in RocketMQ. A failing pass is
logged and the next one tries again; it never stops writes or reads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from storage_engine.message_store import MessageStore

__all__ = ["RetentionService"]

logger = logging.getLogger(__name__)


class RetentionService:
    """Runs `delete_expired` every `clean_resource_interval_ms` until `stop()`."""

    def __init__(self, store: MessageStore, *,
                 clock_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self.store = store
        self._clock_ms = clock_ms
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.deleted_segments = 0
        self.failed_passes = 0

    def run_once(self) -> int:
        """One pass: segments deleted (0 when nothing is old enough)."""
        deleted = self.store.delete_expired(
            now_ms=self._clock_ms(),
            floor_log_position=self.store.stats().confirm_log_position)
        self.deleted_segments += deleted
        return deleted

    def start(self) -> RetentionService:
        self._thread = threading.Thread(target=self._loop, name="retention", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        interval_s = self.store.config.clean_resource_interval_ms / 1000.0
        while not self._stop.wait(interval_s):
            try:
                self.run_once()
            except Exception:
                self.failed_passes += 1
                logger.exception("retention pass failed")
