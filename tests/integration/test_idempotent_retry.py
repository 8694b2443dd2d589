"""An idempotent producer retries "stored, not acknowledged" answers until they are acknowledged.

Goal (issue 15): a put its master could not get acknowledged (FLUSH_SLAVE_TIMEOUT: the slave
did not ack within syncFlushTimeout) is retried by an idempotent producer until the send
deadline, and answered PUT_OK only once the batch is held by the quorum, stored once; a
producer without idempotence gets the status back at once (a retry could store it twice).
Method: a real static replica set of 2 with inSyncReplicas=2; the slave stays in the
SyncStateSet while it is stopped (long housekeeping limits), so each put is stored on the master
and times out waiting for its ack; SIGCONT after a while lets the quorum form.
"""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest

from connector import Admin, ClientConfig, Producer
from tests.ha.replica_set import ReplicaSet, wait_for

pytestmark = pytest.mark.integration

TOPIC = "retried"
FROZEN_S = 1.5  # several syncFlushTimeouts (300 ms) of retries before the slave comes back


def test_an_idempotent_producer_retries_until_the_quorum_holds_the_put(tmp_path: Path) -> None:
    replicas = ReplicaSet(tmp_path / "set", 2, inSyncReplicas="2", syncFlushTimeout="300",
                          haHousekeepingInterval="120000", haMaxTimeSlaveNotCatchup="120000")
    try:
        master = replicas.endpoints[0]
        config = ClientConfig(brokers=(master,), send_deadline_ms=20_000, backoff_max_ms=100)
        Admin(config).create_topic(TOPIC, queues=1)
        replicas.wait_sync_state_set([0, 1])
        replicas.signal(1, signal.SIGSTOP)
        with Producer(config) as plain:
            assert plain.send(TOPIC, b"plain").status == "FLUSH_SLAVE_TIMEOUT"
        results = []
        with Producer(config, idempotent=True) as producer:
            sender = threading.Thread(
                target=lambda: results.append(producer.send(TOPIC, b"idempotent")))
            stored = replicas.info(0)["max_log_position"]
            sender.start()
            wait_for(lambda: replicas.info(0)["max_log_position"] > stored, 10,
                     "the idempotent put to be stored on the master")
            sender.join(timeout=FROZEN_S)
            assert sender.is_alive(), f"answered while the slave was stopped: {results}"
            replicas.signal(1, signal.SIGCONT)
            sender.join(timeout=20)
        assert not sender.is_alive()
        assert [result.status for result in results] == ["PUT_OK"]
        # answered from the master's table (a duplicate): at the original's place (issue 43)
        assert [(result.queue_id, result.queue_offset) for result in results] == [(0, 1)]
        wait_for(lambda: replicas.info(0)["confirm_log_position"]
                 == replicas.info(0)["max_log_position"], 20, "the slave to confirm")
        bodies = sorted(replicas.read_all(0, TOPIC, 1).values())
        assert bodies == [b"idempotent", b"plain"], "stored once each, whatever the retries"
    finally:
        replicas.down()
