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
from controller.liveness import LiveTable, heartbeat_credit_ms
from ha.role_core import RoleCore

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
    # node.py answers a little later than it recorded: credit_behind from its own now
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
