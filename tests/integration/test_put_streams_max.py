"""putStreamsMax bounds the produce streams open at once (each holds a broker thread).

Method: one real broker with putStreamsMax=2, raw Flight DoPut streams: two open streams are
served; a third is refused BUSY before any batch, with one line naming the key, and stores
nothing; once one of the two ends, a new stream is served again; the limit is a runtime key; a
Producer refused this way raises that line once its retries are spent. A Producer's streams
name their topic per batch (`{"topics": "per_batch"}`), so one writing many queues or many
topics holds one stream; a per-batch stream's batch that names no valid topic ends it with one
line and stores nothing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
import pytest
from pyarrow import flight

from connector import Admin, ClientConfig, Producer
from connector.protocol import (
    PutReply,
    RocketHAError,
    decode_error_text,
    produce_descriptor_command,
)
from tests.integration.broker_process import BrokerProcess
from tests.integration.failover_cluster import read_topic

pytestmark = pytest.mark.integration

SCHEMA = pa.schema([pa.field("body", pa.binary(), nullable=False)])
CLOSE_TIMEOUT_S = 30.0
ONE = pa.record_batch([pa.array([b"x"], pa.binary())], schema=SCHEMA)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("put-streams"), putStreamsMax="2").start()
    yield process
    process.stop()


class Stream:
    """One open DoPut stream that has had one batch acknowledged."""

    def __init__(self, client: flight.FlightClient, topic: str) -> None:
        self.writer, self.reader = client.do_put(
            flight.FlightDescriptor.for_command(produce_descriptor_command(topic)), SCHEMA)
        self.writer.write_batch(ONE)
        buffer = self.reader.read()
        if buffer is None:  # the broker ended the stream: its error comes with the close
            self.writer.close()
            raise AssertionError("a stream ended without an error")
        assert PutReply.decode(buffer.to_pybytes()).status == "PUT_OK"

    def close(self) -> None:
        self.writer.done_writing()
        self.writer.close()


def _refused(client: flight.FlightClient, topic: str) -> tuple[str, str]:
    with pytest.raises(flight.FlightError) as caught:
        Stream(client, topic)
    decoded = decode_error_text(str(caught.value), caught.value.extra_info)
    assert decoded is not None, str(caught.value)
    return decoded.name, decoded.message  # type: ignore[attr-defined]


def _wait_streams(broker: BrokerProcess, count: int) -> None:
    """The broker counts a stream closed once its handler returns: wait for that."""
    deadline = time.monotonic() + CLOSE_TIMEOUT_S
    while broker.action("broker_stats")["open_streams"] > count:
        assert time.monotonic() < deadline, "a closed stream is still counted"
        time.sleep(0.02)


def _stored(broker: BrokerProcess, topic: str) -> int:
    queues = broker.action("queue_offsets", {"topic": topic})["queues"]
    return sum(queue["max_queue_offset"] for queue in queues)


def test_a_stream_past_the_limit_is_refused_busy_and_stores_nothing(
        broker: BrokerProcess) -> None:
    client = flight.FlightClient(f"grpc://{broker.endpoint}")
    try:
        first, second = Stream(client, "s"), Stream(client, "s")
        name, message = _refused(client, "s")
        assert name == "BUSY", (name, message)
        assert "putStreamsMax" in message and "\n" not in message, message
        assert _stored(broker, "s") == 2  # the refused stream's batch was never read
        first.close()
        # the broker counts the stream closed once its handler returns: wait for that
        _wait_streams(broker, 1)
        third = Stream(client, "s")
        assert _stored(broker, "s") == 3
        second.close()
        third.close()
    finally:
        client.close()


def test_the_limit_is_a_runtime_key(broker: BrokerProcess) -> None:
    client = flight.FlightClient(f"grpc://{broker.endpoint}")
    try:
        _wait_streams(broker, 0)
        broker.action("set_config", {"key": "putStreamsMax", "value": "1"})
        first = Stream(client, "r")
        assert _refused(client, "r")[0] == "BUSY"
        broker.action("set_config", {"key": "putStreamsMax", "value": "3"})
        second = Stream(client, "r")
        first.close()
        second.close()
    finally:
        client.close()


def test_a_producer_past_the_limit_gets_one_line_naming_the_key(broker: BrokerProcess) -> None:
    client = flight.FlightClient(f"grpc://{broker.endpoint}")
    try:
        _wait_streams(broker, 0)
        broker.action("set_config", {"key": "putStreamsMax", "value": "1"})
        held = Stream(client, "p")
        config = ClientConfig(brokers=(broker.endpoint,), retries_max=2, send_deadline_ms=3000)
        with Producer(config) as producer, pytest.raises(RocketHAError) as caught:
            producer.send("p", b"refused")
        assert "putStreamsMax" in str(caught.value) and "\n" not in str(caught.value)
        assert _stored(broker, "p") == 1  # only the held stream's batch
        held.close()
    finally:
        broker.action("set_config", {"key": "putStreamsMax", "value": "2"})
        client.close()


def test_a_producer_writing_many_queues_shares_its_streams(broker: BrokerProcess) -> None:
    """A Producer's lanes (one per queue) share its DoPut streams: one sending to 40 queues
    of a topic, one send at a time, holds one stream, well under putStreamsMax (2). With a
    stream per lane its third queue was refused BUSY."""
    _wait_streams(broker, 0)
    queues = 40
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic("many", queues=queues)
    with Producer(ClientConfig(brokers=(broker.endpoint,), retries_max=0)) as producer:
        results = [producer.send("many", b"m", queue_id=queue_id) for queue_id in range(queues)]
        assert all(result.ok for result in results), [r for r in results if not r.ok][:1]
        assert sorted(result.queue_id for result in results) == list(range(queues))
        assert broker.action("broker_stats")["open_streams"] == 1
    _wait_streams(broker, 0)  # closed with the producer
    assert _stored(broker, "many") == queues


def test_a_producer_writing_many_topics_holds_one_stream(broker: BrokerProcess) -> None:
    """A Producer's streams name their topic per batch: one sending to 30 topics, one send
    at a time, holds one stream (with a stream per topic its third topic was refused BUSY),
    and each message lands in the topic it was sent to."""
    _wait_streams(broker, 0)
    topics = [f"each-{index}" for index in range(30)]
    with Producer(ClientConfig(brokers=(broker.endpoint,), retries_max=0)) as producer:
        for round_ in range(2):
            for topic in topics:
                assert producer.send(topic, f"{topic}/{round_}".encode()).ok
        assert broker.action("broker_stats")["open_streams"] == 1
    _wait_streams(broker, 0)
    for topic in topics:
        assert sorted(read_topic(broker.endpoint, topic).values()) == [
            f"{topic}/0".encode(), f"{topic}/1".encode()]


def _per_batch_stream(client: flight.FlightClient) -> tuple[flight.FlightStreamWriter,
                                                            flight.FlightMetadataReader]:
    writer, reader = client.do_put(
        flight.FlightDescriptor.for_command(produce_descriptor_command(None)), SCHEMA)
    return writer, reader


def test_a_per_batch_stream_writes_each_batch_to_the_topic_it_names(
        broker: BrokerProcess) -> None:
    client = flight.FlightClient(f"grpc://{broker.endpoint}")
    try:
        _wait_streams(broker, 0)
        writer, reader = _per_batch_stream(client)
        for topic in ("pb-a", "pb-b", "pb-a"):
            writer.write_with_metadata(ONE, pa.py_buffer(topic.encode()))
            buffer = reader.read()
            assert buffer is not None
            assert PutReply.decode(buffer.to_pybytes()).status == "PUT_OK"
        writer.done_writing()
        writer.close()
        assert (_stored(broker, "pb-a"), _stored(broker, "pb-b")) == (2, 1)
    finally:
        client.close()


@pytest.mark.parametrize(("metadata", "expected"), [
    (None, "names no topic"),
    (b"\xff\xfe", "not UTF-8"),
    (b"bad topic!", "topic"),
])
def test_a_per_batch_stream_batch_naming_no_valid_topic_ends_it_with_one_line(
        broker: BrokerProcess, metadata: bytes | None, expected: str) -> None:
    client = flight.FlightClient(f"grpc://{broker.endpoint}")
    try:
        _wait_streams(broker, 0)
        writer, reader = _per_batch_stream(client)
        if metadata is None:
            writer.write_batch(ONE)
        else:
            writer.write_with_metadata(ONE, pa.py_buffer(metadata))
        assert reader.read() is None
        with pytest.raises(flight.FlightError) as caught:
            writer.close()
        decoded = decode_error_text(str(caught.value), caught.value.extra_info)
        assert decoded is not None, str(caught.value)
        assert decoded.name == "BAD_REQUEST", decoded  # type: ignore[attr-defined]
        assert expected in str(decoded) and "\n" not in str(decoded), str(decoded)
        assert not any(topic["name"] == "bad topic!" for topic in
                       Admin(ClientConfig(brokers=(broker.endpoint,))).list_topics())
    finally:
        client.close()
