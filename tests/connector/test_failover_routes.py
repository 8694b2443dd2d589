"""Planning while a replica set's master is gone (the routes still name it, the controller has
not yet elected another): queue bounds come from the next member, and say so.

Goal: `queue_bounds` answers from the next endpoint when the first (the master the routes
name) refuses connections, marking the bounds `from_master=False`; such bounds never prove
data loss (a slave's confirm position may trail the master's by a push), while the master's
own bounds still do. Method: one broker process behind an endpoint list whose first entry is a
closed port; `check_positions` called with both kinds of bounds.
"""

from __future__ import annotations

import pytest

from connector import Admin, ClientConfig, Producer
from connector.client.routes import ReplicaSet, queue_bounds
from connector.spark.offsets import QueueRef
from connector.spark.options import parse_source_options
from connector.spark.planning import Bounds
from connector.spark.source import check_positions
from tests.integration.broker_process import free_port

pytestmark = pytest.mark.integration

TOPIC = "fr_bounds"


def test_bounds_from_the_next_member_when_the_master_is_gone(broker) -> None:  # type: ignore
    Admin(ClientConfig(brokers=(broker.endpoint,))).create_topic(TOPIC, queues=2)
    with Producer(ClientConfig(brokers=(broker.endpoint,))) as producer:
        rows = [{"body": f"m{i}".encode(), "queue_id": i % 2} for i in range(6)]
        assert all(result.ok for result in producer.send_batch(TOPIC, rows))
    direct = queue_bounds(ReplicaSet("broker-a", (broker.endpoint,)), TOPIC, 2000)
    assert [(q.max_queue_offset, q.from_master) for q in direct] == [(3, True), (3, True)]

    dead = f"127.0.0.1:{free_port()}"  # nothing listens: connection refused, as after SIGKILL
    moved = queue_bounds(ReplicaSet("broker-a", (dead, broker.endpoint)), TOPIC, 2000)
    assert [(q.queue_id, q.max_queue_offset, q.from_master) for q in moved] == [
        (0, 3, False), (1, 3, False)]


def test_only_the_masters_bounds_prove_data_loss() -> None:
    options = parse_source_options({"brokers": "127.0.0.1:1", "subscribe": TOPIC})
    ref = QueueRef(TOPIC, "broker-a", 0)
    ahead = {ref: 9}  # the query read up to 9; a slave answering for the dead master has 7
    check_positions(options, ahead, {ref: Bounds(0, 7, from_master=False)})
    with pytest.raises(Exception, match="queue ends at 7"):
        check_positions(options, ahead, {ref: Bounds(0, 7)})
