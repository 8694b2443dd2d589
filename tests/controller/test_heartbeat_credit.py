"""Late heartbeats count when they were made, not when they arrived (controller/liveness.py).

Goal: a master whose heartbeats reach the controller only after seconds of TCP retransmission
(packet loss on its host) is not kept alive by them, and the master lease it is granted still
ends before the controller may count it dead. Method: the credit function on chosen cases; the
live table with late heartbeats; a property test over random transit times that runs the
broker's lease arithmetic (RoleCore.confirm, as ha/broker/controller_link.py calls it) against
the controller's credit, both on one clock.
"""

from __future__ import annotations

import dataclasses

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.api import (
    ROLE_MASTER,
    BrokerHeartbeat,
    BrokerMember,
    HeartbeatReply,
    ReplicaInfo,
    RoleChange,
    lease_max_ms,
)
from controller.config import ControllerConfig
from controller.errors import ConfigError
from controller.leader_core import scan_decision
from controller.liveness import LiveTable, heartbeat_credit_ms, heartbeat_made_no_earlier_ms
from ha.replication.role_core import RoleCore

CLOCK = 7


def _beat(echo_ms: int = 0, age_ms: int = 0, clock: int = CLOCK) -> BrokerHeartbeat:
    return BrokerHeartbeat("c", "a", 1, "h:1", echo_controller_ms=echo_ms,
                           echo_controller_clock=clock if echo_ms else 0, echo_age_ms=age_ms)


def test_a_heartbeat_on_time_counts_at_its_arrival() -> None:
    # made no earlier than 10_000 + 950; arrived 30 ms later
    assert heartbeat_credit_ms(_beat(10_000, 950), 10_980, clock=CLOCK,
                               transit_max_ms=500) == 10_980


def test_a_late_heartbeat_counts_transit_max_after_it_was_made() -> None:
    # made no earlier than 10_950, arrived 2.5 s later: heard at 10_950 + 500
    assert heartbeat_credit_ms(_beat(10_000, 950), 13_450, clock=CLOCK,
                               transit_max_ms=500) == 11_450


def test_without_a_usable_echo_a_heartbeat_counts_at_its_arrival() -> None:
    arrived = 13_450
    for beat, transit_max in (
            (_beat(), 500),  # a new or older broker: no echo
            (_beat(10_000, 950, clock=8), 500),  # another controller process's clock
            (_beat(20_000, 0), 500),  # "made" after it arrived: not this clock after all
            (dataclasses.replace(_beat(10_000, 0), echo_age_ms=-5), 500),  # a bad age
            (_beat(10_000, 950), 0),  # heartbeatTransitMaxMs=0: the old rule
    ):
        assert heartbeat_credit_ms(beat, arrived, clock=CLOCK,
                                   transit_max_ms=transit_max) == arrived, beat


def test_late_heartbeats_do_not_keep_a_master_alive_nor_move_it_back() -> None:
    replica = ReplicaInfo("c", "a", 1, "h:1", 3, (1, 2), 2,
                          (BrokerMember(1, "h:1"), BrokerMember(2, "h:2")))
    table = LiveTable(heartbeat_timeout_ms=1500, brokers_max=10)
    table.heartbeat(_beat(), 1000)  # on time
    # from here on every heartbeat spends 2 s on the way (60-80 % packet loss)
    for made in (1500, 2500, 3500):
        beat = _beat(echo_ms=made - 100, age_ms=100)  # the last reply came before the loss
        arrived = made + 2000
        table.heartbeat(beat, arrived, heartbeat_credit_ms(beat, arrived, clock=CLOCK,
                                                           transit_max_ms=500))
        assert table.silent_ms(replica, 1, arrived) == arrived - max(1000, made + 500)
    # heard last at 3500 + 500: dead at 5500, while heartbeats still arrive (the last at 5500)
    assert table.is_alive(replica, 1, 5499)
    assert not table.is_alive(replica, 1, 5500)
    # a late heartbeat never moves the last heard time back
    old = _beat(echo_ms=100, age_ms=0)
    table.heartbeat(old, 5400, heartbeat_credit_ms(old, 5400, clock=CLOCK, transit_max_ms=500))
    assert table.silent_ms(replica, 1, 5400) == 1400


