"""Hostile client requests get typed errors and never a traceback; the broker keeps serving.

Goal (issue 16): JSON in tickets and action bodies that is too deep, holds a 5000-digit number or
an integer beyond 64 bits, or lacks fields, is a BAD_REQUEST naming the problem (it was a
RecursionError / OverflowError text with the server's Python traceback); a produce stream is cut
at its first batch over putBatchBytesMax and the batches after it are never stored; a schema
that is not the produce schema is refused before any batch; `broker_info` names no filesystem
path. Method: one real broker process, raw Flight calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow import flight

from connector.protocol import PutReply, decode_error_text, produce_descriptor_command
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

BATCH_BYTES_MAX = 1 << 20


@pytest.fixture(scope="module")
def small_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path_factory.mktemp("hostile-clients"),
                            putBatchBytesMax=str(BATCH_BYTES_MAX)).start()
    yield process
    process.stop()


def _error(call: object) -> tuple[str, str]:
    with pytest.raises(flight.FlightError) as caught:
        call()  # type: ignore[operator]
    text = str(caught.value)
    assert "Traceback" not in text and 'File "' not in text, text
    decoded = decode_error_text(text, caught.value.extra_info)
    assert decoded is not None, text
    return decoded.name, decoded.message  # type: ignore[attr-defined]


def test_bad_json_is_a_typed_error(small_broker: BrokerProcess) -> None:
    client = flight.FlightClient(f"grpc://{small_broker.endpoint}")
    try:
        tickets = [b"[" * 100_000, b'{"topic": "t", "queue_id": ' + b"9" * 5000 + b"}",
                   json.dumps({"topic": "t", "queue_id": 0, "queue_offset": 2**70}).encode(),
                   json.dumps({"topic": "t", "queue_id": 0, "queue_offset": 1e308}).encode()]
        for ticket in tickets:
            name, message = _error(lambda t=ticket: client.do_get(flight.Ticket(t)).read_all())
            assert name == "BAD_REQUEST", (name, message)
        for body in (b"{" * 100_000, b'{"topic": ' + b"1" * 5000 + b"}"):
            name, _ = _error(lambda b=body: list(client.do_action(flight.Action("get_topic", b))))
            assert name == "BAD_REQUEST"
        descriptor = flight.FlightDescriptor.for_command(b"[" * 100_000)
        name, _ = _error(lambda: client.do_put(descriptor, pa.schema([("body", pa.binary())])
                                               )[0].close())
        assert name == "BAD_REQUEST"
    finally:
        client.close()
    assert small_broker.process is not None and small_broker.process.poll() is None


def test_a_produce_stream_ends_at_its_first_oversized_batch(small_broker: BrokerProcess) -> None:
    client = flight.FlightClient(f"grpc://{small_broker.endpoint}")
    schema = pa.schema([pa.field("body", pa.binary(), nullable=False)])
    descriptor = flight.FlightDescriptor.for_command(produce_descriptor_command("big"))
    small = pa.record_batch([pa.array([b"s" * 1000] * 4, pa.binary())], schema=schema)
    huge = pa.record_batch([pa.array([b"h" * 1000] * 3000, pa.binary())], schema=schema)
    writer, reader = client.do_put(descriptor, schema)
    replies = []
    errors: list[str] = []
    try:
        writer.write_batch(small)
        replies.append(PutReply.decode(reader.read().to_pybytes()))
        writer.write_batch(huge)
        for _ in range(5):  # never stored: the stream is over at the huge batch
            writer.write_batch(small)
        writer.done_writing()
        while (buffer := reader.read()) is not None:
            replies.append(PutReply.decode(buffer.to_pybytes()))
    except (flight.FlightError, pa.ArrowException, OSError) as err:
        errors.append(str(err))
    try:
        writer.close()
    except (flight.FlightError, pa.ArrowException) as err:
        errors.append(str(err))
    client.close()
    assert any("BATCH_TOO_LARGE" in error for error in errors), errors
    assert not any("Traceback" in error for error in errors), errors
    assert [reply.status for reply in replies] == ["PUT_OK"]
    offsets = small_broker.action("queue_offsets", {"topic": "big"})["queues"]
    assert sum(queue["max_queue_offset"] for queue in offsets) == 4, offsets


def test_broker_info_names_no_path(small_broker: BrokerProcess) -> None:
    info = small_broker.action("broker_info")
    text = json.dumps(info)
    assert "store_dir" not in info and str(small_broker.directory) not in text, text
    assert str(Path("/tmp")) not in text, text
