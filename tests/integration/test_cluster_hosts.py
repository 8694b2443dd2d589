"""`rocketha-cluster up --hosts`: each process on its own test host, seen only through its
advertised address.

Goal: controllers and brokers run in separate network namespaces with addresses from
198.18.0.0/15; `status --json` and the controller's replica info show those addresses (never
127.0.0.1); a client in the root namespace produces through the controller; a slave really
replicates across hosts; `down` removes every namespace the tool made. Method: the user-facing
tool through FailoverCluster(hosts=True).
"""

from __future__ import annotations

import ipaddress
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from connector import ClientConfig, Producer
from ha.local_hosts import BENCHMARK_BLOCK, HostNetwork
from tests.integration.failover_cluster import FailoverCluster

pytestmark = pytest.mark.integration


def test_up_hosts_puts_each_process_on_its_own_host(
        test_hosts: Callable[[int], HostNetwork], tmp_path: Path) -> None:
    cluster = FailoverCluster(tmp_path / "c", controllers=1, replicas=2, hosts=True)
    try:
        status = cluster.status()
        addresses = {name: process["endpoint"].rpartition(":")[0]
                     for name, process in status.items()}
        assert len(set(addresses.values())) == 3, addresses
        assert all(ipaddress.ip_address(a) in BENCHMARK_BLOCK for a in addresses.values())
        master, _ = cluster.wait_master("broker-a")
        cluster.wait_full_sync_state_set(master, 2)
        replica = cluster.replica_state("broker-a")
        assert replica["master_address"] == status[master]["endpoint"]
        producer = Producer(ClientConfig(controller=cluster.controller_addr, retries_max=5,
                                         request_timeout_ms=5000))
        try:
            assert producer.send("orders", b"across hosts", key="k").status == "PUT_OK"
        finally:
            producer.close()
        slave = next(name for name in cluster.members("broker-a") if name != master)
        cluster.wait_converged(slave, master)
        assert cluster.host(slave).namespace in subprocess.run(
            ["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    finally:
        cluster.down()
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout
    assert cluster.network is not None and cluster.network.name not in namespaces
