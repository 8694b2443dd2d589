"""Broker benchmark: acked produce throughput, consume throughput, single-message latency.

    python3 build.py bench broker [--json] [--seconds S]

Method: one real broker process (`python -m ha.broker`, ASYNC_FLUSH, 1 GiB segments) on
127.0.0.1; this process is the client, over raw pyarrow.flight with one DoPut stream kept open
per case (as a producer would). Produce cases wait for each batch's reply before the next
(acknowledged throughput). Consume reads back the 100 B batch-1024 topic from queue_offset 0
with DoGet tickets of up to 65536 messages, every column, then with `columns: ["body"]` (what a
Spark query projected onto `queueId, body` pulls). Latency: single 100 B messages on an open stream.

send_async (issue 23): the client library's Producer, one 100 B message per `send_async` call
for S seconds then `flush()` (every future checked PUT_OK; the rate counts until the last
acknowledgement), keyless, to a topic of 4 queues, default ProducerConfig (linger_ms 5,
batch_messages 1024), against the 1-replica broker above and a 3-replica set (`rocketha-cluster up
--replicas 3`, SYNC_MASTER, inSyncReplicas=2, ASYNC_FLUSH, as `bench ha`); then the p50/p99 of
`Producer.send` of single 100 B messages (what `send()` costs now that it is
`send_async(...).result()`). Keys `send_async_1msg_msgs_per_s_r1|r3`, `send_single_p50_ms_r1|r3`.
The JetStream side by side (`send_async_vs_jetstream_ratio`) belongs to `bench peers`, which runs
nats-server.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from pyarrow import flight

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig, Producer
from connector.protocol import GetReply, GetTicket, PutReply, produce_descriptor_command
from tests.bench.bench_ha import cluster, up, wait_sync_state_set
from tests.integration.broker_process import BrokerProcess

SCHEMA = pa.schema([pa.field("body", pa.binary(), nullable=False)])
MESSAGES_MAX = 20_000_000
LATENCY_SAMPLES_MAX = 20_000
ASYNC_QUEUES = 4  # the send_async topic's queues: keyless batches spread over them


def produce_case(client: flight.FlightClient, topic: str, body_bytes: int, batch: int,
                 seconds: float) -> float:
    writer, reader = client.do_put(
        flight.FlightDescriptor.for_command(produce_descriptor_command(topic)), SCHEMA)
    record_batch = pa.record_batch([pa.array([b"x" * body_bytes] * batch, pa.binary())],
                                   schema=SCHEMA)
    sent = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and sent < MESSAGES_MAX:
        writer.write_batch(record_batch)
        reply = PutReply.decode(reader.read().to_pybytes())
        assert reply.status == "PUT_OK", reply
        sent += batch
    elapsed = time.perf_counter() - start
    writer.done_writing()
    writer.close()
    return sent / elapsed


def consume_case(client: flight.FlightClient, topic: str, queue_count: int,
                 seconds: float, columns: tuple[str, ...] | None = None) -> float:
    received = 0
    start = time.perf_counter()
    for queue_id in range(queue_count):
        queue_offset = 0
        while time.perf_counter() - start < seconds:
            ticket = GetTicket(topic, queue_id, queue_offset, max_messages=65536,
                               max_bytes=64 << 20, columns=columns)
            reader = client.do_get(flight.Ticket(ticket.encode()))
            reply = None
            for chunk in reader:
                received += chunk.data.num_rows
                reply = GetReply.decode(chunk.app_metadata.to_pybytes())
            assert reply is not None
            if reply.next_queue_offset >= reply.max_queue_offset:
                break
            queue_offset = reply.next_queue_offset
    return received / (time.perf_counter() - start)


def latency_case(client: flight.FlightClient, seconds: float) -> tuple[float, float]:
    writer, reader = client.do_put(
        flight.FlightDescriptor.for_command(produce_descriptor_command("latency")), SCHEMA)
    for _ in range(200):  # warm the stream
        writer.write_batch(pa.record_batch([pa.array([b"w"], pa.binary())], schema=SCHEMA))
        reader.read()
    one = pa.record_batch([pa.array([b"x" * 100], pa.binary())], schema=SCHEMA)
    samples = []
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and len(samples) < LATENCY_SAMPLES_MAX:
        sent = time.perf_counter()
        writer.write_batch(one)
        reader.read()
        samples.append((time.perf_counter() - sent) * 1000)
    writer.done_writing()
    writer.close()
    samples = samples[len(samples) // 10:]  # drop the warm-up tenth
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


BARE_SERVER = """
import sys, pyarrow as pa, pyarrow.flight as fl
class Echo(fl.FlightServerBase):
    def do_put(self, context, descriptor, reader, writer):
        for chunk in reader:
            writer.write(pa.py_buffer(b'{"status": "PUT_OK"}'))
