"""Helpers for tiered-storage tests against real broker processes (produce, read all)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import flight

from connector.protocol import GetReply, GetTicket, PutReply, produce_descriptor_command
from tests.integration.broker_process import BrokerProcess

SMALL_TIER = {
    "tieredStoreEnable": "true", "mappedFileSizeCommitLog": str(128 * 1024),
    "maxMessageSize": "4096", "mappedFileSizeConsumeQueue": str(256 * 20),
    "fileReservedTime": "0", "tieredUploadIntervalMs": "50", "tieredRetentionIntervalMs": "100",
    "tieredManifestRefreshIntervalMs": "100", "tieredUploadRetryBackoffMinMs": "50",
    "tieredUploadRetryBackoffMaxMs": "200", "tieredReadBlockBytes": str(32 * 1024),
    "tieredReadCacheBytesMax": str(1 << 20), "defaultTopicQueueNums": "2",
}
TOPIC = "Cold"
# retention removed the segment between the index look-up and the read (the next read goes to
# the tier), or the tier did not answer: both mean "the same offset again", nothing skipped
_RETRY_SAME_OFFSET = ("MESSAGE_WAS_REMOVING", "OFFSET_FOUND_NULL")


def produce(broker: BrokerProcess, batches: int, rows: int = 100, seed: int = 0) -> int:
    """Acked batches of rows over two queues; bodies 200-1000 bytes. Returns rows written."""
    client = flight.FlightClient(f"grpc://{broker.endpoint}")
    writer, reader = client.do_put(flight.FlightDescriptor.for_command(
        produce_descriptor_command(TOPIC)), pa.schema([("body", pa.binary()),
                                                       ("key", pa.string()),
                                                       ("queue_id", pa.int32())]))
    for number in range(batches):
        bodies = [(f"{seed}-{number}-{i}:".encode() * 80)[:200 + (i * 37) % 800]
                  for i in range(rows)]
        writer.write_batch(pa.record_batch({
            "body": pa.array(bodies, pa.binary()),
            "key": pa.array([f"k{number}-{i}" for i in range(rows)], pa.string()),
            "queue_id": pa.array([i % 2 for i in range(rows)], pa.int32())}))
        metadata = reader.read()
        assert metadata is not None
        assert PutReply.decode(metadata.to_pybytes()).status == "PUT_OK"
    writer.done_writing()
    writer.close()
    client.close()
    return batches * rows


def read_all(broker: BrokerProcess, queue_id: int) -> list[tuple[int, bytes, str]]:
    """(queue_offset, body, key) of every message of the queue, from offset 0 (retrying at
    the same offset on the statuses a consumer retries)."""
    client = flight.FlightClient(f"grpc://{broker.endpoint}")
    rows: list[tuple[int, bytes, str]] = []
    cursor = 0
    try:
        for _ in range(10_000):
            reader = client.do_get(flight.Ticket(GetTicket(TOPIC, queue_id, cursor,
                                                           max_messages=500).encode()))
            last: GetReply | None = None
            for chunk in iter(reader.read_chunk, None):
                table = chunk.data.to_pydict()
                rows.extend(zip(table["queue_offset"], table["body"], table["key"], strict=True))
                last = GetReply.decode(chunk.app_metadata.to_pybytes())
            assert last is not None
            if last.status == "OFFSET_TOO_SMALL":
                cursor = last.next_queue_offset
                continue
            if last.status in _RETRY_SAME_OFFSET:  # as the client does: ask again
                time.sleep(0.01)
                continue
            if last.status != "FOUND" or last.next_queue_offset >= last.max_queue_offset:
                return rows
            cursor = last.next_queue_offset
    finally:
        client.close()
    raise AssertionError("read_all did not finish")


def tier_stats(broker: BrokerProcess) -> dict[str, Any]:
    return broker.action("broker_info")["tiered"]


def wait_for(what: str, condition: Callable[[], Any], timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def when(value: Any, predicate: Callable[[Any], Any]) -> Any:
    """`value` when `predicate(value)` holds, else None: a wait_for condition that hands back
    what it polled (the stats it waited for)."""
    return value if predicate(value) else None


def manifest_bases(tier_dir: Path) -> list[int]:
    versions = sorted((tier_dir / "broker-a" / "manifest").glob("*.json"))
    if not versions:
        return []
    return [s["base_log_position"] for s in json.loads(versions[-1].read_bytes())["segments"]]
