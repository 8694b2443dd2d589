"""Hostile input on a controller's ports never stops it (issue 16, replayed on real processes).

Goal: each finding of the security review against the Raft port and the client endpoint is
replayed against a running 3-node group, and the group must still elect, commit and answer
afterwards: a heartbeat with a commit index beyond the receiver's log (was: an assertion ended
the process), a term of 2**64 (was: `struct.error` saving the hard state), a snapshot whose data
is not a controller state or whose voters are not ours (was: the state machine replaced / the
process ended), an AppendRequest whose entries do not chain (was: the Ready loop spun for
ever), deep JSON and 5000-digit numbers; idle and half-sent connections are closed within the
configured limits and connections over raftConnectionsMax are refused at once; JSON bodies on
the client endpoint that are too deep or too large get a typed error, never a traceback.

Method: `python -m controller` subprocesses (tests/controller/controller_process.py) with
small raftConnectionsMax / raftIdleTimeoutMs / raftFrameTimeoutMs; frames are forged with the
transport's own `encode_frame` around hand-written JSON, sent from a raw socket that claims to
be the leader (without mutual TLS that claim cannot be checked: what *can* be checked, is).
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pyarrow import flight

from controller.transport import FRAME_HEADER, encode_frame
from tests.controller.controller_process import ControllerGroup, call
from tests.support.sockets import closed_within

pytestmark = pytest.mark.integration

IDLE_TIMEOUT_MS = 800
FRAME_TIMEOUT_MS = 400
CONNECTIONS_MAX = 6


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControllerGroup]:
    controllers = ControllerGroup(
        tmp_path_factory.mktemp("hostile"), 3, raftConnectionsMax=str(CONNECTIONS_MAX),
        raftIdleTimeoutMs=str(IDLE_TIMEOUT_MS), raftFrameTimeoutMs=str(FRAME_TIMEOUT_MS))
    controllers.start()
    yield controllers
    controllers.stop_all()


def _roles(group: ControllerGroup) -> tuple[int, int, int]:
    """(leader, a follower, the agreed term)."""
    leader = group.wait_leader()
    term = int(group.statuses()[leader]["term"])
    follower = next(n for n in group.ids if n != leader)
    return leader, follower, term


def _send(group: ControllerGroup, node_id: int, *payloads: bytes, raw: bytes = b"") -> bytes:
    """Send frames around `payloads` (and `raw` bytes) to a node's Raft port; what it answered
    before closing (b"" when it just closed the connection)."""
    with socket.create_connection(("127.0.0.1", group.raft_ports[node_id]), timeout=5) as sock:
        sock.sendall(b"".join(encode_frame(payload) for payload in payloads) + raw)
        time.sleep(0.3)
        sock.settimeout(0.5)
        try:
            return sock.recv(4096)
        except (TimeoutError, ConnectionResetError):
            return b""


def _message(kind: str, from_id: int, to_id: int, term: int, **fields: Any) -> bytes:
    return json.dumps({"v": 1, "type": kind, "from_id": from_id, "to_id": to_id, "term": term,
                       **fields}).encode()


def _assert_serving(group: ControllerGroup, broker: str) -> None:
    """Every node runs, one leader is agreed, and a write commits."""
    for node_id, process in group.processes.items():
        assert process.poll() is None, (node_id, group.log(node_id).read_text()[-3000:])
    group.wait_leader()
    reply = group.call_leader("register_broker", {
        "cluster_name": "c", "broker_name": broker, "broker_address": f"127.0.0.1:{len(broker)}"})
    assert reply["status"] == "OK", reply


def _log_text(group: ControllerGroup) -> str:
    return "".join(group.log(n).read_text() for n in group.ids)


def _counter(group: ControllerGroup, node_id: int, name: str) -> int:
    return int(call(group.endpoint(node_id), "controller_status")[name])


def test_heartbeat_commit_beyond_the_log_is_rejected(group: ControllerGroup) -> None:
    leader, follower, term = _roles(group)
    rejected = _counter(group, follower, "rejected_messages")
    _send(group, follower, _message("heartbeat", leader, follower, term,
                                    commit_index=10**12, read_seq=0))
    _assert_serving(group, "after-commit")
    assert _counter(group, follower, "rejected_messages") == rejected + 1
    assert "heartbeat commit index 1000000000000 is beyond" in _log_text(group)


def test_terms_and_numbers_beyond_2_63_are_refused(group: ControllerGroup) -> None:
    leader, follower, _ = _roles(group)
    bad = _counter(group, follower, "bad_frames")
    _send(group, follower, _message("heartbeat", leader, follower, 2**64, commit_index=0,
                                    read_seq=0))
    _send(group, follower, _message("vote", leader, follower, 2**63, pre_vote=False,
                                    last_index=2**63, last_term=0))
    _send(group, follower, b'{"v": 1, "type": "heartbeat", "term": ' + b"9" * 5000 + b"}")
    _send(group, follower, b"[" * 100_000 + b"]" * 100_000)
    _assert_serving(group, "after-terms")
    statuses = group.statuses()
    assert all(s["term"] < 2**32 for s in statuses.values()), statuses
    assert statuses[follower]["bad_frames"] == bad + 4, statuses[follower]
    assert "not an integer in [0, 2**63)" in _log_text(group)


def test_forged_snapshots_do_not_replace_the_state(group: ControllerGroup) -> None:
    _assert_serving(group, "before-snapshot")
    leader, follower, term = _roles(group)
    rejected = _counter(group, follower, "rejected_messages")
    garbage = {"entry_index": 10**9, "term": term, "voter_ids": [1, 2, 3],
               "data": "bm90IGEgc3RhdGU="}  # "not a state"
    strangers = dict(garbage, voter_ids=[1, 2, 3, 7, 8],
                     data="eyJ2ZXJzaW9uIjoxLCJyZXBsaWNhX3NldHMiOltdfQ==")  # an empty state
    for snapshot in (strangers, garbage):
        _send(group, follower, _message("snapshot", leader, follower, term, snapshot=snapshot))
    _assert_serving(group, "after-snapshot")
    status = group.statuses()[follower]
    assert status["snapshot_index"] < 10**9 and status["commit_index"] < 10**9, status
    assert status["rejected_messages"] == rejected + 2, status
    assert "rejects a snapshot" in _log_text(group)


def test_unchained_entries_are_rejected(group: ControllerGroup) -> None:
    _assert_serving(group, "before-append")
    leader, follower, term = _roles(group)
    status = call(group.endpoint(follower), "controller_status")
    bad, last = status["bad_frames"], status["commit_index"]  # idle: the last entry, this term
    # The same index twice right after this node's log: both were appended, and the apply
    # loop then waited for ever for an index that never came (the node stopped answering).
    twice = [[last + 1, term, 0, ""], [last + 1, term, 0, ""]]
    _send(group, follower, _message("append", leader, follower, term, prev_index=last,
                                    prev_term=term, entries=twice, commit_index=last + 2))
    backwards = [[last + 1, term, 0, ""], [last + 2, term - 1, 0, ""]]
    _send(group, follower, _message("append", leader, follower, term, prev_index=last,
                                    prev_term=term - 1, entries=backwards, commit_index=0))
    _assert_serving(group, "after-append")
    assert _counter(group, follower, "bad_frames") == bad + 2


def test_connection_cap_idle_and_half_sent_frames(group: ControllerGroup) -> None:
    _, follower, _ = _roles(group)
    refused = _counter(group, follower, "refused_connections")
    bad = _counter(group, follower, "bad_frames")
    address = ("127.0.0.1", group.raft_ports[follower])
    idle = [socket.create_connection(address, timeout=5) for _ in range(CONNECTIONS_MAX + 4)]
    time.sleep(0.2)
    closed_at_once = sum(1 for sock in idle if closed_within(sock, 0.05))
    assert closed_at_once >= 4, closed_at_once  # over raftConnectionsMax (peers hold some too)
    started = time.monotonic()
    assert all(closed_within(sock, 5.0) for sock in idle)
    assert time.monotonic() - started < IDLE_TIMEOUT_MS / 1000 + 2.0
    with socket.create_connection(address, timeout=5) as half:
        header = FRAME_HEADER.pack(0x5246, 1, 1, 1000, 0)
        half.sendall(header + b"{" * 10)  # 10 of 1000 body bytes, then nothing
        started = time.monotonic()
        assert closed_within(half, 5.0)
        assert time.monotonic() - started < FRAME_TIMEOUT_MS / 1000 + 2.0
    for sock in idle:
        sock.close()
    _assert_serving(group, "after-idle")
    assert _counter(group, follower, "refused_connections") >= refused + CONNECTIONS_MAX + 4
    assert _counter(group, follower, "bad_frames") == bad + 1  # the half-sent frame
    log = _log_text(group)
    assert "raftConnectionsMax" in log and "raftIdleTimeoutMs" in log


def test_client_endpoint_bad_json_gets_typed_errors(group: ControllerGroup) -> None:
    leader, _, _ = _roles(group)
    client = flight.FlightClient(f"grpc://{group.endpoint(leader)}")
    try:
        for body in (b"[" * 100_000, b'{"broker_name": ' + b"9" * 5000 + b"}",
                     b'{"broker_name": "a", "designated_broker_id": 1e999}'):
            with pytest.raises(flight.FlightServerError) as caught:
                list(client.do_action(flight.Action("elect_master", body)))
            text = str(caught.value)
            assert "controller error BAD_REQUEST" in text, text
            assert "Traceback" not in text, text
    finally:
        client.close()
    _assert_serving(group, "after-json")


def test_untyped_requests_fail_alone(group: ControllerGroup, tmp_path: Path) -> None:
    leader, _, _ = _roles(group)
    reply = call(group.endpoint(leader), "clean_broker_data",
                 {"broker_name": "nope", "broker_ids": [2**62, -2**62]})
    assert reply["status"] in ("REPLICA_SET_NOT_FOUND", "INVALID_REQUEST"), reply
    _assert_serving(group, "after-untyped")