server = Echo("grpc://127.0.0.1:0")
print(server.port, flush=True)
server.serve()
"""


def bare_flight_latency(seconds: float) -> tuple[float, float]:
    """The floor: a Flight server that answers each one-row DoPut batch and does nothing."""
    process = subprocess.Popen([sys.executable, "-c", BARE_SERVER], stdout=subprocess.PIPE,
                               text=True)
    try:
        assert process.stdout is not None
        port = int(process.stdout.readline())
        client = flight.FlightClient(f"grpc://127.0.0.1:{port}")
        figures = latency_case(client, seconds)
        client.close()
        return figures
    finally:
        process.kill()
        process.wait(10)


def send_async_case(endpoint: str, topic: str, seconds: float) -> float:
    """Acknowledged msgs/s with one 100 B message per Producer.send_async call."""
    body = b"x" * 100
    Admin(ClientConfig(brokers=(endpoint,))).create_topic(topic, queues=ASYNC_QUEUES)
    with Producer(ClientConfig(brokers=(endpoint,))) as producer:
        producer.send(topic, b"warm")
        futures = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds and len(futures) < MESSAGES_MAX:
            for _ in range(1000):
                futures.append(producer.send_async(topic, body))
        producer.flush()
        elapsed = time.perf_counter() - start
        assert all(future.result().ok for future in futures)
        return len(futures) / elapsed


def send_latency_case(endpoint: str, topic: str, seconds: float) -> tuple[float, float]:
    """p50, p99 in ms of Producer.send of one 100 B message (send_async(...).result())."""
    with Producer(ClientConfig(brokers=(endpoint,))) as producer:
        for _ in range(200):
            producer.send(topic, b"w")
        samples = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds and len(samples) < LATENCY_SAMPLES_MAX:
            sent = time.perf_counter()
            assert producer.send(topic, b"x" * 100).ok
            samples.append((time.perf_counter() - sent) * 1000)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.99)]


def send_async_figures(endpoint: str, replicas: int, seconds: float,
                       figures: dict[str, float]) -> None:
    rate = send_async_case(endpoint, f"async_r{replicas}", seconds)
    figures[f"send_async_1msg_msgs_per_s_r{replicas}"] = rate
    p50, p99 = send_latency_case(endpoint, f"sync_r{replicas}", seconds)
    figures[f"send_single_p50_ms_r{replicas}"] = p50
    figures[f"send_single_p99_ms_r{replicas}"] = p99
    print(f"send_async, 1 msg per call, {replicas} replica(s): {rate:12,.0f} msgs/s; "
          f"send() p50 {p50:.3f} ms, p99 {p99:.3f} ms")


def send_async_r3(root: Path, seconds: float, figures: dict[str, float]) -> None:
    directory = root / "async-r3"
    try:
        brokers = up(directory, 3, {"brokerRole": "SYNC_MASTER", "inSyncReplicas": "2",
                                    "flushDiskType": "ASYNC_FLUSH"})
        endpoint = f"127.0.0.1:{brokers[0]['port']}"
        wait_sync_state_set(endpoint, 3)
        send_async_figures(endpoint, 3, seconds, figures)
    finally:
        if (directory / "cluster.json").exists():
            cluster(directory, "down")


def raw_figures(endpoint: str, seconds: float, figures: dict[str, float]) -> None:
    """The raw-Flight cases: produce, consume, single-message latency, bare Flight."""
    client = flight.FlightClient(f"grpc://{endpoint}")
    for body_bytes, label in ((100, "100B"), (1024, "1KiB")):
        for batch in (1, 32, 1024):
            topic = f"produce_{label}_{batch}"
            rate = produce_case(client, topic, body_bytes, batch, seconds)
            figures[f"produce_{label}_batch{batch}_msgs_per_s"] = rate
            print(f"produce {label:5s} batch {batch:5d}: {rate:12,.0f} msgs/s "
                  f"{rate * body_bytes / 1e6:8.1f} MB/s")
    figures["consume_msgs_per_s"] = consume_case(client, "produce_100B_1024", 1,
                                                  seconds)
    print(f"consume 100B: {figures['consume_msgs_per_s']:12,.0f} msgs/s")
    figures["consume_body_msgs_per_s"] = consume_case(client, "produce_100B_1024", 1,
                                                       seconds, ("body",))
    print(f"consume 100B, columns [body]: {figures['consume_body_msgs_per_s']:12,.0f} "
          "msgs/s")
    p50, p99 = latency_case(client, seconds)
    figures["produce_single_p50_ms"], figures["produce_single_p99_ms"] = p50, p99
    print(f"single-message produce latency: p50 {p50:.3f} ms, p99 {p99:.3f} ms")
    bare_p50, bare_p99 = bare_flight_latency(seconds)
    figures["bare_flight_single_p50_ms"] = bare_p50
    figures["produce_single_p50_vs_bare_flight"] = p50 / bare_p50
    print(f"bare Flight one-row DoPut (same run): p50 {bare_p50:.3f} ms, p99 {bare_p99:.3f}"
          f" ms; broker/bare = {p50 / bare_p50:.2f}")
    client.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--only-async", action="store_true",
                        help="only the send_async figures (issue 23)")
    args = parser.parse_args(argv)
    root = Path.cwd() / ".bench-tmp"
    root.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root))
    broker = BrokerProcess(work, mappedFileSizeCommitLog=str(1 << 30),
                           maxMessageSize=str(4 << 20), defaultTopicQueueNums="1").start()
    figures: dict[str, float] = {}
    try:
        if not args.only_async:
            raw_figures(broker.endpoint, args.seconds, figures)
        send_async_figures(broker.endpoint, 1, args.seconds, figures)
    finally:
        broker.stop()
    try:
        send_async_r3(work, args.seconds, figures)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({key: round(value, 4) for key, value in figures.items()},
                         sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
