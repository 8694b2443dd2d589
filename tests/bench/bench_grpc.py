"""RocketMQ gRPC endpoint benchmark: the official RocketMQ 5 Python client through
rocketha-proxy, beside our Flight Producer, in the same run on the same cluster.

    python3 build.py bench grpc [--json] [--seconds S] [--threads T] [--body-bytes B]

Method: `rocketha-cluster up --controllers 1 --replicas 3` on 127.0.0.1 (default quorum: a
majority, 2 of 3, acknowledges a put) with its proxy; one topic of 4 queues. Each mode sends
single messages of `--body-bytes` for `--seconds`:
  rmq_sync      one thread, RocketMQ Producer.send (gRPC to the proxy, then the proxy's put)
  rmq_threads   T threads sharing one RocketMQ Producer, Producer.send each
  flight_sync   one thread, our Producer.send (Arrow Flight straight to the master)
  flight_threads T threads sharing one of our Producers, Producer.send each
and reports messages/s and send latency p50/p99 (ms). Then `rmq_consume`: a SimpleConsumer
receives (batches of 32) and acks everything rmq_sync wrote: messages/s (every ack is a
replicated state record). Both sides reach the same brokers with the same quorum; the proxy
adds a gRPC hop, a Python server thread and a protobuf conversion per message. Last,
`rmq_wake`: a SimpleConsumer's receive waits (long polling) on a drained 4-queue topic, a
message is sent WAKE_ROUNDS times, each after the receive has waited a while: the time from the
send's answer to the receive's return (p50 and max, ms).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig
from connector import Producer as FlightProducer
from connector.client import controller_call

ROOT = Path(__file__).resolve().parents[2]

TOPIC = "bench-grpc"
WAKE_TOPIC = "bench-grpc-wake"
WAKE_ROUNDS = 12
WAKE_IDLE_S = 1.0  # how long the receive waits before each send
QUEUES = 4
SENDS_MAX = 10_000_000  # loop bound of one sender


def _cluster(directory: Path, *args: str) -> str:
    command = [sys.executable, "-m", "ha.cluster", *args, "--dir", str(directory)]
    done = subprocess.run(command, check=False, cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}\n{done.stderr}")
    return done.stdout


def _run(threads: int, seconds: float, send: Callable[[bytes], None]) -> dict[str, Any]:
    latencies_ms: list[list[float]] = [[] for _ in range(threads)]
    errors = [0] * threads
    deadline = time.monotonic() + seconds

    def loop(index: int) -> None:
        for sequence in range(SENDS_MAX):
            if time.monotonic() >= deadline:
                return
            body = f"{index}:{sequence}:".encode().ljust(BODY_BYTES, b"x")
            started = time.perf_counter()
            try:
                send(body)
            except Exception:  # noqa: BLE001 - counted; the benchmark goes on
                errors[index] += 1
                continue
            latencies_ms[index].append((time.perf_counter() - started) * 1000)

    started = time.monotonic()
    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    elapsed = time.monotonic() - started
    merged = sorted(x for part in latencies_ms for x in part)
    return {"threads": threads, "messages": len(merged), "errors": sum(errors),
            "msgs_per_s": round(len(merged) / elapsed, 1),
            "p50_ms": round(statistics.median(merged), 3) if merged else None,
            "p99_ms": round(merged[int(len(merged) * 0.99) - 1], 3) if merged else None}


BODY_BYTES = 128


def main() -> int:
    global BODY_BYTES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--body-bytes", type=int, default=128)
    parser.add_argument("--child", nargs=6, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        mode, endpoint, controller, number, seconds, body_bytes = args.child
        BODY_BYTES = int(body_bytes)
        child(mode, endpoint, controller, int(number), float(seconds))
        return 0
    BODY_BYTES = args.body_bytes
    with tempfile.TemporaryDirectory(prefix="bench-grpc-") as tmp:
        directory = Path(tmp)
        _cluster(directory, "up", "--controllers", "1", "--replicas", "3", "--insecure")
        try:
            figures = _bench(directory, args)
        finally:
            _cluster(directory, "down")
    for name, value in figures.items():
        print(f"{name:15s} {value}")
    if args.json:
        print(json.dumps(figures))
    return 0


def _bench(directory: Path, args: argparse.Namespace) -> dict[str, Any]:
    status = json.loads(_cluster(directory, "status", "--json"))
    endpoint = status["grpc_endpoint"]
    controller = ",".join(p["endpoint"] for p in status["processes"]
                          if p["kind"] == "controller")
    for topic in (TOPIC, WAKE_TOPIC):
        Admin(ClientConfig(controller=controller)).create_topic(topic, queues=QUEUES)
        deadline = time.monotonic() + 30
        while controller_call(controller, "get_routes", {"topic": topic},
                              3000)["status"] != "OK":
            if time.monotonic() > deadline:
                raise SystemExit("the topic's route never appeared")
            time.sleep(0.1)
    figures: dict[str, Any] = {"body_bytes": BODY_BYTES, "seconds": args.seconds}
    for mode, threads in (("rmq_sync", 1), ("flight_sync", 1), ("rmq_threads", args.threads),
                          ("flight_threads", args.threads)):
        figures[mode] = _child(mode, endpoint, controller, threads, args.seconds)
    figures["rmq_consume"] = _child("rmq_consume", endpoint, controller,
                                    figures["rmq_sync"]["messages"], args.seconds)
    figures["rmq_wake"] = _child("rmq_wake", endpoint, controller, WAKE_ROUNDS, args.seconds)
    return figures


def _child(mode: str, endpoint: str, controller: str, number: int, seconds: float
           ) -> dict[str, Any]:
    """One mode in a process of its own: grpcio (the RocketMQ client) and pyarrow.flight
    each bundle a gRPC core (arrow issue #13300, platform-facts.md), so no process here
    loads both."""
    done = subprocess.run([sys.executable, __file__, "--child", mode, endpoint, controller,
                           str(number), str(seconds), str(BODY_BYTES)], check=False, cwd=ROOT,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(f"{mode} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child(mode: str, endpoint: str, controller: str, number: int, seconds: float) -> None:
    if mode.startswith("rmq"):
        from rocketmq import (
            ClientConfiguration,
            Credentials,
            Message,
            Producer,
        )
        config = ClientConfiguration(endpoint, Credentials(), request_timeout=10)
        if mode == "rmq_consume":
            print(json.dumps(_consume(config, number)))
            return
        if mode == "rmq_wake":
            print(json.dumps(_wake(config, number)))
            return
        rmq = Producer(config, (TOPIC,))
        rmq.startup()

        def rmq_send(body: bytes) -> None:
            message = Message()
            message.topic = TOPIC
            message.body = body
            message.tag = "bench"
            rmq.send(message)

        try:
            print(json.dumps(_run(number, seconds, rmq_send)))
        finally:
            rmq.shutdown()
        return
    # one Producer per thread: one Producer's `send` calls take turns on its one stream
    producers = [FlightProducer(ClientConfig(controller=controller)) for _ in range(number)]
    local = threading.local()
    free = list(producers)

    def flight_send(body: bytes) -> None:
        if not hasattr(local, "producer"):
            local.producer = free.pop()
        result = local.producer.send(TOPIC, body, tags="bench")
        if result.status != "PUT_OK":
            raise RuntimeError(result.status)

    try:
        print(json.dumps(_run(number, seconds, flight_send)))
    finally:
        for producer in producers:
            producer.close()


def _consume(config: Any, count: int) -> dict[str, Any]:
    """Receive + ack `count` messages (the first ones of the topic, any order)."""
    from rocketmq import FilterExpression, SimpleConsumer
    consumer = SimpleConsumer(config, "bench-group", {TOPIC: FilterExpression("*")},
                              await_duration=1)
    consumer.startup()
    received = 0
    started = time.monotonic()
    try:
        for _ in range(SENDS_MAX):
            if received >= count or time.monotonic() - started > 120:
                break
            for message in consumer.receive(32, 60):
                consumer.ack(message)
                received += 1
    finally:
        consumer.shutdown()
    elapsed = time.monotonic() - started
    return {"messages": received, "msgs_per_s": round(received / elapsed, 1)}


def _wake(config: Any, rounds: int) -> dict[str, Any]:
    """Wake-up latency of a waiting receive (module docstring, rmq_wake)."""
    from rocketmq import FilterExpression, Message, Producer, SimpleConsumer
    producer = Producer(config, (WAKE_TOPIC,))
    producer.startup()
    consumer = SimpleConsumer(config, "bench-wake", {WAKE_TOPIC: FilterExpression("*")},
                              await_duration=10)
    consumer.startup()
    latencies_ms = []
    try:
        # warm up: a message on every queue first (the broker cannot long-poll a queue that
        # was never written to; the proxy looks at those every 500 ms)
        for index in range(4 * QUEUES):
            message = Message()
            message.topic = WAKE_TOPIC
            message.body = f"warm-{index}".encode()
            producer.send(message)
        warmed, warm_deadline = 0, time.monotonic() + 60
        while warmed < 4 * QUEUES and time.monotonic() < warm_deadline:
            for received in consumer.receive(32, 30):
                consumer.ack(received)
                warmed += 1
        for index in range(rounds):
            got: dict[str, Any] = {}

            def wait(got: dict[str, Any] = got) -> None:
                got["messages"] = consumer.receive(1, 30)
                got["at"] = time.monotonic()

            waiter = threading.Thread(target=wait)
            waiter.start()
            time.sleep(WAKE_IDLE_S)
            message = Message()
            message.topic = WAKE_TOPIC
            message.body = f"wake-{index}".encode()
            producer.send(message)
            sent = time.monotonic()
            waiter.join()
            for received in got["messages"]:
                consumer.ack(received)
            if got["messages"]:
                latencies_ms.append((got["at"] - sent) * 1000)
    finally:
        consumer.shutdown()
        producer.shutdown()
    latencies_ms.sort()
    return {"rounds": len(latencies_ms),
            "wake_p50_ms": round(statistics.median(latencies_ms), 1) if latencies_ms else None,
            "wake_max_ms": round(latencies_ms[-1], 1) if latencies_ms else None}


if __name__ == "__main__":
    sys.exit(main())
