"""The topic tables yield the CPU to puts: the `topic-tables` thread and delta-rs's tokio threads
run topicTableNice nicer than the broker's other threads (ha/broker/topic_tables.py), read from
/proc/<broker pid>/task/*/stat (field 19 is the nice) after a table commit."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from connector import Admin, ClientConfig, Producer
from tests.ha.replica_set import wait_for
from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="per-thread nice is Linux's")

pytest.importorskip("deltalake", reason="topic tables need rocketha[tables]")

NICE = 7  # not the default, so the key is seen to be read
TABLE_THREADS = {"topic-tables", "tokio-rt-worker"}  # ours, and delta-rs's tokio runtime
# jemalloc's purging threads are made by whichever thread first needs one: either nice
EITHER = {"jemalloc_bg_thd"}
PUT_THREADS = {"grpcpp_sync_ser", "flush-store"}  # gRPC's handlers (the puts), the flush


def thread_nices(pid: int) -> list[tuple[str, int]]:
    """(kernel name, nice) of each thread of `pid`."""
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
            fields = (task / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # a thread that ended meanwhile
            continue
        found.append((name, int(fields[16])))  # stat's field 19 (after pid and comm: index 16)
    return found


def test_the_table_threads_run_nicer_and_the_put_threads_do_not(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "broker", tieredStoreUrl=f"file://{tmp_path / 'tier'}",
                           topicTableDefault="delta", topicTableIntervalMs="100",
                           topicTableNice=str(NICE)).start()
    try:
        assert broker.process is not None
        config = ClientConfig(brokers=(broker.endpoint,), request_timeout_ms=30_000)
        admin = Admin(config)
        admin.create_topic("orders", queues=2)
        with Producer(config) as producer:
            for index in range(4):
                assert producer.send("orders", b"row %d" % index).status == "PUT_OK"

        def committed() -> bool:
            table = admin.broker_info()["topic_tables"]["topics"].get("orders", {})
            return bool(table.get("commits")) and table.get("lag_messages") == 0

        wait_for(committed, 120.0, "the table's first commit")
        nices = thread_nices(broker.process.pid)
    finally:
        broker.stop()
    by_name: dict[str, set[int]] = {}
    for name, nice in nices:
        by_name.setdefault(name, set()).add(nice)
    assert by_name.get("topic-tables") == {NICE}, nices
    assert by_name.get("tokio-rt-worker") == {NICE}, nices  # delta-rs's runtime, every thread
    others = {name: values for name, values in by_name.items()
              if name not in TABLE_THREADS | EITHER}
    assert set(others) >= PUT_THREADS, nices
    assert all(values == {0} for values in others.values()), nices
