"""Replication benchmark: acked produce with 3 replicas vs 1, and a slave's catch-up speed.

    python3 build.py bench ha [--json] [--seconds S] [--producers P] [--backlog-mib N | --full]
                              [--hosts]

Method: real broker processes started with `rocketha-cluster up` (ASYNC_FLUSH or SYNC_FLUSH,
1 GiB segments) on 127.0.0.1; this process is the client over raw pyarrow.flight with P
concurrent DoPut streams (threads; default 4), each waiting for its batch's reply before its
next (acknowledged throughput). Several producers are how a replica set is used (RocketMQ's
benchmark runs 64 threads): while one batch waits for the quorum, another is appended. Both
set-ups get the same P.

- produce: 100 B bodies in batches of 1024 against a standalone broker (1 replica) and a
  SYNC_MASTER with 2 slaves and inSyncReplicas=2, both running, measured in ROUNDS alternating
  slices of S/ROUNDS seconds each (so other load on the machine hits both alike), both flush
  modes; the figure is the ratio 3 replicas / 1 replica.
- catch-up: a 2-replica set whose slave is stopped; the master gets a backlog (1 KiB bodies,
  default 256 MiB, `--full` for 1 GiB); the slave's store is deleted and it restarts; the
  figure is the bytes it received divided by the time from its first received byte to holding
  the master's whole log (polled through broker info every 20 ms).
On this 2-core machine all processes (client, master, slaves) share the same two cores.
`--hosts` (root): every broker on a test host of its own (`rocketha-cluster up --hosts`: a
network namespace, veth pairs on a bridge, 198.18.0.0/15 addresses), the client in the root
namespace: replication and produce cross a real (virtual) network stack instead of loopback.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import flight

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector.protocol import PutReply, produce_descriptor_command

SCHEMA = pa.schema([pa.field("body", pa.binary(), nullable=False)])
MESSAGES_MAX = 50_000_000
CATCHUP_TIMEOUT_S = 600.0
POLL_S = 0.02
ROUNDS = 6
COMMON = {"mappedFileSizeCommitLog": str(1 << 30), "maxMessageSize": str(4 << 20),
          "defaultTopicQueueNums": "1", "haSendHeartbeatInterval": "1000",
          "haHousekeepingInterval": "10000"}


def cluster(directory: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "ha.cluster", *args, "--dir", str(directory)],
                   check=True, capture_output=True, timeout=300)


def up(directory: Path, replicas: int, settings: dict[str, str], hosts: bool = False
       ) -> list[dict[str, Any]]:
    args = ["up", "--insecure", "--replicas", str(replicas), *(["--hosts"] if hosts else [])]
    for key, value in {**COMMON, **settings}.items():
        args += ["--set", f"{key}={value}"]
    cluster(directory, *args)
    return json.loads((directory / "cluster.json").read_text())["brokers"]


def info(endpoint: str) -> dict[str, Any]:
    client = flight.FlightClient(f"grpc://{endpoint}")
    try:
        results = list(client.do_action(flight.Action("broker_info", b"{}")))
        return json.loads(results[0].body.to_pybytes())
    finally:
        client.close()


def wait_sync_state_set(endpoint: str, size: int) -> None:
    deadline = time.monotonic() + 60
    while len(info(endpoint).get("sync_state_set", [0])) < size:
        assert time.monotonic() < deadline, "slaves did not join the SyncStateSet"
        time.sleep(0.05)


def produce(endpoint: str, topic: str, body_bytes: int, batch: int, *, seconds: float = 0.0,
            total_bytes: int = 0) -> float:
    """Acked messages per second, for `seconds` or until `total_bytes` of bodies were sent."""
    client = flight.FlightClient(f"grpc://{endpoint}")
    writer, reader = client.do_put(
        flight.FlightDescriptor.for_command(produce_descriptor_command(topic)), SCHEMA)
    record_batch = pa.record_batch([pa.array([b"x" * body_bytes] * batch, pa.binary())],
                                   schema=SCHEMA)
    sent = 0
    start = time.perf_counter()
    while sent < MESSAGES_MAX:
        if total_bytes and sent * body_bytes >= total_bytes:
            break
        if not total_bytes and time.perf_counter() - start >= seconds:
            break
        writer.write_batch(record_batch)
        reply = PutReply.decode(reader.read().to_pybytes())
        assert reply.status == "PUT_OK", reply
        sent += batch
    elapsed = time.perf_counter() - start
    writer.done_writing()
    writer.close()
    client.close()
    return sent / elapsed


def produce_concurrently(endpoint: str, producers: int, seconds: float) -> float:
    """Acked messages per second summed over `producers` streams running at once."""
    if producers == 1:
        return produce(endpoint, "bench", 100, 1024, seconds=seconds)
    with concurrent.futures.ThreadPoolExecutor(producers) as pool:
        rates = pool.map(lambda _: produce(endpoint, "bench", 100, 1024, seconds=seconds),
                         range(producers))
        return sum(rates)


def endpoint_of(broker: dict[str, Any]) -> str:
    """Its advertised address: its test host's with --hosts, else 127.0.0.1."""
    return f"{broker.get('host', '127.0.0.1')}:{broker['port']}"


