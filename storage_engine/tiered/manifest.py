"""ManifestStore: load the newest manifest version, commit the next one create-only.

    load()                     list <broker>/manifest/, read the highest version (empty
                               Manifest when there is none)
    commit(change, epoch)      latest = load(); fenced if latest.epoch > epoch;
                               next = change(latest) (version + 1);
                               write_if_absent(manifest_key(next.version), next.encode())
                                 True  -> committed; prune versions older than
                                          tieredManifestVersionsKept
                                 False -> another writer took that version: reload, re-apply
                                          `change` (at most MANIFEST_COMMIT_ATTEMPTS_MAX times)

Two writers (a deposed master and a new one) can never both commit version N, and a writer whose
epoch is below the manifest's is refused with TierFencedError, so the manifest never goes back.
Versions are immutable objects, so a reader never sees a half-written manifest.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from storage_engine.tiered.errors import TieredStorageError, TierFencedError, TierManifestError
from storage_engine.tiered.file_io import FileIO
from storage_engine.tiered.layout import (
    Manifest,
    manifest_key,
    manifest_prefix,
    parse_manifest_version,
)

__all__ = ["MANIFEST_COMMIT_ATTEMPTS_MAX", "ManifestStore"]

logger = logging.getLogger(__name__)

MANIFEST_COMMIT_ATTEMPTS_MAX = 8


class ManifestStore:
    """The manifest of one replica set under one tier URL. Thread-safe."""

    def __init__(self, file_io: FileIO, broker_name: str, *, versions_kept: int,
                 segments_max: int) -> None:
        self.file_io = file_io
        self.broker_name = broker_name
        self.versions_kept = versions_kept
        self.segments_max = segments_max
        self._lock = threading.Lock()  # guards _latest
        self._commit_lock = threading.Lock()  # one commit at a time in this process
        self._latest = Manifest(broker_name)

    @property
    def latest(self) -> Manifest:
        """The newest version this process has loaded or committed (no IO)."""
        return self._latest

    def _versions(self) -> list[int]:
        names = self.file_io.list(manifest_prefix(self.broker_name))
        return sorted(v for v in map(parse_manifest_version, names) if v is not None)

    def load(self) -> Manifest:
        versions = self._versions()
        if not versions:
            manifest = Manifest(self.broker_name)
        else:
            key = manifest_key(self.broker_name, versions[-1])
            manifest = Manifest.decode(self.file_io.read(key), source=key)
            if manifest.broker_name != self.broker_name or manifest.version != versions[-1]:
                raise TierManifestError(
                    f"names broker {manifest.broker_name!r} version {manifest.version}, "
                    f"expected {self.broker_name!r} version {versions[-1]}",
                    url=self.file_io.url, key=key, operation="load")
        with self._lock:
            if manifest.version >= self._latest.version:
                self._latest = manifest
            return self._latest

    def commit(self, change: Callable[[Manifest], Manifest], *, epoch: int) -> Manifest:
        """Apply `change` to the newest version and commit the result as the next version.
        `change` returning its argument means nothing to do."""
        with self._commit_lock:
            for _ in range(MANIFEST_COMMIT_ATTEMPTS_MAX):
                latest = self.load()
                if latest.epoch > epoch:
                    raise TierFencedError(
                        f"manifest version {latest.version} has epoch {latest.epoch} > ours "
                        f"{epoch} (written by {latest.writer}): a newer master owns the tier",
                        url=self.file_io.url, operation="commit")
                proposed = change(latest)
                if proposed is latest:
                    return latest
                assert proposed.version == latest.version + 1, (proposed.version, latest.version)
                if len(proposed.segments) > self.segments_max:
                    raise TieredStorageError(
                        f"manifest would list {len(proposed.segments)} segments > "
                        f"tieredManifestSegmentsMax={self.segments_max}",
                        url=self.file_io.url, operation="commit")
                key = manifest_key(self.broker_name, proposed.version)
                if self.file_io.write_if_absent(key, proposed.encode()):
                    with self._lock:
                        self._latest = proposed
                    self._prune(proposed.version)
                    return proposed
                logger.info("manifest version %d taken by another writer; reloading",
                            proposed.version)
        raise TieredStorageError(f"no manifest version committed after "
                                 f"{MANIFEST_COMMIT_ATTEMPTS_MAX} attempts (writers racing)",
                                 url=self.file_io.url, operation="commit")

    def _prune(self, newest: int) -> None:
        """Drop versions older than the newest `versions_kept` (readers holding one reload)."""
        try:
            for version in self._versions():
                if version <= newest - self.versions_kept:
                    self.file_io.delete(manifest_key(self.broker_name, version))
        except TieredStorageError as err:  # old versions are harmless: try again next commit
            logger.warning("manifest pruning failed: %s", err)
