"""Checkpoint, abort marker and lock file of a store directory.

checkpoint (48 bytes, big-endian, replaced atomically: temp file + fsync + rename + dir fsync)

    0   4  magic 0x52434B50 ("RCKP")     4   4  version (1)
    8   8  flushed_log_position          CommitLog bytes below this were fsynced
    16  8  consume_queue_log_position    every ConsumeQueue is fsynced up to records below this
    24  8  confirm_log_position          highest position replicas confirmed (docs/design.md §5.2)
    32  8  truncate_intent_log_position  -1, or a truncation that must be (re)done on open
    40  4  flags (bit 0: written by a clean shutdown)
    44  4  CRC32 of bytes [0, 44)

Why an intent field: a truncation deletes several files; a crash half way must not let a later
recovery scan find the cut records again, so the target is made durable first and redone on open.

abort: exists while the store is open; found at open = the last run crashed (RocketMQ's `abort`).
lock:  an flock held while the store is open (per open file, so a second opener fails fast even
       inside the same process; POSIX record locks would not).
"""

from __future__ import annotations

import dataclasses
import struct
import zlib
from pathlib import Path

from storage_engine.errors import CorruptFileError, StoreLockedError
from storage_engine.files import atomic_write_bytes, fsync_directory
from storage_engine.fs import OS_FILE_SYSTEM, FileLock, FileSystem

__all__ = ["Checkpoint", "DirectoryLock", "read_checkpoint", "write_checkpoint"]

_LAYOUT = struct.Struct(">IIqqqqI")
_CRC = struct.Struct(">I")
MAGIC = 0x52434B50
VERSION = 1
FLAG_CLEAN_SHUTDOWN = 1


@dataclasses.dataclass(frozen=True, slots=True)
class Checkpoint:
    flushed_log_position: int = 0
    consume_queue_log_position: int = 0
    confirm_log_position: int = 0
    truncate_intent_log_position: int = -1
    clean_shutdown: bool = False


def write_checkpoint(path: Path, checkpoint: Checkpoint,
                     fs: FileSystem = OS_FILE_SYSTEM) -> None:
    body = _LAYOUT.pack(
        MAGIC, VERSION, checkpoint.flushed_log_position, checkpoint.consume_queue_log_position,
        checkpoint.confirm_log_position, checkpoint.truncate_intent_log_position,
        FLAG_CLEAN_SHUTDOWN if checkpoint.clean_shutdown else 0,
    )
    atomic_write_bytes(path, body + _CRC.pack(zlib.crc32(body)), fs=fs)


def read_checkpoint(path: Path, fs: FileSystem = OS_FILE_SYSTEM) -> Checkpoint | None:
    """The stored checkpoint; None if the file does not exist. CorruptFileError if damaged."""
    try:
        data = fs.read_bytes(path)
    except FileNotFoundError:
        return None
    if len(data) != _LAYOUT.size + _CRC.size:
        raise CorruptFileError(str(path), f"size {len(data)} != {_LAYOUT.size + _CRC.size}")
    (stored_crc,) = _CRC.unpack_from(data, _LAYOUT.size)
    if zlib.crc32(data[:_LAYOUT.size]) != stored_crc:
        raise CorruptFileError(str(path), "CRC mismatch")
    magic, version, flushed, cq, confirm, intent, flags = _LAYOUT.unpack_from(data)
    if magic != MAGIC or version != VERSION:
        raise CorruptFileError(str(path), f"magic {magic:#x} version {version}")
    return Checkpoint(flushed, cq, confirm, intent, bool(flags & FLAG_CLEAN_SHUTDOWN))


class DirectoryLock:
    """`lock` file with an exclusive lock (FileSystem.lock), plus the `abort` marker."""

    def __init__(self, directory: Path, fs: FileSystem = OS_FILE_SYSTEM) -> None:
        self._directory = directory
        self._fs = fs
        self._lock_path = directory / "lock"
        self._abort_path = directory / "abort"
        self._lock: FileLock | None = None

    def acquire(self) -> bool:
        """Take the lock; returns True when the previous run did not shut down cleanly."""
        try:
            self._lock = self._fs.lock(self._lock_path)
        except OSError as err:
            raise StoreLockedError(str(self._lock_path)) from err
        crashed = self._fs.exists(self._abort_path)
        self._fs.open(self._abort_path, create=True).close()
        fsync_directory(self._directory, self._fs)
        return crashed

    def release(self, *, clean: bool) -> None:
        """Remove the abort marker when the shutdown was clean, then drop the lock."""
        if clean:
            self._fs.remove(self._abort_path)
            fsync_directory(self._directory, self._fs)
        if self._lock is not None:
            self._lock.release()
            self._lock = None
