"""Mixed versions: v0.1.0 and this tree in one replica set and one controller group.

Goal: during a rolling upgrade the previous release and this one run together (docs/
planned-operations.md, "Compatibility"): a Raft group of two v0.1.0 controllers and one new; a
replica set whose v0.1.0 master takes a new slave (the slave reaches it with a plain hello,
since v0.1.0 knows no version block), fails over to the new broker, and takes the old broker
back as its slave; every acknowledged message is read back from the new master and the old
slave. And a peer two minors apart (faked with ROCKETHA_TEST_PROTOCOL, read only by
conf/protocol.py) is refused with the rule's line on the HA link and on a client call.

Method: the v0.1.0 wheel is built from the git tag inside the test (`git archive`, pip wheel
without build isolation) and installed with `--target DIR`; old processes run with
PYTHONPATH=DIR and DIR as their working directory, so the old code and its dist-info come
first and .venv's dependencies are shared. A clone without tags fails with one line naming
`git fetch --tags` (never a skip). Slow (wheel build plus a failover): `build.py test-upgrade`.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pyarrow import flight

from conf.protocol import PROTOCOL_HEADER
from connector import ClientConfig, Producer
from ha.cluster.processes import free_port
from tests.controller.controller_process import ControllerGroup, call
from tests.ha.replica_set import FAST_TIMERS
from tests.integration.broker_process import BrokerProcess
from tests.integration.failover_cluster import read_topic
from tests.support.wheel import without_pythonpath

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
OLD_TAG = "v0.1.0"
DEADLINE_S = 60.0  # 2 shared cores under load: elections and rejoins take seconds
BUILD_TIMEOUT_S = 600
TOPIC = "mixed"


def _wait(condition: Callable[[], Any], what: str, timeout_s: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = condition()
        except (flight.FlightError, OSError, KeyError):
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def old_release(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding v0.1.0's packages and dist-info (pip install --target)."""
    found = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "-q", "--verify",
                            f"refs/tags/{OLD_TAG}"], capture_output=True, check=False)
    if found.returncode != 0:
        pytest.fail(f"tag {OLD_TAG} missing from this clone: run `git fetch --tags`",
                    pytrace=False)
    work = tmp_path_factory.mktemp("old-release")
    source = work / "src"
    source.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", OLD_TAG], capture_output=True,
                             check=True)
    subprocess.run(["tar", "-x", "-C", str(source)], input=archive.stdout, check=True)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", str(source), "-w",
                    str(work)], check=True, cwd=work, timeout=BUILD_TIMEOUT_S,
                   env=without_pythonpath())
    (wheel,) = work.glob("rocketha-0.1.0-*.whl")
    target = work / "site"
    subprocess.run([*pip, "install", "--no-deps", "--target", str(target), str(wheel)],
                   check=True, timeout=BUILD_TIMEOUT_S, env=without_pythonpath())
    return target


def _old(site: Path) -> list[str]:
    """Command prefix running a process of v0.1.0 (its code and dist-info first)."""
    return ["env", "-C", str(site), f"PYTHONPATH={site}"]


def _controller(info: dict[str, Any]) -> dict[str, Any]:
    return info.get("controller") or {}


