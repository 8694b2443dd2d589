"""The power-loss file system (tests/support/lazyfs.py) loses exactly what was not fsynced.

Method: a real FUSE mount (fuse3, mfusepy) in a temporary directory; files written with
os.pwrite, some fsynced, read through plain reads and through mmap (as the store reads its
segments); then a power loss through the control file and the bytes compared. Skipped where
FUSE cannot be mounted (no /dev/fuse, not root, fuse3 missing: the reason is given).
"""

from __future__ import annotations

import mmap
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.failover_cluster import ROOT, _env
from tests.support.lazyfs import fuse_unavailable_reason, power_loss

MOUNT_TIMEOUT_S = 10.0


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    reason = fuse_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    backing, mount = tmp_path / "backing", tmp_path / "mount"
    backing.mkdir()
    mount.mkdir()
    process = subprocess.Popen([sys.executable, "-m", "tests.support.lazyfs", str(backing),
                                str(mount)], cwd=ROOT, env=_env())
    deadline = time.monotonic() + MOUNT_TIMEOUT_S
    while not os.path.ismount(mount):
        assert process.poll() is None and time.monotonic() < deadline, "lazyfs did not mount"
        time.sleep(0.05)
    try:
        yield backing, mount
    finally:
        subprocess.run(["fusermount3", "-u", str(mount)], check=False, timeout=30)
        process.wait(timeout=30)


def test_unsynced_writes_are_lost_synced_ones_kept(lazy: tuple[Path, Path]) -> None:
    backing, mount = lazy
    fd = os.open(mount / "segment", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, 3 * 4096)  # preallocated, as the store's segments are
        os.pwrite(fd, b"A" * 5000, 0)
        os.fsync(fd)
        os.pwrite(fd, b"B" * 3000, 5000)  # not synced: on the same page as synced bytes
        with mmap.mmap(fd, 3 * 4096, prot=mmap.PROT_READ) as view:
            assert view[4998:5002] == b"AABB"  # reads see pending writes, also through mmap
        assert (backing / "segment").read_bytes()[4998:5002] == b"AA\0\0"
    finally:
        os.close(fd)
    grown = os.open(mount / "log", os.O_RDWR | os.O_CREAT, 0o644)
    os.write(grown, b"x" * 100)
    os.fsync(grown)
    os.write(grown, b"y" * 100)  # grows the file, unsynced
    os.close(grown)
    assert os.path.getsize(mount / "log") == 200
    assert power_loss(str(backing)) == (2, 2)  # a page of each file
    data = (mount / "segment").read_bytes()
    assert data[:5000] == b"A" * 5000 and data[5000:8000] == bytes(3000)
    assert (mount / "log").read_bytes() == b"x" * 100


def test_rename_after_fsync_keeps_the_new_file(lazy: tuple[Path, Path]) -> None:
    """The store's atomic replace (temp + fsync + rename) survives a power loss."""
    backing, mount = lazy
    with open(mount / "checkpoint.tmp", "wb") as temp:
        temp.write(b"v2")
        temp.flush()
        os.fsync(temp.fileno())
    os.rename(mount / "checkpoint.tmp", mount / "checkpoint")
    with open(mount / "other", "wb") as other:
        other.write(b"never synced")
    power_loss(str(backing))
    assert (mount / "checkpoint").read_bytes() == b"v2"
    assert (mount / "other").read_bytes() == b""


def test_times_read_through_the_mount_are_the_backing_files(lazy: tuple[Path, Path]) -> None:
    """mfusepy with use_ns takes nanoseconds: a file's mtime must not read as 1970 (the store's
    retention took every sealed segment for decades old and deleted it in a 75-minute
    campaign)."""
    backing, mount = lazy
    (mount / "segment").write_bytes(b"x")
    through = os.stat(mount / "segment")
    assert abs(through.st_mtime - time.time()) < 60
    assert abs(through.st_mtime_ns - os.stat(backing / "segment").st_mtime_ns) < 10**9
    os.utime(mount / "segment", ns=(10**18, 2 * 10**18))
    assert os.stat(mount / "segment").st_mtime_ns == 2 * 10**18
