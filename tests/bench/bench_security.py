"""Security benchmark: what TLS, mutual TLS and authentication cost, as ratios to plaintext
measured in the same run.

    python3 build.py bench security [--json] [--seconds S] [--producers P] [--backlog-mib N]

Method: real broker processes started with `rocketha-cluster up`, twice: once secure (the
default: TLS on the client endpoint with client certificates required, mutual TLS on the HA
link, authentication and authorization on) and once with `--insecure`. This process is the
client over pyarrow.flight (TLS with the cluster's client certificate and every call signed
with the admin's keys from client.properties, or plaintext and unsigned) with P concurrent
DoPut streams, each waiting for its batch's reply before its next (a DoPut stream is signed
once, when it opens).

- produce: 100 B bodies in batches of 1024 against a SYNC_MASTER with 2 slaves and
  inSyncReplicas=2 (every put crosses the HA link before its ack), ASYNC_FLUSH; both clusters
  run side by side and are measured in ROUNDS alternating slices of S/ROUNDS seconds (so other
  load on the machine hits both alike); the figure is TLS / plaintext (goal >= 0.8).
- catch-up: a 2-replica set whose slave is stopped; the master gets a backlog (1 KiB bodies,
  default 128 MiB); the slave's store is deleted and it restarts; the figure is the bytes it
  received divided by the time from its first received byte to holding the master's whole
  log, TLS / plaintext (goal >= 0.7). The plaintext and TLS runs alternate CATCHUP_ROUNDS
  times; the ratio is of the medians.
- auth_signature_us_per_request: the server's check of one signed request in process
  (verify: headers, HMAC-SHA256, clock skew, replay cache; then the ACL decision), from
  tests/bench/bench_auth.py's signature_check_us (that bench also measures it on the wire).
On this 2-core machine the client, the master and the slaves share the same two cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import flight

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from conf.signing import Credentials, action_target, descriptor_target
from conf.tls import NO_TLS, ClientTLS, connect_flight
from connector.client import ClientConfig, signed_options
from connector.protocol import PutReply, produce_descriptor_command
from tests.bench.bench_auth import signature_check_us

SCHEMA = pa.schema([pa.field("body", pa.binary(), nullable=False)])
MESSAGES_MAX = 50_000_000
CATCHUP_TIMEOUT_S = 600.0
POLL_S = 0.02
ROUNDS = 6
CATCHUP_ROUNDS = 2
COMMON = {"mappedFileSizeCommitLog": str(1 << 30), "maxMessageSize": str(4 << 20),
          "defaultTopicQueueNums": "1", "haSendHeartbeatInterval": "1000",
          "haHousekeepingInterval": "10000", "flushDiskType": "ASYNC_FLUSH"}


def cluster(directory: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "ha.cluster", *args, "--dir", str(directory)],
                   check=True, capture_output=True, timeout=300)


class Set:
    """One replica set under `directory`, secure or not; `tls` is what its client presents,
    `credentials` what it signs with."""

    def __init__(self, directory: Path, replicas: int, secure: bool,
                 settings: dict[str, str]) -> None:
        args = ["up", "--replicas", str(replicas), *([] if secure else ["--insecure"])]
        for key, value in {**COMMON, **settings}.items():
            args += ["--set", f"{key}={value}"]
        cluster(directory, *args)
        self.directory = directory
        self.brokers: list[dict[str, Any]] = json.loads(
            (directory / "cluster.json").read_text())["brokers"]
        client = (ClientConfig.from_properties(directory / "client.properties") if secure
                  else None)
        self.tls: ClientTLS = client.tls if client is not None else NO_TLS
        self.credentials: Credentials | None = client.credentials if client is not None \
            else None
        self.master = f"127.0.0.1:{self.brokers[0]['port']}"

    def info(self, endpoint: str) -> dict[str, Any]:
        client = connect_flight(endpoint, self.tls)
        try:
            results = list(client.do_action(flight.Action("broker_info", b"{}"), signed_options(
                self.credentials, "DO_ACTION", action_target("broker_info", b"{}"), 30.0)))
            return json.loads(results[0].body.to_pybytes())  # type: ignore[no-any-return]
        finally:
            client.close()

    def wait_sync_state_set(self, size: int) -> None:
        deadline = time.monotonic() + 60
        while len(self.info(self.master).get("sync_state_set", [0])) < size:
            assert time.monotonic() < deadline, "slaves did not join the SyncStateSet"
            time.sleep(0.05)

    def down(self) -> None:
        cluster(self.directory, "down")
        shutil.rmtree(self.directory, ignore_errors=True)


def produce(replica_set: Set, topic: str, body_bytes: int, batch: int, *,
            seconds: float = 0.0, total_bytes: int = 0) -> float:
    """Acked messages per second, for `seconds` or until `total_bytes` of bodies were sent."""
    client = connect_flight(replica_set.master, replica_set.tls)
    command = produce_descriptor_command(topic)
    writer, reader = client.do_put(
        flight.FlightDescriptor.for_command(command), SCHEMA,
        signed_options(replica_set.credentials, "DO_PUT", descriptor_target(command, None),
                       CATCHUP_TIMEOUT_S))
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


def produce_concurrently(replica_set: Set, producers: int, seconds: float) -> float:
    with concurrent.futures.ThreadPoolExecutor(producers) as pool:
        rates = pool.map(lambda _: produce(replica_set, "bench", 100, 1024, seconds=seconds),
                         range(producers))
        return sum(rates)


def produce_figures(root: Path, seconds: float, producers: int) -> tuple[float, float]:
    """(plaintext, TLS) acked msgs/s of a 3-replica set, inSyncReplicas=2."""
    sets: list[Set] = []
    try:
        for secure in (False, True):
            replica_set = Set(root / f"produce-{'tls' if secure else 'plain'}", 3, secure,
                              {"brokerRole": "SYNC_MASTER", "inSyncReplicas": "2"})
            sets.append(replica_set)
            replica_set.wait_sync_state_set(3)
            produce(replica_set, "warm", 100, 1024, seconds=0.3)
        totals = [0.0, 0.0]
        for _ in range(ROUNDS):
            for index, replica_set in enumerate(sets):
                totals[index] += produce_concurrently(replica_set, producers, seconds / ROUNDS)
        return totals[0] / ROUNDS, totals[1] / ROUNDS
    finally:
        for replica_set in sets:
            replica_set.down()


def catchup(root: Path, secure: bool, backlog_bytes: int) -> float:
    """MB/s a restarted slave with an empty store receives the master's backlog at."""
    replica_set = Set(root / f"catchup-{'tls' if secure else 'plain'}", 2, secure,
                      {"brokerRole": "SYNC_MASTER", "inSyncReplicas": "1"})
    slave_broker = replica_set.brokers[1]
    slave = f"127.0.0.1:{slave_broker['port']}"
    try:
        pid = int(Path(slave_broker["pid_file"]).read_text())
        os.kill(pid, signal.SIGTERM)
        while _alive(pid):
            time.sleep(0.05)
        produce(replica_set, "backlog", 1024, 1024, total_bytes=backlog_bytes)
        end = replica_set.info(replica_set.master)["max_log_position"]
        shutil.rmtree(slave_broker["store_dir"])
        Path(slave_broker["pid_file"]).unlink(missing_ok=True)
        cluster(replica_set.directory, "up")
        first_position, first_time = 0, 0.0
        deadline = time.monotonic() + CATCHUP_TIMEOUT_S
        while True:
            position = replica_set.info(slave)["max_log_position"]
            now = time.perf_counter()
            if position > 0 and not first_time:
                first_position, first_time = position, now
            if position >= end:
                break
            assert time.monotonic() < deadline, "the slave did not catch up in time"
            time.sleep(POLL_S)
        return (end - first_position) / (now - first_time) / 1e6
    finally:
        replica_set.down()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--backlog-mib", type=int, default=128)
    args = parser.parse_args(argv)
    root = Path.cwd() / ".bench-tmp"
    root.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root))
    figures: dict[str, float | None] = {}
    try:
        plain, secure = produce_figures(work, args.seconds, args.producers)
        figures.update(produce_plain_msgs_per_s=plain, produce_tls_msgs_per_s=secure,
                       tls_produce_ratio=secure / plain, producers=args.producers)
        print(f"acked produce, 3 replicas (inSync=2), 100 B x 1024, x{args.producers}: "
              f"plaintext {plain:12,.0f} msgs/s, TLS + auth {secure:12,.0f} msgs/s, "
              f"ratio {secure / plain:.2f} (goal >= 0.8)")
        rates: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(CATCHUP_ROUNDS):
            for mode in (False, True):
                rates[mode].append(catchup(work, mode, args.backlog_mib << 20))
        plain_mbps, tls_mbps = (statistics.median(rates[mode]) for mode in (False, True))
        figures.update(catchup_plain_MBps=plain_mbps, catchup_tls_MBps=tls_mbps,
                       tls_catchup_ratio=tls_mbps / plain_mbps,
                       catchup_backlog_MiB=args.backlog_mib)
        print(f"slave catch-up over a {args.backlog_mib} MiB backlog (median of "
              f"{CATCHUP_ROUNDS}): plaintext {plain_mbps:.0f} MB/s, mutual TLS "
              f"{tls_mbps:.0f} MB/s, ratio {tls_mbps / plain_mbps:.2f} (goal >= 0.7)")
        check = signature_check_us()
        figures["auth_signature_us_per_request"] = check["verify_us"] + check["authorize_us"]
        print(f"signature check per request, in process: verify {check['verify_us']} us + "
              f"authorize {check['authorize_us']} us (signing {check['sign_us']} us, client)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({key: None if value is None else round(value, 4)
                          for key, value in figures.items()}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
