"""Raft wire codec, TCP framing, controller configuration and the liveness table.

Goal: every Raft message survives encode/decode; malformed bytes raise CodecError (never
crash or allocate on a peer's word); frames check magic, version, size (before reading) and
CRC; the properties file rejects unknown keys and bad values by name; the liveness table
expires silent brokers and builds routes from alive ones. Method: direct calls with sample and
corrupted inputs; frames go through a real asyncio.StreamReader.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from controller.api import BrokerHeartbeat, BrokerMember, ReplicaInfo, TopicInfo
from controller.config import ControllerConfig, parse_properties
from controller.errors import CodecError, ConfigError
from controller.liveness import LiveTable
from controller.raft import (
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    HeartbeatRequest,
    HeartbeatResponse,
    Snapshot,
    SnapshotRequest,
    VoteRequest,
    VoteResponse,
    decode_message,
    encode_message,
)
from controller.transport import FrameError, encode_frame, read_frame

MESSAGES = [
    VoteRequest(1, 2, 3, True, 10, 2),
    VoteResponse(2, 1, 3, False, True),
    AppendRequest(1, 2, 3, 9, 2, (Entry(10, 3, EntryKind.NORMAL, b"\x00\xff"),
                                  Entry(11, 3, EntryKind.NOOP, b"")), 9),
    AppendResponse(2, 1, 3, False, 0, 9, 7, 2),
    HeartbeatRequest(1, 2, 3, 8, 4),
    HeartbeatResponse(2, 1, 3, 4),
    SnapshotRequest(1, 2, 3, Snapshot(50, 3, (1, 2, 3), b"state")),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_raft_messages_round_trip(message: object) -> None:
    assert decode_message(encode_message(message)) == message  # type: ignore[arg-type]


@pytest.mark.parametrize("raw", [
    b"\xff\xfe", b"[]", b'{"v": 2, "type": "vote"}', b'{"v": 1, "type": "nope"}',
    b'{"v": 1, "type": "heartbeat_resp", "from_id": 1, "to_id": 2, "term": 3}',
    b'{"v": 1, "type": "heartbeat_resp", "from_id": 1, "to_id": 2, "term": -3, "read_seq": 0}',
    (b'{"v": 1, "type": "append", "from_id": 1, "to_id": 2, "term": 1, "prev_index": 0,'
    b' "prev_term": 0, "entries": [[1, 1, 9, ""]], "commit_index": 0}'),
    (b'{"v": 1, "type": "append", "from_id": 1, "to_id": 2, "term": 1, "prev_index": 0,'
    b' "prev_term": 0, "entries": [[1, 1, 0, "!!"]], "commit_index": 0}'),
])
def test_malformed_raft_messages_raise_codec_errors(raw: bytes) -> None:
    with pytest.raises(CodecError):
        decode_message(raw)


def _read(data: bytes, frame_bytes_max: int = 1 << 20) -> bytes:
    async def run() -> bytes:
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        reader.feed_eof()
        return await read_frame(reader, frame_bytes_max)

    return asyncio.run(run())


def test_frames_check_magic_version_size_and_checksum() -> None:
    payload = encode_message(MESSAGES[0])
    frame = encode_frame(payload)
    assert _read(frame) == payload
    with pytest.raises(FrameError, match="exceeds"):
        _read(frame, frame_bytes_max=len(payload) - 1)
    with pytest.raises(FrameError, match="exceeds"):  # refused before reading 4 GiB
        _read(struct.pack(">HBBII", 0x5246, 1, 1, 0xFFFFFFFF, 0))
    with pytest.raises(FrameError, match="header"):
        _read(b"XX" + frame[2:])
    with pytest.raises(FrameError, match="header"):
        _read(frame[:2] + b"\x09" + frame[3:])
    corrupted = bytearray(frame)
    corrupted[-1] ^= 1
    with pytest.raises(FrameError, match="checksum"):
        _read(bytes(corrupted))
    with pytest.raises(asyncio.IncompleteReadError):
        _read(frame[:-3])


def test_config_reads_properties_and_names_bad_keys() -> None:
    text = """
    # three controllers
    controllerDLegerPeers=n1-127.0.0.1:9880;n2-127.0.0.1:9881;n3-127.0.0.1:9882
    controllerDLegerSelfId=n2
    controllerAddr=127.0.0.1:9876;127.0.0.1:9877;127.0.0.1:9878
    enableElectUncleanMaster=true
    """
    config = ControllerConfig.from_properties(parse_properties(text, "x.conf"))
    assert (config.node_id, config.voter_ids, config.unclean_election_enabled) == (
        2, (1, 2, 3), True)
    assert config.client_address(3) == "127.0.0.1:9878"
    assert config.raft_address(1) == ("127.0.0.1", 9880)
    for bad, key in [
        ({"controllerDLegerPeer": "n1-h:1"}, "controllerDLegerPeer"),
        ({"controllerHeartbeatTimeoutMs": "soon"}, "controllerHeartbeatTimeoutMs"),
        ({"controllerHeartbeatTimeoutMs": "5"}, "controllerHeartbeatTimeoutMs"),
        ({"enableElectUncleanMaster": "yes"}, "enableElectUncleanMaster"),
        ({"controllerDLegerPeers": "n1-h:1;n2-h:2"}, "controllerDLegerPeers"),
        ({"controllerDLegerSelfId": "n7"}, "controllerDLegerSelfId"),
        ({"controllerAddr": "h:1;h:2"}, "controllerAddr"),
        ({"raftElectionTimeoutTicks": "1"}, "raftElectionTimeoutTicks"),
    ]:
        with pytest.raises(ConfigError, match=key):
            ControllerConfig.from_properties(bad)
    with pytest.raises(ConfigError, match=r"x\.conf:1"):
        parse_properties("justakey", "x.conf")  # `key value` is a setting: this is not
    with pytest.raises(ConfigError, match=r"x\.conf:2: duplicate key 'a'"):
        parse_properties("a=1\na=2", "x.conf")
    with pytest.raises(ConfigError, match="did you mean 'controllerDLegerPeers'"):
        ControllerConfig.from_properties({"controllerDLegerPeer": "n1-h:1"})


def test_the_conf_file_in_the_repository_loads() -> None:
    assert ControllerConfig.from_file("conf/controller.conf").node_id == 1


def _beat(broker_id: int, topics: tuple[str, ...] = ("t",)) -> BrokerHeartbeat:
    return BrokerHeartbeat("c", "a", broker_id, f"h:{broker_id}", 1, 100 * broker_id, 0, 9,
                           tuple(TopicInfo(t, 4, 2, 6) for t in topics))


def test_liveness_expires_silent_brokers_and_routes_follow() -> None:
    replica = ReplicaInfo("c", "a", 1, "h:1", 3, (1, 2), 2,
                          (BrokerMember(1, "h:1"), BrokerMember(2, "h:2"), BrokerMember(3, "h:3")))
    table = LiveTable(heartbeat_timeout_ms=1000, brokers_max=10)
    table.heartbeat(_beat(1), now_ms=0)
    table.heartbeat(_beat(2), now_ms=500)
    table.heartbeat(BrokerHeartbeat("c", "a", 3, "elsewhere:3"), now_ms=500)  # wrong address
    assert sorted(table.alive(replica, now_ms=900)) == [1, 2]
    routes = table.routes("t", [replica], now_ms=900)
    assert routes.status == "OK"
    assert (routes.replica_sets[0].master_address, routes.replica_sets[0].slave_addresses) == (
        "h:1", ("h:2",))
    assert (routes.queues[0].read_queue_nums, routes.queues[0].write_queue_nums) == (4, 2)
    assert table.expire(now_ms=1200) == [("a", 1)]
    routes = table.routes("t", [replica], now_ms=1200)
    assert routes.replica_sets[0].master_address is None  # the master left the routes
    assert table.routes("t", [replica], now_ms=1600).status == "TOPIC_NOT_FOUND"
    assert table.routes("other", [replica], now_ms=0).status == "TOPIC_NOT_FOUND"


def test_liveness_says_when_a_master_expires_and_how_long_it_was_silent() -> None:
    """The leader scans when a master's timeout ends (not a scan interval later), and tells
    slaves when their master has gone quiet (so they heartbeat often before the election)."""
    members = (BrokerMember(1, "h:1"), BrokerMember(2, "h:2"))
    set_a = ReplicaInfo("c", "a", 1, "h:1", 3, (1, 2), 2, members)
    set_b = ReplicaInfo("c", "b", 2, "h:2", 3, (1, 2), 2, members)
    headless = ReplicaInfo("c", "z", None, None, 0, (), 0, members)
    table = LiveTable(heartbeat_timeout_ms=1000, brokers_max=10)
    assert table.next_master_expiry_ms([set_a, set_b], now_ms=0) is None  # none heard yet
    table.heartbeat(_beat(1), now_ms=100)
    table.heartbeat(BrokerHeartbeat("c", "b", 2, "h:2"), now_ms=40)
    assert table.next_master_expiry_ms([set_a, set_b, headless], now_ms=500) == 1040
    assert table.next_master_expiry_ms([set_a], now_ms=500) == 1100
    # a timeout already past is the scan's business: no wake-up loop on it (followers)
    assert table.next_master_expiry_ms([set_a, set_b], now_ms=1050) == 1100
    assert table.next_master_expiry_ms([set_a, set_b], now_ms=60_000) is None
    assert table.position_heard_since(set_a, 1, since_ms=100) == (100, 100)
    assert table.position_heard_since(set_a, 1, since_ms=101) is None
    assert table.position_heard_since(set_a, 1, since_ms=0, lease_lapsed=True) is None
    assert table.silent_ms(set_a, 1, now_ms=700) == 600
    assert table.silent_ms(set_a, 2, now_ms=700) is None  # never heard
    assert table.silent_ms(headless, None, now_ms=700) is None
    table.heartbeat(BrokerHeartbeat("c", "a", 1, "h:1", 1, 700, master_lease_lapsed=True),
                    now_ms=900)
    assert table.position_heard_since(set_a, 1, since_ms=0, lease_lapsed=True) == (700, 900)


def test_liveness_table_is_bounded() -> None:
    table = LiveTable(heartbeat_timeout_ms=1000, brokers_max=2)
    for broker_id in (1, 2, 3):
        table.heartbeat(_beat(broker_id), now_ms=broker_id)
    replica = ReplicaInfo("c", "a", None, None, 0, (), 0,
                          tuple(BrokerMember(b, f"h:{b}") for b in (1, 2, 3)))
    assert sorted(table.alive(replica, now_ms=10)) == [2, 3]
