"""A failover under the RocketMQ client: SIGKILL of the master while it sends (issue 21).

Goal: every message the official RocketMQ Producer saw acknowledged (SendReceipt) through
rocketha-proxy is consumed afterwards by a SimpleConsumer, and the POP state fails over with
the data: receipt handles issued by the old master's state are acknowledged after the
failover, and those messages are not delivered again. Method: a real cluster (a controller, a
3-broker replica set, the proxy); a sender thread with the real client; SIGKILL of the master
after the first acks; the client keeps sending through the same proxy (which follows the new
master as our Producer does, and the client's retries of one message id are stored once).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from rocketmq import Producer

from tests.integration.rmq_proxy_support import ProxyCluster, receive_all, rmq_config
from tests.integration.test_rmq_proxy import make_topic, rmq_message, simple_consumer

pytestmark = pytest.mark.integration

BEFORE_KILL = 60  # acks before the master is killed
AFTER_KILL = 60  # acks wanted after the new master took over
SEND_DURATION_MAX_S = 60.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProxyCluster]:
    cluster = ProxyCluster(tmp_path_factory.mktemp("rmq-failover"))
    try:
        yield cluster
    finally:
        cluster.down()


def test_every_acknowledged_message_is_consumed_after_a_master_sigkill(
        cluster: ProxyCluster) -> None:
    topic = "rmq-failover"
    make_topic(cluster, topic)
    acked: list[bytes] = []
    failures: list[str] = []
    stop = threading.Event()
    producer = Producer(rmq_config(cluster.grpc_endpoint), (topic,))
    producer.startup()

    def send() -> None:
        sequence = 0
        deadline = time.monotonic() + SEND_DURATION_MAX_S
        while not stop.is_set() and time.monotonic() < deadline:  # bounded by the deadline
            body = f"f{sequence}".encode()
            sequence += 1
            try:
                producer.send(rmq_message(topic, body, tag="Failover"))
            except Exception as err:  # noqa: BLE001 - not acknowledged: may or may not be stored
                failures.append(f"{body!r}: {err}")
                continue
            acked.append(body)

    sender = threading.Thread(target=send, name="rmq-sender")
    sender.start()
    consumer = simple_consumer(cluster, "g-failover", topic)
    try:
        deadline = time.monotonic() + 30
        while len(acked) < BEFORE_KILL and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(acked) >= BEFORE_KILL, failures[-3:]
        leased = receive_all(consumer, 5, invisible_s=120, ack=False)  # held across the kill
        assert len(leased) >= 5
        old_master, info = cluster.wait_master("broker-a")
        cluster.kill(old_master)
        killed_at = len(acked)
        cluster.wait_master("broker-a", exclude=(old_master,),
                            min_epoch=info["master_epoch"] + 1, timeout_s=30)
        deadline = time.monotonic() + 40
        while len(acked) < killed_at + AFTER_KILL and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        sender.join(timeout=60)
        assert len(acked) >= killed_at + AFTER_KILL, f"sends after the kill: {failures[-3:]}"
        for message in leased:  # handles from before the failover: their leases survived it
            consumer.ack(message)
        leased_bodies = {m.body for m in leased}
        wanted = set(acked) - leased_bodies
        got = receive_all(consumer, len(wanted), timeout_s=90,
                          stop=lambda found: wanted <= {m.body for m in found})
    finally:
        stop.set()
        sender.join(timeout=60)
        producer.shutdown()
        consumer.shutdown()
    bodies = [m.body for m in got]
    missing = wanted - set(bodies)
    assert not missing, f"{len(missing)} acknowledged messages never consumed: " \
                        f"{sorted(missing)[:10]}"
    assert not leased_bodies & set(bodies), "acked before the failover, delivered again"
