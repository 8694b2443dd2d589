"""A fake master's bytes never stop a slave nor reach outside its store (issue 16).

Goal: a real slave broker (`python -m ha.broker`, brokerRole=SLAVE) follows a fake master that
sends, one link after another, what the security review sent: records whose topic is
`../../..` (once made `consumequeue/../../../<queue>` outside the store), in a bulk run and
alone; a record whose BODYLENGTH points past it (once an IndexError that ended the follower
thread); a topic of non-ASCII bytes (once a UnicodeDecodeError); bytes with no magic code; and
metadata naming `../../..` and non-integer queue counts. After each, the slave must still answer,
hold no directory outside its store, have cut the refused bytes, log the refusal, and finally
follow a well-formed stream from the same master (the thread lived on).

Method: the fake master is a thread speaking ha/replication/frames.py over a socket; records are
built with the store's own encoder (valid checksums: a hostile master can compute them too).
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha.replication.errors import FrameError, LinkClosedError
from ha.replication.frames import MasterHello, Metadata, SlaveHello, Transfer, encode_frame
from ha.replication.link import FrameSocket
from storage_engine import EpochEntry
from storage_engine.record_format import encode_host, encode_record
from tests.ha.replica_set import FAST_TIMERS, SEGMENT_BYTES, wait_for
from tests.integration.broker_process import BrokerProcess, free_port
from tests.support.sockets import closed_within

pytestmark = pytest.mark.integration

HOST = encode_host("127.0.0.1", 1)


def _records(topic: bytes, count: int, log_position: int = 0, queue_id: int = 0) -> bytes:
    out = b""
    for index in range(count):
        record = encode_record(
            body=b"x" * 10, topic_meta=bytes([len(topic)]) + topic, properties=b"",
            queue_id=queue_id, queue_offset=index, log_position=log_position + len(out),
            store_timestamp_ms=1, store_host=HOST, born_timestamp_ms=1, born_host=HOST)
        out += record
    return out


def _body_past_end() -> bytes:
    record = bytearray(_records(b"ok", 1))
    record[84:88] = (10**6).to_bytes(4, "big")  # BODYLENGTH far past TOTALSIZE
    return bytes(record)


def _non_ascii_topic() -> bytes:
    return _records(b"\xff\xfe\xfd", 1)


class FakeMaster:
    """Serves `payloads[i]` (data, metadata or None) on the i-th link, the last one for ever."""

    def __init__(self, payloads: list[tuple[bytes, bytes | None]]) -> None:
        self.payloads = payloads
        self.links = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.port = int(self._server.getsockname()[1])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                raw, _ = self._server.accept()
            except TimeoutError:
                continue
            data, metadata = self.payloads[min(self.links, len(self.payloads) - 1)]
            self.links += 1
            link = FrameSocket(raw, body_bytes_max=64 << 20, peer="slave", io_timeout_s=5)
            try:
                self._one_link(link, data, metadata)
            except (OSError, LinkClosedError, FrameError):
                pass  # the slave closed the link: what it should do
            finally:
                link.close()

    def _one_link(self, link: FrameSocket, data: bytes, metadata: bytes | None) -> None:
        hello = link.recv_frame(idle_timeout_s=5)
        assert isinstance(hello, SlaveHello), hello
        link.send_frame(MasterHello(0, 1, 0, len(data), 0, SEGMENT_BYTES, "127.0.0.1:1",
                                    (EpochEntry(1, 0),)))
        link.recv_frame(idle_timeout_s=5)  # the slave's Ack of where it starts
        if metadata is not None:
            link.send_frame(Metadata(1, metadata))
        link.send_frame(Transfer(1, 1, 0, 0, hello.max_log_position,
                                 data[hello.max_log_position:]))
        deadline = time.monotonic() + 1.0
        while time.monotonic() < deadline and not self._stop.is_set():
            link.recv_frame(idle_timeout_s=0.1)  # until the slave closes (or a second)


@pytest.fixture
def fake_master() -> Iterator[list[FakeMaster]]:
    masters: list[FakeMaster] = []
    yield masters
    for master in masters:
        master.close()


def test_a_slave_refuses_a_fake_masters_records_and_lives_on(
        tmp_path: Path, fake_master: list[FakeMaster]) -> None:
    outside = tmp_path.parent / "0"
    assert not outside.exists()
    good = _records(b"good", 3)
    bad_metadata = json.dumps({"topics": [{"name": "../../..", "read_queue_nums": 1,
                                           "write_queue_nums": 1}], "offsets": {}}).encode()
    master = FakeMaster([
        (_records(b"../../..", 10), None),  # a bulk run (>= 8 records of one topic)
        (_records(b"../../..", 1), None),  # the per-record path
        (_body_past_end(), None),
        (_non_ascii_topic(), None),
        (b"\x00\x00\x00\x80" + b"\xab" * 124, None),  # no magic code
        (good, bad_metadata),
    ])
    fake_master.append(master)
    slave = BrokerProcess(tmp_path / "slave", name="broker-a", brokerId="1", brokerRole="SLAVE",
                          haMasterAddress=f"127.0.0.1:{master.port}", haListenPort="0",
                          **FAST_TIMERS).start()
    try:
        queues = slave.store_dir / "consumequeue"
        wait_for(lambda: (queues / "good" / "0").is_dir(), 30, "the good stream indexed")
        assert master.links >= 6
        assert slave.process is not None and slave.process.poll() is None
        info = slave.action("broker_info")
        assert info["role"] == "SLAVE" and info["max_log_position"] == len(good), info
        assert sorted(p.name for p in queues.iterdir()) == ["good"]
        assert not outside.exists() and not (tmp_path / "0").exists()
        log = slave.log.read_text()
        assert log.count("HA link to") >= 5 and log.count("refused: corrupt record") >= 4, log
        assert "topic" in log and "BODYLENGTH" in log and "magic code" in log
        assert "ignoring malformed metadata" in log
        assert "Traceback" not in log, log[-3000:]
        topics = slave.action("list_topics")["topics"]
        assert all(topic["name"] != "../../.." for topic in topics), topics
    finally:
        slave.stop()


def test_idle_strangers_and_half_frames_do_not_hold_the_ha_port(tmp_path: Path) -> None:
    """haConnectionsMax slots taken by strangers that never say SlaveHello free up after
    haHandshakeTimeoutMs; links over the cap are closed at accept; a frame sent in part is cut
    after haFrameTimeoutMs; then the real slave gets in and replicates."""
    ha_port = free_port()
    limits = {"haConnectionsMax": "2", "haHandshakeTimeoutMs": "400", "haFrameTimeoutMs": "400"}
    master = BrokerProcess(tmp_path / "master", brokerRole="SYNC_MASTER", totalReplicas="2",
                           haListenPort=str(ha_port), **{**FAST_TIMERS, **limits}).start()
    slave: BrokerProcess | None = None
    strangers: list[socket.socket] = []
    try:
        strangers = [socket.create_connection(("127.0.0.1", ha_port), timeout=5)
                     for _ in range(5)]
        time.sleep(0.2)
        assert sum(1 for sock in strangers if closed_within(sock, 0.05)) >= 3  # over the cap
        started = time.monotonic()
        assert all(closed_within(sock, 5.0) for sock in strangers)
        assert time.monotonic() - started < 2.5
        with socket.create_connection(("127.0.0.1", ha_port), timeout=5) as half:
            half.sendall(encode_frame(Metadata(1, b"x" * 100))[:20])  # 20 of 120 bytes
            started = time.monotonic()
            assert closed_within(half, 5.0)
            assert time.monotonic() - started < 2.5
        slave = BrokerProcess(tmp_path / "slave", brokerId="1", brokerRole="SLAVE",
                              haMasterAddress=f"127.0.0.1:{ha_port}", haListenPort="0",
                              **{**FAST_TIMERS, **limits}).start()
        wait_for(lambda: [link for link in master.action("broker_info")["slaves"]
                          if link["state"] == "TRANSFER"], 20, "the slave's link")
        log = master.log.read_text()
        assert "haConnectionsMax" in log and "haHandshakeTimeoutMs" in log
        assert "haFrameTimeoutMs" in log
        assert master.process is not None and master.process.poll() is None
    finally:
        for sock in strangers:
            sock.close()
        if slave is not None:
            slave.stop()
        master.stop()

