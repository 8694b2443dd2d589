"""Scale curve (a): queues per broker. What a put, memory, a start and a recovery cost as the
broker holds more queues, and what the controller pays for that broker's heartbeats.

Method: one controller (tests/controller/controller_process.py) and one broker in controller
mode (a replica set of 1, SYNC_MASTER, ASYNC_FLUSH). Queues grow as topics of QUEUES_PER_TOPIC
queues each (`Admin.create_topic`); at each size:
  - put p50/p99: PUT_SAMPLES single 100 B `Producer.send` calls, one in flight, each to a queue
    drawn at random among all of them (a cold queue is part of the cost at many queues), from
    a new Producer: most samples at many queues are also its first send to their topic, which
    opened the client's produce stream for that topic until 2026-12-03 (a Producer now holds
    one stream per broker for all its topics, connector/client/stream_pool.py);
  - the same with the streams open (`put_p99_ms_open_streams`): a second Producer first sends
    one untimed message to queue 0 of every topic, as a long-lived producer of these topics
    would have, then times PUT_SAMPLES sends drawn the same way (the broker's first put to
    most of those queues is still in it);
  - the same with every queue written (`put_p99_ms_written`), the steady state: another
    Producer first writes one untimed message to every queue (a batch of QUEUES_PER_TOPIC
    rows per topic), and the timed one opens its streams as above, so its sends meet queues
    in use and streams open, as on a broker that has served its N queues for a while; the
    timing starts once the broker's flush thread has caught up (`unflushed_queues` 0 in
    broker_stats: the checkpoints after the writer make up to N new queue files);
  - broker RSS and threads (/proc), after the puts of the two above (the third comes last);
  - controller CPU: its utime + stime over CPU_WINDOW_S of idle broker (only heartbeats), as a
    share of one core; heartbeat bytes: the JSON body of the BrokerHeartbeat the broker sends,
    built by the controller API's own codec from the broker's topic list (every topic rides in
    each heartbeat, up to controller.api TOPICS_MAX);
  - start-up: SIGTERM, then time from spawn to the broker answering, and to the first PUT_OK
    (its controller names it master again); recovery: the same after SIGKILL.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from connector import Admin, ClientConfig, Producer
from controller.api import BrokerHeartbeat, TopicInfo
from tests.bench.scale_probe import (
    cpu_s,
    load_average,
    percentile,
    restart,
    rss_bytes,
    rss_split_bytes,
    threads,
)
from tests.controller.controller_process import ControllerGroup
from tests.integration.broker_process import BrokerProcess

QUEUES_PER_TOPIC = 8
PUT_WARMUP = 50
CPU_WINDOW_S = 5.0
READY_TIMEOUT_S = 60.0
SETTLE_TIMEOUT_S = 300.0
BODY = b"x" * 100


def _first_put_s(endpoint: str, started: float) -> float:
    """Seconds from `started` to the first PUT_OK (the broker master again)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    with Producer(ClientConfig(brokers=(endpoint,), retries_max=0)) as producer:
        while True:
            try:
                if producer.send("q0", b"ready", queue_id=0).ok:
                    return time.perf_counter() - started
            except Exception:  # not master yet, or still starting: try again
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.01)


def _heartbeat_bytes(admin: Admin, endpoint: str) -> int:
    topics = tuple(TopicInfo(t["name"], int(t["read_queue_nums"]), int(t["write_queue_nums"]))
                   for t in admin.list_topics())
    beat = BrokerHeartbeat("scale", "broker-a", 0, endpoint, 1, 1 << 40, 1 << 40, topics=topics)
    return len(json.dumps(beat.to_json()).encode())


