"""RaftConfig: one node's identity, its static voter set and every limit of the core, in ticks.

A tick is whatever period the shell chooses (the node shell ticks every `tick_interval_ms`);
the core only counts them. Relationships between limits are checked here, once.
"""

from __future__ import annotations

import dataclasses

from controller.errors import ConfigError

__all__ = ["CLUSTER_SIZES", "RaftConfig"]

CLUSTER_SIZES = (1, 3, 5)  # static membership: an odd voter count that tolerates 0, 1 or 2 faults


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class RaftConfig:
    node_id: int
    voter_ids: tuple[int, ...]
    # A follower campaigns after a random timeout in [election, 2 * election) ticks without
    # hearing from a leader; a leader steps down after `election_timeout_ticks` without hearing
    # from a majority (check-quorum).
    election_timeout_ticks: int = 10
    heartbeat_interval_ticks: int = 1
    pre_vote: bool = True
    check_quorum: bool = True
    append_entries_max: int = 64  # entries per AppendRequest
    inflight_entries_max: int = 256  # sent but unacknowledged entries per follower
    uncommitted_entries_max: int = 1024  # proposals beyond this are DROPPED
    apply_entries_max: int = 256  # committed entries per Ready
    read_requests_max: int = 1024  # pending ReadIndex requests on a leader

    def __post_init__(self) -> None:
        if self.node_id <= 0:
            raise ConfigError("node_id", f"must be > 0, got {self.node_id}")
        if len(self.voter_ids) not in CLUSTER_SIZES:
            raise ConfigError(
                "voter_ids", f"must name {CLUSTER_SIZES} voters, got {len(self.voter_ids)}"
            )
        if len(set(self.voter_ids)) != len(self.voter_ids) or min(self.voter_ids) <= 0:
            raise ConfigError("voter_ids", f"must be distinct positive ids: {self.voter_ids}")
        if self.node_id not in self.voter_ids:
            raise ConfigError("node_id", f"{self.node_id} is not in voter_ids {self.voter_ids}")
        if self.heartbeat_interval_ticks <= 0:
            raise ConfigError("heartbeat_interval_ticks", "must be > 0")
        if self.election_timeout_ticks <= self.heartbeat_interval_ticks:
            raise ConfigError(
                "election_timeout_ticks",
                f"must be > heartbeat_interval_ticks ({self.heartbeat_interval_ticks})",
            )
        for key in (
            "append_entries_max", "inflight_entries_max", "uncommitted_entries_max",
            "apply_entries_max", "read_requests_max",
        ):
            if getattr(self, key) <= 0:
                raise ConfigError(key, "must be > 0")
        if self.inflight_entries_max < self.append_entries_max:
            raise ConfigError("inflight_entries_max", "must be >= append_entries_max")

    @property
    def quorum_size(self) -> int:
        return len(self.voter_ids) // 2 + 1

    @property
    def peer_ids(self) -> tuple[int, ...]:
        return tuple(sorted(voter for voter in self.voter_ids if voter != self.node_id))
