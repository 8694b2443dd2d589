"""LivenessWatchdog: the leader's failure detector, which gives a masterless replica set a master.

Leader duties (`_scan`, every scanNotActiveBrokerIntervalMs, and at once when a heartbeat
comes from a set without a master): a replica set whose master has been silent for
controllerHeartbeatTimeoutMs gets a new master by `choose_master`; so does a set without a
master once an eligible broker is alive. A new leader first waits one heartbeat timeout before
it declares any master dead (its live table starts empty or stale). The scan also runs right
when the first alive master's timeout ends, not up to a scan interval later.

Faster than the timeout, for a master that crashed: a slave whose HA link to the master broke
says so in its next heartbeat (`master_unreachable_epoch`, sent at once). The leader then probes
the master's client address with a TCP connect (masterProbeTimeoutMs): refused means no process
listens there any more, so the master is forgotten from the live table and the scan elects
now. A probe that connects or times out proves nothing (a stopped or busy process still
accepts connections in the kernel), and the heartbeat timeout decides as before.

From a scan's decision until its election applies, heartbeats are answered from the state not
yet changed, so they must not renew the old master's lease: `election_held` says which master
that is (controller/leader_core.py `lease_held`). The request handlers (controller/handlers.py)
feed the watchdog through `wake` when a heartbeat's answer asks for a scan or a probe. Each scan
also puts initAuthenticationUser in the replicated table when it is missing.
"""

from __future__ import annotations

import asyncio
import logging

from conf.acl import User
from controller.api import ReplicaInfo
from controller.auth_changes import change_auth
from controller.errors import BusyError, NotLeaderError
from controller.leader_core import Wake, lease_held, scan_decision
from controller.liveness import LiveTable
from controller.raft import Role
from controller.raft_shell import RaftShell, monotonic_ms
from controller.state import ElectMaster

__all__ = ["SUSPECTS_MAX", "LivenessWatchdog"]

logger = logging.getLogger(__name__)

SUSPECTS_MAX = 1024  # replica sets with a master probe pending at once


