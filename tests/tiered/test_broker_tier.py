"""Goal: a broker with tiering on uploads sealed segments, drops them locally, and serves every
message back from the tier through the normal consume path, across restarts; a SIGKILL in the
middle of an upload leaves nothing partial listed and the upload completes after restart.
Method: real `python -m ha.broker` processes with 128 KiB segments and a file:// tier, raw
Flight produce/consume, the tier directory inspected from the test; waits have deadlines."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess
from tests.tiered.broker_tier import (
    SMALL_TIER,
    manifest_bases,
    produce,
    read_all,
    tier_stats,
    wait_for,
    when,
)

pytestmark = pytest.mark.integration


def _verify_listed(tier_dir: Path) -> int:
    """Every segment the newest manifest lists exists whole with its checksum."""
    versions = sorted((tier_dir / "broker-a" / "manifest").glob("*.json"))
    listed = json.loads(versions[-1].read_bytes())["segments"] if versions else []
    for entry in listed:
        name = f"{entry['base_log_position']:020d}.{entry['epoch']:010d}.seg"
        data = (tier_dir / "broker-a" / "segments" / name).read_bytes()
        assert len(data) == entry["object_size_bytes"]
        assert hashlib.sha256(data).hexdigest() == entry["sha256"]
    return len(listed)


def test_tier_round_trip_through_the_broker(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", **SMALL_TIER).start()
    try:
        produce(broker, batches=24)
        before = [read_all(broker, queue) for queue in (0, 1)]
        assert sum(map(len, before)) == 2400
        info = wait_for("local segments deleted after tiering", lambda: when(
            broker.action("broker_info"),
            lambda i: i["min_log_position"] > 0 and i["tiered"]["tier_segments"] >= 8))
        assert info["tiered"]["upload"]["state"] == "running"
        assert info["tiered"]["last_error"] is None
        assert [read_all(broker, queue) for queue in (0, 1)] == before
        assert tier_stats(broker)["cold_reads"] > 0
        assert broker.stop() == 0
        broker.start()  # after a restart: local files below the minimum are gone for good
        assert broker.action("broker_info")["min_log_position"] > 0
        assert [read_all(broker, queue) for queue in (0, 1)] == before
        assert _verify_listed(broker.store_dir / "tier") >= 8
    finally:
        broker.stop()


def test_sigkill_mid_upload_then_resume(tmp_path: Path) -> None:
    slow = {**SMALL_TIER, "tieredUploadBytesPerSecMax": str(96 * 1024),
            "tieredUploadChunkBytes": str(8 * 1024), "tieredUploadConcurrency": "1",
            "fileReservedTime": "72"}
    broker = BrokerProcess(tmp_path / "b", **slow).start()
    tier_dir = broker.store_dir / "tier"
    segments_dir = tier_dir / "broker-a" / "segments"
    try:
        produce(broker, batches=30, seed=1)
        before = [read_all(broker, queue) for queue in (0, 1)]
        wait_for("a temp object mid-upload", lambda: segments_dir.exists() and [
            p for p in segments_dir.iterdir() if ".tmp-" in p.name])
        broker.kill()
        listed = _verify_listed(tier_dir)
        temps = [p.name for p in segments_dir.iterdir() if ".tmp-" in p.name]
        assert temps and all(".seg.tmp-" in name for name in temps)
        assert len(manifest_bases(tier_dir)) == listed  # the temp is not listed
        (broker.directory / "broker.conf").write_text(
            (broker.directory / "broker.conf").read_text().replace(
                "tieredUploadBytesPerSecMax=98304", "tieredUploadBytesPerSecMax=67108864"))
        broker.start()
        sealed = wait_for("every sealed segment tiered", lambda: when(
            tier_stats(broker), lambda s: s["tier_segments"] >= 10 and not s["upload"]["uploading"]
            and s["upload"]["pending_segments"] == 0))
        wait_for("temp objects cleaned", lambda: not [
            p for p in segments_dir.iterdir() if ".tmp-" in p.name])
        assert _verify_listed(tier_dir) == sealed["tier_segments"] > listed
        assert sealed["upload"]["uploaded_segments"] == sealed["tier_segments"] - listed
        assert [read_all(broker, queue) for queue in (0, 1)] == before
    finally:
        broker.stop()


def test_bad_tiered_key_stops_start_up_naming_it(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", tieredStoreEnable="true",
                           tieredStoreUrl="ftp://somewhere/x")
    with pytest.raises(RuntimeError, match="exited 2") as caught:
        broker.start()
    assert "tieredStoreUrl" in str(caught.value) and "scheme must be one of" in str(caught.value)
