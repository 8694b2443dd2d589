"""The handover's IO shell (ha/broker/handover.py) with threads and a fake master.

Goal: a put that arrives while the master hands over waits at the gate and, once the
controller elected the successor, is refused NOT_MASTER (never written); a refusal lets it
through; no answer keeps it waiting until handoverTimeoutMs, then refuses it; the request
names the furthest in-sync slave once it acked the sealed end; a broker that is not the master
only turns lame duck; a failure inside never escapes. Method: the real HandoverGate and
hand_over against a fake master whose slave's ack the test moves, on real threads, waiting
on conditions.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from controller.api import HandoverRequest, ReplicaInfo, ReplicaInfoReply
from ha.broker.handover import HandoverGate, hand_over, hand_over_to_slave
from ha.broker.replication import NotMasterError
from tests.ha.replica_set import wait_for

LOG_END = 500


@dataclasses.dataclass
class _Link:
    broker_id: int
    acked_log_position: int
    link_id: int = 0


class _FakeMaster:
    master_epoch = 3

    def __init__(self, acked: dict[int, int]) -> None:
        # broker 3's link is the oldest: the handover's choice (handover_core.choose_target)
        self.links = [_Link(b, p, 10 - b) for b, p in acked.items()]
        self.looks = 0  # stats() calls: the handover's polls of its slaves' acks

    def stats(self) -> Any:
        self.looks += 1
        return SimpleNamespace(links=list(self.links), sync_state_set=(1, 2, 3))


def _service(gate: HandoverGate, master: _FakeMaster | None) -> Any:
    fenced: list[str] = []
    replication = SimpleNamespace(handover=gate, master=master,
                                  become_none=fenced.append, fenced=fenced)
    return SimpleNamespace(
        config=SimpleNamespace(runtime_roles=True, handover_timeout_ms=3000,
                               broker_name="broker-a"),
        replication=replication, endpoint="127.0.0.1:1",
        store=SimpleNamespace(stats=lambda: SimpleNamespace(log_position_end=LOG_END)))


def _reply(status: str) -> ReplicaInfoReply:
    replica = ReplicaInfo("c", "broker-a", 2, "127.0.0.1:2", 4, (2,), 5, ())
    return ReplicaInfoReply(status, None, replica if status == "OK" else None)


def _held_put(gate: HandoverGate, outcomes: list[str]) -> threading.Thread:
    def put() -> None:
        try:
            gate.enter()
        except NotMasterError as err:
            outcomes.append(f"NOT_MASTER {err}")
            return
        outcomes.append("admitted")
        gate.exit()
    thread = threading.Thread(target=put, daemon=True)
    thread.start()
    return thread


def _run(gate: HandoverGate, master: _FakeMaster, answer: Callable[[HandoverRequest], Any],
         named: int | None = None) -> tuple[str, list[HandoverRequest], list[str], Any]:
    """hand_over on a thread while one put is in flight and one arrives after the seal."""
    service = _service(gate, master)
    requests: list[HandoverRequest] = []

    def call(request: HandoverRequest) -> Any:
        requests.append(request)
        return answer(request)

    gate.enter()  # a put in flight: the seal waits for it
    result: list[tuple[bool, str]] = []
    runner = threading.Thread(target=lambda: result.append(hand_over(
        service, call, 1, wake_heartbeat=lambda: None, named=named)), daemon=True)
    runner.start()
    wait_for(lambda: gate.core.phase.value == "sealing", 10, "the seal")
    outcomes: list[str] = []
    held = _held_put(gate, outcomes)
    wait_for(lambda: gate.held_puts == 1, 10, "the put to be held")
    assert gate.core.sealed_log_position is None  # not final while a put is in flight
    gate.exit()
    wait_for(lambda: gate.core.sealed_log_position == LOG_END, 10, "the sealed end")
    assert not requests  # the slaves have not acked it yet
    master.links[1].acked_log_position = LOG_END  # broker 3 catches up first
    if named == 2:  # 3 has it all, but is not the one named: the handover polls on
        looks = master.looks
        wait_for(lambda: master.looks > looks + 20, 10, "more polls of the acks")
        assert not requests
        master.links[0].acked_log_position = LOG_END
    runner.join(15)
    held.join(15)
    assert result and outcomes, (result, outcomes)
    handed_over, line = result[0]
    assert handed_over == line.startswith("handed over"), result
    return line, requests, outcomes, service


def test_a_put_held_during_the_handover_is_refused_once_the_successor_is_elected() -> None:
    gate = HandoverGate(3000, NotMasterError)
    result, requests, outcomes, service = _run(gate, _FakeMaster({2: 400, 3: 450}),
                                               lambda request: _reply("OK"))
    assert requests == [HandoverRequest("broker-a", 1, "127.0.0.1:1", 3, LOG_END, 3, LOG_END)]
    assert result.startswith("handed over to broker 3"), result
    assert outcomes == ["NOT_MASTER handed over to 127.0.0.1:2"]
    assert service.replication.fenced and gate.leaving
    with pytest.raises(NotMasterError):
        gate.enter()


def test_a_refusal_lets_the_held_put_through() -> None:
    gate = HandoverGate(3000, NotMasterError)
    result, _, outcomes, service = _run(gate, _FakeMaster({2: 400, 3: 450}),
                                        lambda request: _reply("FENCED_MASTER_EPOCH"))
    assert "FENCED_MASTER_EPOCH" in result
    assert outcomes == ["admitted"]
    assert not service.replication.fenced


def test_no_answer_keeps_the_put_held_until_the_timeout() -> None:
    gate = HandoverGate(3000, NotMasterError)

    def lost(request: HandoverRequest) -> Any:
        raise ConnectionError("no controller answered")

    started = time.monotonic()
    result, _, outcomes, _ = _run(gate, _FakeMaster({2: 400, 3: 450}), lost)
    assert "may still commit" in result
    assert outcomes and outcomes[0].startswith("NOT_MASTER the master was handing over")
    assert time.monotonic() - started >= 2.5  # held for handoverTimeoutMs, not refused at once


def test_a_slave_only_turns_lame_duck_and_a_failure_never_escapes() -> None:
    gate = HandoverGate(3000, NotMasterError)
    woken: list[bool] = []
    result = hand_over(_service(gate, None), lambda r: _reply("OK"), 2,
                       wake_heartbeat=lambda: woken.append(True))
    assert result == (False, "no handover: not the master")
    assert gate.leaving and woken
    gate.enter()  # puts still go through on a slave's gate (the role refuses them)
    gate.exit()
    broken = SimpleNamespace(service=None)
    link = SimpleNamespace(client=None, broker_id=1, wake=lambda: None)
    assert "failed" in hand_over_to_slave(broken, link)[1]


def test_an_elect_hands_over_to_the_member_named_and_stays_a_member() -> None:
    """`elect --broker-id 2`: the master waits for broker 2's ack even though broker 3 is
    further, names 2, and does not turn lame duck (it keeps running as a slave)."""
    gate = HandoverGate(3000, NotMasterError)
    result, requests, outcomes, service = _run(gate, _FakeMaster({2: 400, 3: 450}),
                                               lambda request: _reply("OK"), named=2)
    assert requests == [HandoverRequest("broker-a", 1, "127.0.0.1:1", 3, LOG_END, 2, LOG_END)]
    assert result.startswith("handed over to broker 2"), result
    assert outcomes == ["NOT_MASTER handed over to 127.0.0.1:2"]
    assert service.replication.fenced and not gate.leaving


@pytest.mark.parametrize(("named", "why"), [(4, "not in the SyncStateSet [1, 2, 3]"),
                                            (1, "is the master or has no link")])
def test_an_elect_of_a_member_that_cannot_take_over_is_refused_untouched(
        named: int, why: str) -> None:
    gate = HandoverGate(3000, NotMasterError)
    handed_over, line = hand_over(_service(gate, _FakeMaster({2: 500, 3: 500})),
                                  lambda r: _reply("OK"), 1, wake_heartbeat=lambda: None,
                                  named=named)
    assert not handed_over and why in line, line
    assert gate.core.phase.value == "serving" and not gate.leaving
