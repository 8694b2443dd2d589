"""Producer.send_async against real brokers: order, exactly-once, bounded buffer, failover.

Each test checks what the broker holds afterwards (read back with a Consumer) against what every
future said: an acknowledged message is stored at the (queue, offset) its result names, no body
is stored twice by an idempotent producer, and within a queue (so per key) the stored messages
keep their send order.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path

import pytest

from connector import Admin, ClientConfig, Producer, ProducerConfig, SendResult
from connector.errors import ProducerBufferFullError
from tests.integration.broker_process import BrokerProcess
from tests.integration.failover_cluster import FailoverCluster, read_topic

pytestmark = pytest.mark.integration

QUEUES = 4
KEYS = 16
SET_A = "broker-a"
ELECTION_DEADLINE_S = 30.0


def _check(sent: list[tuple[bytes, str | None, int | None, Future[SendResult]]],
           found: dict[tuple[int, int], bytes], *, acked_min: int) -> None:
    """The futures' results against what a replica holds."""
    where: dict[bytes, list[tuple[int, int]]] = {}
    for place, body in found.items():
        where.setdefault(body, []).append(place)
    acked = 0
    for body, _, _, future in sent:
        result = future.result(timeout=60)
        if not result.ok:
            continue
        acked += 1
        assert body in where, f"acknowledged {body!r} ({result}) is not stored"
        assert found.get((result.queue_id, result.queue_offset)) == body, result  # -1: wrong
    assert acked >= acked_min, f"only {acked} acknowledged"
    twice = {body: places for body, places in where.items() if len(places) > 1}
    assert not twice, f"stored twice: {list(twice.items())[:5]}"
    queues_of: dict[str, set[int]] = {}
    last_offset: dict[tuple[int | None, int], int] = {}  # per lane (queue_id given) and queue
    for body, key, queue_id, _ in sent:  # in send order
        for stored_queue, offset in where.get(body, []):
            assert offset > last_offset.get((queue_id, stored_queue), -1), \
                f"{body!r} stored before an earlier send of its lane in queue {stored_queue}"
            last_offset[(queue_id, stored_queue)] = offset
            if queue_id is not None:
                assert stored_queue == queue_id, (body, queue_id, stored_queue)
            if key is not None:
                queues_of.setdefault(key, set()).add(stored_queue)
    assert all(len(queues) == 1 for queues in queues_of.values()), queues_of


def test_one_message_per_call_keeps_order_per_key_and_queue(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", defaultTopicQueueNums=str(QUEUES)).start()
    try:
        config = ClientConfig(brokers=(broker.endpoint,))
        Admin(config).create_topic("async", queues=QUEUES)
        sent = []
        with Producer(config, idempotent=True,
                      batching=ProducerConfig(linger_ms=2, batch_messages=64)) as producer:
            for seq in range(3000):
                body = b"m:%d" % seq
                key = f"k{seq % KEYS}" if seq % 3 else None
                queue_id = 3 if seq % 7 == 0 else None
                sent.append((body, key if queue_id is None else None, queue_id,
                             producer.send_async("async", body, key=key, queue_id=queue_id)))
                if seq == 1500:
                    assert producer.flush(timeout_ms=30_000)
                    assert all(f.done() for *_, f in sent)
            one = producer.send("async", b"sync", key="k1")
        assert one.ok and one.queue_id >= 0
        found = read_topic(broker.endpoint, "async")
        _check(sent, found, acked_min=3000)
        assert len(found) == 3001
    finally:
        broker.stop()


def test_an_idempotent_producer_stores_once_across_broker_restarts(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", defaultTopicQueueNums=str(QUEUES)).start()
    try:
        config = ClientConfig(brokers=(broker.endpoint,), send_deadline_ms=60_000,
                              backoff_max_ms=200, retries_max=1000)
        Admin(config).create_topic("restarts", queues=QUEUES)
        sent: list = []
        stop = threading.Event()

        def load(producer: Producer) -> None:
            seq = 0
            while not stop.is_set() and seq < 200_000:
                body = b"r:%d" % seq
                key = f"k{seq % KEYS}"
                sent.append((body, key, None, producer.send_async("restarts", body, key=key)))
                seq += 1
                if seq % 50 == 0:
                    time.sleep(0.005)

        with Producer(config, idempotent=True) as producer:
            sender = threading.Thread(target=load, args=(producer,), daemon=True)
            sender.start()
            for _ in range(2):
                time.sleep(0.5)
                broker.stop()
                time.sleep(0.3)
                broker.start()
            time.sleep(0.5)
            stop.set()
            sender.join(timeout=30)
            assert producer.flush(timeout_ms=60_000)
        found = read_topic(broker.endpoint, "restarts")
        _check(sent, found, acked_min=len(sent))
    finally:
        broker.stop()


def test_send_async_blocks_then_raises_when_the_buffer_stays_full(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b").start()
    try:
        config = ClientConfig(brokers=(broker.endpoint,), request_timeout_ms=30_000)
        Admin(config).create_topic("full", queues=1)
        batching = ProducerConfig(buffer_bytes=16 * 1024, batch_bytes=4096, max_block_ms=300)
        with Producer(config, batching=batching) as producer:
            assert producer.send("full", b"warm").ok
            broker.pause()  # round trips hang: nothing leaves the buffer
            futures = []
            started = time.monotonic()
            with pytest.raises(ProducerBufferFullError):
                for seq in range(1000):
                    futures.append(producer.send_async("full", b"x" * 100 + b"%d" % seq))
            blocked_s = time.monotonic() - started
            assert 0.3 <= blocked_s < 5, blocked_s
            assert 50 <= len(futures) < 200  # ~16 KiB of ~170 B messages, then no more
            broker.resume()
            assert producer.flush(timeout_ms=30_000)
            assert all(future.result().ok for future in futures)
    finally:
        broker.resume()
        broker.stop()


def test_send_async_moves_to_the_new_master_after_a_failover(tmp_path: Path) -> None:
    """Controller mode: kill the master under a one-message-per-call load; the pending batches
    go to the new master, and every acknowledged message is there once, in order per key."""
    cluster = None
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3)
        old, info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(old, 3, timeout_s=ELECTION_DEADLINE_S)
        config = ClientConfig(controller=cluster.controller_addr, send_deadline_ms=60_000,
                              request_timeout_ms=5_000, backoff_max_ms=200, retries_max=1000)
        sent: list = []
        stop = threading.Event()

        def load(producer: Producer) -> None:
            seq = 0
            while not stop.is_set() and seq < 200_000:
                body = b"f:%d" % seq
                key = f"k{seq % KEYS}"
                sent.append((body, key, None, producer.send_async("moved", body, key=key)))
                seq += 1
                if seq % 20 == 0:
                    time.sleep(0.005)

        with Producer(config, idempotent=True) as producer:
            sender = threading.Thread(target=load, args=(producer,), daemon=True)
            sender.start()
            time.sleep(1.0)
            killed_at = len(sent)
            cluster.kill(old)
            new, _ = cluster.wait_master(SET_A, min_epoch=info["master_epoch"] + 1,
                                         exclude=[old], timeout_s=ELECTION_DEADLINE_S)
            time.sleep(1.0)
            stop.set()
            sender.join(timeout=30)
            assert producer.flush(timeout_ms=90_000)
        assert len(sent) > killed_at + 100, "no sends after the kill"
        cluster.wait_confirm_at_end(new)
        found = read_topic(cluster.endpoint(new), "moved")
        _check(sent, found, acked_min=len(sent))
    finally:
        if cluster is not None:
            cluster.down()
