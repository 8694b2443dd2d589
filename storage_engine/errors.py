"""Errors of the storage engine.

Expected outcomes on the hot paths (a full queue, an offset out of range, a flush that timed out)
are *statuses* (`PutStatus`, `GetStatus` in `storage_engine.statuses`), never exceptions. The
exceptions below are for environmental failures and bad input at the API edge:

    StorageError                      base; carries the path / log position it is about
    ├── ConfigError                   a StoreConfig field is invalid (names the key)
    ├── StoreLockedError              another process holds the store directory's lock file
    ├── CorruptRecordError            bytes that do not decode as a record (names the position)
    │   └── ReplicatedDataError       a master's bytes a slave refused to index (cut, link ends)
    ├── InvalidNameError              a topic name / queue id no path may be built from
    ├── QueueOffsetsError             records whose queue offsets do not continue their queue
    ├── CorruptFileError              a metadata file (checkpoint, epoch file) fails its checksum
    ├── StoreFormatError              a record of another record format (open refused, nothing cut)
    ├── FsyncFailedError              fsync failed: fail-stop (storage_engine/files.py), never retry
    └── TruncateBelowConfirmError     a truncation would cut data below the confirm position

`retriable` tells a caller (later: the wire protocol's error table) whether the same request may
succeed when repeated.
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "ConfigError",
    "CorruptFileError",
    "CorruptRecordError",
    "FsyncFailedError",
    "InvalidNameError",
    "QueueOffsetsError",
    "ReplicatedDataError",
    "StorageError",
    "StoreFormatError",
    "StoreLockedError",
    "TruncateBelowConfirmError",
]


class StorageError(Exception):
    """Base of every error raised by the storage engine."""

    retriable: ClassVar[bool] = False


class ConfigError(StorageError, ValueError):
    """A configuration value is invalid; the message names the key."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class StoreLockedError(StorageError):
    """The store directory is locked by another process."""

    def __init__(self, path: str) -> None:
        super().__init__(
            f"store directory is in use by another process (lock file {path} is held); "
            "stop that broker first or use another storePathRootDir"
        )
        self.path = path


class CorruptRecordError(StorageError):
    """Bytes at a position do not decode as a CommitLog record."""

    def __init__(self, reason: str, *, log_position: int = -1) -> None:
        where = f" at log_position {log_position}" if log_position >= 0 else ""
        super().__init__(f"corrupt record{where}: {reason}")
        self.reason = reason
        self.log_position = log_position


class ReplicatedDataError(CorruptRecordError):
    """Bytes replicated from a master that do not hold valid records (a slave refuses them)."""


class InvalidNameError(StorageError, ValueError):
    """A topic name or queue id that breaks the naming rule (storage_engine.names)."""


class QueueOffsetsError(StorageError):
    """Records to index whose queue offsets do not continue their ConsumeQueue."""


class CorruptFileError(StorageError):
    """A metadata file failed its checksum or could not be parsed."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"corrupt file {path}: {reason}")
        self.path = path


class StoreFormatError(StorageError):
    """The CommitLog holds a record of a record format this release does not read (its magic
    code is one of record_format.OTHER_FORMAT_MAGIC_CODES). The open is refused and nothing is
    cut: the records are whole, only not readable here (a downgrade, or the wrong binary)."""

    def __init__(self, format_name: str, magic: int, log_position: int) -> None:
        super().__init__(
            f"record format {format_name} (magic 0x{magic:08X}) at log_position {log_position}: "
            "this store was written by a release that uses another record format; this "
            "release reads V1; nothing was cut"
        )
        self.format_name = format_name
        self.magic = magic
        self.log_position = log_position


class FsyncFailedError(StorageError):
    """fsync/fdatasync of a store file failed. Not retriable: the pages it should have written
    may be gone (storage_engine/files.py); the process stops and recovers on restart."""

    def __init__(self, path: str, err: OSError) -> None:
        super().__init__(f"fsync of {path} failed: {err}")
        self.path = path


class TruncateBelowConfirmError(StorageError):
    """A truncation asked to cut data that replicas have confirmed (docs/design.md §5.5)."""

    def __init__(self, log_position: int, confirm_log_position: int) -> None:
        super().__init__(
            f"refusing to truncate to log_position {log_position}: below the confirm position "
            f"{confirm_log_position}"
        )
        self.log_position = log_position
        self.confirm_log_position = confirm_log_position
