"""A Producer with a controller writes to every replica set that takes a topic's writes.

Goal: a topic on broker-a only is extended onto broker-b (`topic update --add-broker-name`)
while an idempotent Producer (option controller) sends: its next sends land on both sets,
each result names its set (`broker_name`), and every acknowledged message is read back from
that set at its reported queue and offset. Then `--remove-broker-name broker-b` drains it: once
the producer's route no longer names broker-b (looked up every QUEUE_LOOKUP_INTERVAL_S), every
new send goes to broker-a and broker-b holds what it held.

Method: real processes (`rocketha-cluster up`: one controller, two sets of one broker), the
admin tool as a subprocess (tests/integration/test_scale_out.py's helpers); every wait polls a
condition with a deadline. ~50 s at load 24 on 2 cores, so marked slow:
`python3 build.py test -m slow tests/integration/test_producer_spread.py`.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from pathlib import Path

import pytest

from connector import ClientConfig, Consumer, Producer
from connector.client.producer_core import SendResult
from connector.protocol import RocketHAError
from tests.ha.replica_set import wait_for
from tests.integration.failover_cluster import FailoverCluster
from tests.integration.test_scale_out import _held, admin, json_rows

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TOPIC = "scale_out"  # (test_scale_out's _held reads this topic)
QUEUES = 4
MESSAGES = 400  # per phase: half keyed, half keyless
ROUTE_DEADLINE_S = 60.0


def _send_all(producer: Producer, prefix: str) -> list[tuple[str, SendResult]]:
    futures = [(f"{prefix}{n:05d}",
                producer.send_async(TOPIC, f"{prefix}{n:05d}",
                                    key=f"k{n}" if n % 2 else None))
               for n in range(MESSAGES)]
    assert producer.flush(120_000)
    return [(body, future.result()) for body, future in futures]


def _read_back(controller: str, sent: list[tuple[str, SendResult]]) -> None:
    """Every acknowledged message is at (its set, queue, offset)."""
    wanted: dict[tuple[str, int], dict[int, str]] = {}
    for body, result in sent:
        assert result.ok, result
        wanted.setdefault((result.broker_name, result.queue_id), {})[result.queue_offset] = body
    for (name, queue_id), by_offset in wanted.items():
        consumer = Consumer(ClientConfig(controller=controller), broker_name=name)
        first, last = min(by_offset), max(by_offset)
        found: dict[int, str] = {}
        offset = first
        while offset <= last:
            table = consumer.pull(TOPIC, queue_id, offset, max_messages=1024).table
            assert table.num_rows, (name, queue_id, offset)
            found.update(zip(table.column("queue_offset").to_pylist(),
                             (b.decode() for b in table.column("body").to_pylist()),
                             strict=True))
            offset = max(found) + 1
        assert {off: found.get(off) for off in by_offset} == by_offset, (name, queue_id)


def _route_drops(producer: Producer, name: str) -> bool:
    """One keyless send (it may still reach the drained set: refused there, not acknowledged),
    then whether the producer's route has left `name` out."""
    with contextlib.suppress(RocketHAError):
        producer.send(TOPIC, "probe")
    route = producer.topic_route(TOPIC)
    return route is not None and name not in {set_name for set_name, _ in route}


def test_a_producer_writes_to_every_set_of_its_topic_and_leaves_a_drained_one(
        tmp_path: Path) -> None:
    cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replica_sets=2, replicas=1)
    controller = ["--controller", cluster.controller_addr]
    try:
        json_rows(admin(*controller, "topic", "create", "--topic", TOPIC, "--queues",
                        str(QUEUES), "--broker-name", "broker-a"))
        config = ClientConfig(controller=cluster.controller_addr)
        with Producer(config, idempotent=True) as producer:
            before = _send_all(producer, "a")  # the first ones before the route is known
            assert {r.broker_name for _, r in before} == {"broker-a"}
            wait_for(lambda: producer.send(TOPIC, "probe").ok
                     and producer.topic_route(TOPIC) == (("broker-a", QUEUES),),
                     ROUTE_DEADLINE_S, "the producer to learn the route")

            json_rows(admin(*controller, "topic", "update", "--topic", TOPIC,
                            "--add-broker-name", "broker-b", "--queues", str(QUEUES)))
            wait_for(lambda: producer.send(TOPIC, "probe").ok and producer.topic_route(TOPIC)
                     == (("broker-a", QUEUES), ("broker-b", QUEUES)),
                     ROUTE_DEADLINE_S, "the producer to learn broker-b")
            spread = _send_all(producer, "s")
            sets = Counter(r.broker_name for _, r in spread)
            assert set(sets) == {"broker-a", "broker-b"}, sets
            keyed = {r.broker_name for body, r in spread if int(body[1:]) % 2}
            assert keyed == {"broker-a", "broker-b"}  # keys hash over both sets' queues
            _read_back(cluster.controller_addr, before + spread)

            json_rows(admin(*controller, "topic", "update", "--topic", TOPIC,
                            "--remove-broker-name", "broker-b"))
            wait_for(lambda: _route_drops(producer, "broker-b"), ROUTE_DEADLINE_S,
                     "the producer to leave drained broker-b")
            held_b = _held(cluster.endpoint("broker-b"))
            after = _send_all(producer, "d")
            assert Counter(r.broker_name for _, r in after) == {"broker-a": MESSAGES}
            _read_back(cluster.controller_addr, after)
            assert _held(cluster.endpoint("broker-b")) == held_b
    finally:
        cluster.down()
