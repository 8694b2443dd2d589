"""Broker liveness and the name service: soft state built from heartbeats (never in the Raft log).

Each controller keeps its own `LiveTable`; brokers heartbeat every second (RocketMQ sends to
every controller, so a new leader already knows who is alive). A broker is alive while its
last heartbeat is younger than `heartbeat_timeout_ms`; `expire(now_ms)` forgets the others, and
with them the topics they served, so a dead broker leaves the routes within the timeout.

Time is passed in (`now_ms`, a monotonic clock read by the shell). The table is bounded:
at most `brokers_max` brokers (the oldest entry is evicted first).

A late heartbeat is credited to when it was made, not when it arrived (`heartbeat_credit_ms`).
Over a lossy link TCP retransmits with a doubling timeout, so a heartbeat can arrive seconds
after it was made; counted at its arrival it kept a master alive that could neither reach its
slaves nor answer its producers (chaos campaigns: elections 3.6-5.3 s after 60-80 % packet loss
began on a master's host, against the 1.5 s timeout). Each reply carries the controller's clock
(`controller_ms`, `controller_clock`); the broker's next heartbeat echoes it with the time since
that reply arrived (`echo_age_ms`), so `echo_controller_ms + echo_age_ms` is, on this
controller's clock, no later than the heartbeat was made (the reply's own way only adds). A
heartbeat that arrives more than `transit_max_ms` after that bound counts as arriving at the
bound plus `transit_max_ms`, and its reply says by how much (`credit_behind_ms`): the broker
starts the master lease it grants that much earlier than its send time, so the lease still ends
before the controller may count the master dead (the send time is at most the arrival).

The same bound lets an election go ahead while the slaves still hear the old master now and
then. Positions are final (election.positions_final) once every other SyncStateSet member has
said it lost the master (its HA link closed: haHousekeepingInterval of silence, which packet
loss can put off for as long as it lasts, a frame getting through now and then), or, new here,
once its latest heartbeat came on time (credited at its arrival, so the controller's view of
that slave is current) and was made at least 5/6 of the timeout after the master was last
heard (`reported_master_lost`): by then the master's lease, at most 2/3 of the timeout from its
last credited heartbeat, has lapsed (1/6 to spare for clock rates), so every put it acked with
a quorum was held by the slave before it made that heartbeat, and a master whose lease has
lapsed acks only what every slave holds. Only slaves heard on time count, so a controller whose
own link loses packets (every heartbeat late) replaces nobody on this rule.

Routes for a topic: every replica set with an alive broker that reports the topic; queue
counts and permission come from the master's report when it is alive, else from any alive
member; addresses come from the replicated ReplicaInfo (master) and the alive table (slaves).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from controller.api import (
    BrokerHeartbeat,
    QueueRoute,
    ReplicaInfo,
    ReplicaSetRoute,
    RoutesReply,
    TopicInfo,
)
from controller.election import BrokerLiveness

__all__ = ["LiveBroker", "LiveTable", "heartbeat_credit_ms", "heartbeat_made_no_earlier_ms"]


# Positions count as final (reported_master_lost) in a heartbeat made this share of the
# timeout after the master was last heard: its lease (at most 2/3) has lapsed by then
FINAL_AFTER_TIMEOUT_SHARE = (5, 6)


@dataclasses.dataclass(frozen=True, slots=True)
class LiveBroker:
    heartbeat: BrokerHeartbeat
    last_heartbeat_ms: int
    # the latest heartbeat's echo: made no earlier than this (None: no echo of our clock),
    # and credited at its arrival
    made_no_earlier_ms: int | None = None
    on_time: bool = False


def heartbeat_made_no_earlier_ms(heartbeat: BrokerHeartbeat, arrived_ms: int, *,
                                 clock: int) -> int | None:
    """The latest time, on this controller's clock (id `clock`), that `heartbeat` can have
    been made (module docstring); None without an echo of this clock (a new broker, an older
    one, or a reply of another controller process) or with one from the future (not this
    clock after all)."""
    if (heartbeat.echo_controller_clock != clock or heartbeat.echo_controller_ms <= 0
            or heartbeat.echo_age_ms < 0):
        return None
    made_no_earlier_ms = heartbeat.echo_controller_ms + heartbeat.echo_age_ms
    return None if made_no_earlier_ms > arrived_ms else made_no_earlier_ms


def heartbeat_credit_ms(heartbeat: BrokerHeartbeat, arrived_ms: int, *, clock: int,
                        transit_max_ms: int) -> int:
    """When `heartbeat`, arriving at `arrived_ms`, counts as heard (module docstring): its
    arrival, or `transit_max_ms` after the latest time it can have been made when it was on
    the way longer. No usable echo, or `transit_max_ms` 0: its arrival, as before."""
    return _credited_ms(arrived_ms,
                        heartbeat_made_no_earlier_ms(heartbeat, arrived_ms, clock=clock),
                        transit_max_ms)


def _credited_ms(arrived_ms: int, made_no_earlier_ms: int | None, transit_max_ms: int) -> int:
    if transit_max_ms <= 0 or made_no_earlier_ms is None:
        return arrived_ms
    return min(arrived_ms, made_no_earlier_ms + transit_max_ms)


class LiveTable:
    def __init__(self, *, heartbeat_timeout_ms: int, brokers_max: int) -> None:
        assert heartbeat_timeout_ms > 0 and brokers_max > 0
        self.heartbeat_timeout_ms = heartbeat_timeout_ms
        self.brokers_max = brokers_max
        self._brokers: dict[tuple[str, int], LiveBroker] = {}
        # when each broker was last heard, kept after it expires (reported_master_lost needs
        # a dead master's); bounded like the table
        self._heard_ms: dict[tuple[str, int], int] = {}

    def heartbeat(self, heartbeat: BrokerHeartbeat, now_ms: int,
                  credited_ms: int | None = None, made_no_earlier_ms: int | None = None
                  ) -> None:
        """Record `heartbeat`, arrived at `now_ms`, as heard at `credited_ms` (default: its
        arrival; see heartbeat_credit_ms) and made no earlier than `made_no_earlier_ms`
        (None: unknown). A late one never moves the broker's last heard time back; its
        report replaces the older one (it was made after it)."""
        key = (heartbeat.broker_name, heartbeat.broker_id)
        heard_ms = now_ms if credited_ms is None else credited_ms
        on_time = made_no_earlier_ms is not None and heard_ms >= now_ms
        previous = self._brokers.pop(key, None)
        if previous is not None:
            heard_ms = max(heard_ms, previous.last_heartbeat_ms)
        if len(self._brokers) >= self.brokers_max:
            oldest = min(self._brokers, key=lambda k: self._brokers[k].last_heartbeat_ms)
            del self._brokers[oldest]
        self._brokers[key] = LiveBroker(heartbeat, heard_ms, made_no_earlier_ms, on_time)
        self._heard_ms.pop(key, None)
        if len(self._heard_ms) >= self.brokers_max:
            del self._heard_ms[min(self._heard_ms, key=self._heard_ms.__getitem__)]
        self._heard_ms[key] = heard_ms

    def heard(self, heartbeat: BrokerHeartbeat, arrived_ms: int, *, clock: int,
              transit_max_ms: int) -> int:
        """Record `heartbeat` as the controller whose clock id is `clock` hears it: credited
        by heartbeat_credit_ms and, with the credit on (`transit_max_ms` > 0), with its
        made-no-earlier bound for reported_master_lost. Returns the credited time."""
        made_ms = (heartbeat_made_no_earlier_ms(heartbeat, arrived_ms, clock=clock)
                   if transit_max_ms > 0 else None)
        credited_ms = _credited_ms(arrived_ms, made_ms, transit_max_ms)
        self.heartbeat(heartbeat, arrived_ms, credited_ms, made_ms)
        return credited_ms

    def forget(self, broker_name: str, broker_ids: Iterable[int] = ()) -> None:
        ids = set(broker_ids)
        for key in [k for k in self._brokers if k[0] == broker_name and (not ids or k[1] in ids)]:
            del self._brokers[key]
        for key in [k for k in self._heard_ms if k[0] == broker_name and (not ids or k[1] in ids)]:
            del self._heard_ms[key]

    def expire(self, now_ms: int) -> list[tuple[str, int]]:
        """Forget brokers silent for the timeout; returns their (broker_name, broker_id)."""
        dead = [key for key, live in self._brokers.items()
                if now_ms - live.last_heartbeat_ms >= self.heartbeat_timeout_ms]
        for key in dead:
            del self._brokers[key]
        return dead

    def alive(self, replica: ReplicaInfo, now_ms: int) -> dict[int, BrokerLiveness]:
        """The registered brokers of `replica` heard from within the timeout, at the address
        the replicated state has for them."""
        result = {}
        for member in replica.brokers:
            live = self._brokers.get((replica.broker_name, member.broker_id))
            if live is None or now_ms - live.last_heartbeat_ms >= self.heartbeat_timeout_ms:
                continue
            beat = live.heartbeat
            if beat.broker_address != member.broker_address:
                continue
            result[member.broker_id] = BrokerLiveness(
                member.broker_id, beat.master_epoch, beat.max_log_position,
                beat.election_priority, beat.master_epoch_abandoned, beat.leaving,
            )
        return result

    def reported_master_lost(self, replica: ReplicaInfo, now_ms: int) -> set[int]:
        """Alive brokers whose positions are final for an election that replaces the master
        of this epoch (module docstring): their latest heartbeat says they lost that master,
        or, the master being dead, came on time and was made FINAL_AFTER_TIMEOUT_SHARE of the
        timeout after the master was last heard."""
        alive = self.alive(replica, now_ms)
        master = replica.master_broker_id
        master_heard_ms = (None if master is None or master in alive
                           else self._heard_ms.get((replica.broker_name, master)))
        share, parts = FINAL_AFTER_TIMEOUT_SHARE
        final_from_ms = (None if master_heard_ms is None
                         else master_heard_ms + self.heartbeat_timeout_ms * share // parts)

        def final(live: LiveBroker) -> bool:
            if live.heartbeat.master_unreachable_epoch == replica.master_epoch:
                return True
            return (final_from_ms is not None and live.on_time
                    and live.made_no_earlier_ms is not None
                    and live.made_no_earlier_ms >= final_from_ms)
        return {broker_id for broker_id in alive
                if final(self._brokers[(replica.broker_name, broker_id)])}

    def silent_ms(self, replica: ReplicaInfo, broker_id: int | None, now_ms: int) -> int | None:
        """How long `broker_id` of `replica` has not heartbeated (None: not in the table)."""
        live = self._brokers.get((replica.broker_name, broker_id)) if broker_id is not None \
            else None
        return None if live is None else now_ms - live.last_heartbeat_ms

    def position_heard_since(self, replica: ReplicaInfo, broker_id: int | None, since_ms: int,
                             *, lease_lapsed: bool = False) -> tuple[int, int] | None:
        """(max_log_position, received_ms) of `broker_id`'s latest heartbeat if it was
        received at `since_ms` or later (and, with `lease_lapsed`, says the broker's master
        lease had lapsed when it was sent); None otherwise."""
        live = self._brokers.get((replica.broker_name, broker_id)) if broker_id is not None \
            else None
        if live is None or live.last_heartbeat_ms < since_ms:
            return None
        if lease_lapsed and not live.heartbeat.master_lease_lapsed:
            return None
        return live.heartbeat.max_log_position, live.last_heartbeat_ms

    def next_master_expiry_ms(self, replicas: Iterable[ReplicaInfo], now_ms: int
                              ) -> int | None:
        """When the first alive master of `replicas` will count as dead if it stays silent
        (None: none will after `now_ms`): the leader's scan runs then, not up to a scan
        interval later. Expiries already past are the scan's business, not a wake-up."""
        expiries = [expiry for replica in replicas if replica.master_broker_id is not None
                    if (live := self._brokers.get((replica.broker_name,
                                                   replica.master_broker_id))) is not None
                    and (expiry := live.last_heartbeat_ms + self.heartbeat_timeout_ms) > now_ms]
        return min(expiries, default=None)

    def last_heartbeat(self, broker_name: str, broker_id: int) -> BrokerHeartbeat | None:
        """The latest heartbeat of a broker still in the table (metrics and console)."""
        live = self._brokers.get((broker_name, broker_id))
        return None if live is None else live.heartbeat

    def is_alive(self, replica: ReplicaInfo, broker_id: int | None, now_ms: int) -> bool:
        return broker_id is not None and broker_id in self.alive(replica, now_ms)

    def routes(self, topic: str, replicas: Iterable[ReplicaInfo], now_ms: int) -> RoutesReply:
        queues: list[QueueRoute] = []
        sets: list[ReplicaSetRoute] = []
        for replica in replicas:
            alive = self.alive(replica, now_ms)
            reports: dict[int, TopicInfo] = {}
            for broker_id in alive:
                beat = self._brokers[(replica.broker_name, broker_id)].heartbeat
                for info in beat.topics:
                    if info.topic == topic:
                        reports[broker_id] = info
            if not reports:
                continue
            master = replica.master_broker_id if replica.master_broker_id in alive else None
            found = reports.get(master) if master is not None else None
            info = found or reports[min(reports)]
            queues.append(QueueRoute(replica.broker_name, info.read_queue_nums,
                                     info.write_queue_nums, info.perm))
            slaves = tuple(m.broker_address for m in replica.brokers
                           if m.broker_id in alive and m.broker_id != master)
            sets.append(ReplicaSetRoute(
                replica.cluster_name, replica.broker_name,
                replica.master_address if master is not None else None,
                replica.master_epoch, slaves,
            ))
        if not queues:
            return RoutesReply("TOPIC_NOT_FOUND", topic=topic)
        return RoutesReply("OK", topic=topic, queues=tuple(queues), replica_sets=tuple(sets))
