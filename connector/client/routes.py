"""Where topics live: replica sets (brokerName -> endpoints) behind one small interface.

    RouteProvider.replica_sets() -> (ReplicaSet(broker_name, endpoints master-first), ...)

`StaticRoutes` is built from the `brokers` option: it asks every HOST:PORT for `broker_info` and
groups the endpoints by the brokerName they report (a replica set's members share it; the one
reporting role MASTER goes first). `ControllerRoutes` asks the controller group (`controller`
option) for `cluster_list`: each replica set's alive brokers, the current master first.

The topic/queue look-ups below (`topic_queue_counts`, `queue_bounds`, ...) take a ReplicaSet and
go through the client library's Admin (bounded retries, cached connections), so a provider only
has to answer "which replica sets are there".

Failover (controller mode, the master dies while a query runs). Every client built with
`client_config(replica_set.endpoints)` knows all the set's alive members, master first; a call
the master cannot answer (connection refused, NOT_MASTER, SERVICE_NOT_AVAILABLE) moves to the
next member after a backoff, round and round, until the elected master (or, for reads, a
member that serves them) answers or the deadline passes. So:
- a sink task's puts reach the newly elected master within the same attempt (its producer id
  and sequences unchanged, so chunks the old master had replicated are answered as
  duplicates); a put answered with a status outside acceptStatuses fails the task, and Spark's
  retry re-sends the same chunks with the same markers;
- a read task reads its range from the next member: a slave with slaveReadEnable=true serves
  it up to the confirm position it holds (the range read waits for the rest, which a member of
  the SyncStateSet has, and the new master raises its confirm position to its log end when it
  takes over), a slave without it answers NOT_MASTER and the read moves on to the new master;
- queue bounds for planning may then come from a slave, whose confirm position can trail the
  master's: `QueueBounds.from_master` says whether the member the routes name master answered,
  and only such bounds can prove data loss (connector.spark.source.check_positions); a query never
  moves a queue backwards (connector.spark.datasource latestOffset).
Routes are asked again for each micro-batch (source) and each write task (sink), so a member
that was down when a task was planned is only reached by the next batch or task attempt.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from conf.controller_addresses import controller_addresses
from conf.signing import Credentials
from conf.tls import NO_TLS, ClientTLS
from connector.client.admin import Admin
from connector.client.config import ClientConfig
from connector.client.discovery import alive_members, controller_cluster_list
from connector.errors import RoutesUnavailableError
from connector.protocol import RocketHAError

__all__ = [
    "ControllerRoutes",
    "QueueBounds",
    "ReplicaSet",
    "RouteProvider",
    "StaticRoutes",
    "client_config",
    "queue_bounds",
    "route_provider",
    "topic_queue_counts",
    "writable_queue_counts",
    "writable_topics",
]

logger = logging.getLogger(__name__)

PERM_WRITE = 2  # a topic config's write permission bit (RocketMQ's PERM_WRITE)


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class ReplicaSet:
    broker_name: str
    endpoints: tuple[str, ...]  # master first (reads of slaves come later, with replication)


@dataclasses.dataclass(frozen=True, slots=True)
class QueueBounds:
    queue_id: int
    min_queue_offset: int
    max_queue_offset: int  # next offset to be written that readers may see (confirmed)
    from_master: bool = True  # False: a slave answered (the master did not), max may trail


class RouteProvider(Protocol):
    def replica_sets(self) -> tuple[ReplicaSet, ...]: ...


def client_config(endpoints: Sequence[str], request_timeout_ms: int,
                  tls: ClientTLS = NO_TLS, credentials: Credentials | None = None
                  ) -> ClientConfig:
    """A client for one replica set: calls give up after a few request timeouts; TLS per
    `tls`, signed with `credentials` (the accessKey/secretKey options) when given."""
    return ClientConfig(brokers=tuple(endpoints), request_timeout_ms=request_timeout_ms,
                        send_deadline_ms=3 * request_timeout_ms,
                        tls_trust_cert_path=tls.trust_cert_path, tls_cert_path=tls.cert_path,
                        tls_key_path=tls.key_path,
                        access_key=credentials.access_key if credentials else None,
                        secret_key=credentials.secret_key if credentials else None)


class StaticRoutes:
    """Replica sets from fixed endpoints (the `brokers` option)."""

    def __init__(self, brokers: Sequence[str], request_timeout_ms: int,
                 tls: ClientTLS = NO_TLS, credentials: Credentials | None = None) -> None:
        self._brokers = tuple(brokers)
        self._request_timeout_ms = request_timeout_ms
        self._tls = tls
        self._credentials = credentials

    def replica_sets(self) -> tuple[ReplicaSet, ...]:
        """Endpoints that answer, grouped by brokerName; one that does not answer within the
        client's deadline is left out with a warning (a dead slave must not stop a query);
        none answering raises RoutesUnavailableError."""
        members: dict[str, list[tuple[bool, str]]] = {}
        failures = []
        for endpoint in self._brokers:
            try:
                config = dataclasses.replace(client_config([endpoint], self._request_timeout_ms,
                                                           self._tls, self._credentials),
                                             send_deadline_ms=2 * self._request_timeout_ms)
                info = Admin(config).broker_info()
            except RocketHAError as err:
                failures.append(f"{endpoint}: {err}")
                continue
            is_master = info.get("role", "MASTER") == "MASTER"
            members.setdefault(str(info["broker_name"]), []).append((not is_master, endpoint))
        if not members:
            raise RoutesUnavailableError("option brokers: no endpoint answered broker_info ("
                                         + "; ".join(failures) + ")")
        for failure in failures:
            logger.warning("option brokers: left out %s", failure)
        return tuple(sorted(ReplicaSet(name, tuple(endpoint for _, endpoint in sorted(entries)))
                            for name, entries in members.items()))


class ControllerRoutes:
    """Replica sets from the controller group's `cluster_list` (the `controller` option:
    HOST:PORT[,HOST:PORT...] of the controllers' client endpoints).

    Any controller answers or names its leader (NOT_LEADER + leader_address, followed a
    bounded number of times per address: connector.client.discovery). Each
    replica set's alive members become its endpoints, the master first; a set with no alive
    member is left out with a warning; no controller answering raises RoutesUnavailableError.
    """

    def __init__(self, controller: str, request_timeout_ms: int,
                 tls: ClientTLS = NO_TLS, credentials: Credentials | None = None) -> None:
        self._tls = tls
        self._credentials = credentials
        self._addresses = controller_addresses(controller)
        if not self._addresses:
            raise RoutesUnavailableError(f"option controller={controller!r} names no HOST:PORT")
        self._request_timeout_ms = request_timeout_ms

    def replica_sets(self) -> tuple[ReplicaSet, ...]:
        reply = self._cluster_list()
        result = []
        for status in reply.get("replica_sets", []):
            name = str(status["replica"]["broker_name"])
            members = alive_members(status)
            if not members:
                logger.warning("option controller: replica set %s has no alive broker; left out",
                               name)
                continue
            result.append(ReplicaSet(name, members))
        if not result:
            raise RoutesUnavailableError(
                f"option controller={','.join(self._addresses)}: no replica set has an alive "
                "broker")
        return tuple(sorted(result))

    def _cluster_list(self) -> dict[str, Any]:
        try:
            return controller_cluster_list(",".join(self._addresses), self._request_timeout_ms,
                                           self._tls, self._credentials)
        except RocketHAError as err:
            raise RoutesUnavailableError(f"option controller: {err.message}") from err


def route_provider(brokers: Sequence[str], controller: str | None,
                   request_timeout_ms: int, tls: ClientTLS = NO_TLS,
                   credentials: Credentials | None = None) -> RouteProvider:
    if controller is not None:
        return ControllerRoutes(controller, request_timeout_ms, tls, credentials)
    return StaticRoutes(brokers, request_timeout_ms, tls, credentials)


def _list_topics(replica_set: ReplicaSet, request_timeout_ms: int, tls: ClientTLS,
                 credentials: Credentials | None) -> list[dict[str, Any]]:
    admin = Admin(client_config(replica_set.endpoints, request_timeout_ms, tls, credentials))
    try:
        return admin.list_topics()
    except RocketHAError as err:
        raise RoutesUnavailableError(
            f"replica set {replica_set.broker_name} ({','.join(replica_set.endpoints)}): "
            f"list_topics failed ({err})") from err


def topic_queue_counts(replica_set: ReplicaSet, request_timeout_ms: int,
                       tls: ClientTLS = NO_TLS, credentials: Credentials | None = None
                       ) -> dict[str, tuple[int, int]]:
    """topic -> (read_queue_nums, write_queue_nums) on one replica set."""
    return {str(topic["name"]): (int(topic["read_queue_nums"]), int(topic["write_queue_nums"]))
            for topic in _list_topics(replica_set, request_timeout_ms, tls, credentials)}


def writable_topics(replica_set: ReplicaSet, request_timeout_ms: int,
                    tls: ClientTLS = NO_TLS, credentials: Credentials | None = None
                    ) -> frozenset[str]:
    """The topics that take writes on one replica set: a topic drained from it (write
    permission off, `rocketha-admin topic update --remove-broker-name`) is not one."""
    return frozenset(writable_queue_counts(replica_set, request_timeout_ms, tls, credentials))


def writable_queue_counts(replica_set: ReplicaSet, request_timeout_ms: int,
                          tls: ClientTLS = NO_TLS, credentials: Credentials | None = None
                          ) -> dict[str, int]:
    """topic -> write_queue_nums of every topic that takes writes on one replica set (see
    `writable_topics`)."""
    return {str(topic["name"]): int(topic["write_queue_nums"]) for topic in _list_topics(
        replica_set, request_timeout_ms, tls, credentials)
        if int(topic.get("perm", PERM_WRITE)) & PERM_WRITE}


def queue_bounds(replica_set: ReplicaSet, topic: str, request_timeout_ms: int,
                 tls: ClientTLS = NO_TLS, credentials: Credentials | None = None
                 ) -> list[QueueBounds]:
    """Min and max queue offsets of every readable queue of `topic` on one replica set, from
    its master, or from the next member that answers when the master does not (failover)."""
    admin = Admin(client_config(replica_set.endpoints, request_timeout_ms, tls, credentials))
    queues = admin.queue_offsets(topic)
    from_master = admin.endpoint == replica_set.endpoints[0]  # the member that answered
    if not from_master:
        logger.info("replica set %s: queue bounds of %s from %s (%s did not answer)",
                    replica_set.broker_name, topic, admin.endpoint, replica_set.endpoints[0])
    return [QueueBounds(int(queue["queue_id"]), int(queue["min_queue_offset"]),
                        int(queue["max_queue_offset"]), from_master) for queue in queues]
