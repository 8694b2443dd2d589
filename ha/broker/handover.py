"""A stopping master hands its role to an in-sync slave first (the IO shell of handover_core).

Why: a SIGTERMed master used to stop within shutdownGraceMs and leave its replica set to the
watchdog, so its producers saw failed puts until a failover (0.2-1 s). In controller mode it
now hands over first (controller/handover.py has the protocol and why it is safe):

    say "leaving" in the heartbeats ─► seal the put gate (new puts wait, the ones in flight
    end) ─► read the final log end ─► wait for the furthest in-sync slave to ack it ─►
    `handover_master` ─► OK: fenced, the master service stops (its slaves' links drop, so
    they ask the controller at once and the successor takes over), held puts answer
    NOT_MASTER naming the successor; refused: the gate opens again; no answer: stays sealed

then the ordinary shutdown follows. Every step is bounded by handoverTimeoutMs; a master
with no in-sync slave, or that is not a master, stops as before.

`HandoverGate` is the thread-safe face of the core that Replication.put passes through: a
put held past the deadline, or released by the handover, is refused with NOT_MASTER (nothing
stored); an idempotent producer asks the controller for the master and resends it there.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from pyarrow import ArrowException

from controller.api import HandoverRequest, ReplicaInfoReply
from ha.broker.handover_core import Admit, HandoverCore, Phase, choose_target

__all__ = ["HandoverGate", "hand_over", "hand_over_to_slave"]

logger = logging.getLogger(__name__)
ACK_POLL_S = 0.002  # how often the master looks at its slave's ack while it catches up


class HandoverGate:
    def __init__(self, hold_max_ms: int, not_master: Callable[[str], Exception]) -> None:
        self.core = HandoverCore()
        self._changed = threading.Condition()
        self._hold_max_s = hold_max_ms / 1000.0
        self._not_master = not_master
        self.leaving = False  # lame duck (heartbeats say so) from the first step on
        self.held_puts = 0  # puts that waited at the gate (broker info)

    def enter(self) -> None:
        """Before a put writes: returns once admitted (then `exit` after it), else raises."""
        with self._changed:
            verdict = self.core.admit()
            if verdict is Admit.ADMIT:
                return
            self.held_puts += 1
            deadline = time.monotonic() + self._hold_max_s
            while verdict is Admit.HOLD:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._not_master("the master was handing over its role and did "
                                           "not finish within handoverTimeoutMs")
                self._changed.wait(left)
                verdict = self.core.admit()
            if verdict is Admit.REFUSE:
                raise self._not_master(f"handed over to {self.core.new_master}")

    def exit(self) -> None:
        with self._changed:
            self.core.put_done()
            if not self.core.in_flight:
                self._changed.notify_all()

    def step(self, action: Callable[[HandoverCore], Any]) -> Any:
        """Run one core step under the lock and wake the waiters."""
        with self._changed:
            result = action(self.core)
            self._changed.notify_all()
            return result

    def wait_for(self, predicate: Callable[[HandoverCore], bool], timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self.core), max(0.0, timeout_s))

    def info(self) -> dict[str, Any]:
        with self._changed:
            return {"phase": self.core.phase.value, "leaving": self.leaving,
                    "sealed_log_position": self.core.sealed_log_position,
                    "held_puts": self.held_puts}


def hand_over(service: Any, call: Callable[[HandoverRequest], ReplicaInfoReply],
              broker_id: int | None, *, wake_heartbeat: Callable[[], None],
              named: int | None = None) -> tuple[bool, str]:
    """Hand the master role over; returns whether it did, and what happened (for the log).

    `service`: the BrokerService (its replication, store, config, endpoint); `call`: the
    controller call; `broker_id`: the id the controller gave this broker (None: not
    registered: nothing to hand over). `named`: an operator's `elect` of that member; the
    broker then keeps running (it does not turn lame duck, and follows the new master once
    the controller says so: HandoverCore.rearm); None: it is stopping, to the best slave."""
    config, replication = service.config, service.replication
    gate: HandoverGate = replication.handover
    master = replication.master
    if not config.runtime_roles or config.handover_timeout_ms == 0:
        return False, "no handover (not in controller mode, or handoverTimeoutMs=0)"
    if named is None:
        gate.leaving = True
        wake_heartbeat()  # lame duck from now on (a slave too): no election picks this broker
    if master is None or broker_id is None:
        return False, "no handover: not the master"
    stats = master.stats()
    if named is not None and named not in stats.sync_state_set:
        return False, (f"no handover: broker {named} is not in the SyncStateSet "
                       f"{sorted(stats.sync_state_set)}")
    pick = functools.partial(choose_target, sync_state_set=stats.sync_state_set,
                             master_broker_id=broker_id, named=named,
                             link_ids={link.broker_id: link.link_id for link in stats.links})
    if pick(_acked(master)) is None:
        return False, ("no handover: " + (f"broker {named} is the master or has no link"
                                          if named is not None else
                                          "no other member of the SyncStateSet has a link"))
    deadline = time.monotonic() + config.handover_timeout_ms / 1000.0
    if not gate.step(HandoverCore.seal):
        return False, "no handover: one is running or ran already"
    store = service.store
    sealed = gate.wait_for(lambda core: core.sealed_at(store.stats().log_position_end),
                           deadline - time.monotonic())
    target = None
    while sealed:
        target = pick(_acked(master))
        acked = _acked(master).get(target, -1) if target is not None else -1
        if gate.step(functools.partial(HandoverCore.ready_to_ask,
                                       target_acked_log_position=acked)):
            break
        if time.monotonic() >= deadline:
            sealed = False
            break
        time.sleep(ACK_POLL_S)
    position = gate.core.sealed_log_position
    if not sealed or target is None or position is None:
        gate.step(HandoverCore.abort)
        return False, ("no handover: the puts in flight or the slave's catch-up outlasted "
                       "handoverTimeoutMs")
    request = HandoverRequest(config.broker_name, broker_id, service.endpoint,
                              master.master_epoch, position, target, _acked(master)[target])
    try:
        reply = call(request)
        status: str | None = reply.status
        new_master = reply.replica.master_address if reply.replica else None
    except (OSError, ValueError, ArrowException) as err:  # no answer: it may still commit
        logger.warning("handover: no answer from the controller (%s)", err)
        status, new_master = None, None
    gate.step(lambda core: core.answered(status, new_master))
    if gate.core.phase is Phase.HANDED_OVER:
        # fenced, and the master service stops: its slaves' links drop and they heartbeat now
        replication.become_none(f"handed over to broker {target} ({new_master})")
        wake_heartbeat()  # learn the new role at once (`elect`: follow the new master)
        return True, (f"handed over to broker {target} ({new_master}) at log position "
                      f"{position}")
    return False, f"no handover: the controller answered {status}" + (
        " (puts stay refused: the election may still commit)"
        if gate.core.phase is Phase.UNKNOWN else "")


def _acked(master: Any) -> dict[int, int]:
    return {link.broker_id: link.acked_log_position for link in master.stats().links}


def hand_over_to_slave(service: Any, link: Any, named: int | None = None) -> tuple[bool, str]:
    """`hand_over` through the broker's controller link (its client, id and wake). Never
    raises: whatever happens, the shutdown that follows must run."""
    try:
        return hand_over(
            service,
            lambda request: link.client.call("handover_master", request, ReplicaInfoReply),
            link.broker_id, wake_heartbeat=link.wake, named=named)
    except Exception:  # logged; the broker stops as it would have before
        logger.exception("handover failed; stopping without it")
        return False, "no handover: it failed (logged above)"
