"""A broker makes room for two file descriptors per queue before its store opens
(ha/broker/descriptors.py): the sans-IO rule, then a real broker whose soft RLIMIT_NOFILE is
below what its queues need after a restart."""

from __future__ import annotations

import os
import resource
import sys
from pathlib import Path

from connector import Admin, ClientConfig, Producer
from ha.broker.descriptors import (
    QUEUES_MAX_FLOOR,
    QUEUES_MAX_UNBOUNDED,
    needed_descriptors,
    queue_count,
    queues_max_for,
    soft_limit_for,
)
from tests.ha.replica_set import wait_for
from tests.integration.broker_process import BrokerProcess

INFINITY = resource.RLIM_INFINITY


def test_a_soft_limit_with_room_is_kept() -> None:
    assert soft_limit_for(100, 65536, 65536) == (65536, None)
    assert soft_limit_for(100, INFINITY, INFINITY) == (INFINITY, None)


def test_a_short_soft_limit_is_raised_to_the_need_within_the_hard_one() -> None:
    assert soft_limit_for(10_000, 1024, 65536) == (needed_descriptors(10_000), None)
    assert soft_limit_for(10_000, 1024, INFINITY) == (needed_descriptors(10_000), None)


def test_a_short_hard_limit_is_used_and_named_in_one_line() -> None:
    soft, warning = soft_limit_for(10_000, 1024, 20_000)
    assert soft == 20_000
    assert warning is not None and "\n" not in warning
    assert "10000 queues" in warning and "20000" in warning and "LimitNOFILE" in warning


def test_queues_max_is_what_the_hard_limit_lets_a_restart_open_unless_set() -> None:
    assert queues_max_for(0, 20_000) == 9_488  # (20,000 - 1,024) / 2
    assert needed_descriptors(queues_max_for(0, 20_000)) <= 20_000
    assert queues_max_for(0, 65_536) == 32_256
    assert queues_max_for(0, 1_024) == QUEUES_MAX_FLOOR  # a hard limit at the reserve
    assert queues_max_for(0, INFINITY) == QUEUES_MAX_UNBOUNDED
    assert queues_max_for(12_000, 20_000) == 12_000  # set: the operator's figure stands


def test_queue_count_counts_queue_directories(tmp_path: Path) -> None:
    assert queue_count(tmp_path) == 0  # no consumequeue directory yet
    for topic, queues in (("a", 3), ("b", 8)):
        for queue_id in range(queues):
            (tmp_path / "consumequeue" / topic / str(queue_id)).mkdir(parents=True)
    (tmp_path / "consumequeue" / "a" / "stray-file").write_text("")
    assert queue_count(tmp_path) == 11


SOFT_LIMIT = 1024  # below the ~1,210 descriptors 600 queues take after a restart
LOW_SOFT_LIMIT = (  # a launcher: lower the soft limit only, then exec the broker
    "import os, resource, sys; hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]; "
    f"resource.setrlimit(resource.RLIMIT_NOFILE, ({SOFT_LIMIT}, hard)); "
    "os.execv(sys.argv[1], sys.argv[1:])")
TOPICS, QUEUES_PER_TOPIC = 75, 8


def _soft_nofile(pid: int) -> int:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            return int(line.split()[3])
    raise AssertionError("no 'Max open files' line")


def test_a_broker_restarts_with_more_queues_than_its_soft_limit_allows(tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert hard == INFINITY or hard >= needed_descriptors(TOPICS * QUEUES_PER_TOPIC)
    broker = BrokerProcess(tmp_path / "b", flushDiskType="ASYNC_FLUSH",
                           launcher=[sys.executable, "-c", LOW_SOFT_LIMIT])
    broker.start()
    try:
        config = ClientConfig(brokers=(broker.endpoint,))
        admin = Admin(config)
        for index in range(TOPICS):
            admin.create_topic(f"t{index}", queues=QUEUES_PER_TOPIC)
        with Producer(config) as producer:
            for index in range(TOPICS):
                results = producer.send_batch(f"t{index}", [
                    {"body": b"x", "queue_id": queue_id} for queue_id in range(QUEUES_PER_TOPIC)])
                assert all(result.ok for result in results)
        wait_for(lambda: queue_count(broker.store_dir) >= TOPICS * QUEUES_PER_TOPIC,
                 timeout_s=60, what="every queue's directory (and the system topic's)")
        broker.stop()
        broker.start()  # before: EMFILE in recovery, the broker exited with a traceback
        assert broker.process is not None
        pid = broker.process.pid
        assert _soft_nofile(pid) >= needed_descriptors(TOPICS * QUEUES_PER_TOPIC)
        assert len(os.listdir(f"/proc/{pid}/fd")) > SOFT_LIMIT  # the old limit was short
        with Producer(config) as producer:  # and it serves
            assert producer.send("t0", b"after", queue_id=0).ok
    finally:
        broker.stop()
