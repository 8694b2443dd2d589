"""queuesMax bounds the queues a broker holds (ha/broker/descriptors.py, docs/operations.md,
"Open files").

Why: a broker whose queues outgrew its file descriptors while it ran kept answering PUT_OK
while every checkpoint failed with `Too many open files` (found 2026-12-03: 2,000 queues under a
nofile of 1,500), and its links to the controller failed the same way. Method: real brokers.
One with queuesMax 20 refuses a create, an auto-create and an update past it with one line
naming the key, creating nothing, and takes what fits again once a topic shrinks. One started
under a hard nofile of 1,400 derives its limit from it ((1,400 - 1,024) / 2 = 188 queues): the
topic past it is refused with a line naming the limit's origin, every queue within it takes a
message, the checkpoint catches up without `Too many open files`, and the broker restarts and
serves under the same limit.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from connector import Admin, ClientConfig, Producer
from connector.protocol import RocketHAError
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

QUEUES_PER_TOPIC = 8
HARD_NOFILE = 1400
DERIVED_QUEUES_MAX = (HARD_NOFILE - 1024) // 2  # 188
LOW_NOFILE = (  # a launcher: set soft and hard nofile, then exec the broker
    "import os, resource, sys; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({HARD_NOFILE}, {HARD_NOFILE})); "
    "os.execv(sys.argv[1], sys.argv[1:])")
SETTLE_TIMEOUT_S = 120.0


def _refused(call: object) -> RocketHAError:
    with pytest.raises(RocketHAError) as caught:
        call()  # type: ignore[operator]
    return caught.value


def _names(admin: Admin) -> set[str]:
    return {topic["name"] for topic in admin.list_topics()}


def test_a_topic_change_past_queues_max_is_refused_with_one_line(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", queuesMax="20").start()
    try:
        config = ClientConfig(brokers=(broker.endpoint,), retries_max=0)
        admin = Admin(config)
        admin.create_topic("a", queues=8)
        admin.create_topic("b", queues=8)
        error = _refused(lambda: admin.create_topic("c", queues=8))
        assert error.name == "BAD_REQUEST", error
        assert "queuesMax 20" in str(error) and "24 queues" in str(error), str(error)
        assert "\n" not in str(error)
        assert "c" not in _names(admin)
        with Producer(config) as producer:  # an auto-create (defaultTopicQueueNums 8) too
            error = _refused(lambda: producer.send("d", b"never"))
            assert error.name == "BAD_REQUEST" and "queuesMax 20" in str(error), str(error)
            assert "d" not in _names(admin)
            error = _refused(lambda: admin.update_topic("b", write_queue_nums=13))
            assert "queuesMax 20" in str(error) and "21 queues" in str(error), str(error)
            admin.update_topic("a", write_queue_nums=4, read_queue_nums=4)  # shrinking passes
            admin.create_topic("c", queues=8)  # 4 + 8 + 8 = 20 fits
            assert producer.send("c", b"fits", queue_id=7).ok
    finally:
        broker.stop()


def test_a_broker_derives_queues_max_from_its_hard_nofile(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", flushDiskType="ASYNC_FLUSH",
                           launcher=[sys.executable, "-c", LOW_NOFILE]).start()
    try:
        config = ClientConfig(brokers=(broker.endpoint,), retries_max=0)
        admin = Admin(config)
        topics = DERIVED_QUEUES_MAX // QUEUES_PER_TOPIC  # 23 topics of 8: 184 queues
        for index in range(topics):
            admin.create_topic(f"t{index}", queues=QUEUES_PER_TOPIC)
        error = _refused(lambda: admin.create_topic("past", queues=QUEUES_PER_TOPIC))
        assert f"queuesMax {DERIVED_QUEUES_MAX}" in str(error), str(error)
        assert f"hard RLIMIT_NOFILE of {HARD_NOFILE}" in str(error), str(error)
        with Producer(config) as producer:  # every queue within the limit gets a file
            for index in range(topics):
                results = producer.send_batch(f"t{index}", [
                    {"body": b"x", "queue_id": queue_id} for queue_id in range(QUEUES_PER_TOPIC)])
                assert all(result.ok for result in results), results[0]
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        while broker.action("broker_stats")["store"]["unflushed_queues"] > 0:
            assert time.monotonic() < deadline, "the checkpoint did not catch up"
            time.sleep(0.1)
        broker.stop()
        broker.start()  # recovery maps every queue: two descriptors each
        with Producer(config) as producer:
            assert producer.send("t0", b"after", queue_id=0).ok
        assert "Too many open files" not in broker.log.read_text()
    finally:
        broker.stop()
