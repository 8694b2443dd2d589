"""Topic routes: the topics a broker serves (reported in its heartbeat) and `get_routes`.

The controller's name service (controller/liveness.py `LiveTable.routes`) builds a
`RoutesReply` for a topic from the alive brokers' reports and the replicated `ReplicaInfo`.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar

from controller.api.codec import JsonMessage

__all__ = ["GetRoutesRequest", "QueueRoute", "ReplicaSetRoute", "RoutesReply", "TopicInfo"]


@dataclasses.dataclass(frozen=True, slots=True)
class TopicInfo(JsonMessage):
    """A topic as one replica set serves it (RocketMQ QueueData; perm bits R=4 W=2)."""

    KIND: ClassVar[str] = "topic info"
    topic: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int = 6


@dataclasses.dataclass(frozen=True, slots=True)
class GetRoutesRequest(JsonMessage):
    KIND: ClassVar[str] = "get_routes request"
    topic: str


@dataclasses.dataclass(frozen=True, slots=True)
class QueueRoute(JsonMessage):
    KIND: ClassVar[str] = "queue route"
    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaSetRoute(JsonMessage):
    """Where a replica set is reachable now (alive brokers only)."""

    KIND: ClassVar[str] = "replica set route"
    cluster_name: str
    broker_name: str
    master_address: str | None
    master_epoch: int
    slave_addresses: tuple[str, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class RoutesReply(JsonMessage):
    KIND: ClassVar[str] = "get_routes reply"
    status: str
    leader_address: str | None = None
    topic: str = ""
    queues: tuple[QueueRoute, ...] = ()
    replica_sets: tuple[ReplicaSetRoute, ...] = ()