class LivenessWatchdog:
    def __init__(self, shell: RaftShell, live: LiveTable, *, init_user: User | None) -> None:
        self._shell = shell
        self.config = shell.config
        self.live = live
        self.init_user = init_user  # initAuthenticationUser: put in the table when missing
        self.prefix = shell.prefix
        # replica set -> (master epoch, master id) from a scan's decision until its election
        # applies (see _maybe_elect)
        self._election_holds: dict[str, tuple[int, int | None]] = {}
        self._election_held_at_ms: dict[str, int] = {}
        self._scan_wakeup: asyncio.Event | None = None
        self._suspects: dict[str, int] = {}  # broker_name -> master epoch a slave lost

    def wake(self, wake: Wake, replica: ReplicaInfo) -> None:
        """A heartbeat's answer (leader_core.answer_heartbeat) asks for a scan or a probe."""
        if self._scan_wakeup is None:
            return  # not running yet
        if wake is Wake.ELECT:
            self._scan_wakeup.set()  # elect now, not at the next scan
        elif wake is Wake.PROBE and len(self._suspects) < SUSPECTS_MAX:
            self._suspects[replica.broker_name] = replica.master_epoch
            self._scan_wakeup.set()  # probe the master now (or elect, once every slave told)

    def election_held(self, replica: ReplicaInfo, broker_id: int) -> bool:
        """Is `broker_id` the master a scan decided to replace, its election not yet applied?"""
        return lease_held(self._election_holds, replica, broker_id)

    async def run(self) -> None:
        self._scan_wakeup = asyncio.Event()
        shell = self._shell
        while True:  # the leader's failure detector, for the life of the node
            wait_ms = self.config.scan_interval_ms
            if shell.raft.role is Role.LEADER:  # only the leader expires and elects
                now_ms = monotonic_ms()
                expiry_ms = self.live.next_master_expiry_ms(shell.state.replica_infos(), now_ms)
                if expiry_ms is not None:  # a master's timeout ends sooner: scan right then
                    wait_ms = max(1, min(wait_ms, expiry_ms - now_ms + 1))
            try:
                async with asyncio.timeout(wait_ms / 1000):
                    await self._scan_wakeup.wait()
            except TimeoutError:
                pass
            self._scan_wakeup.clear()
            if shell.raft.role is Role.LEADER:
                await self._scan()

    async def _scan(self) -> None:
        await self._ensure_init_user()
        await self._probe_suspects()
        now_ms = monotonic_ms()
        self.live.expire(now_ms)
        self._release_election_holds(now_ms)
        for replica in self._shell.state.replica_infos():
            try:
                await self._maybe_elect(replica, now_ms)
            except (NotLeaderError, BusyError) as err:
                logger.info("%s could not elect for %s: %s", self.prefix, replica.broker_name,
                            err)
                return

    async def _ensure_init_user(self) -> None:
        """Put initAuthenticationUser in the table when it is not there (first start; or
        deleted: remove the key from the conf to retire it)."""
        user = self.init_user
        if user is None or self._shell.state.auth.user(user.name) is not None:
            return
        try:
            reply = await change_auth(self._shell, lambda auth: auth.with_user(user))
        except (NotLeaderError, BusyError) as err:
            logger.info("%s could not add initAuthenticationUser %s: %s", self.prefix,
                        user.name, err)
            return
        logger.info("%s: initAuthenticationUser %s: %s %s", self.prefix, user.name,
                    reply.status, reply.message)

    async def _probe_suspects(self) -> None:
        """Probe masters a slave lost; forget those whose address refuses connections."""
        suspects, self._suspects = self._suspects, {}
        for broker_name, epoch in suspects.items():
            replica = self._shell.state.replica_info(broker_name)
            if (replica is None or replica.master_epoch != epoch or replica.master_address is None
                    or not self.live.is_alive(replica, replica.master_broker_id,
                                              monotonic_ms())):
                continue
            if await _refuses_connections(replica.master_address,
                                          self.config.master_probe_timeout_ms):
                assert replica.master_broker_id is not None
                logger.info("%s: %s's master %d at %s refuses connections (a slave lost it): "
                            "dead", self.prefix, broker_name, replica.master_broker_id,
                            replica.master_address)
                # elected once every other member reported its final position
                # (election.positions_final, checked by failover_decision)
                self.live.forget(broker_name, [replica.master_broker_id])

    async def _maybe_elect(self, replica: ReplicaInfo, now_ms: int) -> None:
        decision = scan_decision(replica, self.live, now_ms,
                                 leader_since_ms=self._shell.leader_since_ms,
                                 heartbeat_timeout_ms=self.config.heartbeat_timeout_ms,
                                 unclean_enabled=self.config.unclean_election_enabled)
        if decision is None:
            return
        logger.info("%s: %s has master %s (epoch %d), not alive or absent: proposes %s",
                    self.prefix, replica.broker_name, replica.master_broker_id,
                    replica.master_epoch, decision.broker_id)
        # From the decision until the election applies, heartbeats are answered from the
        # state not yet changed: they must not renew the old master's lease (lease_held).
        # Released once the outcome is known; with none (no answer in requestTimeoutMs, or
        # leadership lost) kept until `_release_election_holds` finds the epoch moved on or
        # the hold old enough that the entry was applied or dropped.
        name = replica.broker_name
        self._election_holds[name] = (replica.master_epoch, replica.master_broker_id)
        self._election_held_at_ms[name] = now_ms
        await self._shell.propose(ElectMaster.decided_on(replica, decision.broker_id))
        self._election_holds.pop(name, None)  # applied (or fenced): the state says the rest

    def _release_election_holds(self, now_ms: int) -> None:
        """Drop the holds of elections whose outcome was not seen (see _maybe_elect)."""
        for name, (epoch, _) in list(self._election_holds.items()):
            replica = self._shell.state.replica_info(name)
            if (replica is None or replica.master_epoch != epoch
                    or now_ms - self._election_held_at_ms.get(name, now_ms)
                    > 2 * self.config.request_timeout_ms):
                del self._election_holds[name]


async def _refuses_connections(address: str, timeout_ms: int) -> bool:
    """True only when a TCP connect to `address` is refused (nothing listens there)."""
    host, _, port = address.rpartition(":")
    try:
        async with asyncio.timeout(timeout_ms / 1000):
            _reader, writer = await asyncio.open_connection(host, int(port))
    except ConnectionRefusedError:
        return True
    except (OSError, TimeoutError, ValueError):
        return False
    writer.close()
    return False
