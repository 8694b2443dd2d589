"""Slave core: the handshake decision table (the seeds' cases) and the transfer rules.

Method: pure calls. `decide_start` gets a local log and a MasterHello and must answer follow /
truncate / restart / refuse at the right position; then a SlaveReplication is driven through
link_up -> MasterHello -> Transfers with explicit `now_ms`, and its effects are checked in order
(append before ack, ack before dispatch, epoch entry before the data of a new epoch).
"""

from __future__ import annotations

import pytest

from conf.protocol import LOCAL
from ha.replication.frames import Ack, MasterHello, Metadata, Refuse, SlaveHello, Transfer
from ha.replication.slave_core import (
    AppendEpoch,
    AppendLog,
    ApplyMetadata,
    CloseLink,
    DispatchLog,
    LocalLog,
    MasterKnown,
    RestartLogAt,
    SendFrame,
    SetConfirm,
    SlaveReplication,
    SlaveState,
    Truncate,
    decide_start,
)
from storage_engine import EpochEntry as E

SEG = 1000


def local(min_: int, end: int, epochs: tuple[E, ...], confirm: int = 0, seg: int = SEG
          ) -> LocalLog:
    return LocalLog(min_, end, confirm, epochs, seg)


def hello(min_: int, max_: int, epochs: tuple[E, ...], epoch: int = 8, seg: int = SEG
          ) -> MasterHello:
    return MasterHello(0, epoch, min_, max_, 0, seg, "127.0.0.1:1", epochs)


SEEDS_MASTER = (E(6, 200), E(7, 1200), E(8, 2500))
SEEDS_SLAVE = (E(6, 200), E(7, 1200), E(8, 2250))


@pytest.mark.parametrize("name, slave, master, seen, expected", [
    # The seeds' example: the fork is at <8,2250>; both hold epoch 7 up to 2250.
    ("seeds example", local(300, 2500, SEEDS_SLAVE), hello(300, 2500, SEEDS_MASTER), 0,
     ("truncate", 2250)),
    ("behind, same epochs", local(300, 2000, SEEDS_MASTER[:2]), hello(300, 2500, SEEDS_MASTER),
     0, ("follow", 2000)),
    ("equal", local(300, 2500, SEEDS_MASTER), hello(300, 2500, SEEDS_MASTER), 0,
     ("follow", 2500)),
    ("ahead in the master's epoch", local(0, 3000, (E(8, 0),)), hello(0, 2600, (E(8, 0),)), 0,
     ("truncate", 2600)),
    ("ahead with a newer local epoch", local(0, 3000, (E(1, 0), E(9, 2000))),
     hello(0, 2600, (E(1, 0), E(2, 2400))), 0, ("truncate", 2000)),
    ("far behind the master's min", local(0, 900, (E(1, 0),)), hello(2000, 5000, (E(1, 0),)), 0,
     ("restart", 2000)),
    ("empty, master starts later", local(0, 0, ()), hello(2000, 5000, (E(1, 0),)), 0,
     ("restart", 2000)),
    ("empty at zero", local(0, 0, ()), hello(0, 5000, (E(1, 0),)), 0, ("follow", 0)),
    ("no common epoch", local(0, 900, (E(3, 0),)), hello(0, 5000, (E(1, 0), E(2, 10))), 0,
     ("refuse", -1)),
    ("same epoch, different start", local(0, 900, (E(1, 5),)), hello(0, 5000, (E(1, 0),)), 0,
     ("refuse", -1)),
    ("data without epochs", local(0, 900, ()), hello(0, 5000, (E(1, 0),)), 0, ("refuse", -1)),
    ("fork below confirm", local(0, 3000, (E(1, 0), E(9, 2000)), confirm=2500),
     hello(0, 2600, (E(1, 0), E(2, 2400))), 0, ("refuse", -1)),
    ("segment sizes differ", local(0, 0, ()), hello(0, 0, (), seg=SEG * 2), 0, ("refuse", -1)),
    ("stale master epoch", local(0, 100, (E(1, 0),)), hello(0, 100, (E(1, 0),), epoch=3), 5,
     ("refuse", -1)),
])
def test_decide_start(name: str, slave: LocalLog, master: MasterHello, seen: int,
                      expected: tuple[str, int]) -> None:
    decision = decide_start(slave, master, seen)
    assert (decision.action, decision.log_position) == expected, decision.reason
    if decision.action == "refuse":
        assert decision.reason


def new_slave(fsync: bool = False) -> SlaveReplication:
    return SlaveReplication(broker_id=2, heartbeat_interval_ms=100, housekeeping_interval_ms=1000,
                            fsync_before_ack=fsync)


