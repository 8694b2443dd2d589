"""What a controller remembers for its metrics and console beyond its Raft and replicated state.

Fed by the Raft shell (controller/raft_shell.py) on its event loop, read there too (the metrics
collector and the console hop onto the loop to read): how often this node took each Raft
role, how often the leader changed, and the last ELECTIONS_KEPT master elections it applied
(every node applies the same entries, so every node can show them; the time is this node's
apply time, wall clock, for display only).
"""

from __future__ import annotations

import collections
import time

from controller.api import ElectionRecord
from controller.state import ApplyResult, Command, ElectMaster

__all__ = ["ELECTIONS_KEPT", "ControllerTelemetry"]

ELECTIONS_KEPT = 32


class ControllerTelemetry:
    def __init__(self) -> None:
        self.role_counts: collections.Counter[str] = collections.Counter()
        self.leader_changes = 0
        self.master_elections: collections.Counter[str] = collections.Counter()  # per set
        self.recent_elections: collections.deque[ElectionRecord] = collections.deque(
            maxlen=ELECTIONS_KEPT)
        self._leader_id: int | None = None
        self._role = "follower"  # what a node starts as

    def on_role(self, role: str, term: int, leader_id: int | None) -> None:
        """A Raft soft-state change: role, leader or term (counted when the role changes)."""
        if role != self._role:
            self.role_counts[role] += 1
            self._role = role
        self.on_leader(leader_id)

    def on_leader(self, leader_id: int | None) -> None:
        if leader_id is not None and leader_id != self._leader_id:
            self.leader_changes += 1
            self._leader_id = leader_id

    def on_applied(self, command: Command, result: ApplyResult, entry_index: int) -> None:
        """A committed command was applied; elections that changed the master are kept."""
        if not isinstance(command, ElectMaster) or result.replica is None:
            return
        if result.status not in ("OK", "MASTER_NOT_AVAILABLE"):
            return
        replica = result.replica
        self.master_elections[replica.broker_name] += 1
        self.recent_elections.append(ElectionRecord(
            replica.broker_name, replica.master_epoch, replica.master_broker_id,
            replica.master_address, entry_index, int(time.time() * 1000)))
