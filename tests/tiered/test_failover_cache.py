"""Goal: a new master continues uploading from the manifest (no object twice, nothing
conflicting) and the deposed one is fenced; the cold-read cache stays within its bound and
read-ahead saves requests.
Method: two real MessageStores with the same bytes (a copied store directory stands for a
replica) sharing one file:// tier, uploads driven by the test; the cache over a real FileIO
whose reads are counted (the IO boundary)."""

from __future__ import annotations

import dataclasses
import shutil
import time
from pathlib import Path

import pytest

from storage_engine import MessageStore
from storage_engine.tiered import BlockCache, FileIO, TierService
from tests.tiered.test_uploader import CONFIG, TIERED, _everything, _fill


def test_new_master_continues_from_the_manifest(tmp_path: Path) -> None:
    tiered = dataclasses.replace(TIERED, url=f"file://{tmp_path / 'tier'}")
    config = dataclasses.replace(CONFIG, tiered=tiered)
    old = MessageStore(tmp_path / "a", config)
    _fill(old)
    old.close()
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    old = MessageStore(tmp_path / "a", config)
    new = MessageStore(tmp_path / "b", config)
    try:
        sealed = old.tier_segments()
        assert [s[:2] for s in new.tier_segments()] == [s[:2] for s in sealed]
        deposed = TierService(old, tiered, broker_name="broker-a", writer="a", epoch=lambda: 1)
        for base, size, _ in sealed[:3]:  # the old master tiers three, then loses its role
            deposed.uploader.upload_segment(base, size)
        master = TierService(new, tiered, broker_name="broker-a", writer="b", epoch=lambda: 2)
        assert master.uploader.drain() == len(sealed) - 3
        manifest = master.manifests.load()
        assert manifest.bases == [s[0] for s in sealed] and manifest.epoch == 2
        assert [s.epoch for s in manifest.segments] == [1] * 3 + [2] * (len(sealed) - 3)
        segments_dir = tmp_path / "tier" / "broker-a" / "segments"
        listed_names = [entry.object_name for entry in manifest.segments]
        assert sorted(p.name for p in segments_dir.iterdir()) == listed_names  # one per segment
        # the deposed master has not seen the new manifest and uploads a segment of its own,
        # with different bytes (its index changed): it may write, it may not list or clobber
        version = manifest.version
        old.delete_topic("Audit")
        deposed.uploader._upload_guarded(*sealed[3][:2])
        stats = deposed.uploader.stats()
        assert stats["state"] == "fenced" and stats["last_error"]["kind"] == "fenced"
        assert deposed.uploader.run_pass(wait=True) == 0
        assert master.manifests.load().version == version
        late = f"{sealed[3][0]:020d}.0000000001.seg"
        assert sorted(p.name for p in segments_dir.iterdir()) == sorted([*listed_names, late])
        master.uploader._listed = False  # as after a restart: the next pass lists and cleans
        master.uploader.run_pass(wait=True)
        assert sorted(p.name for p in segments_dir.iterdir()) == listed_names
        # the new master's local copies go, and everything reads back from the tier
        before = _everything(new)
        master.attach()
        assert master.run_retention(int(time.time() * 1000) + 1000)[0] > 0
        assert _everything(new) == before
    finally:
        old.close()
        new.close()


class CountingFileIO(FileIO):
    """A real file:// FileIO that counts ranged reads (the IO boundary)."""

    reads = 0

    def read_range(self, key: str, start: int, end: int) -> bytes:
        self.reads += 1
        return super().read_range(key, start, end)


@pytest.mark.parametrize("read_ahead", [0, 3])
def test_block_cache_bound_and_read_ahead(tmp_path: Path, read_ahead: int) -> None:
    io = CountingFileIO(f"file://{tmp_path}")
    data = bytes(range(256)) * 400  # 102400 bytes = 25 blocks of 4096
    io.write_atomic("obj", [data], part_bytes=1 << 20)
    cache = BlockCache(4096, read_ahead, 8 * 4096)
    for start in range(0, len(data), 1000):  # a sequential reader, 1000 bytes at a time
        assert cache.read(io, "obj", len(data), start, min(len(data), start + 1000)) == \
            data[start:start + 1000]
        assert cache.size_bytes <= 8 * 4096
    assert io.reads == (25 if read_ahead == 0 else 7)  # ceil(25 / (1 + 3)) with read-ahead
    assert cache.read(io, "obj", len(data), 0, len(data)) == data  # bigger than the cache
    assert cache.size_bytes <= 8 * 4096
