"""Controller mode, broker side: config keys and the link (register, heartbeat, role learnt).

Goal: a broker in controller mode gets a stable broker id from the controller group (following
NOT_LEADER redirects from a follower), learns its role within a few heartbeats (one master, the
other a slave of it), keeps heartbeating when the leading controller is SIGKILLed, and bad
controller-mode settings stop start-up with a ConfigError naming the key. Method: three real
controller processes on 127.0.0.1 and two in-process ControllerLinks; a real broker process for
the broker_info report.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from controller.api import (
    ROLE_MASTER,
    ROLE_SLAVE,
    BrokerHeartbeat,
    ControllerStatusReply,
    GetReplicaInfoRequest,
    HeartbeatReply,
    RegisterBrokerReply,
    RegisterBrokerRequest,
    ReplicaInfoReply,
    RoleChange,
)
from ha.broker.config import BrokerConfig
from ha.broker.controller_link import (
    ControllerClient,
    ControllerLink,
    ControllerUnavailableError,
    HeartbeatState,
)
from storage_engine import ConfigError
from tests.controller.controller_process import ControllerGroup, free_port

DEADLINE_S = 20.0


def _wait(condition: Callable[[], bool], what: str, timeout_s: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("properties", "key"),
    [
        ({"enableControllerMode": "true"}, "controllerAddr"),
        ({"enableControllerMode": "true", "controllerAddr": "nohost"}, "controllerAddr"),
        ({"controllerAddr": "h:70000"}, "controllerAddr"),
        ({"brokerHeartbeatInterval": "0"}, "brokerHeartbeatInterval"),
        ({"controllerRedirectsMax": "99"}, "controllerRedirectsMax"),
        ({"enableControllerMode": "yes"}, "enableControllerMode"),
    ],
)
def test_bad_controller_settings_name_the_key(properties: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        BrokerConfig.from_properties(properties)
    assert key in str(info.value)


def test_controller_mode_skips_the_static_broker_id_check() -> None:
    properties = {"brokerId": "3", "brokerRole": "SYNC_MASTER",
                  "controllerAddr": "127.0.0.1:1;127.0.0.1:2"}
    with pytest.raises(ConfigError, match="brokerId"):
        BrokerConfig.from_properties(properties)
    config = BrokerConfig.from_properties({**properties, "enableControllerMode": "true"})
    assert config.controller_addr == ("127.0.0.1:1", "127.0.0.1:2")


def test_no_controller_answering_is_a_typed_error() -> None:
    client = ControllerClient([f"127.0.0.1:{free_port()}"], request_timeout_ms=300,
                              redirects_max=2)
    with pytest.raises(ControllerUnavailableError):
        client.call("controller_status", None, ControllerStatusReply)


@pytest.fixture
def group(tmp_path: Path) -> Iterator[ControllerGroup]:
    group = ControllerGroup(tmp_path, 3)
    try:
        yield group.start()
    finally:
        group.stop_all()


def _link(group: ControllerGroup, address: str, first: int,
          roles: list[RoleChange]) -> ControllerLink:
    # The follower-first order makes the first call a NOT_LEADER redirect.
    ids = [first] + [n for n in group.ids if n != first]
    client = ControllerClient([group.endpoint(n) for n in ids], request_timeout_ms=2000,
                              redirects_max=3)
    return ControllerLink(client, cluster_name="c", broker_name="a", broker_address=address,
                          heartbeat_interval_ms=200, report=HeartbeatState,
                          on_role=roles.append)


@pytest.mark.integration
def test_links_register_learn_roles_and_survive_the_leader_dying(
        group: ControllerGroup) -> None:
    leader = group.wait_leader()
    follower = next(n for n in group.ids if n != leader)
    roles: dict[str, list[RoleChange]] = {"x:1": [], "x:2": []}
    links = [_link(group, address, follower, roles[address]) for address in roles]
    for link in links:
        link.start()
    try:
        for link in links:
            assert link.wait_registered(DEADLINE_S)
        assert sorted(link.broker_id for link in links) == [1, 2]  # type: ignore[type-var]
        assert links[0].client.leader == group.endpoint(leader)
        _wait(lambda: all(link.role is not None and link.role.role != "none"
                          for link in links), "roles")
        by_role = {link.role.role: link for link in links}  # type: ignore[union-attr]
        assert set(by_role) == {ROLE_MASTER, ROLE_SLAVE}
        master = by_role[ROLE_MASTER]
        assert by_role[ROLE_SLAVE].role.master_broker_id == master.broker_id  # type: ignore
        assert roles["x:1"][-1] == links[0].role and roles["x:2"][-1] == links[1].role

        group.kill(leader)
        before = [link.heartbeats_ok for link in links]
        _wait(lambda: all(link.heartbeats_ok > count + 3
                          for link, count in zip(links, before, strict=True)),
              "heartbeats after the leader died")
        assert by_role[ROLE_MASTER].role.role == ROLE_MASTER  # type: ignore[union-attr]
        # The new leader knows both brokers are alive: the master keeps its role.
        new_leader = group.wait_leader(not_id=leader)
        status = group.call_leader("get_replica_info", {"broker_name": "a"})
        assert status["replica"]["master_broker_id"] == master.broker_id
        assert new_leader != leader
    finally:
        for link in links:
            link.stop()


@pytest.mark.integration
def test_a_stopped_controller_does_not_delay_heartbeats_to_the_others(
        group: ControllerGroup) -> None:
    leader = group.wait_leader()
    follower = next(n for n in group.ids if n != leader)
    link = _link(group, "x:1", leader, [])
    # A call to the stopped node hangs for the whole request timeout (2 s, 10 heartbeats).
    group.processes[follower].send_signal(signal.SIGSTOP)
    link.start()
    try:
        assert link.wait_registered(DEADLINE_S)
        _wait(lambda: link.heartbeats_failed >= 1, "a heartbeat to the stopped node to fail")
        start_ok, start = link.heartbeats_ok, time.monotonic()
        _wait(lambda: link.heartbeats_ok >= start_ok + 6, "heartbeats to the live nodes")
        # 3 rounds of 2 live nodes; waiting for the stopped one would take 2 s per round.
        assert time.monotonic() - start < 4.0
        assert link.role is not None and link.role.role == ROLE_MASTER
    finally:
        group.processes[follower].send_signal(signal.SIGCONT)
        link.stop()


@pytest.mark.integration
def test_heartbeats_echo_each_controllers_clock_and_a_late_one_is_not_alive(
        group: ControllerGroup) -> None:
    """controller/liveness.py heartbeat_credit_ms on real controllers: a link echoes every
    controller's clock; a heartbeat whose echo says it was made 5 s before it arrived (it sat
    in TCP retransmissions) is credited 5 s - heartbeatTransitMaxMs (0.5 s, a third of the
    1.5 s timeout) early, so the leader does not count its broker alive, and the reply says by
    how much its lease must start early; the broker's next heartbeat on time counts again."""
    leader = group.wait_leader()
    link = _link(group, "x:1", leader, [])
    link.start()
    try:
        assert link.wait_registered(DEADLINE_S)
        _wait(lambda: len(link._echoes) == 3, "a reply from every controller")
        clocks = {clock for _, clock, _ in link._echoes.values()}
        assert len(clocks) == 3 and 0 not in clocks  # one clock id per controller process
        client = ControllerClient([group.endpoint(leader)], request_timeout_ms=2000,
                                  redirects_max=3)
        registered = client.call("register_broker", RegisterBrokerRequest("c", "a", "x:2"),
                                 RegisterBrokerReply)
        assert registered.status == "OK" and registered.broker_id == 2
        fresh = client.call("get_replica_info", GetReplicaInfoRequest("a"), ReplicaInfoReply)
        assert fresh.alive_broker_ids == (1,)

        def heartbeat(echo_ms: int, clock: int) -> HeartbeatReply:
            beat = BrokerHeartbeat("c", "a", 2, "x:2", echo_controller_ms=echo_ms,
                                   echo_controller_clock=clock, echo_age_ms=0)
            return client.call_one(group.endpoint(leader), "broker_heartbeat", beat,
                                   HeartbeatReply)

        # echo the leader's reply to the link of 5 s before, received just now: this
        # heartbeat was made 5 s before it arrived
        echo_ms, clock, _ = link._echoes[group.endpoint(leader)]
        late = heartbeat(echo_ms - 5000, clock)
        assert late.status == "OK" and late.controller_clock == clock
        # heartbeatTransitMaxMs: a third of the group's 1.5 s timeout
        assert late.credit_behind_ms == late.controller_ms - echo_ms + 4500
        info = client.call("get_replica_info", GetReplicaInfoRequest("a"), ReplicaInfoReply)
        assert 2 not in info.alive_broker_ids and 1 in info.alive_broker_ids
        on_time = heartbeat(late.controller_ms, late.controller_clock)
        assert on_time.credit_behind_ms == 0
        info = client.call("get_replica_info", GetReplicaInfoRequest("a"), ReplicaInfoReply)
        assert 2 in info.alive_broker_ids
    finally:
        link.stop()


def test_an_echo_bounds_a_heartbeat_only_from_a_reply_that_came_before_its_report() -> None:
    """The echo says the heartbeat (and the positions in it) was made no earlier than the
    controller's reply time plus the age; a reply that came after the report was read (on a
    pool thread, during the round) may have been made after it, so it is not echoed."""
    client = ControllerClient(["127.0.0.1:1"], request_timeout_ms=100, redirects_max=1)
    link = ControllerLink(client, cluster_name="c", broker_name="a", broker_address="x:1",
                          heartbeat_interval_ms=200, report=HeartbeatState, on_role=print)
    beat = BrokerHeartbeat("c", "a", 1, "x:1")
    assert link._with_echo(beat, "127.0.0.1:1", 5000) == beat  # no reply yet
    link._echoes["127.0.0.1:1"] = (90_000, 7, 4000)
    echoed = link._with_echo(beat, "127.0.0.1:1", 5000)
    assert (echoed.echo_controller_ms, echoed.echo_controller_clock, echoed.echo_age_ms) == (
        90_000, 7, 1000)
    assert link._with_echo(beat, "127.0.0.1:1", 3999) == beat  # that reply came later
