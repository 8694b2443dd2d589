"""Tiered storage: sealed CommitLog segments in object storage (fsspec: file://, s3://).

Import from here (`from storage_engine.tiered import TierService`). Modules:

    layout.py    object names, segment object layout, manifest codec (pure)
    policy.py    resume plan, retry backoff, bandwidth throttle (pure)
    file_io.py   FileIO over fsspec: ranged reads, atomic and create-only writes, verify
    manifest.py  ManifestStore: newest version, create-only commits, fencing by epoch
"""

from __future__ import annotations

from storage_engine.tiered.errors import (
    TierAccessDeniedError,
    TierFencedError,
    TierManifestError,
    TierNotFoundError,
    TierTimeoutError,
    TierVerifyError,
    TieredStorageError,
)
from storage_engine.tiered.file_io import FileIO, FileIOOptions, resolve_tier_url
from storage_engine.tiered.layout import Manifest, QueueRange, SegmentEntry
from storage_engine.tiered.manifest import ManifestStore

__all__ = [
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
    "TierTimeoutError",
    "TierVerifyError",
    "TieredStorageError",
    "resolve_tier_url",
]
