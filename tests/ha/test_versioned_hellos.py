"""HA hellos carry the protocol version; a 0.1 peer (no version block) still links.

Goal: the version block round-trips and a hello without it (v0.1.0's exact body) still decodes;
a master answers a hello in kind (v0.1.0 slaves reject a longer MasterHello); both ends refuse
a pair the rule refuses with its line; a slave whose versioned hello met a silent close (what
v0.1.0 does with a body it does not know) sends one plain hello next, then versioned again.
Method: pure calls on the frame codec and on both sans-IO cores.
"""

from __future__ import annotations

import pytest

from conf.protocol import LOCAL, PeerVersion
from ha.replication.errors import FrameError
from ha.replication.frames import (
    Ack,
    MasterHello,
    Refuse,
    SlaveHello,
    decode_stream,
    encode_frame,
)
from ha.replication.master_core import CloseLink as MasterClose
from ha.replication.master_core import SendFrame as MasterSend
from ha.replication.slave_core import CloseLink, LocalLog, SendFrame, SlaveReplication, SlaveState
from storage_engine import EpochEntry as E
from tests.ha.test_master_core import SEG, log, master

FAR = PeerVersion(0, 4, "0.4.0")


@pytest.mark.parametrize("frame", [
    SlaveHello(1, 100, 50, 3, SEG, (E(1, 0), E(3, 60)), "0.2 0.2.0.dev0"),
    SlaveHello(1, 100, 50, 3, SEG, (E(1, 0),)),
    MasterHello(0, 3, 0, 100, 50, SEG, "h:1", (E(1, 0),), "0.2 0.2.0"),
    MasterHello(0, 3, 0, 100, 50, SEG, "h:1", ()),
])
def test_hellos_round_trip_with_and_without_the_block(frame: SlaveHello | MasterHello) -> None:
    data = encode_frame(frame)
    assert decode_stream(data, 1 << 20) == ([frame], len(data))
    plain = encode_frame(type(frame)(*[getattr(frame, f) for f in frame.__slots__][:-1]))
    assert len(data) - len(plain) == (len(frame.version) + 1 if frame.version else 0)


def test_a_broken_version_block_is_a_frame_error() -> None:
    data = bytearray(encode_frame(SlaveHello(1, 100, 50, 3, SEG, (), "0.2 x")))
    data[-6] = 9  # the block's size byte says more than there is
    with pytest.raises(FrameError):
        decode_stream(bytes(_recrc(data)), 1 << 20)


def _recrc(data: bytearray) -> bytearray:
    import zlib
    crc = zlib.crc32(bytes(data[12:]), zlib.crc32(bytes(data[:8])))
    data[8:12] = crc.to_bytes(4, "big")
    return data


def _hello_reply(core_version: PeerVersion, hello: SlaveHello) -> list[object]:
    core = master()
    core.version = core_version
    core.link_opened(1, now_ms=0)
    return core.on_frame(1, hello, log(0, epochs=()), now_ms=0)


def test_the_master_answers_in_kind() -> None:
    [plain] = _hello_reply(LOCAL, SlaveHello(1, 0, 0, 0, SEG, ()))
    assert isinstance(plain, MasterSend) and isinstance(plain.frame, MasterHello)
    assert plain.frame.version == ""  # a 0.1 slave: its decoder wants the exact body
    [versioned] = _hello_reply(LOCAL, SlaveHello(1, 0, 0, 0, SEG, (), "0.2 0.2.0"))
    assert isinstance(versioned, MasterSend) and isinstance(versioned.frame, MasterHello)
    assert versioned.frame.version == LOCAL.text()


@pytest.mark.parametrize("master_version, slave_text", [
    (LOCAL, FAR.text()),  # a slave two minors ahead
    (FAR, None),  # a 0.4 master and a 0.1 slave
])
def test_the_master_refuses_with_the_line(master_version: PeerVersion,
                                          slave_text: str | None) -> None:
    effects = _hello_reply(master_version, SlaveHello(1, 0, 0, 0, SEG, (), slave_text or ""))
    assert isinstance(effects[0], MasterSend) and isinstance(effects[0].frame, Refuse)
    assert effects[0].frame.reason.startswith("HA link from slave 1 refused: the peer speaks")
    assert isinstance(effects[-1], MasterClose)


def _slave(version: PeerVersion = LOCAL) -> SlaveReplication:
    return SlaveReplication(broker_id=2, heartbeat_interval_ms=100, housekeeping_interval_ms=1000,
                            fsync_before_ack=False, version=version)


def _up(slave: SlaveReplication) -> SlaveHello:
    [sent] = slave.link_up(LocalLog(0, 0, 0, (), SEG), now_ms=0)
    assert isinstance(sent, SendFrame) and isinstance(sent.frame, SlaveHello)
    return sent.frame


def test_the_slave_refuses_a_master_two_minors_apart() -> None:
    slave = _slave(FAR)
    _up(slave)
    effects = slave.on_frame(MasterHello(0, 1, 0, 0, 0, SEG, "h:1", ()), now_ms=1)  # a 0.1 master
    assert isinstance(effects[0], SendFrame) and isinstance(effects[0].frame, Refuse)
    assert isinstance(effects[1], CloseLink) and effects[1].refused
    assert "the peer speaks protocol 0.1" in slave.stats().last_refusal
    assert slave.state is SlaveState.CLOSED


def test_a_silent_close_after_a_versioned_hello_makes_the_next_one_plain() -> None:
    slave = _slave()
    assert _up(slave).version == LOCAL.text()
    slave.link_down()  # closed without a word: a 0.1 master's decoder refused the block
    assert _up(slave).version == ""
    effects = slave.on_frame(MasterHello(0, 1, 0, 0, 0, SEG, "h:1", ()), now_ms=1)
    assert effects[-1] == SendFrame(Ack(0)) and slave.state is SlaveState.TRANSFER
    slave.link_down()  # a link that worked ends: the next hello is versioned again
    assert _up(slave).version == LOCAL.text()
    slave.link_down()
    assert _up(slave).version == ""  # silent again: plain
    slave.link_down()
    assert _up(slave).version == LOCAL.text()  # a plain hello met silence too: versioned


def test_a_refusal_is_not_silence() -> None:
    slave = _slave()
    _up(slave)
    slave.on_frame(Refuse("busy"), now_ms=1)
    slave.link_down()
    assert _up(slave).version == LOCAL.text()
