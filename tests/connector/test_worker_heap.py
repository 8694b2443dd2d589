"""The Python worker's heap is frozen once per process at our first read or write task.

Why it matters and what it costs: connector/spark/worker_heap.py. Each check runs in a fresh
interpreter (`gc.freeze` is process-wide and cannot be judged inside the test runner, whose
heap someone else may have frozen). The gain itself is measured by `bench spark` (README).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess

ROOT = Path(__file__).resolve().parents[2]


def run_python(code: str, *args: str) -> str:
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_freezes_once_per_process_and_again_in_a_forked_child() -> None:
    out = run_python("""
        import gc, os
        from connector.spark.worker_heap import freeze_worker_heap_once
        assert gc.get_freeze_count() == 0
        assert freeze_worker_heap_once()
        frozen = gc.get_freeze_count()
        assert frozen > 1000, frozen  # the imports' objects
        later = [[n] for n in range(5000)]  # made after: the collector still sees them
        assert not freeze_worker_heap_once()
        assert gc.get_freeze_count() == frozen
        pid = os.fork()  # Spark's daemon forks its workers: each child freezes its own heap
        if pid == 0:
            os._exit(0 if freeze_worker_heap_once() and gc.get_freeze_count() > frozen else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        print("ok", len(later))
    """)
    assert out == "ok 5000"


@pytest.mark.parametrize("task", ["read", "write"])
@pytest.mark.parametrize("value, frozen", [("default", True), ("true", True), ("false", False)])
def test_read_and_write_tasks_freeze_unless_the_option_says_not(task: str, value: str,
                                                                 frozen: bool,
                                                                 broker: BrokerProcess) -> None:
    # a read of Spark's empty InputPartition and a write of no rows (which looks up its
    # replica set on the broker): did the task freeze the worker's heap?
    out = run_python("""
        import gc, sys
        from pyspark.sql.datasource import InputPartition
        from connector.spark.datasource import _read
        from connector.spark.writers import write_task
        from connector.spark.options import parse_sink_options, parse_source_options
        from connector.spark.sink import SinkColumns
        from connector.spark.source import ALL_SOURCE_COLUMNS
        task, value, endpoint = sys.argv[1:]
        common = {"brokers": endpoint}
        if value != "default":
            common["workerGcFreeze"] = value
        if task == "read":
            options = parse_source_options({**common, "subscribe": "t"})
            assert list(_read(InputPartition(None), options, ALL_SOURCE_COLUMNS)) == []
        else:
            options = parse_sink_options({**common, "topic": "t"})
            message = write_task(iter(()), options, SinkColumns("body", (), False), None)
            assert message.rows == 0, message
        print(gc.get_freeze_count() > 0)
    """, task, value, broker.endpoint)
    assert out == str(frozen)
