"""`rocketha-cluster restart --rolling` under a steady idempotent load loses nothing.

Goal: every process of a cluster of 3 controllers and 2 replica sets of 3 is restarted once, in
the documented order (controller followers, the controller leader, then per set the slaves and
the master last), and the command's write probe (one Producer(idempotent=True) per set) sees
no failed put, no acknowledged message lost or stored twice; the longest write pause is
printed. Method: the command as an operator runs it (`--json`), against a real cluster;
process ids before and after show each process was restarted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.failover_cluster import FailoverCluster, cluster_cli
from tests.integration.test_controller_failover import QUORUM_AUTO

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_rolling_restart_loses_nothing_and_fails_no_put(tmp_path: Path) -> None:
    cluster = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=3, replica_sets=2,
                                  replicas=3, **QUORUM_AUTO)
        for name in ("broker-a", "broker-b"):
            master, _ = cluster.wait_master(name)
            cluster.wait_full_sync_state_set(master, 3)
        leader = cluster.wait_controller_leader()
        pids = {name: cluster.pid(name) for name in [*cluster.brokers, *cluster.controllers]}
        masters = {name for name in cluster.brokers
                   if (cluster.info(name) or {}).get("role") == "MASTER"}

        out = cluster_cli("restart", "--rolling", "--dir", str(cluster.directory), "--json")
        report = json.loads(out.strip().splitlines()[-1])
        per_set = {name: (figures["longest_write_pause_s"], figures["send_p99_ms"])
                   for name, figures in report["sets"].items()}
        steps = [(s["process"], s["seconds"], s["write_pause_s"], s["write_pause_from_s"],
                  s["write_pause_set"]) for s in report["steps"]]
        print(f"\nrolling restart: longest write pause {report['longest_write_pause_s']} s, "
              f"acked {report['acked']}, failed {report['failed_puts']}, steps "
              f"{steps} (process, s, longest pause s, from s, set); the longest in "
              f"{report['longest_write_pause_step']}; per set (pause s, send p99 ms) {per_set}")

        order = [step["process"] for step in report["steps"]]
        assert sorted(order) == sorted(pids), order
        assert order[2] == leader, order  # controllers: the leader last
        assert all(step["kind"] == "controller" for step in report["steps"][:3])
        for offset in (3, 6):  # each set: its master last
            members = report["steps"][offset:offset + 3]
            assert len({cluster.brokers[s["process"]]["set"] for s in members}) == 1, members
            assert members[2]["process"] in masters, (members, masters)
        assert all(cluster.pid(name) not in (None, pids[name]) for name in pids)
        assert report["acked"] > 100
        assert report["lost_acked"] == 0 and report["duplicated"] == 0, report
        assert report["failed_puts"] == 0, report["sets"]
    finally:
        if cluster is not None:
            cluster.down()
