"""Disk faults for chaos runs: power loss (LazyFS under a broker's store) and corrupt tails.

    LazyMounts(cluster, brokers)   moves each broker's store onto a LazyFS mount
                                   (tests/support/lazyfs.py): the broker is stopped, its store
                                   directory becomes `<store>.backing`, LazyFS serves it at the
                                   old path, the broker starts again (`rocketha-cluster up`).
                                   `close()` unmounts (after the cluster is down).
    corrupt_tail(store_dir, rng)   on a stopped broker: flips bits in, or zeroes, a random span
                                   of the last TAIL_BYTES of its CommitLog's data. Recovery must
                                   find the damage (a record's CRC covers all of it), cut the log
                                   there, and the slave fetch the rest again from its master.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.integration.failover_cluster import ROOT, FailoverCluster, _env
from tests.support.lazyfs import power_loss

__all__ = ["TAIL_BYTES", "LazyMounts", "corrupt_tail"]

TAIL_BYTES = 4096
MOUNT_TIMEOUT_S = 15.0


class LazyMounts:
    def __init__(self, cluster: FailoverCluster, brokers: list[str]) -> None:
        self.cluster = cluster
        self.backing: dict[str, str] = {}
        self._processes: dict[str, subprocess.Popen[bytes]] = {}
        try:
            for name in brokers:
                if cluster.pid(name) is not None:
                    cluster.kill(name)
                store = cluster.store_dir(name)
                backing = store.with_name(store.name + ".backing")
                store.rename(backing)
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

    def power_loss(self, name: str) -> tuple[int, int]:
        """`name` (already killed) loses what its store had not fsynced: (pages, files)."""
        return power_loss(self.backing[name])

    def close(self) -> None:
        """Unmount every store (its broker must be stopped); lazily if still busy."""
        for name, process in self._processes.items():
            store = self.cluster.store_dir(name)
            if os.path.ismount(store):
                done = subprocess.run(["fusermount3", "-u", str(store)], capture_output=True,
                                      timeout=30, check=False)
                if done.returncode != 0:
                    subprocess.run(["fusermount3", "-uz", str(store)], capture_output=True,
                                   timeout=30, check=False)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
        self._processes.clear()


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