def test_old_and_new_run_together_and_fail_over(tmp_path: Path, old_release: Path) -> None:
    old = _old(old_release)
    group = ControllerGroup(tmp_path / "controllers", 3, launchers={1: old, 3: old})
    brokers: dict[str, BrokerProcess] = {}
    producer = None
    try:
        group.start()
        group.wait_leader(timeout_s=DEADLINE_S)
        versions = {n: call(group.endpoint(n), "controller_status")["version"]
                    for n in group.ids}
        assert versions[1] == versions[3] == "0.1.0", versions
        controller_addr = ";".join(group.endpoint(n) for n in group.ids)
        common = {**FAST_TIMERS, "enableControllerMode": "true",
                  "controllerAddr": controller_addr, "brokerHeartbeatInterval": "200",
                  "totalReplicas": "2", "inSyncReplicas": "2", "minInSyncReplicas": "1",
                  "enableAutoInSyncReplicas": "true", "brokerRole": "SYNC_MASTER",
                  "defaultTopicQueueNums": "2"}
        brokers["old"] = BrokerProcess(tmp_path / "old", name="a", launcher=old, **{
            **common, "haListenPort": str(free_port())}).start()
        _wait(lambda: brokers["old"].action("broker_info")["role"] == "MASTER",
              "the v0.1.0 broker to become master")
        assert brokers["old"].action("broker_info")["version"] == "0.1.0"
        brokers["new"] = BrokerProcess(tmp_path / "new", name="a", **{
            **common, "haListenPort": str(free_port())}).start()
        _wait(lambda: len(brokers["old"].action("broker_info").get("sync_state_set") or [])
              == 2, "the new slave to join the old master's SyncStateSet")

        producer = Producer(ClientConfig(controller=controller_addr.replace(";", ","),
                                         request_timeout_ms=2000, send_deadline_ms=60_000,
                                         retries_max=200))
        acked: dict[tuple[int, int], bytes] = {}

        def send(phase: str, count: int) -> None:
            assert producer is not None
            for n in range(count):
                body = f"{phase}:{n}".encode()
                result = producer.send(TOPIC, body)
                assert result.ok, (phase, n, result)
                acked[(result.queue_id, result.queue_offset)] = body

        send("old-master", 40)
        on_old_master = read_topic(brokers["old"].endpoint, TOPIC)  # a new client, an old broker
        assert {k: on_old_master.get(k) for k in acked} == acked
        brokers["old"].kill()  # failover: the new broker takes over from the v0.1.0 master
        _wait(lambda: brokers["new"].action("broker_info")["role"] == "MASTER",
              "the new broker to be elected")
        send("new-master", 40)
        brokers["old"].start()  # back as the slave of the new master
        _wait(lambda: _controller(brokers["old"].action("broker_info")).get("role") == "slave",
              "the v0.1.0 broker to follow the new master")
        _wait(lambda: len(brokers["new"].action("broker_info").get("sync_state_set") or [])
              == 2, "the v0.1.0 slave to join the new master's SyncStateSet")
        send("old-slave", 40)

        on_master = read_topic(brokers["new"].endpoint, TOPIC)
        assert {k: on_master.get(k) for k in acked} == acked
        _wait(lambda: all(read_topic(brokers["old"].endpoint, TOPIC).get(k) == body
                          for k, body in acked.items()),
              "the v0.1.0 slave to hold every acknowledged message")
        # the new slave reached the v0.1.0 master with a plain hello after a silent close
        assert "the next hello is a 0.1 hello" in brokers["new"].log.read_text()
    finally:
        if producer is not None:
            producer.close()
        for broker in brokers.values():
            if broker.process is not None and broker.process.poll() is None:
                broker.kill()
        group.stop_all()


def test_two_minors_apart_is_refused_with_the_line(tmp_path: Path) -> None:
    far = ["env", "ROCKETHA_TEST_PROTOCOL=0.4"]
    ha_port = free_port()
    master = BrokerProcess(tmp_path / "master", name="b", haListenPort=str(ha_port),
                           brokerRole="SYNC_MASTER", totalReplicas="2", **FAST_TIMERS)
    slave = BrokerProcess(tmp_path / "slave", name="b", launcher=far, brokerId="1",
                          brokerRole="SLAVE", haMasterAddress=f"127.0.0.1:{ha_port}",
                          haListenPort="0", **FAST_TIMERS)
    try:
        master.start()
        slave.start(wait=False)  # its broker_info refuses this helper's call (no version: 0.1)
        line = "HA link from slave 1 refused: the peer speaks protocol 0.4"
        _wait(lambda: line in master.log.read_text(), "the master to refuse the 0.4 slave")
        _wait(lambda: f"master refused: {line}" in slave.log.read_text(),
              "the slave to report the master's line")
        assert not [link for link in master.action("broker_info")["slaves"]
                    if link["state"] == "TRANSFER"]

        client = flight.FlightClient(f"grpc://{master.endpoint}")
        options = flight.FlightCallOptions(timeout=10.0, headers=[
            (PROTOCOL_HEADER.encode(), b"0.4 0.4.0")])
        with pytest.raises(flight.FlightError) as refused:
            list(client.do_action(flight.Action("broker_info", json.dumps({}).encode()),
                                  options))
        client.close()
        text = str(refused.value)
        assert "VERSION_REFUSED" in text and "the peer speaks protocol 0.4 (release 0.4.0)" \
            in text and "docs/planned-operations.md#compatibility" in text, text
    finally:
        for broker in (master, slave):
            if broker.process is not None and broker.process.poll() is None:
                broker.kill()
