"""Planned operations as chaos faults: what operators do on purpose, mixed with crashes.

Why: a graceful handover or a rolling restart is judged by tests of its own on a quiet
cluster (tests/integration/test_handover.py, test_rolling_restart.py); in a campaign it runs
beside kills, pauses and partitions, whose leftovers (a slave still catching up, a controller
just re-elected) are what such a step meets in production. The checker judges the run as any
other: no acknowledged message lost, none stored twice, every ack at its position.

Kinds (opt-in in tests/chaos/nemesis.py, so the default schedules stay as they were):
    handover   the master of a replica set is stopped gracefully, by SIGTERM (`sigterm`) or
               the broker's `shutdown` action as `rocketha-admin broker shutdown` sends it
               (`shutdown`); the fault waits until it exited and another member is master.
               Healed by `rocketha-cluster up`, then waits until it is back in its set's
               SyncStateSet.
    restart    one member other than a master (`slave`, `controller`: any controller, the
               leader included) is stopped by SIGTERM; healed by `up`, then waits as
               `rocketha-cluster restart --rolling` does (ha/cluster/rolling.py's conditions:
               a broker back in its SyncStateSet, a controller following a leader and caught
               up with its commit index).
The time between the stop and the heal is the plan's hold time (how long the member is away).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from typing import Any

from connector import Admin, ClientConfig
from connector.protocol import RocketHAError
from ha.cluster import auth as cluster_auth
from ha.cluster.rolling import _back_in_sync_state_set, _controller_caught_up
from ha.cluster.security import client_tls
from tests.chaos.history import History
from tests.ha.replica_set import wait_for
from tests.integration.failover_cluster import FailoverCluster

__all__ = ["HANDOVER_VARIANTS", "RESTART_VARIANTS", "PlannedOperations"]

HANDOVER_VARIANTS = ("sigterm", "shutdown")
RESTART_VARIANTS = ("slave", "controller")
GRACEFUL_STOP_S = 60.0  # a handover (handoverTimeoutMs) plus the ordinary shutdown, on busy cores
SUCCESSOR_TIMEOUT_S = 30.0  # another member master after the old one exited
HANDOVER_LOG_LINES = 400  # the broker's last log lines searched for its handover's outcome
BACK_TIMEOUT_S = 120.0  # as rolling.py's STEP_TIMEOUT_S: a broker recovering its store

Heal = Callable[[], None]


class PlannedOperations:
    """Starts a handover or a restart on `cluster`; the caller holds, then heals."""

    def __init__(self, cluster: FailoverCluster, history: History) -> None:
        self.cluster = cluster
        self.history = history

    def _manifest(self) -> dict[str, Any]:
        return dict(json.loads((self.cluster.directory / "cluster.json").read_text()))

    def stop_gracefully(self, fault: str, name: str, *, by_action: bool = False) -> None:
        """SIGTERM (or the broker's shutdown action) and wait for the exit; a process still
        alive after GRACEFUL_STOP_S is killed and the history says so (`forced`)."""
        pid = self.cluster.pid(name)
        assert pid is not None, f"{name} is not running"
        started = time.monotonic()
        if by_action:
            config = ClientConfig(brokers=(self.cluster.endpoint(name),), retries_max=0,
                                  request_timeout_ms=10_000)
            try:
                Admin(config).action("shutdown")
            except RocketHAError as err:  # the reply may be lost as the broker goes away
                self.history.add("nemesis", "info", "fault_detail", name=fault,
                                 shutdown_reply=repr(err)[:300])
        else:
            os.kill(pid, signal.SIGTERM)
        deadline = started + GRACEFUL_STOP_S
        while self.cluster.pid(name) is not None and time.monotonic() < deadline:
            time.sleep(0.05)
        forced = self.cluster.pid(name) is not None
        if forced:
            self.cluster.kill(name)
        self.history.add("nemesis", "info", "fault_detail", name=fault, stopped=name,
                         stop_s=round(time.monotonic() - started, 3), forced=forced)

    def handover(self, fault: str, replica_set: str, variant: str,
                 started: Callable[[list[str]], None]) -> tuple[list[str], Heal | None]:
        found = self.cluster.master_now(replica_set)
        if found is None:
            return [], None
        master, info = found
        started([master])
        stop_began = time.monotonic()
        self.stop_gracefully(fault, master, by_action=variant == "shutdown")
        successor, after = self.cluster.wait_master(
            replica_set, min_epoch=info["master_epoch"] + 1, exclude=[master],
            timeout_s=SUCCESSOR_TIMEOUT_S)
        self.history.add("nemesis", "info", "fault_detail", name=fault, successor=successor,
                         epoch=after["master_epoch"],
                         successor_s=round(time.monotonic() - stop_began, 3),
                         outcome=self._handover_outcome(master))
        return [master], lambda: self._back_broker(master)

    def restart(self, fault: str, victim: str,
                started: Callable[[list[str]], None]) -> tuple[list[str], Heal | None]:
        started([victim])
        self.stop_gracefully(fault, victim)
        heal = self._back_controller if victim in self.cluster.controllers else self._back_broker
        return [victim], lambda: heal(victim)

    def _handover_outcome(self, name: str) -> str:
        """The broker's own word on its last stop (ha/broker/main.py logs what `hand_over`
        returned): "handed over to broker N ..." or "no handover: why". A stop that fell back
        to a failover is no violation (the checker judges the data), but a campaign whose
        handovers all fell back would not test the handover: the history keeps which."""
        lines = self.cluster.log_tail(name, HANDOVER_LOG_LINES).splitlines()
        starts = [i for i, line in enumerate(lines) if " serving on " in line]
        lines = lines[starts[-1]:] if starts else lines  # this run of the broker only
        said = [line for line in lines if "handed over to broker" in line or "no handover" in line]
        return said[-1].split(": ", 1)[-1][:300] if said else "not logged"

    def _back_broker(self, name: str) -> None:
        self.cluster.up()
        manifest = self._manifest()
        broker = next(b for b in manifest["brokers"] if b["name"] == name)
        tls, credentials = self._security(manifest)
        wait_for(lambda: _back_in_sync_state_set(broker, manifest, tls, credentials),
                 BACK_TIMEOUT_S, f"{name} back in its SyncStateSet")

    def _back_controller(self, name: str) -> None:
        self.cluster.up()
        manifest = self._manifest()
        controller = next(c for c in manifest["controllers"] if c["name"] == name)
        tls, credentials = self._security(manifest)
        wait_for(lambda: _controller_caught_up(controller, manifest, tls, credentials),
                 BACK_TIMEOUT_S, f"{name} to follow a leader and catch up")

    def _security(self, manifest: dict[str, Any]) -> tuple[Any, Any]:
        return (client_tls(self.cluster.directory, manifest),
                cluster_auth.admin_credentials(self.cluster.directory))
