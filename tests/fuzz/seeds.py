"""Well-formed starting inputs for each fuzz target (the fuzzer mutates from these)."""

from __future__ import annotations

import json

from connector.protocol import GetTicket
from controller.api import BrokerHeartbeat, TopicInfo
from controller.raft import AppendRequest, Entry, EntryKind, HeartbeatRequest, encode_message
from controller.state import ApplyBrokerId, ControllerState, encode_command
from ha.replication.frames import Ack, MasterHello, Metadata, Transfer, encode_frame
from storage_engine import EpochEntry

__all__ = ["seeds"]


def seeds(target: str) -> list[bytes]:
    if target in ("record_codec", "record_runs", "slave_indexer"):
        return [b"\x01", b"\x00"]
    if target == "ha_frames":
        hello = MasterHello(0, 2, 0, 400, 100, 1 << 20, "127.0.0.1:1",
                            (EpochEntry(1, 0), EpochEntry(2, 200)))
        return [encode_frame(hello) + encode_frame(Transfer(2, 2, 200, 100, 300, b"x" * 40))
                + encode_frame(Metadata(1, b"{}")), encode_frame(Ack(5))]
    if target == "raft_codec":
        entry = Entry(4, 2, EntryKind.NORMAL, b"data")
        return [encode_message(AppendRequest(2, 1, 2, 3, 2, (entry,), 3)),
                encode_message(HeartbeatRequest(2, 1, 2, 3, 1))]
    if target == "raft_core":
        return [bytes(range(40)), b"\x01\x02" * 30]
    if target == "controller_api":
        heartbeat = BrokerHeartbeat("c", "a", 1, "127.0.0.1:1", topics=(TopicInfo("t", 4, 4),))
        return [json.dumps(heartbeat.to_json()).encode(),
                encode_command(ApplyBrokerId("c", "a", "127.0.0.1:1")),
                ControllerState().snapshot()]
    if target == "flight_tickets":
        return [GetTicket("t", 0, 5, columns=("body",)).encode(),
                json.dumps({"status": "PUT_OK", "code": 0, "queues": [[0, 1, 2]],
                            "row_queue_ids": None, "log_position_end": 9}).encode()]
    if target == "config_parsing":
        return [b"brokerName=broker-a\nbrokerId=0\nlistenPort=10911\n",
                (b"controllerDLegerPeers=n1-127.0.0.1:9880\ncontrollerDLegerSelfId=n1\n"
                 b"controllerAddr=127.0.0.1:9876\n"),
                b"brokers=127.0.0.1:1\nsubscribe=t\nstartingOffsets=earliest\n"]
    if target == "console_sessions":
        return [b"access_key=AK_viewer&secret_key=s3cret&csrf=abc",
                b"rocketha_console_session=tok; rocketha_console_login=x",
                b"127.0.0.1:8443\nhttps://127.0.0.1:8443"]
    if target == "http_access":
        return [b"Bearer the-token-of-the-fuzz-target-0", b"Basic dXNlcjpwYXNz", b"Bearer "]
    if target == "tls_files":  # (file, how) then bytes: see tests/fuzz/targets.py tls_files
        return [b"\x00\x00MII", b"\x03\x01-----BEGIN X509 CRL-----\nMIIB\n", b"\x01\x02\xff"]
    raise KeyError(target)