def test_handshake_truncates_then_acks_the_fork_point() -> None:
    slave = new_slave()
    [sent] = slave.link_up(local(300, 2500, SEEDS_SLAVE), now_ms=0)
    assert sent == SendFrame(SlaveHello(2, 2500, 0, 0, SEG, SEEDS_SLAVE, LOCAL.text()))
    effects = slave.on_frame(hello(300, 2500, SEEDS_MASTER), now_ms=1)
    assert effects == [MasterKnown(8, "127.0.0.1:1", 0), Truncate(2250), SendFrame(Ack(2250))]
    assert slave.state is SlaveState.TRANSFER
    # Data of epoch 7 continues the local entry <7,1200>; then epoch 8 opens at 2500.
    effects = slave.on_frame(Transfer(8, 7, 1200, 2000, 2250, b"x" * 250), now_ms=2)
    assert effects == [AppendLog(2250, b"x" * 250, False), SendFrame(Ack(2500)), DispatchLog(),
                       SetConfirm(2000)]
    effects = slave.on_frame(Transfer(8, 8, 2500, 2500, 2500, b"y" * 10), now_ms=3)
    assert effects == [AppendEpoch(8, 2500), AppendLog(2500, b"y" * 10, False),
                       SendFrame(Ack(2510)), DispatchLog(), SetConfirm(2500)]


def test_refusal_is_reported_and_closes() -> None:
    slave = new_slave()
    slave.link_up(local(0, 900, (E(3, 0),)), now_ms=0)
    effects = slave.on_frame(hello(0, 5000, (E(1, 0),)), now_ms=1)
    assert isinstance(effects[0], SendFrame) and isinstance(effects[0].frame, Refuse)
    assert isinstance(effects[1], CloseLink) and effects[1].refused
    assert "no common epoch" in slave.stats().last_refusal
    assert slave.state is SlaveState.CLOSED


def test_restart_far_behind() -> None:
    slave = new_slave()
    slave.link_up(local(0, 900, (E(1, 0),)), now_ms=0)
    effects = slave.on_frame(hello(2000, 5000, (E(1, 0),), epoch=1), now_ms=1)
    assert effects[1:] == [RestartLogAt(2000), SendFrame(Ack(2000))]
    # The first batch carries an epoch that started before our (empty) log: accepted.
    effects = slave.on_frame(Transfer(1, 1, 0, 0, 2000, b"z"), now_ms=2)
    assert effects[0] == AppendEpoch(1, 0)


@pytest.mark.parametrize("transfer, reason", [
    (Transfer(8, 8, 2500, 0, 2400, b"x"), "starts at 2400"),  # gap / overlap
    (Transfer(7, 8, 2500, 0, 2500, b"x"), "stale master"),  # older master epoch
    (Transfer(8, 6, 200, 0, 2500, b"x"), "does not follow"),  # data epoch older than local
    (Transfer(8, 8, 2400, 0, 2500, b"x"), "does not follow"),  # same epoch, other start
    (Transfer(8, 9, 2600, 0, 2500, b"x"), "does not follow"),  # epoch starting after its data
])
def test_transfer_rules(transfer: Transfer, reason: str) -> None:
    slave = new_slave()
    slave.link_up(local(0, 2500, (E(8, 2500),)), now_ms=0)
    slave.on_frame(hello(0, 2500, (E(8, 2500),)), now_ms=0)
    [close] = slave.on_frame(transfer, now_ms=1)
    assert isinstance(close, CloseLink) and reason in close.reason and not close.refused


def test_sync_flush_slave_fsyncs_before_ack_and_confirm_is_bounded() -> None:
    slave = new_slave(fsync=True)
    slave.link_up(local(0, 0, ()), now_ms=0)
    slave.on_frame(hello(0, 100, (E(1, 0),), epoch=1), now_ms=0)
    effects = slave.on_frame(Transfer(1, 1, 0, 100, 0, b"a" * 40), now_ms=1)
    assert effects == [AppendEpoch(1, 0), AppendLog(0, b"a" * 40, True), SendFrame(Ack(40)),
                       DispatchLog(), SetConfirm(40)]  # confirm 100 capped at our end 40
    # A lower confirm later never moves it back.
    assert slave.on_frame(Transfer(1, 1, 0, 20, 40, b""), now_ms=2) == []


def test_heartbeats_and_housekeeping() -> None:
    slave = new_slave()
    slave.link_up(local(0, 0, ()), now_ms=0)
    slave.on_frame(hello(0, 0, (E(1, 0),), epoch=1), now_ms=0)
    assert slave.on_tick(now_ms=50) == []
    assert slave.on_tick(now_ms=100) == [SendFrame(Ack(0))]  # periodic report
    assert slave.on_frame(Metadata(3, b"{}"), now_ms=150) == [ApplyMetadata(3, b"{}")]
    [close] = slave.on_tick(now_ms=1150)  # silent master for haHousekeepingInterval
    assert isinstance(close, CloseLink) and "haHousekeepingInterval" in close.reason
