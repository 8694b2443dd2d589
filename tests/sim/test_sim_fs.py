"""The simulated disk itself: it keeps POSIX's promises and breaks everything else, seeded.

Goal: tests/sim/sim_fs.py is only useful if its crash really drops what was not synced (file
data, and directory entries not made durable by a directory fsync), tears and flips only the
unsynced part, fails syncs the fsyncgate way (a retry "succeeds" over lost data), and replays a
seed exactly. Method: small scripted write/sync/crash sequences, each checked byte for byte.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.sim.sim_fs import SimDiskFaults, SimFileSystem

D = Path("/d")


def _fs(seed: int = 1, **faults: float) -> SimFileSystem:
    fs = SimFileSystem(random.Random(seed), SimDiskFaults(**faults))
    fs.make_dirs(D)
    fs.sync_directory(Path("/"))
    return fs


def _durable_file(fs: SimFileSystem, name: str, data: bytes) -> None:
    handle = fs.open(D / name, create=True)
    handle.write_at(data, 0)
    handle.sync(data_only=True)
    fs.sync_directory(D)


def test_synced_data_survives_and_unsynced_data_is_lost() -> None:
    fs = _fs()
    _durable_file(fs, "f", b"durable")
    handle = fs.open(D / "f", create=False)
    handle.write_at(b"-lost", 7)
    assert fs.read_bytes(D / "f") == b"durable-lost"  # the page cache shows it at once
    fs.crash()
    assert fs.read_bytes(D / "f") == b"durable"
    assert fs.stats.unsynced_bytes_dropped == 5


def test_a_new_file_needs_its_directory_synced() -> None:
    fs = _fs()
    handle = fs.open(D / "new", create=True)
    handle.write_at(b"data", 0)
    handle.sync(data_only=True)  # the data is durable, its name is not
    fs.crash()
    assert not fs.exists(D / "new")
    _durable_file(fs, "kept", b"x")
    fs.crash()
    assert fs.read_bytes(D / "kept") == b"x"


def test_rename_and_unlink_are_undone_without_a_directory_sync() -> None:
    fs = _fs()
    _durable_file(fs, "a", b"old")
    temp = fs.open(D / "a.tmp", create=True)
    temp.write_at(b"new", 0)
    temp.sync(data_only=False)
    fs.rename(D / "a.tmp", D / "a")
    _durable_file(fs, "b", b"b")  # its directory sync makes the rename durable too
    fs.remove(D / "b")
    fs.crash()
    assert fs.read_bytes(D / "a") == b"new"
    assert fs.read_bytes(D / "b") == b"b"  # the unlink was never synced
    assert not fs.exists(D / "a.tmp")


def test_a_new_directory_needs_its_parent_synced() -> None:
    fs = _fs()
    fs.make_dirs(D / "sub")
    _durable_file(fs, "x", b"x")  # syncs /d: now /d/sub is durable
    fs.make_dirs(D / "sub" / "deeper")
    fs.crash()
    assert fs.is_dir(D / "sub")
    assert not fs.exists(D / "sub" / "deeper")


def test_torn_writes_keep_a_prefix_of_the_unsynced_writes_only() -> None:
    outcomes = set()
    for seed in range(200):
        fs = _fs(seed, torn_write_probability=1.0)
        _durable_file(fs, "f", b"S" * 8)
        handle = fs.open(D / "f", create=False)
        handle.write_at(b"A" * 8, 8)
        handle.write_at(b"B" * 8, 16)
        fs.crash()
        data = fs.read_bytes(D / "f")
        assert data[:8] == b"S" * 8
        tail = data[8:]
        assert tail == (b"A" * 8 + b"B" * 8)[:len(tail)], tail  # a prefix, in write order
        outcomes.add(len(tail))
    assert {0, 8, 16} <= outcomes and len(outcomes) > 5  # none, whole writes, torn ones


def test_bit_flips_hit_only_unsynced_bytes() -> None:
    flipped = 0
    for seed in range(100):
        fs = _fs(seed, torn_write_probability=1.0, bit_flip_probability=1.0)
        _durable_file(fs, "f", bytes(64))
        handle = fs.open(D / "f", create=False)
        handle.write_at(bytes(64), 64)
        fs.crash()
        data = fs.read_bytes(D / "f")
        assert data[:64] == bytes(64)
        flipped += data[64:] != bytes(len(data) - 64)
    assert flipped > 50


def test_a_failed_sync_drops_the_writes_it_should_have_made_durable() -> None:
    fs = _fs()
    _durable_file(fs, "f", b"ok")
    handle = fs.open(D / "f", create=False)
    handle.write_at(b"-gone", 2)
    fs.fail_next_syncs(1)
    with pytest.raises(OSError, match="Input/output error"):
        handle.sync(data_only=True)
    handle.sync(data_only=True)  # the retry "succeeds": nothing is left to write back
    assert fs.read_bytes(D / "f") == b"ok-gone"  # ...while the page cache still shows it
    fs.crash()
    assert fs.read_bytes(D / "f") == b"ok"  # fsyncgate: only fail-stop is safe
    assert fs.stats.sync_failures == 1


def test_maps_follow_writes_and_handles_die_with_the_process() -> None:
    fs = _fs()
    handle = fs.open(D / "seg", create=True)
    handle.truncate(32)
    view = handle.map_readonly(32)
    handle.write_at(b"abc", 4)
    assert bytes(view[4:7]) == b"abc"
    handle.truncate(5)
    handle.truncate(32)  # shrink and regrow (recovery's discard_tail): zeros, map still valid
    assert bytes(view[4:7]) == b"a\x00\x00"
    fs.crash()
    with pytest.raises(OSError):
        handle.write_at(b"zombie", 0)


def test_a_lock_is_exclusive_until_released_or_crashed() -> None:
    fs = _fs()
    lock = fs.lock(D / "lock")
    with pytest.raises(OSError):
        fs.lock(D / "lock")
    lock.release()
    fs.lock(D / "lock")
    fs.crash()
    fs.lock(D / "lock")


def test_a_seed_replays_exactly() -> None:
    def run(seed: int) -> tuple[bytes, str]:
        fs = _fs(seed, torn_write_probability=0.5, bit_flip_probability=0.5)
        handle = fs.open(D / "f", create=True)
        for index in range(20):
            handle.write_at(bytes([index]) * 7, index * 7)
            if index % 6 == 5:
                handle.sync(data_only=True)
        fs.sync_directory(D)
        handle.write_at(b"tail" * 4, 140)
        fs.crash()
        return fs.read_bytes(D / "f"), repr(fs.stats)

    assert run(5) == run(5)
    assert len({run(seed) for seed in range(10)}) > 1
