"""The storage engine's file layer: a FileSystem protocol and the operating system's one.

Every file IO of the store (CommitLog and ConsumeQueue segments, checkpoint, epoch file, lock
and abort marker, retention's mtimes) goes through a `FileSystem`, so that a simulator can run
the real engine over a simulated disk (tests/sim/sim_fs.py: unsynced bytes lost at a crash, torn
and bit-flipped tails, failing fsyncs) and drive its real recovery path. The protocol is what
the engine uses, nothing more:

    FileSystem                                   FileHandle (one open file)
      open(path, create=, mode=) -> FileHandle          size_bytes()  truncate(size)
      read_bytes(path)      (FileNotFoundError)    write_at(data, position) -> bytes written
      exists  is_dir  make_dirs  list_dir          read_at(position, size)
      remove(path)  remove_tree(path)              sync(data_only=)   raw: raises OSError
      rename(source, target)  (atomic replace)     map_readonly(size) -> buffer (slices, numpy)
      sync_directory(path)  raw: raises OSError    release_pages(buffer, size)  unmap(buffer)
      lock(path) -> FileLock  (OSError if held)    data_end(size)  close()
      mtime_s(path)  disk_used_ratio(path)

`sync` and `sync_directory` raise the raw OSError; callers go through `files.sync_file` /
`files.fsync_directory`, which hand a failure to the fail-stop handler (files.py). A write is
durable only after `sync` of its file; a create, rename or unlink only after `sync_directory`
of its directory (POSIX; the simulated disk enforces exactly this).

OsFileSystem is today's behaviour: os.pwrite into preallocated files, read-only mmap for reads,
fdatasync/fsync, flock. It adds one Python call per write over calling `os` directly (below
the noise of a 1.6-1.8 µs pwrite, README "The real storage engine on a simulated disk"); reads
slice the mmap as before.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import shutil
from pathlib import Path
from typing import Any, Protocol

__all__ = ["OS_FILE_SYSTEM", "FileHandle", "FileLock", "FileSystem", "OsFileSystem"]

# A read-only buffer (mmap, memoryview): slicing, len(), struct.unpack_from, numpy.frombuffer.
# (collections.abc.Buffer is Python 3.12.)
Buffer = Any

EXTENTS_MAX = 1 << 16  # data extents walked before giving up (data_end)


class FileHandle(Protocol):
    """One open file, read-write."""

    def size_bytes(self) -> int: ...

    def truncate(self, size_bytes: int) -> None:
        """Set the file's size (ftruncate): growth reads as zeros."""

    def write_at(self, data: bytes | memoryview, position: int) -> int:
        """pwrite; returns the bytes written."""

    def read_at(self, position: int, size_bytes: int) -> bytes: ...

    def sync(self, *, data_only: bool) -> None:
        """fdatasync (`data_only`) or fsync; raises OSError (callers use files.sync_file)."""

    def map_readonly(self, size_bytes: int) -> Buffer:
        """A read-only view of the first `size_bytes` that follows later writes (mmap)."""

    def release_pages(self, view: Buffer, size_bytes: int) -> None:
        """Drop this process's resident pages of view[0:size_bytes] (a whole number of pages);
        the view stays valid and a later read faults the bytes back from the file."""

    def unmap(self, view: Buffer) -> None:
        """Release a view from map_readonly (a reader may still hold it: never raises)."""

    def data_end(self, size_bytes: int) -> int:
        """Where the file's last data extent ends (size_bytes where holes are not known)."""

    def close(self) -> None: ...


class FileLock(Protocol):
    def release(self) -> None: ...