def _settled(broker: BrokerProcess) -> None:
    """Wait until the broker's flush thread has caught up: no queue waits for a checkpoint
    (a new queue's first file is made by the checkpoint after its first put)."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while broker.action("broker_stats")["store"]["unflushed_queues"] > 0:
        assert time.monotonic() < deadline, "the checkpoint did not catch up"
        time.sleep(0.1)


def _puts(broker: BrokerProcess, queues: int, samples: int, *, open_streams: bool = False,
          written: bool = False) -> list[float]:
    """Latencies of `samples` sends to random queues; with `open_streams`, after one untimed
    send to every topic; with `written`, that and one untimed write to every queue (module
    docstring)."""
    chooser = random.Random(queues + open_streams + 2 * written)
    latencies = []
    endpoint = broker.endpoint
    with Producer(ClientConfig(brokers=(endpoint,))) as producer:
        for _ in range(PUT_WARMUP):
            producer.send("q0", BODY, queue_id=0)
        if written:  # another producer, one batch per topic
            with Producer(ClientConfig(brokers=(endpoint,))) as writer:
                for topic_index in range(queues // QUEUES_PER_TOPIC):
                    results = writer.send_batch(
                        f"q{topic_index}", [{"body": BODY, "queue_id": queue_id}
                                            for queue_id in range(QUEUES_PER_TOPIC)])
                    assert all(result.ok for result in results)
        if open_streams or written:
            for topic_index in range(queues // QUEUES_PER_TOPIC):
                assert producer.send(f"q{topic_index}", BODY, queue_id=0).ok
        if written:
            _settled(broker)
        for _ in range(samples):
            queue = chooser.randrange(queues)
            topic, queue_id = f"q{queue // QUEUES_PER_TOPIC}", queue % QUEUES_PER_TOPIC
            start = time.perf_counter()
            assert producer.send(topic, BODY, queue_id=queue_id).ok
            latencies.append(time.perf_counter() - start)
    return latencies


def _restart_s(broker: BrokerProcess, *, kill: bool) -> tuple[float, float]:
    """(seconds to answering, seconds to the first PUT_OK) after a SIGKILL or a clean stop."""
    answering_s, started = restart(broker, kill=kill)
    return answering_s, _first_put_s(broker.endpoint, started)


def queues_curve(work: Path, sizes: list[int], samples: int) -> list[dict[str, Any]]:
    controllers = ControllerGroup(work / "controller", 1).start()
    # queuesMax set: derived from this machine's hard nofile (20,000) it is 9,488, what a
    # restart of that many written queues can open; the curve restarts the broker before it
    # writes every queue (below), so 10,000 fit
    broker = BrokerProcess(work / "broker", enableControllerMode="true",
                           controllerAddr=controllers.endpoint(1), brokerClusterName="scale",
                           brokerRole="SYNC_MASTER", flushDiskType="ASYNC_FLUSH",
                           mappedFileSizeCommitLog=str(64 << 20),
                           queuesMax=str(max(sizes) + QUEUES_PER_TOPIC))
    rows = []
    try:
        broker.start()
        admin = Admin(ClientConfig(brokers=(broker.endpoint,)))
        _first_put_s(broker.endpoint, time.perf_counter())  # q0 auto-created? make it first
        topics = 1 if admin.list_topics() else 0
        for size in sizes:
            while topics * QUEUES_PER_TOPIC < size:
                admin.create_topic(f"q{topics}", queues=QUEUES_PER_TOPIC)
                topics += 1
            latencies = _puts(broker, topics * QUEUES_PER_TOPIC, samples)
            warm = _puts(broker, topics * QUEUES_PER_TOPIC, samples, open_streams=True)
            assert broker.process is not None
            rss = rss_bytes(broker.process.pid), rss_split_bytes(broker.process.pid)[0]
            broker_threads = threads(broker.process.pid)
            row: dict[str, Any] = {
                "queues": topics * QUEUES_PER_TOPIC, "load_1m": load_average(),
                "put_p50_ms": round(percentile(latencies, 0.5) * 1000, 3),
                "put_p99_ms": round(percentile(latencies, 0.99) * 1000, 3),
                "put_p50_ms_open_streams": round(percentile(warm, 0.5) * 1000, 3),
                "put_p99_ms_open_streams": round(percentile(warm, 0.99) * 1000, 3),
                "broker_rss_bytes": rss[0], "broker_threads": broker_threads,
                "broker_rss_anon_bytes": rss[1],
                "heartbeat_bytes": _heartbeat_bytes(admin, broker.endpoint)}
            controller_pid = controllers.processes[1].pid
            before = cpu_s(controller_pid)
            time.sleep(CPU_WINDOW_S)  # the measuring window itself, not a wait for a state
            row["controller_cpu_share"] = round((cpu_s(controller_pid) - before)
                                                / CPU_WINDOW_S, 4)
            row["controller_rss_bytes"] = rss_bytes(controller_pid)
            row["startup_s"], row["startup_to_put_s"] = _restart_s(broker, kill=False)
            row["recovery_s"], row["recovery_to_put_s"] = _restart_s(broker, kill=True)
            # last: after it the store holds a file per queue, and a restart of 10,000 written
            # queues needs ~21,000 descriptors (docs/operations.md, "Open files"), past this
            # machine's hard nofile of 20,000
            written = _puts(broker, topics * QUEUES_PER_TOPIC, samples, written=True)
            row["put_p50_ms_written"] = round(percentile(written, 0.5) * 1000, 3)
            row["put_p99_ms_written"] = round(percentile(written, 0.99) * 1000, 3)
            print(f"queues {row['queues']:6d}: put p50 {row['put_p50_ms']:.2f} ms p99 "
                  f"{row['put_p99_ms']:.2f} ms (streams open: p50 "
                  f"{row['put_p50_ms_open_streams']:.2f} ms p99 "
                  f"{row['put_p99_ms_open_streams']:.2f} ms; every queue written: p50 "
                  f"{row['put_p50_ms_written']:.2f} ms p99 {row['put_p99_ms_written']:.2f} ms), "
                  f"RSS {row['broker_rss_bytes'] / 2**20:.0f} MiB "
                  f"(anon {row['broker_rss_anon_bytes'] / 2**20:.0f}), "
                  f"heartbeat {row['heartbeat_bytes']:,} B, controller CPU "
                  f"{row['controller_cpu_share']:.1%}, start {row['startup_to_put_s']:.2f} s, "
                  f"recovery {row['recovery_to_put_s']:.2f} s (load {row['load_1m']})",
                  flush=True)
            rows.append(row)
    finally:
        broker.stop()
        controllers.stop_all()
    return rows
