"""A failed fsync stops the broker: the put that needed it is never PUT_OK (fsyncgate).

Goal: docs/design.md §5.1 (PUT_OK only for what a replica fsynced, SYNC_FLUSH) under a disk that
fails
an fsync. After a failed fsync the kernel may have dropped the dirty pages, so neither an
acknowledgement nor a retry of the same fsync is safe: the process must stop, and a restart
recovers from what reached the disk. Method: a real `python -m ha.broker` process (SYNC_FLUSH)
runs under tests/support/fsync_faults.py, which makes every fsync of the store fail with EIO
once a trigger file exists; a put before the trigger is PUT_OK; the put after it is not (the
process exits before it can answer, or answers FLUSH_DISK_TIMEOUT); the process exits with
FSYNC_FAILED_EXIT_CODE and its log says why; restarted without the fault it serves every
acknowledged message.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from pyarrow import flight

from connector.protocol import GetTicket
from storage_engine import FSYNC_FAILED_EXIT_CODE
from tests.integration.broker_process import BrokerProcess
from tests.integration.test_broker import bodies_table, consume, produce

pytestmark = pytest.mark.integration


def test_a_failed_fsync_stops_the_broker_and_acknowledges_nothing(tmp_path: Path) -> None:
    trigger = tmp_path / "fail-fsync"
    store_dir = tmp_path / "broker" / "store"
    launcher = [sys.executable, "-m", "tests.support.fsync_faults", str(trigger), str(store_dir)]
    broker = BrokerProcess(tmp_path / "broker", launcher=launcher,
                           flushDiskType="SYNC_FLUSH", syncFlushTimeout="3000").start()
    try:
        broker.action("create_topic", {"topic": "t", "read_queue_nums": 1,
                                        "write_queue_nums": 1})
        (before,) = produce(broker, "t", bodies_table([b"acked-0", b"acked-1"]))
        assert before.status == "PUT_OK"
        trigger.touch()
        try:
            after = produce(broker, "t", bodies_table([b"never-acked"]))
            statuses = [reply.status for reply in after]
        except (flight.FlightError, AssertionError, OSError) as err:
            statuses = [f"no answer: {type(err).__name__}"]
        assert "PUT_OK" not in statuses, statuses
        assert broker.process is not None
        assert broker.process.wait(20) == FSYNC_FAILED_EXIT_CODE
        log = broker.log.read_text()
        assert "fsync of" in log and "stopping the process" in log, log[-2000:]
    finally:
        broker.stop()
    trigger.unlink()
    restarted = BrokerProcess(tmp_path / "broker", flushDiskType="SYNC_FLUSH").start()
    try:
        rows, _ = consume(restarted, GetTicket("t", 0, 0))
        bodies = [row["body"] for row in rows]
        assert bodies[:2] == [b"acked-0", b"acked-1"], bodies
        assert set(bodies) <= {b"acked-0", b"acked-1", b"never-acked"}
    finally:
        assert restarted.stop() == 0
