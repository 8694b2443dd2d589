"""Goal: in a replica set the master uploads, the slave uploads nothing, both drop their local
copies of tiered segments, and both still serve every acked message (cold from the tier).
Method: `rocketha-cluster up --replicas 2` (tests/ha/replica_set.py) with one shared file://
tier and 128 KiB segments, raw produce batches, reads from each replica (slaveReadEnable)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.ha.replica_set import ReplicaSet, wait_for
from tests.tiered.broker_tier import SMALL_TIER, when

pytestmark = pytest.mark.integration


def test_master_uploads_slave_reads_cold(tmp_path: Path) -> None:
    replicas = ReplicaSet(tmp_path / "set", 2, inSyncReplicas="2",
                          tieredStoreUrl=f"file://{tmp_path / 'tier'}", **SMALL_TIER)
    try:
        replicas.wait_sync_state_set([0, 1])
        acked: dict[tuple[int, int], bytes] = {}
        for batch in range(30):
            bodies = [b"%d-%d-" % (batch, row) + b"x" * 400 for row in range(100)]
            reply = replicas.put("Cold", bodies)
            assert reply["status"] == "PUT_OK"
            acked.update(zip(map(tuple, reply["offsets"]), bodies, strict=True))
        for index in (0, 1):
            info = wait_for(lambda index=index: when(
                replicas.info(index),
                lambda i: i["min_log_position"] > 0 and i["tiered"]["tier_segments"] >= 8),
                30, f"replica {index} trimmed after tiering")
            assert info["tiered"]["last_error"] is None
        assert replicas.info(0)["tiered"]["upload"]["uploaded_segments"] >= 8
        assert replicas.info(1)["tiered"]["upload"] == {"state": "off"}
        replicas.check_acked_readable(acked, [0, 1], "Cold", 2)
        assert replicas.info(1)["tiered"]["cold_reads"] > 0
    finally:
        replicas.down()
