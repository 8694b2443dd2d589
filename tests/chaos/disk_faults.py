"""Disk faults for chaos runs: power loss (LazyFS under a broker's store) and corrupt tails.

    StoreMounts(cluster, lazy=[...], limited=[...])
                                   moves brokers' stores onto other file systems: `lazy` ones
                                   onto a LazyFS mount (tests/support/lazyfs.py: the store
                                   directory becomes `<store>.backing`, LazyFS serves it at the
                                   old path), `limited` ones onto a tmpfs of LIMITED_MB (under
                                   LazyFS's backing directory when both), each broker stopped
                                   first and started again (`rocketha-cluster up`). `fill(name)`
                                   fills a limited broker's disk to ENOSPC, `unfill(name)` frees
                                   it. `close()` unmounts (after the cluster is down).
    corrupt_tail(store_dir, rng)   on a stopped broker: flips bits in, or zeroes, a random span
                                   of the last TAIL_BYTES of its CommitLog's data. Recovery must
                                   find the damage (a record's CRC covers all of it), cut the log
                                   there, and the slave fetch the rest again from its master.
"""

from __future__ import annotations

import errno
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tests.integration.failover_cluster import ROOT, FailoverCluster, _env
from tests.support.lazyfs import power_loss

__all__ = ["LIMITED_MB", "TAIL_BYTES", "StoreMounts", "corrupt_tail", "unmount_under"]

TAIL_BYTES = 4096
MOUNT_TIMEOUT_S = 15.0
LIMITED_MB = 256
FILLER = ".chaos-filler"
FILL_CHUNK_BYTES = 1 << 20


def _tmpfs_at(directory: Path, size_mb: int) -> None:
    """Turn `directory` into a tmpfs of `size_mb` holding the same files."""
    old = directory.with_name(directory.name + ".before-tmpfs")
    directory.rename(old)
    directory.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(directory)],
                   check=True, capture_output=True, timeout=30)
    shutil.copytree(old, directory, dirs_exist_ok=True)
    shutil.rmtree(old)


def _unmount(directory: Path, command: list[str], lazy_flag: str) -> None:
    if os.path.ismount(directory):
        done = subprocess.run([*command, str(directory)], capture_output=True, timeout=30,
                              check=False)
        if done.returncode != 0:  # still busy: detach now, gone once unused
            subprocess.run([*command, lazy_flag, str(directory)], capture_output=True,
                           timeout=30, check=False)


def unmount_under(directory: Path) -> list[str]:
    """Detach every mount below `directory` (a killed run's LazyFS and tmpfs stores), deepest
    first; returns the mount points."""
    root = os.path.realpath(directory) + os.sep
    with open("/proc/mounts") as mounts:
        points = [line.split()[1] for line in mounts if line.split()[1].startswith(root)]
    for point in sorted(points, key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True, timeout=30, check=False)
    return points


class StoreMounts:
    def __init__(self, cluster: FailoverCluster, *, lazy: Sequence[str] = (),
                 limited: Sequence[str] = (), limited_mb: int = LIMITED_MB) -> None:
        self.cluster = cluster
        self.backing: dict[str, str] = {}
        self.disks: dict[str, Path] = {}  # limited broker -> its tmpfs
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for name in sorted(set(lazy) | set(limited)):
                if cluster.pid(name) is not None:
                    cluster.kill(name)
                store = cluster.store_dir(name)
                if name not in lazy:
                    _tmpfs_at(store, limited_mb)
                    self.disks[name] = store
                    continue
                backing = store.with_name(store.name + ".backing")
                store.rename(backing)
                if name in limited:
                    _tmpfs_at(backing, limited_mb)
                    self.disks[name] = backing
                store.mkdir()
                with open(store.with_name(store.name + ".lazyfs.log"), "wb") as log:
                    self._processes[name] = subprocess.Popen(
                        [sys.executable, "-m", "tests.support.lazyfs", str(backing),
                         str(store)], cwd=ROOT, env=_env(), stdout=subprocess.DEVNULL,
                        stderr=log)
                self.backing[name] = str(backing)
                deadline = time.monotonic() + MOUNT_TIMEOUT_S
                while not os.path.ismount(store):
                    if self._processes[name].poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"LazyFS for {name} did not mount at {store}")
                    time.sleep(0.05)
            cluster.up()
        except BaseException:
            self.close()
            raise

    def fill(self, name: str) -> int:
        """Fill `name`'s disk until ENOSPC; returns the bytes the filler took."""
        filled = 0
        chunk = bytes(FILL_CHUNK_BYTES)
        with open(self.disks[name] / FILLER, "wb") as filler:
            for _ in range(LIMITED_MB * 4):  # bounded: the disk is smaller than this
                try:
                    filled += os.write(filler.fileno(), chunk)
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    break
        return filled

    def unfill(self, name: str) -> None:
        (self.disks[name] / FILLER).unlink(missing_ok=True)

    def power_loss(self, name: str) -> tuple[int, int]:
        """`name` (already killed) loses what its store had not fsynced: (pages, files)."""
        return power_loss(self.backing[name])

    def close(self) -> None:
        """Unmount every store (its broker must be stopped); lazily if still busy. A limited
        store's files are copied back to the disk first (kept for a look after the run)."""
        for name, process in self._processes.items():
            _unmount(self.cluster.store_dir(name), ["fusermount3", "-u"], "-z")
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self._processes.clear()
        for disk in self.disks.values():
            if os.path.ismount(disk):
                (disk / FILLER).unlink(missing_ok=True)
                kept = disk.with_name(disk.name + ".kept")
                shutil.copytree(disk, kept, dirs_exist_ok=True)
                _unmount(disk, ["umount"], "-l")
                shutil.rmtree(disk, ignore_errors=True)
                kept.rename(disk)
        self.disks.clear()


def _data_end(path: Path) -> int:
    """Where the written bytes of a preallocated segment end (its last nonzero byte + 1)."""
    data = path.read_bytes()
    return len(data.rstrip(b"\0"))


def corrupt_tail(store_dir: Path, rng: random.Random) -> dict[str, Any]:
    """Damage the end of the CommitLog's data on a stopped broker; returns what was done."""
    segments = sorted((p for p in (store_dir / "commitlog").iterdir() if p.name.isdigit()),
                      key=lambda p: int(p.name))
    for path in reversed(segments):
        end = _data_end(path)
        if end == 0:
            continue
        start = max(0, end - TAIL_BYTES)
        with open(path, "r+b") as segment:
            if rng.random() < 0.5:
                spots = sorted(rng.randrange(start, end) for _ in range(3))
                for spot in spots:
                    segment.seek(spot)
                    byte = segment.read(1)[0]
                    segment.seek(spot)
                    segment.write(bytes([byte ^ (1 << rng.randrange(8))]))
                what = {"mode": "bitflip", "positions": [int(path.name) + s for s in spots]}
            else:
                cut = rng.randrange(start, end)
                segment.seek(cut)
                segment.write(bytes(end - cut))
                what = {"mode": "truncate", "from": int(path.name) + cut,
                        "to": int(path.name) + end}
            segment.flush()
            os.fsync(segment.fileno())
        return what
    return {"mode": "none", "reason": "empty CommitLog"}
