"""Brokers in controller mode + the connector's ControllerRoutes, as real processes.

Goal: brokers started with enableControllerMode=true register with the controller group,
become the master of their replica set (broker_info shows the id and role the controller
gave), and `ControllerRoutes` (the connector's `controller` option) finds every replica set's
alive endpoints, which then serve the topic look-ups; a dead broker drops out of the routes.
Method: one controller process and two broker processes (replica sets a and b) on 127.0.0.1;
conditions are waited for with deadlines.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from connector.client import ClientConfig, Producer
from connector.client.routes import ControllerRoutes, ReplicaSet, route_provider, topic_queue_counts
from connector.errors import RoutesUnavailableError
from connector.protocol import RocketHAError
from tests.controller.controller_process import ControllerGroup, free_port
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration
DEADLINE_S = 20.0


def _wait(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_brokers_register_and_controller_routes_find_them(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path / "controllers", 1).start()
    brokers: list[BrokerProcess] = []
    try:
        group.wait_leader()
        controller = group.endpoint(1)
        for name in ("a", "b"):
            brokers.append(BrokerProcess(
                tmp_path / name, name=name, enableControllerMode="true",
                controllerAddr=f"127.0.0.1:{free_port()},{controller}",
                brokerHeartbeatInterval="200", controllerRequestTimeoutMs="500").start())

        def roles() -> list[object]:
            return [(broker.action("broker_info").get("controller") or {}).get("role")
                    for broker in brokers]

        _wait(lambda: roles() == ["master", "master"], "both brokers master of their set")
        info = brokers[0].action("broker_info")["controller"]
        assert info["broker_id"] == 1 and info["master_epoch"] >= 1
        assert info["master_address"] == brokers[0].endpoint

        routes = route_provider((), controller, 2000)
        assert isinstance(routes, ControllerRoutes)
        assert routes.replica_sets() == (ReplicaSet("a", (brokers[0].endpoint,)),
                                         ReplicaSet("b", (brokers[1].endpoint,)))
        brokers[0].action("create_topic", {"topic": "orders", "read_queue_nums": 4,
                                               "write_queue_nums": 4})
        counts = topic_queue_counts(routes.replica_sets()[0], 2000)
        assert counts["orders"] == (4, 4)

        def queue_routes() -> list[object]:  # topics travel with the heartbeats
            return group.call_leader("get_routes", {"topic": "orders"}).get("queues", [])

        _wait(lambda: bool(queue_routes()), "the controller to route the new topic")
        assert [(q["broker_name"], q["write_queue_nums"]) for q in queue_routes()] == [("a", 4)]

        brokers[1].kill()
        _wait(lambda: [s.broker_name for s in routes.replica_sets()] == ["a"],
              "the dead broker's set to leave the routes")
    finally:
        for broker in brokers:
            if broker.process is not None and broker.process.poll() is None:
                broker.kill()
        group.stop_all()


def test_controller_routes_without_any_controller_is_a_typed_error() -> None:
    routes = ControllerRoutes(f"127.0.0.1:{free_port()}", 300)
    with pytest.raises(RoutesUnavailableError, match="no controller answered"):
        routes.replica_sets()
    with pytest.raises(RoutesUnavailableError, match="names no HOST:PORT"):
        ControllerRoutes(" , ", 300)


def _send(endpoint: str) -> str:
    """One send to one broker: PUT_OK, or the error name it ends with."""
    config = ClientConfig(brokers=(endpoint,), request_timeout_ms=1000, send_deadline_ms=1500,
                          retries_max=2)
    producer = Producer(config)
    try:
        return producer.send("orders", b"x").status
    except RocketHAError as err:
        return err.name
    finally:
        producer.close()


def test_only_the_broker_the_controller_names_master_takes_writes(tmp_path: Path) -> None:
    # These two brokers do not replicate (HA roles at runtime are not built), so the master
    # never grows its SyncStateSet: the controller may only elect the other one uncleanly.
    group = ControllerGroup(tmp_path / "controllers", 1, enableElectUncleanMaster="true").start()
    brokers: dict[str, BrokerProcess] = {}
    try:
        group.wait_leader()
        for member in ("a1", "a2"):
            brokers[member] = BrokerProcess(
                tmp_path / member, name="a", enableControllerMode="true",
                controllerAddr=group.endpoint(1), brokerHeartbeatInterval="200").start()

        def role(member: str) -> object:
            return (brokers[member].action("broker_info").get("controller") or {}).get("role")

        _wait(lambda: {role("a1"), role("a2")} == {"master", "slave"}, "one master, one slave")
        master, other = sorted(brokers, key=lambda m: role(m) != "master")
        assert _send(brokers[master].endpoint) == "PUT_OK"
        assert _send(brokers[other].endpoint) == "NOT_MASTER"
        # A client that knows only the controller (and one given both brokers) follow the master.
        following = [Producer(ClientConfig(controller=group.endpoint(1), request_timeout_ms=1000,
                                           send_deadline_ms=15_000, retries_max=40)),
                     Producer(ClientConfig(brokers=(brokers["a2"].endpoint,
                                                    brokers["a1"].endpoint),
                                           request_timeout_ms=1000, send_deadline_ms=15_000,
                                           retries_max=40))]
        assert [producer.send("orders", b"before").status for producer in following] == [
            "PUT_OK", "PUT_OK"]

        brokers[master].kill()  # the controller elects the other one after the liveness timeout
        assert [producer.send("orders", b"after").status for producer in following] == [
            "PUT_OK", "PUT_OK"]
        assert role(other) == "master"
        assert _send(brokers[other].endpoint) == "PUT_OK"
        for producer in following:
            producer.close()

        brokers[master].start()  # the old master comes back: a newer epoch names another master
        _wait(lambda: role(master) == "slave", "the old master to learn it is deposed")
        assert _send(brokers[master].endpoint) == "NOT_MASTER"
        assert brokers[other].action("broker_info")["controller"]["master_epoch"] >= 2

        # Every controller gone (docs/design.md §5.6): the set keeps the roles it had and takes
        # writes.
        group.kill(1)

        def failed_heartbeats() -> int:
            return int(brokers[other].action("broker_info")["controller"]["heartbeats_failed"])

        failed = failed_heartbeats()
        _wait(lambda: failed_heartbeats() >= failed + 3, "heartbeats to a dead controller")
        assert _send(brokers[other].endpoint) == "PUT_OK"
        assert _send(brokers[master].endpoint) == "NOT_MASTER"
        assert role(other) == "master"
    finally:
        for broker in brokers.values():
            if broker.process is not None and broker.process.poll() is None:
                broker.kill()
        group.stop_all()