@settings(max_examples=400, deadline=None)
@given(previous_reply_transit_ms=st.integers(0, 5000), request_transit_ms=st.integers(0, 5000),
       echo_age_ms=st.integers(0, 10_000), transit_max_ms=st.integers(0, 1499),
       lease_ms=st.integers(10, 5000), answered_after_ms=st.integers(0, 3000))
def test_a_masters_lease_ends_before_the_controller_may_count_it_dead(
        previous_reply_transit_ms: int, request_transit_ms: int, echo_age_ms: int,
        transit_max_ms: int, lease_ms: int, answered_after_ms: int) -> None:
    """One clock for both sides (the safety argument needs only durations). The controller
    replied at `reply_ms`; the broker got it `previous_reply_transit_ms` later, made its next
    heartbeat `echo_age_ms` after that, and the heartbeat arrived `request_transit_ms` later.
    The controller counts the broker dead `timeout` after the credit; the lease the reply
    grants (RoleCore, after the link takes credit_behind_ms off the send time) ends first."""
    timeout_ms = 1500
    reply_ms = 100_000
    made_ms = reply_ms + previous_reply_transit_ms + echo_age_ms
    arrived_ms = made_ms + request_transit_ms
    beat = _beat(reply_ms, echo_age_ms)
    credit = heartbeat_credit_ms(beat, arrived_ms, clock=CLOCK, transit_max_ms=transit_max_ms)
    assert made_ms - (arrived_ms - credit) <= credit <= arrived_ms
    # handlers.py answers a little later than it recorded: credit_behind from its own now
    answered_ms = arrived_ms + answered_after_ms
    behind = answered_ms - heartbeat_credit_ms(beat, answered_ms, clock=CLOCK,
                                               transit_max_ms=transit_max_ms)
    reply = HeartbeatReply("OK", None, RoleChange("a", 1, ROLE_MASTER, 3, 1, "h:1", (1,), 1),
                           heartbeat_timeout_ms=timeout_ms, credit_behind_ms=behind)
    core = RoleCore(broker_name="a", runtime_roles=True, master_lease_ms=lease_ms)
    assert reply.role is not None
    until = core.confirm(reply.role, made_ms - max(0, reply.credit_behind_ms),
                         reply.heartbeat_timeout_ms)
    assert until is not None
    assert until <= credit + lease_max_ms(timeout_ms) < credit + timeout_ms


def test_heartbeat_transit_max_defaults_to_a_third_of_the_timeout_and_is_checked() -> None:
    assert ControllerConfig(heartbeat_timeout_ms=1500).transit_max_ms == 500
    assert ControllerConfig.from_properties({"heartbeatTransitMaxMs": "0"}).transit_max_ms == 0
    for value in ("-1", "3000"):
        try:
            ControllerConfig.from_properties({"heartbeatTransitMaxMs": value})
        except ConfigError as err:
            assert "heartbeatTransitMaxMs" in str(err)
        else:
            raise AssertionError(f"heartbeatTransitMaxMs={value} accepted")


def _set_of_three() -> ReplicaInfo:
    return ReplicaInfo("c", "a", 1, "h:1", 1, (1, 2, 3), 1,
                       tuple(BrokerMember(i, f"h:{i}") for i in (1, 2, 3)))


def _slave_beat(broker_id: int, made_ms: int) -> BrokerHeartbeat:
    return BrokerHeartbeat("c", "a", broker_id, f"h:{broker_id}", master_epoch=1,
                           max_log_position=500 + broker_id, echo_controller_ms=made_ms - 50,
                           echo_controller_clock=CLOCK, echo_age_ms=50)


