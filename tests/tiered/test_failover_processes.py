"""Goal: a failover in the middle of uploads: the promoted slave continues from the manifest,
uploads only what is missing, and no segment ends up with two objects or a conflicting one.
Method: real broker processes: a master (slow uploads) and its slave share one file:// tier;
once some segments are tiered the master is SIGKILLed and the slave restarted as the master
(static roles: its conf changed, as an operator would); then the tier is inspected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess, free_port
from tests.tiered.broker_tier import SMALL_TIER, produce, read_all, tier_stats, wait_for, when

pytestmark = pytest.mark.integration


def _listed(tier_dir: Path) -> list[dict]:
    versions = sorted((tier_dir / "broker-a" / "manifest").glob("*.json"))
    return json.loads(versions[-1].read_bytes())["segments"] if versions else []


def _has_topic(broker: BrokerProcess) -> bool:
    topics = broker.action("list_topics").get("topics", [])
    return any(topic["name"] == "Cold" for topic in topics)


def test_promoted_slave_continues_from_the_manifest(tmp_path: Path) -> None:
    tier_dir = tmp_path / "tier"
    common = {**SMALL_TIER, "tieredStoreUrl": f"file://{tier_dir}", "fileReservedTime": "72",
              "tieredUploadBytesPerSecMax": str(256 * 1024), "tieredUploadConcurrency": "1",
              "tieredUploadChunkBytes": "8192", "totalReplicas": "2", "inSyncReplicas": "2",
              "haSendHeartbeatInterval": "100", "haReconnectInterval": "100",
              "haMetadataSyncInterval": "100"}
    ha_port = free_port()
    master = BrokerProcess(tmp_path / "m", brokerRole="SYNC_MASTER", haListenPort=str(ha_port),
                           **common).start()
    slave = BrokerProcess(tmp_path / "s", brokerId="1", brokerRole="SLAVE",
                          haListenPort=str(free_port()),
                          haMasterAddress=f"127.0.0.1:{ha_port}", **common).start()
    try:
        wait_for("slave in sync", lambda: master.action("broker_info").get(
            "sync_state_set") == [0, 1])
        produce(master, batches=30, seed=4)
        expected = [read_all(master, queue) for queue in (0, 1)]
        wait_for("topic config on the slave", lambda: _has_topic(slave))
        wait_for("some segments tiered", lambda: tier_stats(master)["tier_segments"] >= 3)
        master.kill()
        before_failover = {s["base_log_position"]: s for s in _listed(tier_dir)}
        assert before_failover
        assert slave.stop() == 0
        conf = slave.conf.read_text().splitlines()
        kept = [line for line in conf if not line.startswith(
            ("brokerId=", "brokerRole=", "haMasterAddress=", "totalReplicas=",
             "inSyncReplicas=", "tieredUploadBytesPerSecMax="))]
        slave.conf.write_text("\n".join([*kept, "brokerId=0", "brokerRole=ASYNC_MASTER",
                                         "tieredUploadBytesPerSecMax=67108864"]) + "\n")
        slave.start()
        sealed_min = 10
        done = wait_for("the new master tiers the rest", lambda: when(
            tier_stats(slave), lambda s: s["tier_segments"] >= sealed_min
            and s["upload"]["pending_segments"] == 0 and not s["upload"]["uploading"]))
        listed = _listed(tier_dir)
        assert len(listed) == done["tier_segments"]
        for base, entry in before_failover.items():  # nothing the old master listed changed
            assert next(s for s in listed if s["base_log_position"] == base) == entry
        assert done["upload"]["uploaded_segments"] == len(listed) - len(before_failover)
        names = sorted(p.name for p in (tier_dir / "broker-a" / "segments").iterdir())
        wanted = sorted(f"{s['base_log_position']:020d}.{s['epoch']:010d}.seg" for s in listed)
        assert names == wanted  # one object per segment; the killed upload's temp is gone
        assert [read_all(slave, queue) for queue in (0, 1)] == expected
    finally:
        slave.stop()
        master.stop()
