"""Two replica sets as real processes committing one topic table (controller mode).

Goal: with a topic on two replica sets sharing one file:// tier, the one Delta table under
`<tier>/tables/<topic>` holds what each set's master holds, each message once: per
(brokerName, queueId) the offsets are contiguous from 0 and the rows are the master's; every
acknowledged body is in it once; each set has its own fence and queue app transactions, and
the commits of both sets are in the log.
Method: `rocketha-cluster up` with 2 sets of 2 brokers and 1 controller, half of the bodies
produced to each set's master, the table read with deltalake once each set's
app transactions reach its master's confirmed ends (a condition with a deadline).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from connector import Admin, ClientConfig, Producer
from connector.protocol.table_ids import fence_app_id, queue_app_id
from tests.ha.replica_set import wait_for
from tests.integration.failover_cluster import FailoverCluster, read_topic

pytestmark = pytest.mark.integration

TOPIC = "shared"
QUEUES = 4
MESSAGES = 1200
CATCH_UP_S = 60.0


def _ends(uri: str, broker_name: str) -> list[int | None]:
    try:
        table = DeltaTable(uri)
    except TableNotFoundError:
        return [None] * QUEUES
    return [table.transaction_version(queue_app_id(broker_name, q)) for q in range(QUEUES)]


def test_two_replica_sets_commit_one_table_each_message_once(tmp_path: Path) -> None:
    tier = tmp_path / "tier"
    cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replica_sets=2, replicas=2,
                              tieredStoreUrl=f"file://{tier}", topicTableIntervalMs="200")
    try:
        sets = sorted({entry["set"] for entry in cluster.brokers.values()})
        assert len(sets) == 2
        masters = {name: cluster.wait_master(name)[0] for name in sets}
        for master in masters.values():
            Admin(ClientConfig(brokers=(cluster.endpoint(master),))).create_topic(
                TOPIC, queues=QUEUES, table="delta")
        bodies = [b"two-%05d" % n for n in range(MESSAGES)]
        for index, master in enumerate(masters.values()):  # half of the bodies each
            with Producer(ClientConfig(brokers=(cluster.endpoint(master),),
                                       request_timeout_ms=5000)) as producer:
                for first in range(index * 100, MESSAGES, 200):
                    results = producer.send_batch(TOPIC, [{"body": b}
                                                          for b in bodies[first:first + 100]])
                    assert all(result.ok for result in results), results
        uri = str(tier / "tables" / TOPIC)
        held = {}
        for name, master in masters.items():
            cluster.wait_confirm_at_end(master)
            found = read_topic(cluster.endpoint(master), TOPIC)
            assert found, f"{name} holds none of the topic"
            held.update({(name, q, o): body for (q, o), body in found.items()})
            ends = [max((o + 1 for q, o in found if q == queue), default=0)
                    for queue in range(QUEUES)]
            wait_for(lambda n=name, e=ends: _ends(uri, n) == e, CATCH_UP_S,
                     f"{name}'s table ends at {ends} ({_ends(uri, name)})")
        table = DeltaTable(uri).to_pyarrow_table()
        places = list(zip(table["brokerName"].to_pylist(), table["queueId"].to_pylist(),
                          table["queueOffset"].to_pylist(), strict=True))
        assert len(places) == len(set(places)), "a message is in the table twice"
        assert dict(zip(places, table["body"].to_pylist(), strict=True)) == held
        assert sorted(table["body"].to_pylist()) == bodies  # every acked body, once
        snapshot = DeltaTable(snapshot_uri := uri)
        assert all(snapshot.transaction_version(fence_app_id(name)) for name in sets), \
            snapshot_uri
        writers = {commit.get("rocketha.brokerName") for commit in snapshot.history()}
        assert set(sets) <= writers
    finally:
        cluster.down()
