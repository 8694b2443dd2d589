"""Small durable-file helpers shared by the store's files, and the store's fsync policy.

Fail-stop on fsync errors (PostgreSQL's "fsyncgate" lesson): when fsync/fdatasync fails, the
kernel may already have dropped the dirty pages it could not write and marked them clean, so a
second fsync can succeed although the data never reached the disk. Retrying is therefore never
safe, nor is acknowledging anything that needed the failed fsync. Every fsync of the store goes
through `sync_file` / `fsync_directory` (over the store's FileSystem, fs.py); a failure calls
the process-wide fsync failure handler, whose default logs one CRITICAL line and ends the
process at once with exit code `FSYNC_FAILED_EXIT_CODE` (no clean shutdown: the abort marker
stays, the restart recovers from the log what really reached the disk). A test or the simulator
installs its own handler with `set_fsync_failure_handler`; when a handler returns, the caller
gets `FsyncFailedError` and the flush service that saw it flushes nothing more (it never
retries).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path

from storage_engine.errors import FsyncFailedError
from storage_engine.fs import OS_FILE_SYSTEM, FileHandle, FileSystem

__all__ = [
    "FSYNC_FAILED_EXIT_CODE",
    "FsyncFailureHandler",
    "PendingDirectorySyncs",
    "atomic_write_bytes",
    "exit_on_fsync_failure",
    "fsync_directory",
    "make_dirs",
    "make_dirs_durable",
    "set_fsync_failure_handler",
    "sync_file",
]

logger = logging.getLogger(__name__)

FSYNC_FAILED_EXIT_CODE = 74  # sysexits.h EX_IOERR

FsyncFailureHandler = Callable[[OSError, str], None]


def exit_on_fsync_failure(err: OSError, path: str) -> None:
    """The production handler: say why in one line, then end the process without cleanup."""
    message = (f"fsync of {path} failed ({err}): the kernel may have dropped unwritten pages, "
               f"so nothing that needed this fsync is acknowledged and it is not retried; "
               f"stopping the process (exit code {FSYNC_FAILED_EXIT_CODE}); a restart "
               f"recovers from what reached the disk")
    logger.critical("%s", message)
    for handler in logging.getLogger().handlers:
        handler.flush()
    try:
        sys.stderr.flush()
        os.write(2, f"FATAL: {message}\n".encode())
    finally:
        os._exit(FSYNC_FAILED_EXIT_CODE)


_handler: FsyncFailureHandler = exit_on_fsync_failure


def set_fsync_failure_handler(handler: FsyncFailureHandler) -> FsyncFailureHandler:
    """Install `handler` for every later fsync failure of this process; returns the old one."""
    global _handler
    previous, _handler = _handler, handler
    return previous


def sync_file(handle: FileHandle, path: str | Path, *, data_only: bool) -> None:
    """fdatasync (`data_only`) or fsync a file; a failure goes to the fsync failure handler."""
    try:
        handle.sync(data_only=data_only)
    except OSError as err:
        _handler(err, str(path))
        raise FsyncFailedError(str(path), err) from err


def fsync_directory(path: Path, fs: FileSystem = OS_FILE_SYSTEM) -> None:
    """Make a create/rename/unlink in `path` durable; a failure goes to the handler."""
    try:
        fs.sync_directory(path)
    except OSError as err:
        _handler(err, str(path))
        raise FsyncFailedError(str(path), err) from err


def make_dirs(path: Path, fs: FileSystem = OS_FILE_SYSTEM) -> list[Path]:
    """mkdir -p; returns the parent of each directory it created, outermost first: the
    directories to fsync before the new ones are durable (none when `path` existed)."""
    missing: list[Path] = []
    cursor = Path(path)
    while not fs.exists(cursor):
        missing.append(cursor)
        if cursor.parent == cursor:
            break
        cursor = cursor.parent
    if missing:
        fs.make_dirs(path)
    return [created.parent for created in reversed(missing)]


def make_dirs_durable(path: Path, fs: FileSystem = OS_FILE_SYSTEM) -> None:
    """mkdir -p, and make every directory it created durable (fsync of each new one's parent).

    Why: a new directory's entry is durable only after its parent is fsynced (POSIX), and
    files fsynced inside a directory whose entry is lost are lost with it: a ConsumeQueue
    directory made by a plain mkdir could vanish in a power cut after the checkpoint vouched
    for its entries (found by the simulated disk, tests/sim/test_engine_on_sim_disk.py).
    """
    for parent in make_dirs(path, fs):
        fsync_directory(parent, fs)


class PendingDirectorySyncs:
    """Directories holding new entries (a created file or subdirectory) not yet durable, to
    fsync later in one pass (`sync_all`).

    Why: a ConsumeQueue's first write fsynced up to three directories on the put path, under
    the store's lock (its topic's and its own new directory, its first segment file): 3 to 8
    ms for each queue's first message, most of a put's cost at thousands of queues
    (docs/benchmarks/scale.md). Nothing needs those entries durable before a checkpoint
    vouches for the index entries in them (recovery rebuilds the index past the checkpoint
    from the CommitLog), so write_checkpoint calls `sync_all` before it writes.

    A directory removed meanwhile (a deleted topic, a dropped log) is skipped: whoever removes
    a tree holds `removing`, and so does `sync_all` around each check and fsync, so a
    directory is either there for its fsync or gone with every entry it held.
    """

    def __init__(self, fs: FileSystem = OS_FILE_SYSTEM) -> None:
        self.fs = fs
        self.removing = threading.RLock()  # (re-entrant: a test nests two passes in one thread)
        self._mutex = threading.Lock()
        # directory -> the number of its latest `add`; insertion-ordered, outermost first
        self._pending: dict[Path, int] = {}
        self._adds = 0

    def __len__(self) -> int:
        return len(self._pending)

    def add(self, directory: Path) -> None:
        with self._mutex:
            self._adds += 1
            self._pending.pop(directory, None)
            self._pending[directory] = self._adds

    def make_dirs(self, path: Path) -> None:
        """mkdir -p, the new directories' entries to be made durable by `sync_all`."""
        for parent in make_dirs(path, self.fs):
            self.add(parent)

    def sync_all(self) -> int:
        """fsync every directory added before this call (a failure goes to the fsync failure
        handler, files.fsync_directory); returns how many were fsynced. A directory leaves
        the pending set only once fsynced, and only if nothing was added to it since: two
        checkpoints at once both wait for every fsync either needs."""
        with self._mutex:
            pending = list(self._pending.items())
        synced = 0
        for directory, add in pending:
            with self.removing:
                if self.fs.is_dir(directory):
                    fsync_directory(directory, self.fs)
                    synced += 1
            with self._mutex:
                if self._pending.get(directory) == add:
                    del self._pending[directory]
        return synced


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644,
                       fs: FileSystem = OS_FILE_SYSTEM) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content.

    Write a sibling temp file, fsync it, rename over the target, fsync the directory. `mode`:
    the new file's permissions (0o600 for one holding secrets).
    """
    temp = path.with_name(path.name + ".tmp")
    handle = fs.open(temp, create=True, mode=mode)
    try:
        handle.truncate(0)
        view = memoryview(data)
        written = 0
        while written < len(view):
            written += handle.write_at(view[written:], written)
        sync_file(handle, temp, data_only=False)
    finally:
        handle.close()
    fs.rename(temp, path)
    fsync_directory(path.parent, fs)
