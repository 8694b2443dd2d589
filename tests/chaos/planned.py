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
    add-set    one more replica set (`rocketha-cluster add-set`, on new test hosts), waited
               for until it has a master and a full SyncStateSet, then the topic is extended
               onto it as `rocketha-admin topic update --add-broker-name` does (its config
               copied from a set that has it, writable) and a consumer started for it. The
               set stays (nothing to heal); at most ADD_SETS_MAX per run, later ones skipped.
    drain      toggles: when a set was drained by an earlier drain, it takes the topic's
               writes again (re-added); else one set is drained from the topic's writes as
               `--remove-broker-name` does (write permission off; reads go on), never the
               last set that takes them. A drained set stays drained while the faults after
               it run, so kills and pauses meet a topic on fewer sets; the producers follow
               the topic's writable sets (tests/chaos/workload.py TopicRoutes).
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
from connector.admin.scale import PERM_READ, extended_fields
from connector.client.routes import PERM_WRITE
from connector.protocol import RocketHAError
from ha.cluster import auth as cluster_auth
from ha.cluster.rolling import _back_in_sync_state_set, _controller_caught_up
from ha.cluster.security import client_tls
from tests.chaos.history import History
from tests.chaos.workload import TOPIC, SetAdmin
from tests.ha.replica_set import wait_for
from tests.integration.failover_cluster import FailoverCluster

__all__ = ["ADD_SETS_MAX", "DRAIN_VARIANTS", "HANDOVER_VARIANTS", "RESTART_VARIANTS",
           "PlannedOperations", "drain_step"]

HANDOVER_VARIANTS = ("sigterm", "shutdown")
RESTART_VARIANTS = ("slave", "controller")
GRACEFUL_STOP_S = 60.0  # a handover (handoverTimeoutMs) plus the ordinary shutdown, on busy cores
SUCCESSOR_TIMEOUT_S = 30.0  # another member master after the old one exited
HANDOVER_LOG_LINES = 400  # the broker's last log lines searched for its handover's outcome
BACK_TIMEOUT_S = 120.0  # as rolling.py's STEP_TIMEOUT_S: a broker recovering its store
ADD_SETS_MAX = 1  # sets one run adds (each is 3 more brokers on 3 more hosts)
DRAIN_VARIANTS = ("toggle",)
ADMIN_TIMEOUT_MS = 5000  # one topic call to a set's master (retried until BACK_TIMEOUT_S)

Heal = Callable[[], None]


def drain_step(sets: list[str], writable: dict[str, bool], drained: list[str],
               draw: int) -> tuple[str, str] | None:
    """What a `drain` fault does: ("undrain", set) for the set an earlier drain took out
    (the oldest), else ("drain", one of the sets that take writes, by `draw`), None when
    fewer than two sets take writes (the topic must keep one)."""
    if drained:
        return "undrain", drained[0]
    takes = [name for name in sets if writable.get(name)]
    if len(takes) < 2:
        return None
    return "drain", takes[draw % len(takes)]


class PlannedOperations:
    """Starts a handover or a restart on `cluster`; the caller holds, then heals."""

    def __init__(self, cluster: FailoverCluster, history: History,
                 replica_sets: list[str] | None = None,
                 on_new_set: Callable[[str], None] | None = None) -> None:
        self.cluster = cluster
        self.history = history
        self.replica_sets = replica_sets if replica_sets is not None else []  # shared, grows
        self.on_new_set = on_new_set  # the run starts a consumer for a set add-set made
        self.added: list[str] = []
        self.drained: list[str] = []  # sets a drain took out of the topic's writes

    def _admin(self, replica_set: str) -> SetAdmin:
        config = ClientConfig(controller=self.cluster.controller_addr,
                              request_timeout_ms=ADMIN_TIMEOUT_MS, retries_max=2,
                              send_deadline_ms=3 * ADMIN_TIMEOUT_MS)
        return SetAdmin(config, replica_set)

    def _until_done(self, what: str, call: Callable[[], Any]) -> Any:
        """`call` again until it answers (a master elected meanwhile, a put's quorum back)."""
        def attempt() -> tuple[Any] | None:
            try:
                return (call(),)
            except RocketHAError as err:
                self.history.add("nemesis", "info", "fault_detail", name=what,
                                 retry=repr(err)[:200])
                return None
        return wait_for(attempt, BACK_TIMEOUT_S, what)[0]

    def _perm(self, fault: str, replica_set: str) -> int:
        """The topic's permission on `replica_set` (its master's word)."""
        admin = self._admin(replica_set)
        return int(self._until_done(f"{fault} perm {replica_set}",
                                    lambda: admin.get_topic(TOPIC))["perm"])

    def add_set(self, fault: str, started: Callable[[list[str]], None]
                ) -> tuple[list[str], Heal | None]:
        if len(self.added) >= ADD_SETS_MAX:
            return [], None
        started([])
        began = time.monotonic()
        name = self.cluster.add_set()
        members = self.cluster.members(name)
        master, _ = self.cluster.wait_master(name, timeout_s=BACK_TIMEOUT_S)
        self.cluster.wait_full_sync_state_set(master, len(members), timeout_s=BACK_TIMEOUT_S)
        template = self._until_done(f"{fault} template", lambda: self._admin(
            self.replica_sets[0]).get_topic(TOPIC))
        fields = extended_fields(template, {"perm": PERM_READ | PERM_WRITE})
        self._until_done(f"{fault} extend", lambda: self._admin(name).action(
            "create_topic", {"topic": TOPIC, **fields}))
        self.added.append(name)
        self.replica_sets.append(name)
        if self.on_new_set is not None:
            self.on_new_set(name)
        self.history.add("nemesis", "info", "fault_detail", name=fault, added=name,
                         members=members, master=master, topic=fields,
                         add_s=round(time.monotonic() - began, 3))
        return members, lambda: None

    def drain(self, fault: str, draw: int, started: Callable[[list[str]], None]
              ) -> tuple[list[str], Heal | None]:
        writable = {name: bool(self._perm(fault, name) & PERM_WRITE)
                    for name in self.replica_sets}
        step = drain_step(self.replica_sets, writable, self.drained, draw)
        if step is None:
            return [], None
        action, name = step
        started([name])
        admin = self._admin(name)
        perm = self._perm(fault, name)
        new_perm = (perm | PERM_WRITE | PERM_READ if action == "undrain"
                    else perm & ~PERM_WRITE | PERM_READ)
        self._until_done(f"{fault} {action}", lambda: admin.update_topic(TOPIC, perm=new_perm))
        if action == "undrain":
            self.drained.remove(name)
        else:
            self.drained.append(name)
        self.history.add("nemesis", "info", "fault_detail", name=fault, action=action,
                         set=name, perm=new_perm, writable_before=writable)
        return [name], lambda: None

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
