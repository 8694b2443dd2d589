"""The test-host harness itself: namespaces on a bridge, the fault operations, the clean-up.

Goal: hosts reach each other and the root namespace over 198.18.0.0/15 addresses; each fault
operation cuts exactly what it says (one peer, one direction, drop = silence, reject = refused;
link down = the whole host); heal restores everything; nothing outlives a test, and a network
left by a killed run is removed by name without touching a live owner's network. A broker runs
inside a host and advertises that host's address. Method: a tiny TCP listener in each host,
connects from hosts and from the root namespace; `ip netns list` / `ip link` after clean-up.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from connector import ClientConfig, Producer
from ha.cluster.netns import BENCHMARK_BLOCK, HostNetwork, TestHost, remove_leftovers
from tests.integration.broker_process import BrokerProcess
from tests.support.hosts import can_connect

pytestmark = pytest.mark.integration

PORT = 7100
_LISTEN = """
import socket, sys
server = socket.create_server((sys.argv[1], int(sys.argv[2])))
print("up", flush=True)
while True:
    conn, _ = server.accept()
    conn.close()
"""


def _listen(host: TestHost) -> subprocess.Popen[str]:
    process = subprocess.Popen([*host.launcher(), sys.executable, "-c", _LISTEN, host.address,
                                str(PORT)], stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "up"
    return process


def _names() -> str:
    def run(*argv: str) -> str:
        return subprocess.run(argv, capture_output=True, text=True, check=True).stdout

    return run("ip", "netns", "list") + run("ip", "-o", "link", "show")


def test_reach_faults_and_heal(test_hosts: Callable[[int], HostNetwork]) -> None:
    net = test_hosts(3)
    assert BENCHMARK_BLOCK.supernet_of(net.subnet)
    assert {h.address for h in net.hosts} | {net.root_address} <= set(
        map(str, net.subnet.hosts()))
    listeners = [_listen(h) for h in net.hosts]
    try:
        _faults(net)
    finally:
        for listener in listeners:
            listener.kill()
            listener.wait(10)
            assert listener.stdout is not None
            listener.stdout.close()


def _faults(net: HostNetwork) -> None:
    h1, h2, h3 = net.hosts

    def reach(src: TestHost, dst: TestHost) -> str:
        return can_connect(dst.address, PORT, launcher=src.launcher())

    assert [can_connect(h.address, PORT) for h in net.hosts] == ["ok"] * 3
    assert reach(h1, h2) == reach(h2, h1) == reach(h1, h3) == "ok"

    net.block(h1, h2.address, direction="in", action="drop")  # h2 -> h1 only
    assert reach(h2, h1) == "timeout"
    assert reach(h3, h1) == "ok" and reach(h1, h3) == "ok" and can_connect(h1.address, PORT) == "ok"
    net.heal(h1)
    assert reach(h2, h1) == "ok"

    net.block(h2, h3.address, direction="out", action="reject")
    assert reach(h2, h3) == "refused"  # a reject looks like nothing listening
    assert reach(h2, h1) == "ok"
    net.heal()

    net.isolate(h3, allow=[net.root_address])
    assert reach(h1, h3) == "timeout" and reach(h3, h2) == "timeout"
    assert can_connect(h3.address, PORT) == "ok"  # the root namespace is allowed
    net.heal()

    net.lose(h1, 100, direction="in")  # every packet from the network, drawn at random
    assert reach(h2, h1) == "timeout" and can_connect(h1.address, PORT) == "timeout"
    assert reach(h1, h3) == "timeout"  # the answers come in too
    net.heal()
    net.lose(h1, 40)
    assert "numgen random mod 100 < 40 drop" in net.rules(h1)
    net.heal()

    net.link_down(h2)
    assert can_connect(h2.address, PORT) != "ok" and reach(h1, h2) != "ok"
    assert reach(h1, h3) == "ok"
    net.heal()
    assert reach(h1, h2) == "ok" and can_connect(h2.address, PORT) == "ok"
    assert "rocketha" in net.rules(h2) and "drop" not in net.rules(h2)


def test_a_broker_runs_on_a_host_and_advertises_its_address(
        test_hosts: Callable[[int], HostNetwork], tmp_path: Path) -> None:
    net = test_hosts(1)
    host = net.host(1)
    broker = BrokerProcess(tmp_path / "b", host=host.address, launcher=host.launcher(),
                           flushDiskType="ASYNC_FLUSH").start()
    try:
        info = broker.action("broker_info")
        assert info["endpoint"] == f"{host.address}:{broker.port}"
        producer = Producer(ClientConfig(brokers=(broker.endpoint,), request_timeout_ms=5000))
        try:
            assert producer.send("t", b"from the root namespace").status == "PUT_OK"
        finally:
            producer.close()
        assert can_connect("127.0.0.1", broker.port) == "refused"  # not on the root's loopback
    finally:
        broker.stop()


def test_leftovers_of_a_killed_run_are_removed_and_live_ones_kept(
        test_hosts: Callable[[int], HostNetwork]) -> None:
    ours = test_hosts(1)
    script = ("from ha.cluster.netns import HostNetwork; import subprocess, sys, time\n"
              "net = HostNetwork(2)\n"
              "subprocess.Popen([*net.host(1).launcher(), 'sleep', '300'])\n"
              "print(net.name, flush=True); time.sleep(300)\n")
    orphan = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[2])
    assert orphan.stdout is not None
    name = orphan.stdout.readline().strip()
    assert name.startswith("rh") and f"{name}h1" in _names()
    os.kill(orphan.pid, signal.SIGKILL)  # a test run killed before its finalizers
    orphan.wait(10)
    orphan.stdout.close()
    removed = remove_leftovers()
    assert {f"{name}h1", f"{name}h2", f"{name}b"} <= set(removed)
    assert name not in _names()
    assert ours.exists() and ours.bridge in _names()  # a live owner's network is kept
