"""`/metrics` on real brokers and a real controller, scraped and parsed as Prometheus would.

Goal: `rocketha-cluster up` turns metrics on and `status --json` names each endpoint; the
series an operator alerts on say the truth before and after a failover: traffic per topic,
produce latency, role and epoch, SyncStateSet size, each slave's lag, consumer-group lag per
queue, rejected requests by code, the controller's Raft state and master elections. Method:
one controller and a set of three brokers started by the tool, produce and commit through the
client library, refuse a request on a slave, SIGKILL the master, scrape with urllib and parse
with prometheus_client's parser.
"""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from pyarrow import flight

from connector import Admin, ClientConfig, Consumer, Producer
from tests.integration.operated_cluster import OperatedCluster, scrape, value, wait_for

pytestmark = pytest.mark.integration
TOPIC = "metered"


def test_metrics_follow_traffic_lag_and_a_failover(tmp_path: Path) -> None:
    cluster = OperatedCluster(tmp_path, inSyncReplicas="2", defaultTopicQueueNums="2")
    try:
        processes = cluster.status()
        assert all(p["metrics_endpoint"].startswith("http://127.0.0.1:") for p in processes)
        master = cluster.wait_master()
        config = ClientConfig(brokers=(master["endpoint"],), retries_max=3)
        with Producer(config) as producer:
            for _ in range(6):
                results = producer.send_batch(TOPIC, [{"body": b"m" * 100}] * 10)
                assert {r.status for r in results} == {"PUT_OK"}
        admin = Admin(config)

        def readable() -> dict[int, int]:  # acked at the quorum (2 of 3), readable once the
            # confirm position, held by every SyncStateSet member, covers it (README)
            return {q["queue_id"]: q["max_queue_offset"] for q in admin.queue_offsets(TOPIC)}

        wait_for(lambda: sum(readable().values()) == 60, 10, "the acked messages readable")
        queues = readable()
        admin.commit_offset("readers", TOPIC, 0, 1)
        consumer = Consumer(config)
        pulled = sum(consumer.pull(TOPIC, queue_id, 0, max_messages=100).table.num_rows
                     for queue_id in queues)
        assert pulled == 60
        slave = next(b for b in cluster.brokers() if b["role"] == "SLAVE")
        with pytest.raises(flight.FlightError, match="NOT_MASTER"):
            client = flight.FlightClient(f"grpc://{slave['endpoint']}")
            list(client.do_action(flight.Action("create_topic",
                                                json.dumps({"topic": "x"}).encode())))

        on_master = scrape(master["metrics_endpoint"])
        assert value(on_master, "rocketmq_messages_in_total", topic=TOPIC) == 60
        assert value(on_master, "rocketmq_throughput_in_total", topic=TOPIC) >= 6000
        assert value(on_master, "rocketmq_messages_out_total", topic=TOPIC) == 60
        assert value(on_master, "rocketmq_throughput_out_total", topic=TOPIC) >= 6000
        assert value(on_master, "rocketha_put_batches_total", status="PUT_OK") == 6
        assert value(on_master, "rocketmq_rpc_latency_count", request="produce") == 6
        assert value(on_master, "rocketmq_rpc_latency_bucket", request="produce",
                     le="+Inf") == 6
        assert value(on_master, "rocketha_broker_role", role="MASTER") == 1
        assert value(on_master, "rocketha_in_sync_replicas_configured") == 2
        assert value(on_master, "rocketmq_consumer_lag_messages", group="readers",
                     topic=TOPIC, queue_id="0") == queues[0] - 1
        assert value(on_master, "rocketha_topic_messages", topic=TOPIC) == 60
        first_epoch = value(on_master, "rocketha_master_epoch")
        assert first_epoch and first_epoch >= 1

        def caught_up() -> bool:
            samples = scrape(master["metrics_endpoint"])
            lags = samples.get("rocketha_slave_lag_bytes", [])
            return (value(samples, "rocketha_sync_state_set_size") == 3 and len(lags) == 2
                    and all(v == 0 for _, v in lags)
                    and all(v == 0 for _, v in samples["rocketha_slave_lag_seconds"]))
        wait_for(caught_up, 20, "both slaves caught up in the SyncStateSet")
        on_slave = scrape(slave["metrics_endpoint"])
        assert value(on_slave, "rocketha_broker_role", role="SLAVE") == 1
        assert value(on_slave, "rocketha_slave_link_up") == 1
        assert value(on_slave, "rocketha_rejected_requests_total", code="NOT_MASTER") == 1

        controller = cluster.controller()
        on_controller = scrape(controller["metrics_endpoint"])
        assert value(on_controller, "rocketha_controller_is_leader") == 1
        assert value(on_controller, "rocketha_raft_term") >= 1
        assert value(on_controller, "rocketha_raft_commit_index") >= 1
        assert value(on_controller, "rocketha_replica_set_has_master",
                     replica_set="broker-a") == 1
        assert value(on_controller, "rocketmq_active_broker_num", replica_set="broker-a") == 3
        elections = value(on_controller, "rocketmq_election_total", replica_set="broker-a")
        assert elections == 1

        _dashboard_names_exist([p["metrics_endpoint"] for p in cluster.status()])

        cluster.kill(master)
        successor = cluster.wait_master(not_name=master["name"])
        on_successor = scrape(successor["metrics_endpoint"])
        assert value(on_successor, "rocketha_broker_role", role="MASTER") == 1
        assert value(on_successor, "rocketha_master_epoch") > first_epoch
        after = scrape(controller["metrics_endpoint"])
        # at least the failover's election (the leader may first leave the set without a master
        # while it waits for the slaves' final positions)
        assert value(after, "rocketmq_election_total", replica_set="broker-a") >= 2
        assert value(after, "rocketha_replica_set_master_epoch", replica_set="broker-a") \
            == value(on_successor, "rocketha_master_epoch")
    finally:
        cluster.down()


def _dashboard_names_exist(endpoints: list[str]) -> None:
    """Every series conf/grafana-dashboard.json queries is a family some process serves."""
    served = set()
    for endpoint in endpoints:
        with urllib.request.urlopen(endpoint, timeout=10) as response:
            served |= set(re.findall(r"^# TYPE (\S+) ", response.read().decode(), re.MULTILINE))
    dashboard = (Path(__file__).resolve().parents[2] / "conf" / "grafana-dashboard.json")
    queried = set(re.findall(r"\b(rocket(?:mq|ha)_[a-z_]+)", dashboard.read_text()))
    def family(name: str) -> str:
        return re.sub(r"_(total|bucket|count|sum)$", "", name)
    missing = {name for name in queried if family(name) not in {family(n) for n in served}}
    assert queried and not missing, f"the dashboard queries series nobody serves: {missing}"
