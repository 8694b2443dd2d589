"""The floor under one acknowledged put at 3 replicas: the same message flow in bare Python.

    python3 build.py bench latency_floor [--json] [--rounds R] [--sends N] [--no-peer]

Why: issues 22/23 want our single-message put at 3 replicas (client -> master -> 2 slaves,
acked once the master and the first slave hold it) at or below NATS JetStream R3's p50. Before
more work on the broker, this asks whether a Python implementation can get there at all on this
machine, and how much of our time is gRPC/Arrow Flight on the client hop rather than the cost
every set of Python processes pays to pass a message around. It builds that floor: the same
hops and threads as our broker, with no broker logic and no storage.

Method: every server below is an OS process of its own (this file, run with `--role`), on
127.0.0.1, TCP_NODELAY everywhere, killed at the end (and exiting by itself when its stdin, a
pipe from this process, closes). The client is this process; one message (100 B) in flight.
  raw_echo               client <-> one server: a thread per connection reads a frame and
                         sends it back (the single-hop Python floor).
  raw_replicated_cond    client -> master -> 2 slaves over persistent TCP links; the master
                         sends the frame to both slaves, each slave acks it, the master answers
                         the client on the first ack. Threads as in our broker: one per client
                         connection, one reader per slave link; the reader judges the ack
                         (the highest acked sequence, under a threading.Condition) and notifies;
                         the client's thread, waiting on that Condition, writes the reply.
  raw_replicated_direct  the same, but the slave-link reader writes the reply to the client
                         itself (the design considered in issue 22: no wake-up of a second
                         thread between the ack and the reply).
  flight_echo            the client hop as ours: a pyarrow.flight DoPut stream, a 1-row batch
                         (schema: body binary) written with write_batch, the server's do_put
                         takes the body out and answers through the put stream's metadata
                         writer, the client reads that with the metadata reader's read(), as
                         connector/client/put_channel.py and ha/broker/produce.py's do_put do.
  flight_replicated      flight_echo's client hop on raw_replicated_cond's master.
  flight_replicated_direct  the same with the reply written on the put stream's metadata
                         writer by the slave-link reader (issue 22's design on our transport;
                         tests/bench/flight_reply_thread.py models it without slaves).
  rocketha               our set of 3 (`rocketha-cluster up`, ASYNC_FLUSH, inSyncReplicas=2)
                         and Producer.send, exactly as tests/bench/bench_latency.py.
  jetstream              NATS JetStream R3 with nats-py's js.publish, as bench_latency.py.
Frames on the raw links (module `encode_frame`/`read_frame`): u32 body size, u64 sequence,
then the body, big-endian; an ack or a reply is a frame with an empty body. A frame is one
sendall and, through a buffered reader, usually one recv. The floor's client reuses one
message and one Arrow batch; Producer.send builds them per call, which is client-library
cost and lands in `rocketha` minus `flight_replicated` with the broker's logic and storage.

All servers stay up for the whole run; each round runs every case once, in turn, N sends each
(after WARM_UP_SENDS per case before the first round), so a burst of load from the other jobs
on this shared machine moves a round, not one case. Figures are the medians over rounds of
each round's p50 and p99; the load average is printed with every round. With --json the last
line holds `<case>_p50_ms`, `<case>_p99_ms`, `floor_vs_jetstream_p50_ratio`
(raw_replicated_cond / jetstream), `flight_floor_vs_jetstream_p50_ratio` (flight_replicated /
jetstream), `rocketha_vs_floor_p50_ratio` (rocketha / raw_replicated_cond) and
`rocketha_vs_flight_floor_p50_ratio` (rocketha / flight_replicated).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import itertools
import json
import os
import select
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
from pyarrow import flight

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench import bench_peers as peers
from tests.integration.broker_process import free_port

ROOT = Path(__file__).resolve().parents[2]

BODY_BYTES = 100
WARM_UP_SENDS = 200
FRAME_HEADER = struct.Struct(">IQ")  # body_size_bytes, sequence
REPLY = struct.Struct(">Q")  # Flight reply metadata: the stream's batch count so far
FRAME_BODY_BYTES_MAX = 1 << 20
READ_BUFFER_BYTES = 64 << 10
ROLE_READY_TIMEOUT_S = 30.0
ROLE_STOP_TIMEOUT_S = 15.0
FLOOR_CASES = ("raw_echo", "raw_replicated_cond", "raw_replicated_direct", "flight_echo",
               "flight_replicated", "flight_replicated_direct")


# -- frames -------------------------------------------------------------------------------------
def encode_frame(sequence: int, body: bytes) -> bytes:
    return FRAME_HEADER.pack(len(body), sequence) + body


def read_frame(stream: BinaryIO) -> tuple[int, bytes] | None:
    """The next (sequence, body) from a buffered socket reader; None at end of stream."""
    header = stream.read(FRAME_HEADER.size)
    if len(header) < FRAME_HEADER.size:
        return None
    body_size_bytes, sequence = FRAME_HEADER.unpack(header)
    assert body_size_bytes <= FRAME_BODY_BYTES_MAX, body_size_bytes  # our own peers only
    body = stream.read(body_size_bytes) if body_size_bytes else b""
    if len(body) < body_size_bytes:
        return None
    return sequence, body


def _no_delay(sock: socket.socket) -> socket.socket:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _reader(sock: socket.socket) -> BinaryIO:
    return sock.makefile("rb", buffering=READ_BUFFER_BYTES)


# -- server roles (each in its own process) -------------------------------------------------------
def _serve_connections(port: int, handle: Callable[[socket.socket], None]) -> None:
    """Accept on 127.0.0.1:port, one thread per connection running `handle`."""
    server = socket.create_server(("127.0.0.1", port))
    print("ready", flush=True)
    while True:  # the role's accept loop: the process ends when the parent kills it
        conn, _address = server.accept()
        threading.Thread(target=handle, args=(_no_delay(conn),), daemon=True).start()


def _echo_connection(conn: socket.socket) -> None:
    stream = _reader(conn)
    while (frame := read_frame(stream)) is not None:
        conn.sendall(encode_frame(*frame))


def _slave_connection(conn: socket.socket) -> None:
    stream = _reader(conn)
    while (frame := read_frame(stream)) is not None:
        conn.sendall(encode_frame(frame[0], b""))


class _Replication:
    """The master's side of its slave links: `ship` sends a frame to every slave; one reader
    thread per link takes the acks. The first ack of a sequence settles it (the highest
    settled sequence, under a Condition, notified); the later slave's ack is ignored. A
    sequence registered in `direct_replies` is answered (its reply function called) by the
    reader that settles it."""

    def __init__(self, slave_ports: list[int]) -> None:
        self.links = [_no_delay(socket.create_connection(("127.0.0.1", port)))
                      for port in slave_ports]
        self.link_locks = [threading.Lock() for _ in self.links]
        self.sequences = itertools.count(1)
        self.settled = threading.Condition()
        self.settled_sequence = 0
        self.direct_replies: dict[int, Callable[[], None]] = {}
        for link in self.links:
            threading.Thread(target=self._read_acks, args=(link,), daemon=True).start()

    def ship(self, sequence: int, body: bytes) -> None:
        frame = encode_frame(sequence, body)
        for link, lock in zip(self.links, self.link_locks, strict=True):
            with lock:
                link.sendall(frame)

    def wait_settled(self, sequence: int) -> None:
        with self.settled:
            while self.settled_sequence < sequence:
                self.settled.wait()

    def _read_acks(self, link: socket.socket) -> None:
        stream = _reader(link)
        while (frame := read_frame(stream)) is not None:
            sequence = frame[0]
            with self.settled:
                if sequence <= self.settled_sequence:
                    continue  # the second slave's ack
                self.settled_sequence = sequence
                self.settled.notify_all()
            reply = self.direct_replies.pop(sequence, None)
            if reply is not None:
                reply()


def _reply_raw(conn: socket.socket, send_lock: threading.Lock, client_sequence: int) -> None:
    with send_lock:
        conn.sendall(encode_frame(client_sequence, b""))


def _master_connection(replication: _Replication, direct: bool, conn: socket.socket) -> None:
    """One client connection on the raw master: ship each request, answer on the first ack
    (this thread after a wake-up, or the slave-link reader itself when `direct`)."""
    stream = _reader(conn)
    send_lock = threading.Lock()
    while (frame := read_frame(stream)) is not None:
        client_sequence, body = frame
        sequence = next(replication.sequences)
        if direct:
            replication.direct_replies[sequence] = functools.partial(
                _reply_raw, conn, send_lock, client_sequence)
            replication.ship(sequence, body)
            continue
        replication.ship(sequence, body)
        replication.wait_settled(sequence)
        _reply_raw(conn, send_lock, client_sequence)


def _reply_flight(writer: flight.FlightMetadataWriter, count: int,
                  written: threading.Lock) -> None:
    writer.write(pa.py_buffer(REPLY.pack(count)))
    written.release()


class _FlightMaster(flight.FlightServerBase):  # type: ignore[misc]
    """DoPut of 1-row batches; each body shipped and settled (when there are slaves) before
    the reply goes out on the stream's metadata writer: from the do_put thread, or (`direct`)
    from the slave-link reader that settles it while do_put already waits for the next batch
    (gRPC allows one read and one write at a time on a stream, from different threads)."""

    def __init__(self, port: int, replication: _Replication | None, direct: bool) -> None:
        super().__init__(f"grpc://127.0.0.1:{port}")
        self.replication = replication
        self.direct = direct

    def do_put(self, context: Any, descriptor: flight.FlightDescriptor,
               reader: flight.MetadataRecordBatchReader,
               writer: flight.FlightMetadataWriter) -> None:
        count = 0
        written = threading.Lock()  # held from a direct reply's registration to its write
        for chunk in reader:
            batch = chunk.data
            if batch is None:
                continue
            body = batch.column(0)[0].as_py()
            count += 1
            if self.replication is None:
                writer.write(pa.py_buffer(REPLY.pack(count)))
                continue
            sequence = next(self.replication.sequences)
            if self.direct:
                written.acquire()  # the previous reply is out (always, one batch in flight)
                self.replication.direct_replies[sequence] = functools.partial(
                    _reply_flight, writer, count, written)
                self.replication.ship(sequence, body)
                continue
            self.replication.ship(sequence, body)
            self.replication.wait_settled(sequence)
            writer.write(pa.py_buffer(REPLY.pack(count)))
        with written:  # the writer must outlive the last direct reply
            pass


def _exit_with_parent() -> None:
    sys.stdin.buffer.read()  # the parent's pipe: EOF when it exits, however it exits
    os._exit(0)


def serve_role(role: str, port: int, slave_ports: list[int]) -> int:
    threading.Thread(target=_exit_with_parent, name="parent-watch", daemon=True).start()
    if role == "echo":
        _serve_connections(port, _echo_connection)
    elif role == "slave":
        _serve_connections(port, _slave_connection)
    elif role in ("master_cond", "master_direct"):
        replication = _Replication(slave_ports)
        direct = role == "master_direct"
        _serve_connections(port, lambda conn: _master_connection(replication, direct, conn))
    elif role in ("flight", "flight_direct"):
        server = _FlightMaster(port, _Replication(slave_ports) if slave_ports else None,
                               role == "flight_direct")
        print("ready", flush=True)
        server.serve()
    else:
        raise SystemExit(f"unknown role {role!r}")
    return 0


class _Roles:
    """The floor's server processes: started one by one (each says `ready` on stdout once it
    listens and its slave links are up), killed and waited for in `stop`."""

    def __init__(self) -> None:
        self.processes: list[subprocess.Popen[str]] = []

    def start(self, role: str, slave_ports: tuple[int, ...] = ()) -> int:
        port = free_port()
        argv = [sys.executable, __file__, "--role", role, "--port", str(port)]
        if slave_ports:
            argv += ["--slaves", ",".join(map(str, slave_ports))]
        process = subprocess.Popen(argv, cwd=ROOT, stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True)
        self.processes.append(process)
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], ROLE_READY_TIMEOUT_S)
        line = process.stdout.readline() if ready else ""
        if line.strip() != "ready":
            raise SystemExit(f"role {role} on port {port} did not start (exit {process.poll()})")
        return port

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
        for process in self.processes:
            process.wait(timeout=ROLE_STOP_TIMEOUT_S)
            for pipe in (process.stdin, process.stdout):
                if pipe is not None:
                    pipe.close()


# -- clients (this process) ----------------------------------------------------------------------
def raw_round_trips(port: int, sends: int) -> list[float]:
    body = b"x" * BODY_BYTES
    samples = []
    with _no_delay(socket.create_connection(("127.0.0.1", port))) as sock:
        stream = _reader(sock)
        for sequence in range(1, sends + 1):
            start = time.perf_counter()
            sock.sendall(encode_frame(sequence, body))
            reply = read_frame(stream)
            samples.append(time.perf_counter() - start)
            assert reply is not None and reply[0] == sequence, (reply, sequence)
        stream.close()
    return samples


def flight_round_trips(port: int, sends: int) -> list[float]:
    client = flight.FlightClient(f"grpc://127.0.0.1:{port}")
    try:
        batch = pa.record_batch({"body": pa.array([b"x" * BODY_BYTES], pa.binary())})
        writer, reader = client.do_put(flight.FlightDescriptor.for_command(b"floor"),
                                       batch.schema)
        samples = []
        for count in range(1, sends + 1):
            start = time.perf_counter()
            writer.write_batch(batch)
            reply = reader.read()
            samples.append(time.perf_counter() - start)
            assert reply is not None and REPLY.unpack(reply.to_pybytes())[0] == count, reply
        writer.done_writing()
        writer.close()
        return samples
    finally:
        client.close()


def start_floor(roles: _Roles) -> dict[str, Callable[[int], list[float]]]:
    """The floor's processes (the two slaves serve all three replicated masters, a link
    each), and a round-trip function per case."""
    slaves = (roles.start("slave"), roles.start("slave"))
    ports = {"raw_echo": roles.start("echo"),
             "raw_replicated_cond": roles.start("master_cond", slaves),
             "raw_replicated_direct": roles.start("master_direct", slaves),
             "flight_echo": roles.start("flight"),
             "flight_replicated": roles.start("flight", slaves),
             "flight_replicated_direct": roles.start("flight_direct", slaves)}
    return {case: functools.partial(
        flight_round_trips if case.startswith("flight") else raw_round_trips, port)
        for case, port in ports.items()}


# -- the run --------------------------------------------------------------------------------------
def _start_systems(work: Path, ours: peers.RocketHACluster, with_peer: bool,
                   cases: dict[str, Callable[[int], list[float]]]) -> peers.NatsCluster | None:
    """rocketha's set and (with_peer) JetStream's cluster up; their cases added to `cases`."""
    ours.start()
    config = ours.config()
    peers.Admin(config).create_topic("latency", queues=peers.QUEUES)
    cases["rocketha"] = lambda sends: peers.rh_latency(config, "latency", sends)
    if not with_peer:
        return None
    theirs = peers.NatsCluster(peers.ensure_peer_tools(), work / "nats", sync_always=False)
    theirs.start()
    asyncio.run(peers.nats_ready(theirs.servers))
    asyncio.run(peers.nats_stream(theirs.servers, "LATENCY", 3))
    cases["jetstream"] = lambda sends: asyncio.run(
        peers.nats_latency(theirs.servers, "LATENCY", sends))
    return theirs


def measure(cases: dict[str, Callable[[int], list[float]]], rounds: int,
            sends: int) -> tuple[dict[str, list[float]], list[float]]:
    figures: dict[str, list[float]] = {}
    loads = []
    for measure_case in cases.values():
        measure_case(WARM_UP_SENDS)
    for index in range(rounds):
        loads.append(os.getloadavg()[0])
        print(f"round {index + 1}/{rounds}, load {loads[-1]:.1f}:", flush=True)
        for case, measure_case in cases.items():
            samples = measure_case(sends)
            for name, fraction in (("p50", 0.5), ("p99", 0.99)):
                figures.setdefault(f"{case}_{name}_ms", []).append(
                    peers.percentile_ms(samples, fraction))
            print(f"  {case:24s} p50 {figures[f'{case}_p50_ms'][-1]:.3f} / p99 "
                  f"{figures[f'{case}_p99_ms'][-1]:.3f} ms  (load {os.getloadavg()[0]:.1f})",
                  flush=True)
    return figures, loads


def run(rounds: int, sends: int, with_peer: bool) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-latency-floor-"))
    roles = _Roles()
    ours = peers.RocketHACluster(work / "rocketha", 3, "ASYNC_FLUSH")
    theirs = None
    load_start = os.getloadavg()
    try:
        cases = start_floor(roles)
        theirs = _start_systems(work, ours, with_peer, cases)
        figures, loads = measure(cases, rounds, sends)
    finally:
        try:
            if theirs is not None:
                theirs.stop()
            if (work / "rocketha").exists():
                ours.stop()
        finally:
            roles.stop()
            shutil.rmtree(work, ignore_errors=True)
    result: dict[str, Any] = {name: round(statistics.median(values), 4)
                              for name, values in figures.items()}
    result["rocketha_vs_floor_p50_ratio"] = round(
        result["rocketha_p50_ms"] / result["raw_replicated_cond_p50_ms"], 3)
    result["rocketha_vs_flight_floor_p50_ratio"] = round(
        result["rocketha_p50_ms"] / result["flight_replicated_p50_ms"], 3)
    if with_peer:
        jetstream_p50_ms = result["jetstream_p50_ms"]
        result["floor_vs_jetstream_p50_ratio"] = round(
            result["raw_replicated_cond_p50_ms"] / jetstream_p50_ms, 3)
        result["flight_floor_vs_jetstream_p50_ratio"] = round(
            result["flight_replicated_p50_ms"] / jetstream_p50_ms, 3)
    result.update(rounds=rounds, sends_per_round=sends, body_bytes=BODY_BYTES,
                  machine=peers.machine(), load_average_start=list(load_start),
                  load_average_rounds=loads, load_average_end=list(os.getloadavg()))
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="last line: the figures as JSON")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--sends", type=int, default=1000, help="sends per round and case")
    parser.add_argument("--no-peer", action="store_true", help="no JetStream (no NATS)")
    parser.add_argument("--role", help=argparse.SUPPRESS)  # a server process of the floor
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--slaves", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.role is not None:
        return serve_role(args.role, args.port, [int(p) for p in args.slaves.split(",") if p])
    if args.rounds < 1 or args.sends < 10:
        parser.error("--rounds >= 1 and --sends >= 10")
    result = run(args.rounds, args.sends, not args.no_peer)
    print(f"median of {args.rounds} rounds (p50 / p99 ms):", flush=True)
    for case in (*FLOOR_CASES, "rocketha", "jetstream"):
        if f"{case}_p50_ms" in result:
            print(f"  {case:24s} {result[f'{case}_p50_ms']:.3f} / {result[f'{case}_p99_ms']:.3f}",
                  flush=True)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
