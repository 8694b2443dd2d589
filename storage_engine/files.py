"""Small durable-file helpers shared by the store's metadata files."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["atomic_write_bytes", "fsync_directory"]


def fsync_directory(path: Path) -> None:
    """Make a create/rename/unlink in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so that a crash leaves either the old or the new content.

    Write a sibling temp file, fsync it, rename over the target, fsync the directory.
    """
    temp = path.with_name(path.name + ".tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temp, path)
    fsync_directory(path.parent)
