"""Goal: the tier's object names, manifest codec, resume plan, backoff, throttle and config keys
are right.
Method: pure functions with hand-built inputs and hypothesis round trips; the ManifestStore
against a real file:// tier in a temp directory (two writers racing, a fenced writer)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage_engine import ConfigError, StoreConfig
from storage_engine.tiered.errors import TierFencedError, TierManifestError
from storage_engine.tiered.file_io import FileIO, FileIOOptions, resolve_tier_url
from storage_engine.tiered.layout import (
    CQ_ENTRY_SIZE_BYTES,
    Manifest,
    QueueRange,
    SegmentEntry,
    manifest_key,
    parse_manifest_version,
    parse_segment_name,
    segment_key,
)
from storage_engine.tiered.manifest import ManifestStore
from storage_engine.tiered.policy import LocalSegment, Throttle, backoff_ms, plan_uploads


def _entry(base: int, queues: tuple[QueueRange, ...] = (), data: int = 100,
           segment: int = 4096) -> SegmentEntry:
    count = sum(q.count for q in queues)
    return SegmentEntry(base, segment, data, data + CQ_ENTRY_SIZE_BYTES * count, "ab" * 32,
                        1, 10, 5, 6, queues)


def test_object_names_sort_by_position_and_parse_back() -> None:
    keys = [segment_key("b", base, 3) for base in (0, 4096, 10 ** 12)]
    assert keys == sorted(keys)
    assert keys[1] == "b/segments/00000000000000004096.0000000003.seg"
    assert [parse_segment_name(k.rsplit("/", 1)[1]) for k in keys] == [
        (0, 3), (4096, 3), (10 ** 12, 3)]
    assert parse_segment_name("00000000000000004096.0000000003.seg.tmp-abc") is None
    assert parse_segment_name("00000000000000004096.seg") is None
    assert parse_segment_name("4096.3.seg") is None
    assert parse_manifest_version(manifest_key("b", 7).rsplit("/", 1)[1]) == 7
    assert parse_manifest_version("x.json") is None


queue_ranges = st.lists(st.tuples(st.sampled_from(["A", "B%RETRY%g"]), st.integers(0, 7),
                                  st.integers(0, 10 ** 9), st.integers(1, 1000)),
                        max_size=4, unique_by=lambda t: (t[0], t[1]))


@given(st.lists(st.tuples(st.integers(0, 1000), queue_ranges), max_size=5,
                unique_by=lambda t: t[0]), st.integers(0, 5))
def test_manifest_round_trip(items: list, epoch: int) -> None:
    manifest = Manifest("broker-a")
    for index, (slot, queues) in enumerate(items):
        entry = _entry(slot * 4096, tuple(QueueRange(*q) for q in queues))
        manifest = manifest.with_segment(entry, epoch=epoch, writer="w", now_ms=index)
    decoded = Manifest.decode(manifest.encode(), source="m")
    assert decoded == manifest
    assert decoded.version == len(items)
    assert decoded.bases == sorted(slot * 4096 for slot, _ in items)


def test_manifest_checksum_refuses_damage() -> None:
    manifest = Manifest("b").with_segment(_entry(0, (QueueRange("T", 0, 0, 3),)), epoch=1,
                                          writer="w", now_ms=1)
    raw = json.loads(manifest.encode())
    raw["segments"][0]["queues"][0][3] = 4
    raw["segments"][0]["object_size_bytes"] += CQ_ENTRY_SIZE_BYTES  # sizes still add up
    with pytest.raises(TierManifestError, match="checksum"):
        Manifest.decode(json.dumps(raw).encode(), source="m")
    for bad in (b"", b"[]", b"{\"format\": 2}", manifest.encode()[:-5]):
        with pytest.raises(TierManifestError):
            Manifest.decode(bad, source="m")


def test_index_position_counts_queues_before() -> None:
    entry = _entry(0, (QueueRange("A", 0, 10, 3), QueueRange("A", 1, 0, 5)), data=1000)
    assert entry.queue_index("A", 1) == 1 and entry.queue_index("B", 0) is None
    assert entry.index_position(0, 10) == 1000
    assert entry.index_position(1, 2) == 1000 + 20 * (3 + 2)
    assert entry.object_size_bytes == 1000 + 20 * 8


def test_without_segments_moves_the_retired_mark() -> None:
    manifest = Manifest("b")
    for base in (0, 4096, 8192):
        manifest = manifest.with_segment(_entry(base), epoch=1, writer="w", now_ms=0)
    trimmed = manifest.without_segments([0, 4096], epoch=1, writer="w", now_ms=1)
    assert trimmed.bases == [8192] and trimmed.retired_below_log_position == 8192
    assert trimmed.version == manifest.version + 1


def test_resume_plan_after_crash() -> None:
    manifest = Manifest("b", retired_below_log_position=4096)
    manifest = manifest.with_segment(_entry(8192), epoch=1, writer="w", now_ms=0)
    local = [LocalSegment(base, 4096, 1000) for base in (4096, 8192, 12288, 16384)]
    local.append(LocalSegment(20480, 4096, 9_500))  # too young
    names = ["00000000000000000000.0000000001.seg",  # retired leftover
             "00000000000000008192.0000000001.seg",  # listed
             "00000000000000008192.0000000000.seg",  # a deposed master's late write
             "00000000000000012288.0000000001.seg",  # written, not committed: rewritten
             "00000000000000016384.0000000001.seg.tmp-1a2b",  # cut by SIGKILL
             "README"]
    plan = plan_uploads(manifest, local, names, now_ms=10_000, delay_ms=1000, busy={16384})
    assert plan.upload == (4096, 12288)
    assert plan.remove_objects == ("00000000000000000000.0000000001.seg",
                                   "00000000000000008192.0000000000.seg")
    plan = plan_uploads(manifest, local, names, now_ms=10_000, delay_ms=0)
    assert plan.upload == (4096, 12288, 16384, 20480)
    assert plan.remove_objects == ("00000000000000000000.0000000001.seg",
                                   "00000000000000008192.0000000000.seg",
                                   "00000000000000016384.0000000001.seg.tmp-1a2b")


def test_backoff_doubles_to_the_cap() -> None:
    delays = [backoff_ms(n, min_ms=100, max_ms=1000) for n in range(1, 7)]
    assert delays == [100, 200, 400, 800, 1000, 1000]
    assert backoff_ms(10 ** 6, min_ms=1, max_ms=5) == 5


def test_throttle_holds_the_rate() -> None:
    throttle = Throttle(1000, 500)
    now, waited = 0.0, 0.0
    for _ in range(20):  # 20 x 250 bytes = 5000 bytes: about (5000 - 500) / 1000 s
        wait = throttle.reserve(250, now)
        now += wait
        waited += wait
    assert 4.4 <= now <= 4.6 and waited == now
    assert Throttle(1000, 500).reserve(10_000, 0.0) == pytest.approx(9.5)


def test_manifest_store_commits_races_and_fences(tmp_path) -> None:
    file_io = FileIO(f"file://{tmp_path}")
    first = ManifestStore(file_io, "b", versions_kept=2, segments_max=3)
    second = ManifestStore(file_io, "b", versions_kept=2, segments_max=3)
    assert first.load() == Manifest("b")

    def add(base: int):
        def change(m: Manifest) -> Manifest:
            if m.find(base) is not None:
                return m
            return m.with_segment(_entry(base), epoch=1, writer="x", now_ms=0)
        return change

    first.commit(add(0), epoch=1)
    stale = first.latest
    # the second writer commits version 2 while the first still believes version 1 is newest
    second.commit(add(4096), epoch=1)
    assert first.latest is stale
    merged = first.commit(add(8192), epoch=1)
    assert merged.version == 3 and merged.bases == [0, 4096, 8192]
    assert first.commit(add(0), epoch=1).version == 3  # nothing to do: no new version
    versions = sorted(p.name for p in (tmp_path / "b" / "manifest").iterdir())
    assert versions == [f"{v:020d}.json" for v in (2, 3)]  # pruned to versions_kept
    newer = second.commit(lambda m: dataclasses.replace(m, version=m.version + 1, epoch=2),
                          epoch=2)
    assert newer.epoch == 2
    with pytest.raises(TierFencedError, match="epoch 2"):
        first.commit(add(12288), epoch=1)
    with pytest.raises(Exception, match="tieredManifestSegmentsMax"):
        second.commit(add(12288), epoch=2)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("tieredUploadConcurrency", "0", "not an integer in"),
    ("tieredStoreUrl", "ftp://host/x", "scheme must be one of"),
    ("tieredStoreUrl", "s3://", "names no bucket"),
    ("tieredStoreEnable", "yes", "expected true or false"),
    ("tieredS3AccessKeyId", "AKIA1", "give both"),
    ("tieredReadCacheBytesMax", "4096", "not an integer in"),  # below one read-ahead window
])
def test_tiered_config_errors_name_the_key(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message) as caught:
        StoreConfig.from_properties({key: value})
    assert caught.value.key == key


def test_tiered_config_reads_every_key() -> None:
    config = StoreConfig.from_properties({
        "tieredStoreEnable": "true", "tieredStoreUrl": "s3://bucket/prefix/",
        "tieredUploadBytesPerSecMax": "1048576", "tieredStoreFileReservedTime": "1.5",
        "tieredS3AccessKeyId": "AKIA1", "tieredS3SecretAccessKey": "s3cr3t"}).tiered
    assert config.enabled and config.url == "s3://bucket/prefix/"
    assert config.upload_bytes_per_sec_max == 1 << 20 and config.file_reserved_time_hours == 1.5
    assert "s3cr3t" not in repr(config) and "s3cr3t" not in repr(FileIOOptions.from_config(config))
    assert resolve_tier_url(config, "/x") == "s3://bucket/prefix"
    assert resolve_tier_url(StoreConfig().tiered, "/var/store") == "file:///var/store/tier"
