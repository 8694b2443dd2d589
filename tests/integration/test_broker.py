"""Broker service end to end: real `python -m ha.broker` processes on 127.0.0.1, raw Flight.

Goal: the client protocol does what connector/protocol/wire.py promises — every column round
trips, a ticket's `columns` gets exactly those columns with the full read's values (tag filter
too), per-queue and per-key order holds, long polls wake on arrival, acknowledged messages
survive SIGTERM restarts and SIGKILL crashes (SYNC_FLUSH), malformed requests fail alone, and
concurrent producers/consumers neither lose nor duplicate. Method: start brokers through the
user entry point with small segments, talk to them with pyarrow.flight only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow import flight

from connector import ClientConfig, Consumer
from connector.protocol import (
    CONSUME_SCHEMA,
    PRODUCE_SCHEMA,
    FatalError,
    GetReply,
    GetTicket,
    PutReply,
    consume_schema,
    decode_error_text,
    produce_descriptor_command,
)
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration
PROPS = pa.map_(pa.string(), pa.string())


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    process = BrokerProcess(tmp_path_factory.mktemp("broker")).start()
    yield process
    assert process.stop() == 0


def client_for(broker: BrokerProcess) -> flight.FlightClient:
    return flight.FlightClient(f"grpc://{broker.endpoint}")


def produce(broker: BrokerProcess, topic: str, table: pa.Table) -> list[PutReply]:
    client = client_for(broker)
    writer, reader = client.do_put(
        flight.FlightDescriptor.for_command(produce_descriptor_command(topic)), table.schema)
    replies = []
    for batch in table.to_batches():
        writer.write_batch(batch)
        metadata = reader.read()
        if metadata is None:  # the server failed the stream: close() raises its error
            writer.close()
            raise AssertionError("stream ended without a reply or an error")
        replies.append(PutReply.decode(metadata.to_pybytes()))
    writer.done_writing()
    writer.close()
    client.close()
    return replies


def consume(broker: BrokerProcess, ticket: GetTicket) -> tuple[list[dict], list[GetReply]]:
    client = client_for(broker)
    reader = client.do_get(flight.Ticket(ticket.encode()))
    rows, replies = [], []
    while True:
        try:
            chunk = reader.read_chunk()
        except StopIteration:
            break
        rows.extend(chunk.data.to_pylist())
        replies.append(GetReply.decode(chunk.app_metadata.to_pybytes()))
    client.close()
    return rows, replies


def bodies_table(bodies: list[bytes], **columns: list) -> pa.Table:
    data = {"body": pa.array(bodies, pa.binary())}
    for name, values in columns.items():
        data[name] = pa.array(values, PRODUCE_SCHEMA.field(name).type)
    return pa.table(data)


def test_every_column_round_trips(broker: BrokerProcess) -> None:
    broker.action("create_topic", {"topic": "rt", "read_queue_nums": 2, "write_queue_nums": 2})
    before_ms = int(time.time() * 1000)
    table = pa.table({
        "body": pa.array([b"\x00\xffbinary", b"", b"text"], pa.binary()),
        "key": pa.array(["k1", None, "k3"], pa.string()),
        "tags": pa.array(["TagA", "TagB", None], pa.string()),
        "properties": pa.array([[("a", "1"), ("b", "x y")], None, [("c", "")]], PROPS),
        "queue_id": pa.array([1, 1, 1], pa.int32()),
    })
    (reply,) = produce(broker, "rt", table)
    assert reply.status == "PUT_OK" and reply.queues == [[1, 0, 3]]
    rows, replies = consume(broker, GetTicket("rt", 1, 0))
    assert replies[0].status == "FOUND" and replies[-1].next_queue_offset == 3
    assert [row["body"] for row in rows] == [b"\x00\xffbinary", b"", b"text"]
    assert [row["key"] for row in rows] == ["k1", None, "k3"]
    assert [row["tags"] for row in rows] == ["TagA", "TagB", None]
    assert [row["properties"] for row in rows] == [[("a", "1"), ("b", "x y")], None, [("c", "")]]
    assert [row["queue_offset"] for row in rows] == [0, 1, 2]
    assert all(row["topic"] == "rt" and row["queue_id"] == 1 for row in rows)
    assert all(row["store_timestamp"].timestamp() * 1000 >= before_ms - 1000 for row in rows)
    assert len({row["msg_id"] for row in rows}) == 3
    positions = [row["log_position"] for row in rows]
    assert positions == sorted(positions) and len(set(positions)) == 3
    tagged, _ = consume(broker, GetTicket("rt", 1, 0, tag_filter="TagB || TagC"))
    assert [row["queue_offset"] for row in tagged] == [1]


def consume_table(broker: BrokerProcess, ticket: GetTicket) -> tuple[pa.Table, GetReply]:
    """The whole stream of `ticket` as one table (its declared schema checked against the
    ticket's columns) and the last reply."""
    client = client_for(broker)
    reader = client.do_get(flight.Ticket(ticket.encode()))
    assert reader.schema == consume_schema(ticket.columns)
    batches, reply = [], None
    for chunk in reader:
        assert chunk.data.schema == consume_schema(ticket.columns)
        batches.append(chunk.data)
        reply = GetReply.decode(chunk.app_metadata.to_pybytes())
    client.close()
    assert reply is not None
    return pa.Table.from_batches(batches, consume_schema(ticket.columns)), reply


def test_pull_columns_are_the_full_pull_columns(broker: BrokerProcess) -> None:
    """Same-size bulk records (the 2-D decode path), records with properties, tag filters:
    a pull naming columns gets those columns in schema order, equal to the full pull's."""
    broker.action("create_topic", {"topic": "cols", "read_queue_nums": 1,
                                   "write_queue_nums": 1})
    produce(broker, "cols", bodies_table([b"%06d" % n for n in range(500)]))
    produce(broker, "cols", pa.table({
        "body": pa.array([b"a", b"bb", b"", b"dddd"], pa.binary()),
        "key": pa.array(["k1", None, "k3", None], pa.string()),
        "tags": pa.array(["TagA", "TagB", None, "TagA"], pa.string()),
        "properties": pa.array([[("p", "1")], None, None, [("q", "")]], PROPS),
    }))
    for tag_filter in (None, "TagA"):
        full, full_reply = consume_table(broker, GetTicket("cols", 0, 0, max_messages=10_000,
                                                           tag_filter=tag_filter))
        assert full.num_rows == (504 if tag_filter is None else 2)
        for columns in (("body",), ("msg_id", "queue_offset"), ("tags", "body", "key"),
                        ("properties",), ("store_timestamp", "topic", "born_timestamp"),
                        tuple(reversed(CONSUME_SCHEMA.names))):
            ticket = GetTicket("cols", 0, 0, max_messages=10_000, tag_filter=tag_filter,
                               columns=columns)
            got, reply = consume_table(broker, ticket)
            assert got.column_names == [n for n in CONSUME_SCHEMA.names if n in columns]
            assert got.equals(full.select(got.column_names)), (tag_filter, columns)
            assert reply == full_reply
    consumer = Consumer(ClientConfig(brokers=(broker.endpoint,)))
    pulled = consumer.pull("cols", 0, 498, columns=["body"], tag_filter="TagA || TagB")
    assert pulled.table.column_names == ["body"]
    assert pulled.table.column("body").to_pylist() == [b"a", b"bb", b"dddd"]
    assert pulled.next_queue_offset == 504
    with pytest.raises(FatalError, match="unknown column 'bodies'") as info:
        consumer.pull("cols", 0, 0, columns=["body", "bodies"])
    assert info.value.name == "BAD_REQUEST"
    error = flight_error(lambda: client_for(broker).do_get(flight.Ticket(json.dumps(
        {"topic": "cols", "queue_id": 0, "queue_offset": 0, "columns": ["msgId"]}).encode())
        ).read_all())
    assert error.name == "BAD_REQUEST" and "'msgId'" in error.message  # type: ignore


def test_order_per_queue_and_per_key(broker: BrokerProcess) -> None:
    broker.action("create_topic", {"topic": "ordered", "read_queue_nums": 4,
                                   "write_queue_nums": 4})
    keys = [f"user-{i % 7}" for i in range(300)]
    bodies = [f"{key}:{i}".encode() for i, key in enumerate(keys)]
    for start in range(0, 300, 50):
        replies = produce(broker, "ordered", bodies_table(bodies[start:start + 50],
                                                          key=keys[start:start + 50]))
        assert replies[0].status == "PUT_OK"
    seen: dict[str, list[int]] = {}
    queue_of_key: dict[str, int] = {}
    for queue_id in range(4):
        rows, _ = consume(broker, GetTicket("ordered", queue_id, 0, max_messages=1000))
        assert [row["queue_offset"] for row in rows] == list(range(len(rows)))
        for row in rows:
            key, index = row["body"].decode().split(":")
            assert queue_of_key.setdefault(key, queue_id) == queue_id, "a key moved queues"
            seen.setdefault(key, []).append(int(index))
    assert sum(len(v) for v in seen.values()) == 300
    for indexes in seen.values():
        assert indexes == sorted(indexes)


def test_long_poll_wakes_on_arrival(broker: BrokerProcess) -> None:
    broker.action("create_topic", {"topic": "tail", "read_queue_nums": 1, "write_queue_nums": 1})
    produce(broker, "tail", bodies_table([b"first"]))
    result: dict[str, object] = {}

    def wait_for_second() -> None:
        started = time.monotonic()
        rows, replies = consume(broker, GetTicket("tail", 0, 1, max_wait_ms=10_000))
        result.update(rows=rows, status=replies[-1].status, waited=time.monotonic() - started)

    waiter = threading.Thread(target=wait_for_second)
    waiter.start()
    time.sleep(0.3)  # let the read park in its long poll
    produce(broker, "tail", bodies_table([b"second"]))
    acked = time.monotonic()
    waiter.join(15)
    assert result["status"] == "FOUND"
    assert [row["body"] for row in result["rows"]] == [b"second"]  # type: ignore[index]
    assert time.monotonic() - acked < 2.0, "the long poll did not wake on arrival"
    assert result["waited"] < 9.0  # type: ignore[operator]
    empty_rows, replies = consume(broker, GetTicket("tail", 0, 2, max_wait_ms=200))
    assert empty_rows == [] and replies[-1].status == "OFFSET_OVERFLOW_ONE"


def flight_error(call) -> object:  # type: ignore[no-untyped-def]
    with pytest.raises(flight.FlightError) as info:
        call()
    error = decode_error_text(str(info.value), info.value.extra_info)
    assert error is not None, str(info.value)
    return error


def test_malformed_requests_fail_alone(broker: BrokerProcess) -> None:
    client = client_for(broker)
    errors = []
    for _ in range(20):
        errors.append(flight_error(lambda: client.do_get(flight.Ticket(b"\x00garbage")).read_all()))
        errors.append(flight_error(lambda: client.do_get(flight.Ticket(
            json.dumps({"topic": "rt", "queue_id": -1, "queue_offset": 0}).encode())).read_all()))
        errors.append(flight_error(lambda: list(client.do_action(flight.Action("nope", b"{}")))))
        errors.append(flight_error(lambda: list(client.do_action(
            flight.Action("create_topic", b"[not json")))))
        errors.append(flight_error(lambda: list(client.do_action(flight.Action(
            "create_topic", json.dumps({"topic": "bad topic!"}).encode())))))
    names = {error.name for error in errors}  # type: ignore[attr-defined]
    assert names == {"BAD_REQUEST", "UNKNOWN_ACTION"}
    wrong = pa.table({"body": pa.array([1, 2], pa.int64())})
    error = flight_error(lambda: produce(broker, "rt", wrong))
    assert error.name == "BAD_SCHEMA" and "body" in error.message  # type: ignore[attr-defined]
    extra = pa.table({"body": pa.array([b"x"]), "colour": pa.array(["red"])})
    assert flight_error(lambda: produce(broker, "rt", extra)).name == "BAD_SCHEMA"  # type: ignore
    (oversize,) = produce(broker, "rt", bodies_table([b"x" * ((1 << 20) + 1)]))
    assert oversize.status == "MESSAGE_ILLEGAL" and "maxMessageSize" in oversize.error
    assert flight_error(lambda: produce(broker, "bad topic", bodies_table([b"x"]))).name == \
        "BAD_REQUEST"  # type: ignore[attr-defined]
    # Normal traffic still works for everyone.
    (ok,) = produce(broker, "rt", bodies_table([b"after the storm"], queue_id=[0]))
    assert ok.status == "PUT_OK"
    rows, _ = consume(broker, GetTicket("rt", 0, ok.queues[0][1]))
    assert rows[0]["body"] == b"after the storm"
    assert broker.process is not None and broker.process.poll() is None
    client.close()


def test_concurrent_producers_and_consumers(broker: BrokerProcess) -> None:
    broker.action("create_topic", {"topic": "busy", "read_queue_nums": 2, "write_queue_nums": 2})
    producers, batches, rows_per_batch = 4, 20, 25
    total = producers * batches * rows_per_batch
    received: dict[int, list[bytes]] = {0: [], 1: []}
    stop = threading.Event()

    def produce_all(worker: int) -> None:
        for batch in range(batches):
            bodies = [f"{worker}-{batch}-{row}".encode() for row in range(rows_per_batch)]
            (reply,) = produce(broker, "busy", bodies_table(bodies))
            assert reply.status == "PUT_OK"

    def tail(queue_id: int) -> None:
        offset = 0
        deadline = time.monotonic() + 60
        while not stop.is_set() and time.monotonic() < deadline:
            rows, replies = consume(broker, GetTicket("busy", queue_id, offset, max_wait_ms=200))
            received[queue_id].extend(row["body"] for row in rows)
            offset = replies[-1].next_queue_offset
            if sum(len(v) for v in received.values()) >= total:
                return

    threads = [threading.Thread(target=tail, args=(q,)) for q in (0, 1)]
    threads += [threading.Thread(target=produce_all, args=(w,)) for w in range(producers)]
    for thread in threads:
        thread.start()
    for thread in threads[2:]:
        thread.join(60)
    deadline = time.monotonic() + 30
    while sum(len(v) for v in received.values()) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for thread in threads[:2]:
        thread.join(10)
    everything = received[0] + received[1]
    assert len(everything) == total and len(set(everything)) == total


@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_acknowledged_messages_survive_restart(tmp_path: Path, how: str) -> None:
    broker = BrokerProcess(tmp_path, flushDiskType="SYNC_FLUSH").start()
    broker.action("create_topic", {"topic": "durable", "read_queue_nums": 3,
                                   "write_queue_nums": 3})
    acked: dict[int, list[bytes]] = {0: [], 1: [], 2: []}
    for batch in range(30):
        bodies = [f"m-{batch}-{row}".encode() * 20 for row in range(40)]
        (reply,) = produce(broker, "durable", bodies_table(bodies, queue_id=[batch % 3] * 40))
        assert reply.status == "PUT_OK"
        acked[batch % 3].extend(bodies)
    broker.action("commit_offset", {"group": "g1", "topic": "durable", "queue_id": 2,
                                    "queue_offset": 17})
    # a topic change is a CommitLog record: killed before topics.json's next snapshot, the
    # restart replays it (and starts serving only after)
    broker.action("create_topic", {"topic": "late", "read_queue_nums": 5, "write_queue_nums": 5})
    if how == "sigkill":
        broker.kill()
    else:
        assert broker.stop() == 0
    broker.start()
    for queue_id, bodies in acked.items():
        rows, _ = consume(broker, GetTicket("durable", queue_id, 0, max_messages=10_000,
                                            max_bytes=64 << 20))
        assert [row["body"] for row in rows] == bodies
        assert [row["queue_offset"] for row in rows] == list(range(len(bodies)))
    assert broker.action("query_offsets", {"group": "g1", "topic": "durable"})["offsets"] == \
        {"2": 17}
    assert broker.action("get_topic", {"topic": "late"})["topic"]["write_queue_nums"] == 5
    assert broker.action("broker_stats", {})["topic_records"]["applied_queue_offset"] == 2
    (reply,) = produce(broker, "durable", bodies_table([b"after"], queue_id=[0]))
    assert reply.queues == [[0, len(acked[0]), 1]]
    assert broker.stop() == 0


def run_broker_cli(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ha.broker", *args], capture_output=True,
                          text=True, timeout=60, cwd=Path(__file__).resolve().parents[2],
                          check=False)


def test_bad_configuration_names_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "bad.conf"
    conf.write_text(f"storePathRootDir={tmp_path}/s\nlistenPrt=1234\n")
    result = run_broker_cli(["--conf", str(conf)])
    assert result.returncode == 2 and "listenPrt" in result.stderr
    conf.write_text(f"storePathRootDir={tmp_path}/s\nflushDiskType=SOMETIMES\n")
    result = run_broker_cli(["--conf", str(conf)])
    assert result.returncode == 2 and "flushDiskType" in result.stderr


def test_second_broker_on_same_store_is_refused(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path).start()
    try:
        other = BrokerProcess(tmp_path / "other", storePathRootDir=str(broker.store_dir))
        result = run_broker_cli(["--conf", str(other.conf)])
        assert result.returncode == 2 and "lock" in result.stderr
    finally:
        assert broker.stop() == 0
