"""Bind and advertise apart, with real processes on loopback aliases (127.0.0.0/8 is all lo).

Goal: every address a process hands to another is its advertised one, and each listener binds
where it is told. Method: three controllers advertising 127.0.0.5-7 and bound to 0.0.0.0, and a
replica set of two brokers in controller mode: broker 0 advertises 127.0.0.2 (clients) and
127.0.0.3 (brokerIP2, HA) and binds its client endpoint to 0.0.0.0 but its HA port to 127.0.0.3
only; broker 1 advertises 127.0.0.4 for both. The slave's link can only come up through
brokerIP2 (the HA port refuses on brokerIP1); routes, SyncStateSet members, NOT_LEADER and
NOT_MASTER replies must name advertised addresses. A wildcard brokerIP1 or controllerAddr stops
start-up naming the key.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from connector import ClientConfig, Producer
from connector.client import controller_cluster_list
from connector.protocol import RocketHAError
from ha.broker.peer import broker_info
from tests.controller.controller_process import ROOT, ControllerGroup, call, free_port
from tests.ha.replica_set import FAST_TIMERS, wait_for
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

CONTROLLER_HOSTS = {1: "127.0.0.5", 2: "127.0.0.6", 3: "127.0.0.7"}


def _refused(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except ConnectionRefusedError:
        return True
    return False


def test_every_handed_out_address_is_advertised(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path / "controllers", 3, hosts=CONTROLLER_HOSTS,
                            controllerBindAddress="0.0.0.0").start()
    brokers: list[BrokerProcess] = []
    try:
        leader = group.wait_leader()
        controller_addr = ";".join(group.endpoint(n) for n in group.ids)
        common = {**FAST_TIMERS, "enableControllerMode": "true", "controllerAddr": controller_addr,
                  "brokerHeartbeatInterval": "200", "totalReplicas": "2",
                  "brokerRole": "SYNC_MASTER", "inSyncReplicas": "2", "brokerName": "a"}
        ha_port = free_port()
        brokers.append(BrokerProcess(
            tmp_path / "a0", name="a", host="127.0.0.2", **{
                **common, "brokerIP2": "127.0.0.3", "bindAddress": "0.0.0.0",
                "haBindAddress": "127.0.0.3", "haListenPort": str(ha_port)}).start())
        master = brokers[0]
        wait_for(lambda: master.action("broker_info")["role"] == "MASTER", 20,
                 "broker 0 to become master")
        brokers.append(BrokerProcess(tmp_path / "a1", name="a", host="127.0.0.4", **{
            **common, "haListenPort": str(free_port())}).start())
        slave = brokers[1]

        def linked() -> bool:
            info = master.action("broker_info")
            return len(info.get("sync_state_set") or []) == 2
        wait_for(linked, 30, "the slave to join the SyncStateSet through brokerIP2")
        info = master.action("broker_info")
        assert info["endpoint"] == master.endpoint == f"127.0.0.2:{master.port}"
        assert info["ha_address"] == f"127.0.0.3:{ha_port}"
        assert _refused("127.0.0.2", ha_port), "haBindAddress: the HA port binds 127.0.0.3 only"
        # bindAddress=0.0.0.0: any local address answers, and still names brokerIP1
        elsewhere = broker_info(f"127.0.0.9:{master.port}", timeout_s=5.0)
        assert elsewhere is not None and elsewhere["endpoint"] == master.endpoint
        assert slave.action("broker_info")["master_endpoint"] == master.endpoint

        listing = controller_cluster_list(group.endpoint(leader), 3000)
        assert {c["address"] for c in listing["controllers"]} == {
            group.endpoint(n) for n in group.ids}
        (entry,) = listing["replica_sets"]
        assert entry["replica"]["master_address"] == master.endpoint
        assert {m["broker_address"] for m in entry["replica"]["brokers"]} == {
            master.endpoint, slave.endpoint}
        follower = next(n for n in group.ids if n != leader)
        redirect = call(group.endpoint(follower), "get_replica_info", {"broker_name": "a"})
        assert redirect["status"] == "NOT_LEADER"
        assert redirect["leader_address"] == group.endpoint(leader)

        config = ClientConfig(controller=controller_addr, retries_max=5,
                              request_timeout_ms=5000)
        producer = Producer(config)
        try:
            assert producer.send("orders", b"across", key="k").status == "PUT_OK"
        finally:
            producer.close()
        direct = Producer(ClientConfig(brokers=(slave.endpoint,), retries_max=0,
                                       request_timeout_ms=3000))
        try:
            with pytest.raises(RocketHAError) as caught:
                direct.send("orders", b"to the slave")
        finally:
            direct.close()
        assert caught.value.name == "NOT_MASTER"
        assert master.endpoint in str(caught.value)
    finally:
        for broker in brokers:
            broker.stop()
        group.stop_all()


def test_wildcard_advertised_address_stops_start_naming_the_key(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", host="0.0.0.0")
    with pytest.raises(RuntimeError, match="exited 2"):
        broker.start()
    assert "brokerIP1" in broker.log.read_text() and "wildcard" in broker.log.read_text()
    conf = tmp_path / "controller.conf"
    conf.write_text(f"controllerDLegerPeers=n1-127.0.0.1:{free_port()}\n"
                    f"controllerAddr=0.0.0.0:{free_port()}\n"
                    f"controllerStorePath={tmp_path / 'c'}\n")
    done = subprocess.run([sys.executable, "-m", "controller", "--conf", str(conf)],
                          check=False, capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert "controllerAddr" in done.stderr and "wildcard" in done.stderr
