"""Faults for a chaos run: a schedule drawn from the seed, and their injection and healing.

`schedule(seed, kinds)` yields FaultPlans from `random.Random(seed)` alone: the same seed gives
the same sequence of (kind, variant, target role, choice draws, hold and quiet times), so a
run replays its schedule. Which process a role names ("the master of broker-b") is resolved
when the fault starts, from the cluster as it is then.

Kinds and variants (targets: master / slave of a replica set, controller leader / follower):
    kill        SIGKILL; healed by `rocketha-cluster up` (restarts what is down)
    pause       SIGSTOP (until every thread stopped); healed by SIGCONT
    partition   nftables rules inside host namespaces: `halves` (a random minority of hosts
                cut from the rest, both ways), `isolate-master`, `isolate-leader` (the
                controller leader), `one-way` (the master's host drops what it sends, or
                what it receives, to or from the other hosts). Clients, in the root
                namespace, are never cut off. Healed by flushing the rules.
    loss        30-80 % of a host's packets with the network dropped at random (nftables
                numgen), the master's or the controller leader's host
    link        the host's link set down; healed by setting it up
    power       a broker (master or slave) loses power: SIGKILL, then its LazyFS store
                (tests/chaos/disk_faults.py) forgets every write not fsynced; healed by
                `rocketha-cluster up` (crash recovery on what was durable)
    disk        the disk of a replica set's limited broker (`<set>-2`, on a tmpfs of 256 MiB)
                fills up (ENOSPC); healed by freeing it and `up` (restarts it if it stopped)
    corrupt     a slave (a minority replica) is stopped and the tail of its CommitLog
                damaged (bit flips or zeroes in its last 4 KiB); healed by `up`: recovery must
                cut the damage and the slave fetch it again
    shape       (opt-in: name it in --faults; the default kinds and so the schedules of
                earlier seeds stay as they were) partial partitions over every host, in a
                random order drawn from the fault's draw (tests/support/partitions.py): `bridge`
                (two halves that cannot reach each other, and one host that reaches both) and `ring`
                (Jepsen's majorities ring: each host reaches its nearest neighbours, a
                majority counting itself, but no two hosts see the same majority). Healed by
                flushing the rules.
    handover    (opt-in) planned operations, tests/chaos/planned.py: a master stopped
    restart     gracefully (`sigterm` or the broker's `shutdown` action) and started again
                after its successor took over; a slave or a controller stopped by SIGTERM and
                started again, waited for as `rocketha-cluster restart --rolling` waits
    add-set     (opt-in) one more replica set, the topic extended onto it (planned.py)
    drain       (opt-in) a set taken out of the topic's writes, or one taken out earlier
                put back (planned.py): it stays drained through the faults that follow
Every fault is healed before the next one starts (`Nemesis.inject` returns the heal); an added
set and a drain are lasting changes of the cluster, with nothing to heal.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Iterator
from typing import Any

from ha.cluster.netns import HostNetwork
from tests.chaos.disk_faults import StoreMounts, corrupt_tail
from tests.chaos.history import History
from tests.chaos.planned import (
    DRAIN_VARIANTS,
    HANDOVER_VARIANTS,
    RESTART_VARIANTS,
    PlannedOperations,
)
from tests.integration.failover_cluster import FailoverCluster
from tests.support.partitions import SHAPES, shape_cuts

__all__ = ["KINDS", "OPT_IN_KINDS", "FaultPlan", "Nemesis", "schedule"]

KINDS = ("kill", "pause", "partition", "loss", "link", "power", "corrupt", "disk")
# by --faults only (keeps old schedules)
OPT_IN_KINDS = ("shape", "handover", "restart", "add-set", "drain")
PROCESS_TARGETS = ("master", "slave", "controller-leader", "controller-follower")
PARTITIONS = ("halves", "isolate-master", "isolate-leader", "one-way")
HOST_TARGETS = ("master", "controller-leader", "any")
HOLD_S = (3.0, 6.0)  # how long a fault lasts, drawn uniformly
QUIET_S = (3.0, 5.0)  # healthy time after its heal, before the next fault
LOSS_PERCENT = (30, 80)

Heal = Callable[[], None]


@dataclasses.dataclass(frozen=True, slots=True)
class FaultPlan:
    index: int
    kind: str
    variant: str  # a target role or a partition shape
    replica_set: int  # which replica set a master/slave role means (index)
    draw: float  # picks among candidates (a slave, a follower, the minority's hosts)
    percent: int  # loss
    hold_s: float
    quiet_s: float

    @property
    def name(self) -> str:
        return f"{self.index}:{self.kind}:{self.variant}"


def schedule(seed: int, kinds: tuple[str, ...]) -> Iterator[FaultPlan]:
    """Fault plans drawn from `seed` only (see the module docstring)."""
    rng = random.Random(seed)
    for index in range(1_000_000):  # bounded: a run takes what it has time for
        kind = rng.choice(kinds)
        variant = rng.choice({"kill": PROCESS_TARGETS, "pause": PROCESS_TARGETS,
                              "partition": PARTITIONS, "power": ("master", "slave"),
                              "corrupt": ("slave",), "disk": ("limited",), "shape": SHAPES,
                              "handover": HANDOVER_VARIANTS, "restart": RESTART_VARIANTS,
                              "add-set": ("new",), "drain": DRAIN_VARIANTS,
                              }.get(kind, HOST_TARGETS))
        yield FaultPlan(index, kind, variant, rng.randrange(2), rng.random(),
                        rng.randint(*LOSS_PERCENT), round(rng.uniform(*HOLD_S), 2),
                        round(rng.uniform(*QUIET_S), 2))


class Nemesis:
    """Starts a planned fault on the cluster and returns how to heal it (None: skipped, e.g.
    no master to hit right now); records start and stop in the history."""

    def __init__(self, cluster: FailoverCluster, history: History, replica_sets: list[str],
                 mounts: StoreMounts | None = None,
                 on_new_set: Callable[[str], None] | None = None) -> None:
        """`replica_sets`: the run's list, which `add-set` appends to (`on_new_set` is told)."""
        assert cluster.network is not None, "faults need test hosts"
        self.mounts = mounts
        self.cluster = cluster
        self.history = history
        self.replica_sets = replica_sets
        self.planned = PlannedOperations(cluster, history, replica_sets, on_new_set)

    @property
    def network(self) -> HostNetwork:
        """The cluster's test hosts (more of them after an `add-set`)."""
        assert self.cluster.network is not None
        return self.cluster.network

    # -- targets --------------------------------------------------------------------------
    def _process(self, plan: FaultPlan) -> str | None:
        cluster = self.cluster
        if plan.variant.startswith("controller"):
            leader = cluster.wait_controller_leader(timeout_s=15)
            if plan.variant == "controller-leader":
                return leader
            followers = sorted(name for name in cluster.controllers if name != leader)
            return followers[int(plan.draw * len(followers))]
        replica_set = self.replica_sets[plan.replica_set % len(self.replica_sets)]
        found = cluster.master_now(replica_set)
        if found is None:
            return None
        if plan.variant == "master":
            return found[0]
        slaves = sorted(name for name in cluster.members(replica_set) if name != found[0])
        return slaves[int(plan.draw * len(slaves))]

    def _host_target(self, plan: FaultPlan) -> str | None:
        if plan.variant in ("master", "isolate-master", "one-way"):
            return self._process(dataclasses.replace(plan, variant="master"))
        if plan.variant in ("controller-leader", "isolate-leader"):
            return self.cluster.wait_controller_leader(timeout_s=15)
        everyone = sorted([*self.cluster.controllers, *self.cluster.brokers])
        return everyone[int(plan.draw * len(everyone))]

    # -- faults ---------------------------------------------------------------------------
    def inject(self, plan: FaultPlan) -> Heal | None:
        start = getattr(self, "_" + plan.kind.replace("-", "_"))
        targets, heal = start(plan)
        if heal is None:
            return None

        def healed() -> None:
            heal()
            self.history.add("nemesis", "info", "fault", phase="stop", kind=plan.kind,
                             name=plan.name, targets=targets)
        return healed

    def _started(self, plan: FaultPlan, targets: list[str], **fields: Any) -> None:
        self.history.add("nemesis", "info", "fault", phase="start", kind=plan.kind,
                         name=plan.name, variant=plan.variant, targets=targets, **fields)

    def _kill(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        victim = self._process(plan)
        if victim is None:
            return [], None
        self._started(plan, [victim])
        self.cluster.kill(victim)
        return [victim], self.cluster.up

    def _pause(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        victim = self._process(plan)
        if victim is None:
            return [], None
        self._started(plan, [victim])
        self.cluster.pause(victim)
        return [victim], lambda: self.cluster.resume(victim)

    def _partition(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        network, cluster = self.network, self.cluster
        root = network.root_address
        if plan.variant == "halves":
            everyone = sorted([*cluster.controllers, *cluster.brokers])
            rng = random.Random(plan.draw)
            minority = sorted(rng.sample(everyone, rng.randint(1, (len(everyone) - 1) // 2)))
            self._started(plan, minority)
            others = [cluster.host(name).address for name in everyone if name not in minority]
            for name in minority:
                for address in others:
                    network.block(cluster.host(name), address, direction="both")
            return minority, network.heal
        victim = self._host_target(plan)
        if victim is None:
            return [], None
        if plan.variant == "one-way":
            direction = "out" if plan.draw < 0.5 else "in"
            self._started(plan, [victim], direction=direction)
            network.isolate(cluster.host(victim), allow=[root], direction=direction)
        else:
            self._started(plan, [victim])
            network.isolate(cluster.host(victim), allow=[root])
        return [victim], network.heal

    def _shape(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        cluster = self.cluster
        cuts = shape_cuts([*cluster.controllers, *cluster.brokers], plan.variant, plan.draw)
        cut_off = sorted({name for pair in cuts for name in pair})
        self._started(plan, cut_off, cuts=[list(pair) for pair in cuts])
        for a, b in cuts:
            self.network.block(cluster.host(a), cluster.host(b).address, direction="both")
        return cut_off, self.network.heal

    def _loss(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        victim = self._host_target(plan)
        if victim is None:
            return [], None
        self._started(plan, [victim], percent=plan.percent)
        self.network.lose(self.cluster.host(victim), plan.percent)
        return [victim], self.network.heal

    def _link(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        victim = self._host_target(plan)
        if victim is None:
            return [], None
        self._started(plan, [victim])
        host = self.cluster.host(victim)
        self.network.link_down(host)
        return [victim], lambda: self.network.link_up(host)

    def _power(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        assert self.mounts is not None and self.mounts.backing, "power needs LazyFS stores"
        victim = self._process(plan)
        if victim is None:
            return [], None
        self._started(plan, [victim])
        self.cluster.kill(victim)
        pages, files = self.mounts.power_loss(victim)
        self.history.add("nemesis", "info", "fault_detail", name=plan.name,
                         unsynced_pages_lost=pages, files=files)
        return [victim], self.cluster.up

    def _corrupt(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        victim = self._process(plan)
        if victim is None:
            return [], None
        self.cluster.kill(victim)
        damage = corrupt_tail(self.cluster.store_dir(victim), random.Random(plan.draw))
        self._started(plan, [victim], **damage)
        return [victim], self.cluster.up

    def _disk(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        assert self.mounts is not None and self.mounts.disks, "disk faults need limited stores"
        replica_set = self.replica_sets[plan.replica_set % len(self.replica_sets)]
        victim = next(name for name in sorted(self.mounts.disks)
                      if name in self.cluster.members(replica_set))
        self._started(plan, [victim])
        filled = self.mounts.fill(victim)
        self.history.add("nemesis", "info", "fault_detail", name=plan.name, filler_bytes=filled)

        def heal() -> None:
            self.history.add("nemesis", "info", "fault_detail", name=plan.name,
                             stopped_by_it=self.cluster.pid(victim) is None)
            self.mounts.unfill(victim)  # type: ignore[union-attr]
            self.cluster.up()  # starts it again if it stopped (fsync failed: fail-stop)
        return [victim], heal

    def _handover(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        replica_set = self.replica_sets[plan.replica_set % len(self.replica_sets)]
        return self.planned.handover(plan.name, replica_set, plan.variant,
                                     lambda targets: self._started(plan, targets))

    def _add_set(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        return self.planned.add_set(plan.name, lambda targets: self._started(plan, targets))

    def _drain(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        return self.planned.drain(plan.name, int(plan.draw * 1000),
                                  lambda targets: self._started(plan, targets))

    def _restart(self, plan: FaultPlan) -> tuple[list[str], Heal | None]:
        if plan.variant == "controller":
            controllers = sorted(self.cluster.controllers)
            victim: str | None = controllers[int(plan.draw * len(controllers))]
        else:
            victim = self._process(plan)
        if victim is None:
            return [], None
        return self.planned.restart(plan.name, victim,
                                    lambda targets: self._started(plan, targets))
