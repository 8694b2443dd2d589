"""A broker without tiering deletes expired segments by itself (cleanResourceInterval).

Goal: with fileReservedTime=0, sealed segments below the confirm position go within a few
passes, consumers then start at the new minimum, and the newest messages stay readable; a
broker with the default 72 h keeps everything. Method: real broker processes on 127.0.0.1 with
256 KiB segments; offsets and reads through the client library.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from connector import Admin, ClientConfig, Consumer, Producer
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

SMALL_SEGMENTS = {"mappedFileSizeCommitLog": "262144", "maxMessageSize": "65536",
                  "cleanResourceInterval": "100", "flushDiskType": "ASYNC_FLUSH"}


def _fill(broker: BrokerProcess, messages: int) -> ClientConfig:
    config = ClientConfig(brokers=(broker.endpoint,))
    Admin(config).create_topic("ret", queues=1)
    with Producer(config) as producer:
        for first in range(0, messages, 500):
            rows = [{"body": b"%08d" % n + b"r" * 992} for n in range(first, first + 500)]
            assert all(result.ok for result in producer.send_batch("ret", rows))
    return config


def _min_offset(config: ClientConfig) -> int:
    return Admin(config).queue_offsets("ret")[0]["min_queue_offset"]


def test_expired_segments_are_deleted_without_tiering(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", fileReservedTime="0", **SMALL_SEGMENTS).start()
    try:
        config = _fill(broker, 3000)  # ~3 MB: a dozen 256 KiB segments
        deadline = time.monotonic() + 20
        while _min_offset(config) == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _min_offset(config) > 0, "no segment was deleted"
        # passes go on (deleteFileBatchMax segments each): one may delete below the minimum
        # read here before the pull at it; then the pull says OFFSET_TOO_SMALL and the reader
        # starts again at the new minimum, as a consumer does
        for _ in range(100):
            low = _min_offset(config)
            result = Consumer(config).pull("ret", 0, low, max_messages=10)
            if result.status != "OFFSET_TOO_SMALL":
                break
        assert result.status == "FOUND", result.status
        first_body = result.table.column("body")[0].as_py()
        assert first_body.startswith(b"%08d" % low)
        newest = Consumer(config).pull("ret", 0, 2999, max_messages=1)
        assert newest.table.column("body")[0].as_py().startswith(b"00002999")
    finally:
        broker.stop()


def test_default_reserved_time_keeps_everything(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", **SMALL_SEGMENTS).start()
    try:
        config = _fill(broker, 1500)
        time.sleep(0.5)  # several retention passes (every 100 ms) had their chance
        assert _min_offset(config) == 0
    finally:
        broker.stop()
