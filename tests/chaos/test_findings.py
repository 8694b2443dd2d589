"""Deterministic replays of what chaos campaigns found and is not fixed yet (strict xfails: each
turns into a failure, XPASS, the day it is fixed, so the marker goes with the fix).

Finding 1 (every campaign with master faults): a consumer group's committed offset moves
backwards after a failover. A master answers `commit_offset` once the offset is in its own
consumerOffset.json; slaves get the offsets with the topics, at most every
haMetadataSyncInterval (ha/broker/replication.py), so a slave elected before the next sync
serves older offsets, and a cut-off master keeps accepting commits the new master never sees
(seed 7: 55 regressions over one isolate-master partition). Consumers then re-read (at-least-
once still holds), but Jepsen's Kafka checker calls it an anomaly, and lag tools jump back.
Replay: metadata synced once at start only (haMetadataSyncInterval 10 min), one commit on the
master, the master killed, the new master asked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from connector import Admin, ClientConfig
from tests.integration.failover_cluster import FailoverCluster
from tests.integration.test_controller_failover import QUORUM_AUTO, SET_A
from tests.integration.test_partitions import CONTROLLER_FAST

pytestmark = pytest.mark.integration


def test_committed_offset_survives_a_failover(tmp_path: Path) -> None:
    cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3,
                              controller_settings=CONTROLLER_FAST,
                              haMetadataSyncInterval="600000", **QUORUM_AUTO)
    try:
        old, info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(old, 3)
        admin = Admin(ClientConfig(brokers=(cluster.endpoint(old),), retries_max=3))
        admin.create_topic("orders", queues=1)
        admin.commit_offset("billing", "orders", 0, 7)
        assert admin.query_offsets("billing", "orders") == {0: 7}
        cluster.kill(old)
        new, _ = cluster.wait_master(SET_A, min_epoch=info["master_epoch"] + 1, exclude=[old])
        offsets = Admin(ClientConfig(brokers=(cluster.endpoint(new),), retries_max=3)
                        ).query_offsets("billing", "orders")
        assert offsets == {0: 7}, f"the acknowledged commit moved back: {offsets}"
    finally:
        cluster.down()
