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
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from connector import ClientConfig, Producer
from ha.cluster.netns import BENCHMARK_BLOCK, HostNetwork
from tests.integration.failover_cluster import FailoverCluster, cluster_cli

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


def test_spare_hosts_are_listed_empty_and_removed_by_down(
        test_hosts: Callable[[int], HostNetwork], tmp_path: Path) -> None:
    """`up --hosts --spare-hosts 2` (brokers only, no controllers: that failed once, the
    controllers' plan made a network of 0 hosts): two more hosts with
    nothing of the cluster on them, reachable from the root namespace, kept by a second `up`,
    removed by `down`."""
    directory = tmp_path / "c"
    cluster_cli("up", "--dir", str(directory), "--insecure", "--hosts", "--spare-hosts", "2")
    try:
        manifest = json.loads((directory / "cluster.json").read_text())
        spares = manifest["hosts"]["spare"]
        used = {manifest["brokers"][0]["host"]}
        assert len(spares) == 2 and not used & {s["address"] for s in spares}, spares
        network = HostNetwork.attach(manifest["hosts"]["network"], manifest["hosts"]["count"])
        spare_hosts = [h for h in network.hosts if h.address in {s["address"] for s in spares}]
        assert [h.namespace for h in spare_hosts] == [s["namespace"] for s in spares]
        listed = subprocess.run(["ip", "netns", "pids", spares[0]["namespace"]],
                                capture_output=True, text=True, check=True).stdout
        assert not listed.strip(), "something runs on a spare host"
        cluster_cli("up", "--dir", str(directory))
        again = json.loads((directory / "cluster.json").read_text())["hosts"]["spare"]
        assert again == spares
    finally:
        cluster_cli("down", "--dir", str(directory))
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True,
                                check=True).stdout.splitlines()
    assert not any(line.startswith(manifest["hosts"]["network"]) for line in namespaces)
