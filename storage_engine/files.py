"""Small durable-file helpers shared by the store's files, and the store's fsync policy.

Fail-stop on fsync errors (PostgreSQL's "fsyncgate" lesson): when fsync/fdatasync fails, the
kernel may already have dropped the dirty pages it could not write and marked them clean, so a
second fsync can succeed although the data never reached the disk. Retrying is therefore never
safe, nor is acknowledging anything that needed the failed fsync. Every fsync of the store goes
through `fsync_file` / `fsync_directory`; a failure calls the process-wide fsync failure handler,
whose default logs one CRITICAL line and ends the process at once with exit code
`FSYNC_FAILED_EXIT_CODE` (no clean shutdown: the abort marker stays, the restart recovers from
the log what really reached the disk). A test or the simulator installs its own handler with
`set_fsync_failure_handler`; when a handler returns, the caller gets `FsyncFailedError` and the
flush service that saw it flushes nothing more (it never retries).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from pathlib import Path

from storage_engine.errors import FsyncFailedError

__all__ = [
    "FSYNC_FAILED_EXIT_CODE",
    "FsyncFailureHandler",
    "atomic_write_bytes",
    "exit_on_fsync_failure",
    "fsync_directory",
    "fsync_file",
    "set_fsync_failure_handler",
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


def fsync_file(fd: int, path: str | Path, *, data_only: bool) -> None:
    """fdatasync (`data_only`) or fsync `fd`; a failure goes to the fsync failure handler."""
    try:
        if data_only:
            os.fdatasync(fd)
        else:
            os.fsync(fd)
    except OSError as err:
        _handler(err, str(path))
        raise FsyncFailedError(str(path), err) from err


def fsync_directory(path: Path) -> None:
    """Make a create/rename/unlink in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync_file(fd, path, data_only=False)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content.

    Write a sibling temp file, fsync it, rename over the target, fsync the directory. `mode`:
    the new file's permissions (0o600 for one holding secrets).
    """
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.fchmod(fd, mode)  # also when a stale temp file existed with another mode
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        fsync_file(fd, temp, data_only=False)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_directory(path.parent)
