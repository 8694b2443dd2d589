"""Real controller processes on 127.0.0.1 (1 and 3 nodes): Raft, failover, state, admin.

Goal: a leader is elected; SIGKILL of the leader gives a new leader within seconds with the
state intact; SIGKILL of every node and a restart keep the state (fsynced Raft log); a master
that stops heartbeating is replaced from its SyncStateSet; admin actions are fenced; followers
redirect; bad requests fail alone. Method: `python -m controller` subprocesses (the entry point
users run); brokers are played by this test process sending heartbeats (the broker side of
controller mode is wired separately), waiting on conditions with deadlines.
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyarrow import flight

from controller.api import lease_max_ms
from tests.controller.controller_process import ControllerGroup, call

pytestmark = pytest.mark.integration


def _heartbeat(group: ControllerGroup, broker_id: int, *, epoch: int = 0, log_end: int = 0,
               topics: tuple[str, ...] = ("orders",), lease_lapsed: bool = False,
               lost_master_epoch: int = 0) -> dict[str, Any]:
    """One heartbeat from fake broker `broker_id` of set `a`, sent to every node (as RocketMQ
    brokers do); returns the leader's reply. `lost_master_epoch`: a slave that has no link to
    the master of that epoch (master_unreachable_epoch)."""
    body = {
        "cluster_name": "c", "broker_name": "a", "broker_id": broker_id,
        "broker_address": f"127.0.0.1:{20000 + broker_id}", "master_epoch": epoch,
        "max_log_position": log_end, "master_lease_lapsed": lease_lapsed,
        "master_unreachable_epoch": lost_master_epoch,
        "topics": [{"topic": t, "read_queue_nums": 4, "write_queue_nums": 4} for t in topics],
    }
    for node_id in list(group.processes):
        try:
            reply = call(group.endpoint(node_id), "broker_heartbeat", body, timeout_s=2.0)
        except flight.FlightError:
            continue
        if reply["status"] != "NOT_LEADER":
            return reply
    return {"status": "NO_LEADER"}


HEARTBEAT_TIMEOUT_MS = 1500  # tests/controller/controller_process.py


class _FakeLease:
    """A fake broker's master lease, kept as a real broker keeps it: a reply that names it
    master renews it to the heartbeat's send time + lease_max_ms; its heartbeats say when it
    has lapsed (an operator's election waits for that)."""

    def __init__(self) -> None:
        self.until_s: dict[int, float] = {}
        self.replies: list[dict[str, Any]] = []

    def beat(self, group: ControllerGroup, broker_id: int, **fields: Any) -> dict[str, Any]:
        sent_s = time.monotonic()
        reply = _heartbeat(group, broker_id, lease_lapsed=sent_s >= self.until_s.get(
            broker_id, 0.0), **fields)
        self.replies.append(reply)
        if (reply.get("role") or {}).get("role") == "master":
            self.until_s[broker_id] = sent_s + lease_max_ms(HEARTBEAT_TIMEOUT_MS) / 1000
        return reply


def _elect(group: ControllerGroup, body: dict[str, Any]) -> dict[str, Any]:
    """elect_master, again while the leader answers BUSY (it refuses to replace a live master
    until it has led for controllerHeartbeatTimeoutMs)."""
    deadline = time.monotonic() + 10
    while True:
        reply = group.call_leader("elect_master", body)
        if reply["status"] != "BUSY" or time.monotonic() > deadline:
            return reply
        time.sleep(0.2)


@contextlib.contextmanager
def _keep_alive(group: ControllerGroup, broker_ids: tuple[int, ...]) -> Iterator[None]:
    """Heartbeat these fake brokers every 300 ms (as real brokers do) while the block runs."""
    done = threading.Event()
    lease = _FakeLease()

    def beat() -> None:
        while not done.wait(0.3):
            for broker_id in broker_ids:
                lease.beat(group, broker_id)

    thread = threading.Thread(target=beat, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(10)


def _register(group: ControllerGroup, broker_id: int) -> int:
    reply = group.call_leader("register_broker", {
        "cluster_name": "c", "broker_name": "a",
        "broker_address": f"127.0.0.1:{20000 + broker_id}"})
    assert reply["status"] == "OK", reply
    return int(reply["broker_id"])


def _wait(condition: Any, timeout_s: float, what: str) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not within {timeout_s} s")


def _replica(group: ControllerGroup) -> dict[str, Any]:
    reply = group.call_leader("get_replica_info", {"broker_name": "a"})
    assert reply["status"] == "OK", reply
    return reply["replica"]  # type: ignore[no-any-return]


@pytest.fixture
def group3(tmp_path: Path) -> Iterator[ControllerGroup]:
    group = ControllerGroup(tmp_path, 3)
    try:
        yield group.start()
    finally:
        group.stop_all()


def test_single_node_elects_registers_and_keeps_state_across_sigkill(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path, 1).start()
    try:
        assert group.wait_leader() == 1
        assert [_register(group, b) for b in (1, 2, 1)] == [1, 2, 1]
        first = _heartbeat(group, 1, epoch=0)
        assert first["status"] == "OK"
        role = _wait(lambda: _heartbeat(group, 1)["role"]["role"] == "master", 5, "master")
        assert role
        before = _replica(group)
        assert (before["master_broker_id"], before["master_epoch"]) == (1, 1)
        group.kill(1)
        group.start(1)
        group.wait_leader()
        assert _replica(group) == before
        assert _register(group, 3) == 3  # ids continue after the restart
    finally:
        group.stop_all()


def test_sigkill_of_the_leader_elects_another_within_seconds(group3: ControllerGroup) -> None:
    leader = group3.wait_leader()
    _register(group3, 1)
    _register(group3, 2)
    killed_at = time.monotonic()
    group3.kill(leader)
    new_leader = group3.wait_leader(timeout_s=5.0)
    assert new_leader != leader
    assert time.monotonic() - killed_at < 5.0
    replica = _replica(group3)
    assert [m["broker_id"] for m in replica["brokers"]] == [1, 2]
    group3.start(leader)
    assert _register(group3, 3) == 3
    assert group3.wait_leader() in group3.ids


def test_state_survives_sigkill_of_every_node(group3: ControllerGroup) -> None:
    group3.wait_leader()
    for broker_id in (1, 2, 3):
        _register(group3, broker_id)
    _wait(lambda: _heartbeat(group3, 2).get("role", {}).get("role") == "master", 5, "master")
    reply = group3.call_leader("alter_sync_state_set", {
        "broker_name": "a", "master_broker_id": 2, "master_epoch": 1,
        "sync_state_set": [2], "sync_state_set_epoch": 1})
    assert reply["status"] == "OK"  # the same set: a new SyncStateSet epoch (a fence)
    assert reply["sync_state_set_epoch"] == 2
    before = _replica(group3)
    for node_id in list(group3.processes):
        group3.kill(node_id)
    group3.start()
    group3.wait_leader()
    assert _replica(group3) == before


def test_a_silent_master_is_replaced_from_its_sync_state_set(group3: ControllerGroup) -> None:
    group3.wait_leader()
    for broker_id in (1, 2, 3):
        _register(group3, broker_id)
    _wait(lambda: _heartbeat(group3, 1).get("role", {}).get("role") == "master", 5, "master 1")
    for broker_id in (2, 3):
        _heartbeat(group3, broker_id)
    grow = group3.call_leader("alter_sync_state_set", {
        "broker_name": "a", "master_broker_id": 1, "master_epoch": 1,
        "sync_state_set": [1, 2], "sync_state_set_epoch": 1})
    assert (grow["status"], grow["sync_state_set"], grow["sync_state_set_epoch"]) == (
        "OK", [1, 2], 2)
    stale = group3.call_leader("alter_sync_state_set", {
        "broker_name": "a", "master_broker_id": 1, "master_epoch": 1,
        "sync_state_set": [1, 2, 3], "sync_state_set_epoch": 1})
    assert stale["status"] == "FENCED_SYNC_STATE_SET_EPOCH"

    def new_master(lost: int) -> int | None:  # brokers 2 and 3 keep heartbeating; 1 is silent
        for broker_id in (2, 3):
            role = _heartbeat(group3, broker_id, epoch=1, log_end=100,
                              lost_master_epoch=lost).get("role") or {}
            if role.get("role") == "master":
                return broker_id
        return None

    # 2 still linked to master 1 (no loss reported) may be acking for it: nobody is elected
    # past the heartbeat timeout (1.5 s) until 2 reports its final position
    deadline = time.monotonic() + 2.5
    while time.monotonic() < deadline:
        assert new_master(0) is None
        time.sleep(0.1)
    lost_at = time.monotonic()
    assert _wait(lambda: new_master(1), 10, "failover") == 2  # 3 is not in the SyncStateSet
    assert time.monotonic() - lost_at < 3.0  # elected at the next scan, with margin
    replica = _replica(group3)
    assert (replica["master_epoch"], replica["sync_state_set"]) == (2, [2])
    back = _heartbeat(group3, 1, epoch=1)  # the old master comes back: it is a slave now
    assert (back["role"]["role"], back["role"]["master_epoch"]) == ("slave", 2)
    routes = group3.call_leader("get_routes", {"topic": "orders"})
    assert routes["replica_sets"][0]["master_address"] == "127.0.0.1:20002"


def test_admin_elect_and_clean_are_checked(group3: ControllerGroup) -> None:
    group3.wait_leader()
    for broker_id in (1, 2):
        _register(group3, broker_id)
    _wait(lambda: _heartbeat(group3, 1).get("role", {}).get("role") == "master", 5, "master")
    _heartbeat(group3, 2)
    with _keep_alive(group3, (1, 2)):
        kept = group3.call_leader("elect_master", {"broker_name": "a"})
        assert kept["status"] == "MASTER_STILL_EXIST"
        to_two = {"broker_name": "a", "designated_broker_id": 2}
        outside = group3.call_leader("elect_master", to_two)
        assert outside["status"] == "ELECT_MASTER_FAILED"  # 2 is not in the SyncStateSet
        grown = group3.call_leader("alter_sync_state_set", {
            "broker_name": "a", "master_broker_id": 1, "master_epoch": 1,
            "sync_state_set": [1, 2], "sync_state_set_epoch": 1})
        assert grown["status"] == "OK", grown
        moved = _elect(group3, to_two)
        assert moved["status"] == "OK", moved
        assert (moved["replica"]["master_broker_id"], moved["replica"]["master_epoch"]) == (2, 2)
        refused = group3.call_leader("clean_broker_data",
                                     {"broker_name": "a", "broker_ids": [1]})
        assert refused["status"] == "BROKER_ALIVE"
        listing = group3.call_leader("cluster_list")
        roles = sorted(c["role"] for c in listing["controllers"])
        assert roles.count("leader") == 1 and len(roles) == 3


def test_an_operator_election_outlasts_the_masters_lease_and_waits_for_its_log(
        group3: ControllerGroup) -> None:
    """Replacing a master that still heartbeats: its lease is not renewed from the request
    until the election is committed, the election waits for the master to report its lease
    lapsed, and elects the slave only once it reports the log position the master had then
    (issue 15: a master acks under its lease with slaves that have not heard of the election;
    a new master lacking those puts would make their holders truncate them)."""
    group3.wait_leader()
    for broker_id in (1, 2):
        _register(group3, broker_id)
    _wait(lambda: _heartbeat(group3, 1).get("role", {}).get("role") == "master", 5, "master")
    _heartbeat(group3, 2, epoch=1, log_end=500)
    grown = group3.call_leader("alter_sync_state_set", {
        "broker_name": "a", "master_broker_id": 1, "master_epoch": 1,
        "sync_state_set": [1, 2], "sync_state_set_epoch": 1})
    assert grown["status"] == "OK", grown
    slave_end = {"value": 500}  # behind the master's 1000 until the test lets it catch up
    done = threading.Event()
    lease = _FakeLease()

    def beat() -> None:
        while not done.wait(0.02):  # often: a renewal between hold and commit would show
            lease.beat(group3, 1, epoch=1, log_end=1000)
            lease.beat(group3, 2, epoch=1, log_end=slave_end["value"])

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    to_two = {"broker_name": "a", "designated_broker_id": 2}
    try:
        started = time.monotonic()
        lagging = _elect(group3, to_two)
        assert lagging["status"] == "ELECT_MASTER_FAILED", lagging  # 2 lacks 500..1000
        assert time.monotonic() - started >= lease_max_ms(HEARTBEAT_TIMEOUT_MS) / 1000
        assert _replica(group3)["master_broker_id"] == 1
        slave_end["value"] = 1000
        _wait(lambda: (lease.beat(group3, 1, epoch=1, log_end=1000).get("role") or {})
              .get("role") == "master", 5, "the failed election to give the lease back")
        lease.replies.clear()
        moved = _elect(group3, to_two)
        renewed_late = [r for r in lease.replies if (r.get("role") or {}).get("role") == "master"
                        and r["role"]["broker_id"] == 1 and r["role"]["master_epoch"] == 1]
        assert moved["status"] == "OK", moved
        assert (moved["replica"]["master_broker_id"], moved["replica"]["master_epoch"]) == (2, 2)
        # the lease was not renewed from the request to the commit (a few renewals may come
        # before the leader took the request: at most those before the first held reply)
        held = [i for i, r in enumerate(lease.replies) if r.get("status") == "OK"
                and r.get("role") is None]
        assert held, "the master's heartbeats were never held"
        assert not [r for r in renewed_late if lease.replies.index(r) > held[0]], \
            "the master's lease was renewed during the hold"
    finally:
        done.set()
        beater.join(timeout=5)


def test_followers_redirect_and_bad_requests_fail_alone(group3: ControllerGroup) -> None:
    leader = group3.wait_leader()
    follower = next(n for n in group3.ids if n != leader)
    reply = call(group3.endpoint(follower), "get_replica_info", {"broker_name": "a"})
    assert (reply["status"], reply["leader_address"]) == ("NOT_LEADER", group3.endpoint(leader))
    with pytest.raises(flight.FlightServerError, match=r"BAD_REQUEST.*broker_name"):
        call(group3.endpoint(leader), "get_replica_info", {"broker_name": 7})
    with pytest.raises(flight.FlightServerError, match="UNKNOWN_ACTION"):
        call(group3.endpoint(leader), "drop_everything", {})
    # garbage and an oversized frame on the Raft port: the connection is dropped, nothing else
    for junk in (b"\x00" * 64, struct.pack(">HBBII", 0x5246, 1, 1, 1 << 30, 0)):
        with socket.create_connection(("127.0.0.1", group3.raft_ports[leader]), 2) as sock:
            sock.sendall(junk)
            sock.settimeout(2)
            assert sock.recv(16) == b""  # closed by the node
    assert group3.wait_leader() == leader
    assert group3.call_leader("cluster_list")["status"] == "OK"


def test_a_sigstopped_leader_is_replaced_and_steps_down_after_sigcont(
    group3: ControllerGroup,
) -> None:
    old = group3.wait_leader()
    _register(group3, 1)
    old_process = group3.processes[old]
    old_process.send_signal(signal.SIGSTOP)
    try:
        others = {n: group3.processes.pop(n) for n in list(group3.processes) if n != old}
        group3.processes = others  # poll only the running nodes
        new = group3.wait_leader(timeout_s=5.0)
        assert new != old
        assert _register(group3, 2) == 2  # the majority side takes writes meanwhile
    finally:
        old_process.send_signal(signal.SIGCONT)
        group3.processes[old] = old_process
    # At once after SIGCONT the old leader may still think it leads; it must not get a write
    # committed in its old term (a majority moved on): NOT_LEADER or BUSY, never OK.
    early = call(group3.endpoint(old), "register_broker", {
        "cluster_name": "c", "broker_name": "a", "broker_address": "127.0.0.1:29998"},
        timeout_s=10.0)
    assert early["status"] in ("NOT_LEADER", "BUSY"), early
    # The resumed node must not act as leader any more: it learns the higher term.
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        status = call(group3.endpoint(old), "controller_status")
        if status["role"] != "leader":
            break
        time.sleep(0.05)
    assert status["role"] != "leader" and status["term"] > 0
    reply = call(group3.endpoint(old), "register_broker", {
        "cluster_name": "c", "broker_name": "a", "broker_address": "127.0.0.1:29999"})
    assert reply["status"] == "NOT_LEADER"
    # a leader again (not necessarily `new`: on a busy machine a heartbeat can be late enough
    # for another election after the resume, which is Raft doing its job), and both
    # registrations committed, the one made while the old leader was stopped included
    group3.wait_leader()
    replica = _replica(group3)
    assert [m["broker_id"] for m in replica["brokers"]] == [1, 2]


def test_a_follower_behind_the_compacted_log_catches_up_by_snapshot(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path, 3, snapshotEveryEntries="16").start()
    try:
        leader = group.wait_leader()
        lagging = next(n for n in group.ids if n != leader)
        group.kill(lagging)
        for broker_id in range(1, 41):
            _register(group, broker_id)
        statuses = group.statuses()
        assert statuses[leader]["snapshot_index"] >= 16  # the leader compacted its log
        group.start(lagging)

        def converged() -> bool:
            statuses = group.statuses()
            applied = {s["applied_index"] for s in statuses.values()}
            digests = {s["state_digest"] for s in statuses.values()}
            return len(statuses) == 3 and len(applied) == 1 and len(digests) == 1

        _wait(converged, 10, "the restarted follower to catch up")
        assert "installs snapshot" in group.log(lagging).read_text()
        group.kill(lagging)  # the installed snapshot was persisted: it reloads
        group.start(lagging)
        _wait(converged, 10, "the follower to reload its snapshot and catch up again")
    finally:
        group.stop_all()


def test_an_isolated_leader_steps_down_and_rejoins_without_disruption(tmp_path: Path) -> None:
    group = ControllerGroup(tmp_path, 3, proxied=True).start()
    try:
        old = group.wait_leader()
        _register(group, 1)
        group.isolate(old)
        rest = [n for n in group.ids if n != old]

        def majority_leader() -> int | None:
            statuses = group.statuses()
            leaders = [n for n in rest if statuses[n]["role"] == "leader"]
            return leaders[0] if leaders else None

        new = _wait(majority_leader, 5, "a leader on the majority side")
        # check-quorum: the cut-off leader stops leading by itself (it hears from no majority)
        _wait(lambda: group.statuses()[old]["role"] != "leader", 5, "the old leader to step down")
        isolated = call(group.endpoint(old), "register_broker", {
            "cluster_name": "c", "broker_name": "a", "broker_address": "127.0.0.1:29997"})
        assert isolated["status"] in ("NOT_LEADER", "BUSY")
        assert _register(group, 2) == 2
        term = group.statuses()[new]["term"]
        time.sleep(1.0)  # several election timeouts in isolation (pre-vote: no term inflation)
        assert group.statuses()[old]["term"] <= term
        group.heal()
        _wait(lambda: group.statuses()[old]["leader_id"] == new, 5, "the old leader to rejoin")
        statuses = group.statuses()
        assert statuses[new]["role"] == "leader" and statuses[new]["term"] == term
        replica = _replica(group)
        assert [m["broker_id"] for m in replica["brokers"]] == [1, 2]
    finally:
        group.stop_all()


def _admin(group: ControllerGroup, *args: str) -> tuple[int, Any]:
    addresses = ";".join(group.endpoint(n) for n in group.ids)
    result = subprocess.run(
        [sys.executable, "-m", "rocketha_admin", "--controller", addresses, *args, "--json"],
        capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[2],
        check=False,
    )
    return result.returncode, json.loads(result.stdout) if result.stdout else result.stderr


def test_the_admin_tool_lists_elects_and_refuses(group3: ControllerGroup) -> None:
    leader = group3.wait_leader()
    for broker_id in (1, 2):
        _register(group3, broker_id)
    _wait(lambda: _heartbeat(group3, 1).get("role", {}).get("role") == "master", 5, "master")
    with _keep_alive(group3, (1, 2)):  # each admin call starts a process: keep time
        code, views = _admin(group3, "status")
        assert code == 0 and [v["role"] == "leader" for v in views].count(True) == 1
        assert next(v for v in views if v["role"] == "leader")["node_id"] == leader
        code, listing = _admin(group3, "cluster")
        assert code == 0 and listing["replica_sets"][0]["replica"]["master_broker_id"] == 1
        code, replica = _admin(group3, "replica", "--broker-name", "a")
        assert code == 0 and replica["replica"]["sync_state_set"] == [1]
        code, kept = _admin(group3, "elect", "--broker-name", "a")
        assert (code, kept["status"]) == (0, "MASTER_STILL_EXIST")
        code, refused = _admin(group3, "elect", "--broker-name", "a", "--broker-id", "2")
        assert (code, refused["status"]) == (1, "ELECT_MASTER_FAILED")
        code, alive = _admin(group3, "clean", "--broker-name", "a", "--broker-id", "2")
        assert (code, alive["status"]) == (1, "BROKER_ALIVE")
        code, routes = _admin(group3, "routes", "--topic", "orders")
        assert code == 0 and routes["queues"][0]["broker_name"] == "a"
        code, missing = _admin(group3, "replica", "nope")
        assert (code, missing["status"]) == (1, "REPLICA_SET_NOT_FOUND")


def test_a_sigtermed_leader_hands_over_and_transfer_leader_moves_the_role(
        group3: ControllerGroup) -> None:
    """Leadership transfer (thesis §3.10) on real processes: `transfer-leader --to N` makes N
    the leader at the next term (one election, the TimeoutNow's); a refused target is one
    status; a SIGTERMed leader hands its role over before it stops (its log says to whom),
    and the state it led is intact at the new leader."""
    leader = group3.wait_leader()
    _register(group3, 1)
    term = group3.statuses()[leader]["term"]
    target = next(n for n in group3.ids if n != leader)
    code, moved = _admin(group3, "transfer-leader", "--to", str(target))
    assert code == 0, moved
    assert (moved["status"], moved["from_node_id"], moved["leader_id"]) == ("OK", leader, target)
    assert group3.wait_leader() == target
    assert group3.statuses()[target]["term"] == term + 1
    code, refused = _admin(group3, "transfer-leader", "--to", "9")
    assert (code, refused["status"]) == (1, "INVALID_REQUEST")

    process = group3.processes.pop(target)
    process.send_signal(signal.SIGTERM)
    assert process.wait(30) == 0
    new_leader = group3.wait_leader(timeout_s=10.0)
    assert new_leader != target
    assert "handed the Raft leadership to node" in group3.log(target).read_text()
    assert [m["broker_id"] for m in _replica(group3)["brokers"]] == [1]
