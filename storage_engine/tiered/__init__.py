"""Tiered storage: sealed CommitLog segments in object storage (fsspec: file://, s3://).

Import from here (`from storage_engine.tiered import TierService`). Modules:

    layout.py    object names, segment object layout, manifest codec (pure)
    policy.py    resume plan, retry backoff, bandwidth throttle (pure)
    file_io.py   FileIO over fsspec: ranged reads, atomic and create-only writes, verify
    manifest.py  ManifestStore: newest version, create-only commits, fencing by epoch
    uploader.py  Uploader: background uploads (atomic, verified, throttled, retried, resumable)
    reader.py    TierReader (the store's cold path, block cache) and direct range reads
    service.py   TierService: the above wired to one MessageStore, retention, stats
"""

from __future__ import annotations

from storage_engine.tiered.errors import (
    TierAccessDeniedError,
    TieredStorageError,
    TierFencedError,
    TierManifestError,
    TierNotFoundError,
    TierTimeoutError,
    TierVerifyError,
)
from storage_engine.tiered.file_io import FileIO, FileIOOptions, resolve_tier_url
from storage_engine.tiered.layout import Manifest, QueueRange, SegmentEntry
from storage_engine.tiered.manifest import ManifestStore
from storage_engine.tiered.policy import backoff_ms
from storage_engine.tiered.reader import (
    BlockCache,
    TierRange,
    TierReader,
    load_manifest,
    plan_tier_ranges,
    read_tier_range,
)
from storage_engine.tiered.service import TierService
from storage_engine.tiered.uploader import Uploader

__all__ = [
    "BlockCache",
    "FileIO",
    "FileIOOptions",
    "Manifest",
    "ManifestStore",
    "QueueRange",
    "SegmentEntry",
    "TierAccessDeniedError",
    "TierFencedError",
    "TierManifestError",
    "TierNotFoundError",
    "TierRange",
    "TierReader",
    "TierService",
    "TierTimeoutError",
    "TierVerifyError",
    "TieredStorageError",
    "Uploader",
    "backoff_ms",
    "load_manifest",
    "plan_tier_ranges",
    "read_tier_range",
    "resolve_tier_url",
]
