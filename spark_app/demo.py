"""The demo (`python3 build.py demo`): a local cluster, a realistic order stream, a summary.

Today (issues 2–3 landed): start one broker with SYNC_FLUSH through `rocketha-cluster`, produce
orders keyed by customer and tagged by kind through the client library, SIGKILL the broker once
mid-stream and restart it (acknowledged orders must survive), read everything back and check it,
then stop every process. Later issues replace the broker with a replica set under a controller
and add the Spark ingest job and tiering. Data stays under one directory it names. The last
line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from connector import Admin, ClientConfig, Consumer, Producer

__all__ = ["main"]

KINDS = ("created", "paid", "shipped", "cancelled")
CUSTOMERS = 500
QUEUES = 4


def cluster(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "ha.cluster", *args], capture_output=True,
                            text=True, timeout=120)
    if result.returncode != 0:
        raise SystemExit(f"rocketha-cluster {' '.join(args)} failed: {result.stderr}")
    return result.stdout


def order_batch(rng: random.Random, first: int, count: int) -> list[dict[str, object]]:
    rows = []
    for seq in range(first, first + count):
        customer = f"customer-{rng.randrange(CUSTOMERS)}"
        kind = rng.choice(KINDS)
        body = json.dumps({"order": seq, "customer": customer, "kind": kind,
                           "amount_cents": rng.randrange(100, 100_000)}).encode()
        rows.append({"body": body, "key": customer, "tags": kind})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="demo", description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("demo-data"))
    parser.add_argument("--orders", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args(argv)
    directory = args.dir.resolve()
    print(f"demo data under {directory}")
    cluster("up", "--dir", str(directory), "--brokers", "1", "--set", "flushDiskType=SYNC_FLUSH",
            "--set", "mappedFileSizeCommitLog=67108864")
    try:
        status = json.loads(cluster("status", "--dir", str(directory), "--json"))
        endpoint = status["processes"][0]["endpoint"]
        config = ClientConfig(brokers=(endpoint,), send_deadline_ms=60_000)
        admin = Admin(config)
        admin.create_topic("orders", queues=QUEUES)
        rng = random.Random(7)
        acked, crash_at, restart_s = 0, args.orders // 2, 0.0
        with Producer(config) as producer:
            for first in range(0, args.orders, args.batch):
                if acked >= crash_at and not restart_s:
                    restart_s = crash_and_restart(directory, status)
                rows = order_batch(rng, first, min(args.batch, args.orders - first))
                acked += sum(result.ok for result in producer.send_batch("orders", rows))
        consumed = read_back(config)
        summary = {"produced_acked": acked, "consumed": consumed, "orders": args.orders,
                   "broker_restart_s": round(restart_s, 3), "data_dir": str(directory)}
        print(f"acknowledged {acked} orders, read back {consumed}")
        print(json.dumps(summary, sort_keys=True))
        return 0 if consumed == acked == args.orders else 1
    finally:
        cluster("down", "--dir", str(directory))


def crash_and_restart(directory: Path, status: dict) -> float:  # type: ignore[type-arg]
    """SIGKILL the broker, bring it back, return seconds until it answered again."""
    pid = int(status["processes"][0]["pid"])
    os.kill(pid, signal.SIGKILL)
    killed = time.monotonic()
    print(f"SIGKILL broker pid {pid} mid-stream")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the kernel releases its lock when it is gone
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.02)
    cluster("up", "--dir", str(directory), "--brokers", "1")
    return time.monotonic() - killed


def read_back(config: ClientConfig) -> int:
    consumer = Consumer(config)
    seen: set[int] = set()
    for queue_id in range(QUEUES):
        for table in consumer.iter_queue("orders", queue_id, 0, until_idle_ms=300):
            for body in table.column("body").to_pylist():
                seen.add(json.loads(body)["order"])
    return len(seen)


if __name__ == "__main__":
    sys.exit(main())
