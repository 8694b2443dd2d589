"""The put in flight when a paused master is replaced is acknowledged with its real position.

Goal (issue 43): in hidden fault runs the batch in flight when a paused master was replaced
was resent to the new master, which already held it and answered it as a duplicate, PUT_OK
with queue id and queue offset -1. Now that answer names where the message is, on the new
master, from its idempotence table rebuilt from the log at take-over.

Method: `rocketha-cluster up` with a controller and a replica set of 3 that needs all three
replicas for an ack (inSyncReplicas=3, no degradation). With one slave stopped (SIGSTOP), one
idempotent send is stored on the master and replicated to the other slave, and can never be
acknowledged (the retries the producer makes are answered from the master's table, never
PUT_OK); then the master is stopped and the other slave resumed (the controller elects only
once every SyncStateSet member reported where its log ends), the controller elects a slave
holding the put (the most advanced), and the producer's master watch resends the batch there
(connector/client/master_watch.py). The old master is resumed so the new one has its three
replicas. The resend's result
must be PUT_OK at the (queue, offset) where the new master holds the body, answered as a
duplicate (the new master's duplicates_dropped), and the body stored once. Every wait is on
a condition (broker_info positions, the controller's election), none on a sleep. (The send
follows the slave's SIGSTOP at once: the master keeps it in its SyncStateSet for
haHousekeepingInterval, 1.5 s, long enough to take the put.)
"""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

from connector import Admin, ClientConfig, Producer, SendResult
from tests.ha.replica_set import wait_for
from tests.integration.failover_cluster import FailoverCluster, read_topic
from tests.integration.test_controller_failover import ELECTION_DEADLINE_S, SET_A

pytestmark = pytest.mark.integration

TOPIC = "in-flight"
ALL_THREE = {"inSyncReplicas": "3", "enableAutoInSyncReplicas": "false"}


def _duplicates_dropped(cluster: FailoverCluster, name: str) -> int:
    admin = Admin(ClientConfig(brokers=(cluster.endpoint(name),), retries_max=0,
                               request_timeout_ms=5000))
    return int(admin.broker_stats()["idempotence"]["duplicates_dropped"])


def test_the_resent_put_of_a_paused_master_names_its_position(tmp_path: Path) -> None:
    cluster = None
    results: list[SendResult] = []
    errors: list[BaseException] = []
    try:
        cluster = FailoverCluster(tmp_path / "cluster", controllers=1, replicas=3, **ALL_THREE)
        master, info = cluster.wait_master(SET_A)
        cluster.wait_full_sync_state_set(master, 3, timeout_s=ELECTION_DEADLINE_S)
        holder, stopped = [name for name in cluster.members(SET_A) if name != master]
        config = ClientConfig(controller=cluster.controller_addr, request_timeout_ms=30_000,
                              send_deadline_ms=90_000, backoff_max_ms=200)
        with Producer(config, idempotent=True) as producer:
            warm = producer.send(TOPIC, b"warm-up")
            assert warm.ok and warm.queue_id >= 0 and warm.queue_offset >= 0, warm
            cluster.wait_converged(holder, master)
            cluster.pause(stopped)  # from here no put on `master` can be acknowledged
            before = cluster.info_now(master)["max_log_position"]

            def send() -> None:
                try:
                    results.append(producer.send(TOPIC, b"in flight", key="k"))
                except BaseException as err:  # noqa: BLE001 - reported below
                    errors.append(err)

            sender = threading.Thread(target=send, name="in-flight-sender", daemon=True)
            sender.start()
            def grown() -> int | None:
                end = int(cluster.info_now(master)["max_log_position"])
                return end if end > before else None

            stored_at = wait_for(grown, 30, "the put to be stored on the master")
            wait_for(lambda: cluster.info_now(holder)["max_log_position"] >= stored_at, 30,
                     f"{holder} to hold the put")
            assert not results and not errors, (results, errors)  # held: not acknowledged
            cluster.pause(master)  # the answer is never sent: the producer must resend
            cluster.resume(stopped)  # (an election waits for every SyncStateSet member)
            new, new_info = cluster.wait_master(SET_A, min_epoch=info["master_epoch"] + 1,
                                                exclude=[master],
                                                timeout_s=ELECTION_DEADLINE_S)
            # (the resumed slave may hold the put too: the master's last frames wait in its
            # socket's buffer; the election ranks by position, so the new master holds it)
            assert cluster.info_now(new)["max_log_position"] >= stored_at, new
            cluster.resume(master)  # it follows the new master: three replicas again
            sender.join(timeout=90)
            assert not sender.is_alive(), "the resent put was never answered"
        assert not errors, errors
        [result] = results
        assert result.status == "PUT_OK", result
        assert result.queue_id >= 0 and result.queue_offset >= 0, (
            f"acknowledged without a position: {result}")
        assert _duplicates_dropped(cluster, new) >= 1, "the resend was not a duplicate there"
        cluster.wait_confirm_at_end(new)
        found = read_topic(cluster.endpoint(new), TOPIC)
        assert found.get((result.queue_id, result.queue_offset)) == b"in flight", (
            result, sorted(found.items()))
        assert Counter(found.values())[b"in flight"] == 1, "stored twice"
        cluster.wait_slave(master, new_info["master_epoch"])
    finally:
        if cluster is not None:
            cluster.down()  # SIGCONT first
