"""A Producer against a broker that takes one topic per produce stream (v0.1.0).

Goal: this release's Producer names its topic per batch (descriptor `{"topics": "per_batch"}`),
which a v0.1.0 broker refuses with BAD_REQUEST before it reads a batch. In a rolling upgrade a
new producer meets such brokers: its first send there must still succeed, on a stream per
topic, without a retry that could store twice, and it must not try the per-batch descriptor
again on that broker.

Method: a Flight peer in this process whose DoPut is v0.1.0's produce check line for line (the
descriptor must name a string "topic", else BAD_REQUEST with v0.1.0's line, before the stream is
read) and which answers each batch PUT_OK, recording (topic, bodies) per stream. A real v0.1.0
broker is in tests/integration/test_mixed_versions.py (slow: it builds v0.1.0 from its tag).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pyarrow import flight

from connector import ClientConfig, Producer
from connector.protocol import PutReply, code_for
from ha.broker.request_errors import flight_error


class SingleTopicBroker(flight.FlightServerBase):
    def __init__(self) -> None:
        super().__init__("grpc://127.0.0.1:0")
        self.lock = threading.Lock()
        self.refused = 0
        self.streams: list[tuple[str, list[bytes]]] = []  # (topic, bodies) per stream
        self.offsets: dict[str, int] = {}

    def do_put(self, context: Any, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader,
               writer: flight.FlightMetadataWriter) -> None:
        name = json.loads(descriptor.command).get("topic")
        if not isinstance(name, str):  # v0.1.0's check, before any batch is read
            with self.lock:
                self.refused += 1
            raise flight_error("BAD_REQUEST",
                               'produce descriptor: field "topic" must be a string')
        bodies: list[bytes] = []
        with self.lock:
            self.streams.append((name, bodies))
        for chunk in reader:
            if chunk.data is None:
                continue
            rows = chunk.data.column("body").to_pylist()
            with self.lock:
                bodies.extend(rows)
                first = self.offsets.get(name, 0)
                self.offsets[name] = first + len(rows)
            reply = PutReply("PUT_OK", code_for("PUT_OK"), [[0, first, len(rows)]], None,
                             first + len(rows))
            writer.write(reply.encode())


@pytest.fixture
def old_broker() -> Iterator[SingleTopicBroker]:
    server = SingleTopicBroker()
    try:
        yield server
    finally:
        server.shutdown()


def test_a_producer_falls_back_to_a_stream_per_topic_once(old_broker: SingleTopicBroker) -> None:
    endpoint = f"127.0.0.1:{old_broker.port}"
    config = ClientConfig(brokers=(endpoint,), retries_max=0)  # no retry may hide a failure
    with Producer(config) as producer:
        for round_ in range(3):
            for topic in ("a", "b"):
                result = producer.send(topic, f"{topic}{round_}".encode(), queue_id=0)
                assert result.ok, result
    assert old_broker.refused == 1  # the per-batch descriptor once, then streams per topic
    stored: dict[str, list[bytes]] = {}
    for topic, bodies in old_broker.streams:
        stored.setdefault(topic, []).extend(bodies)
    assert stored == {"a": [b"a0", b"a1", b"a2"], "b": [b"b0", b"b1", b"b2"]}
    assert len(old_broker.streams) == 2  # one per topic, each reused
