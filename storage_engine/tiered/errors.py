"""Errors of tiered storage (a subtree of storage_engine's StorageError).

    StorageError
    └── TieredStorageError         an object-store operation failed; names the URL, key and
        │                          operation. Retriable: the uploader and readers try again.
        ├── TierAccessDeniedError  credentials rejected or no permission (check tieredS3* keys
        │                          or the AWS environment)
        ├── TierNotFoundError      the bucket (or an object the manifest names) does not exist
        ├── TierTimeoutError       no answer within tieredRequestTimeoutMs
        ├── TierVerifyError        an uploaded object read back with the wrong size or checksum
        ├── TierManifestError      a manifest version that does not parse or belongs to another
        │                          replica set (not retriable: an operator must look)
        └── TierFencedError        a writer with a newer epoch owns the manifest: this broker is
                                   a deposed master and must stop uploading (not retriable)

Hot writes and reads never see these: the uploader's thread and cold reads catch them, count
them in stats and log them with context (STYLE.md §3.5: environmental failures).
"""

from __future__ import annotations

from typing import ClassVar

from storage_engine.errors import StorageError

__all__ = [
    "TierAccessDeniedError",
    "TierFencedError",
    "TierManifestError",
    "TierNotFoundError",
    "TierTimeoutError",
    "TierVerifyError",
    "TieredStorageError",
]


class TieredStorageError(StorageError):
    """An object-store operation failed."""

    retriable: ClassVar[bool] = True
    kind: ClassVar[str] = "io"

    def __init__(self, message: str, *, url: str = "", key: str = "", operation: str = "") -> None:
        where = "/".join(part.strip("/") for part in (url, key) if part)
        prefix = f"{operation} {where}: " if operation or where else ""
        super().__init__(f"{prefix}{message}")
        self.url = url
        self.key = key
        self.operation = operation


class TierAccessDeniedError(TieredStorageError):
    kind: ClassVar[str] = "access_denied"


class TierNotFoundError(TieredStorageError):
    kind: ClassVar[str] = "not_found"


class TierTimeoutError(TieredStorageError):
    kind: ClassVar[str] = "timeout"


class TierVerifyError(TieredStorageError):
    kind: ClassVar[str] = "verify"


class TierManifestError(TieredStorageError):
    retriable: ClassVar[bool] = False
    kind: ClassVar[str] = "manifest"


class TierFencedError(TieredStorageError):
    retriable: ClassVar[bool] = False
    kind: ClassVar[str] = "fenced"