def _heard(table: LiveTable, beat: BrokerHeartbeat, arrived_ms: int) -> None:
    table.heartbeat(beat, arrived_ms,
                    heartbeat_credit_ms(beat, arrived_ms, clock=CLOCK, transit_max_ms=500),
                    heartbeat_made_no_earlier_ms(beat, arrived_ms, clock=CLOCK))


def _elected(table: LiveTable, now_ms: int) -> int | None:
    decision = scan_decision(_set_of_three(), table, now_ms, leader_since_ms=0,
                             heartbeat_timeout_ms=1500, unclean_enabled=False)
    return None if decision is None else decision.broker_id


def test_slaves_heard_on_time_after_the_masters_lease_make_positions_final() -> None:
    """Packet loss on the master's host: its heartbeats stop counting, while its slaves'
    HA links stay up (a frame gets through now and then), so they never report the master
    lost. Positions are final once both slaves were heard on time in heartbeats made 5/6
    of the timeout (1250 ms) after the master was last heard (1000): its lease (at most
    1000 ms) has lapsed by then."""
    table = LiveTable(heartbeat_timeout_ms=1500, brokers_max=10)
    table.heartbeat(BrokerHeartbeat("c", "a", 1, "h:1", master_epoch=1), 1000)
    for broker_id in (2, 3):
        _heard(table, _slave_beat(broker_id, 2240), 2245)  # 10 ms too early
    assert table.reported_master_lost(_set_of_three(), 2600) == set()
    assert _elected(table, 2600) is None
    _heard(table, _slave_beat(2, 2300), 2305)
    assert table.reported_master_lost(_set_of_three(), 2600) == {2}
    assert _elected(table, 2600) is None  # broker 3's position may still be missing acks
    _heard(table, _slave_beat(3, 2400), 2405)
    assert table.reported_master_lost(_set_of_three(), 2600) == {2, 3}
    assert _elected(table, 2600) == 3  # the longer log


def test_late_or_echoless_slave_heartbeats_or_an_alive_master_elect_nobody() -> None:
    """A controller whose own host loses packets hears every heartbeat late: it must not
    take the master's silence for the master's fault. Nor do heartbeats without an echo
    (older brokers) count, nor anything while the master is alive."""
    late = LiveTable(heartbeat_timeout_ms=1500, brokers_max=10)
    late.heartbeat(BrokerHeartbeat("c", "a", 1, "h:1", master_epoch=1), 1000)
    for broker_id in (2, 3):
        _heard(late, _slave_beat(broker_id, 2300), 3000)  # 700 ms on the way: late
    assert late.is_alive(_set_of_three(), 2, 3000)
    assert late.reported_master_lost(_set_of_three(), 3000) == set()
    assert _elected(late, 3000) is None

    echoless = LiveTable(heartbeat_timeout_ms=1500, brokers_max=10)
    echoless.heartbeat(BrokerHeartbeat("c", "a", 1, "h:1", master_epoch=1), 1000)
    for broker_id in (2, 3):
        echoless.heartbeat(BrokerHeartbeat("c", "a", broker_id, f"h:{broker_id}",
                                           master_epoch=1), 2600)
    assert _elected(echoless, 2600) is None

    master_alive = LiveTable(heartbeat_timeout_ms=1500, brokers_max=10)
    master_alive.heartbeat(BrokerHeartbeat("c", "a", 1, "h:1", master_epoch=1), 2000)
    for broker_id in (2, 3):
        _heard(master_alive, _slave_beat(broker_id, 3300), 3305)
    assert master_alive.reported_master_lost(_set_of_three(), 3400) == set()
    assert _elected(master_alive, 3400) is None
    # a slave that lost its link says so, as before
    lost = dataclasses.replace(_slave_beat(2, 3350), master_unreachable_epoch=1)
    _heard(master_alive, lost, 3355)
    assert master_alive.reported_master_lost(_set_of_three(), 3400) == {2}