class FileSystem(Protocol):
    def open(self, path: Path, *, create: bool, mode: int = 0o644) -> FileHandle:
        """Open read-write; with `create`, make it if missing and give it `mode`."""

    def read_bytes(self, path: Path) -> bytes:
        """The whole file; FileNotFoundError when it does not exist."""

    def exists(self, path: Path) -> bool: ...

    def is_dir(self, path: Path) -> bool: ...

    def make_dirs(self, path: Path) -> None:
        """mkdir -p."""

    def list_dir(self, path: Path) -> list[str]:
        """Entry names (unsorted); FileNotFoundError when the directory does not exist."""

    def remove(self, path: Path) -> None:
        """Unlink a file; nothing when it does not exist."""

    def remove_tree(self, path: Path) -> None:
        """Delete a directory and everything below it; nothing when it does not exist."""

    def rename(self, source: Path, target: Path) -> None:
        """Atomically replace `target` with `source` (os.replace)."""

    def sync_directory(self, path: Path) -> None:
        """Make creates, renames and unlinks in `path` durable; raises OSError."""

    def lock(self, path: Path) -> FileLock:
        """An exclusive lock on `path` (created); OSError when someone holds it."""

    def mtime_s(self, path: Path) -> float: ...

    def disk_used_ratio(self, path: Path) -> float:
        """Used / total bytes of the disk holding `path` (0.0 when unknown)."""


class OsFile:
    """An os-level file descriptor (the production FileHandle)."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def size_bytes(self) -> int:
        return os.fstat(self.fd).st_size

    def truncate(self, size_bytes: int) -> None:
        os.ftruncate(self.fd, size_bytes)

    def write_at(self, data: bytes | memoryview, position: int) -> int:
        return os.pwrite(self.fd, data, position)

    def read_at(self, position: int, size_bytes: int) -> bytes:
        return os.pread(self.fd, size_bytes, position)

    def sync(self, *, data_only: bool) -> None:
        if data_only:
            os.fdatasync(self.fd)  # looked up per call: tests fail it at the os boundary
        else:
            os.fsync(self.fd)

    def map_readonly(self, size_bytes: int) -> Buffer:
        return mmap.mmap(self.fd, size_bytes, prot=mmap.PROT_READ)

    def release_pages(self, view: Buffer, size_bytes: int) -> None:
        # MAP_SHARED + PROT_READ: the page cache keeps the pages (segment.py's docstring)
        view.madvise(mmap.MADV_DONTNEED, 0, size_bytes)

    def unmap(self, view: Buffer) -> None:
        # a reader may still hold a memoryview (BufferError): the GC unmaps it later
        with contextlib.suppress(BufferError):
            view.close()

    def data_end(self, size_bytes: int) -> int:
        """Skip file holes with SEEK_DATA/SEEK_HOLE (a 1 GiB segment is mostly a hole)."""
        position = last_end = 0
        for _ in range(EXTENTS_MAX):
            try:
                start = os.lseek(self.fd, position, os.SEEK_DATA)
            except OSError:  # ENXIO: no data after `position`
                return last_end
            position = last_end = min(os.lseek(self.fd, start, os.SEEK_HOLE), size_bytes)
            if position >= size_bytes:
                return size_bytes
        return size_bytes

    def close(self) -> None:
        os.close(self.fd)


class _OsLock:
    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def release(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class OsFileSystem:
    """The operating system's file system (what a broker uses)."""

    def open(self, path: Path, *, create: bool, mode: int = 0o644) -> OsFile:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), mode)
        if create:
            try:
                os.fchmod(fd, mode)  # also when a stale file existed with another mode
            except OSError:
                os.close(fd)
                raise
        return OsFile(fd)

    def read_bytes(self, path: Path) -> bytes:
        return Path(path).read_bytes()

    def exists(self, path: Path) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: Path) -> bool:
        return os.path.isdir(path)

    def make_dirs(self, path: Path) -> None:
        os.makedirs(path, exist_ok=True)

    def list_dir(self, path: Path) -> list[str]:
        return os.listdir(path)

    def remove(self, path: Path) -> None:
        Path(path).unlink(missing_ok=True)

    def remove_tree(self, path: Path) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def rename(self, source: Path, target: Path) -> None:
        os.replace(source, target)

    def sync_directory(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def lock(self, path: Path) -> _OsLock:
        """flock (per open file, so a second opener fails fast even inside one process;
        POSIX record locks would not); the file then says which process holds it."""
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return _OsLock(fd)

    def mtime_s(self, path: Path) -> float:
        return os.stat(path).st_mtime

    def disk_used_ratio(self, path: Path) -> float:
        usage = shutil.disk_usage(path)
        return usage.used / usage.total if usage.total else 0.0


OS_FILE_SYSTEM = OsFileSystem()