def produce_ratio(root: Path, flush: str, seconds: float, producers: int = 1,
                  hosts: bool = False) -> tuple[float, float]:
    """Both set-ups run side by side; measured in alternating slices so that load from other
    processes on the machine falls on both alike."""
    endpoints, directories = [], []
    try:
        for replicas, settings in ((1, {}), (3, {"brokerRole": "SYNC_MASTER",
                                                 "inSyncReplicas": "2"})):
            directory = root / f"produce-{flush}-{replicas}"
            directories.append(directory)
            brokers = up(directory, replicas, {"flushDiskType": flush, **settings}, hosts)
            endpoint = endpoint_of(brokers[0])
            if replicas > 1:
                wait_sync_state_set(endpoint, replicas)
            produce(endpoint, "warm", 100, 1024, seconds=0.3)
            endpoints.append(endpoint)
        totals = [0.0, 0.0]
        for _ in range(ROUNDS):
            for index, endpoint in enumerate(endpoints):
                totals[index] += produce_concurrently(endpoint, producers, seconds / ROUNDS)
        return totals[0] / ROUNDS, totals[1] / ROUNDS
    finally:
        for directory in directories:
            cluster(directory, "down")
            shutil.rmtree(directory, ignore_errors=True)


def catchup(root: Path, backlog_bytes: int, hosts: bool = False) -> float:
    directory = root / "catchup"
    brokers = up(directory, 2, {"brokerRole": "SYNC_MASTER", "inSyncReplicas": "1"}, hosts)
    master, slave = endpoint_of(brokers[0]), endpoint_of(brokers[1])
    try:
        pid = int(Path(brokers[1]["pid_file"]).read_text())
        os.kill(pid, signal.SIGTERM)
        while _alive(pid):
            time.sleep(0.05)
        produce(master, "backlog", 1024, 1024, total_bytes=backlog_bytes)
        end = info(master)["max_log_position"]
        shutil.rmtree(brokers[1]["store_dir"])
        Path(brokers[1]["pid_file"]).unlink(missing_ok=True)
        cluster(directory, "up")
        first_position, first_time = 0, 0.0
        deadline = time.monotonic() + CATCHUP_TIMEOUT_S
        while True:
            position = info(slave)["max_log_position"]
            now = time.perf_counter()
            if position > 0 and not first_time:
                first_position, first_time = position, now
            if position >= end:
                break
            assert time.monotonic() < deadline, "the slave did not catch up in time"
            time.sleep(POLL_S)
        return (end - first_position) / (now - first_time) / 1e6
    finally:
        cluster(directory, "down")
        shutil.rmtree(directory, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--producers", type=int, default=4,
                        help="concurrent producer streams (both set-ups)")
    parser.add_argument("--backlog-mib", type=int, default=256)
    parser.add_argument("--full", action="store_true", help="a 1 GiB backlog")
    parser.add_argument("--hosts", action="store_true",
                        help="each broker on a test host of its own (root)")
    args = parser.parse_args(argv)
    backlog = (1024 if args.full else args.backlog_mib) << 20
    root = Path.cwd() / ".bench-tmp"
    root.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root))
    figures: dict[str, float] = {}
    try:
        for flush, label in (("ASYNC_FLUSH", "async"), ("SYNC_FLUSH", "sync")):
            one, three = produce_ratio(work, flush, args.seconds, args.producers, args.hosts)
            figures[f"produce_1rep_{label}_msgs_per_s"] = one
            figures[f"produce_3rep_{label}_msgs_per_s"] = three
            figures[f"produce_3rep_vs_1rep_ratio_{label}"] = three / one
            print(f"produce 100B batch 1024 {flush} x{args.producers}: "
                  f"1 replica {one:12,.0f} msgs/s, "
                  f"3 replicas (inSync=2) {three:12,.0f} msgs/s, ratio {three / one:.2f}")
        figures["producers"] = args.producers
        figures["hosts"] = int(args.hosts)
        figures["catchup_MBps"] = catchup(work, backlog, args.hosts)
        figures["catchup_backlog_MiB"] = backlog >> 20
        print(f"slave catch-up over a {backlog >> 20} MiB backlog: "
              f"{figures['catchup_MBps']:.0f} MB/s")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({key: round(value, 4) for key, value in figures.items()},
                         sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
