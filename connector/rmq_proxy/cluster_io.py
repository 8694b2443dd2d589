"""The proxy as a client of the cluster: routes from the controllers, puts and pulls per
replica set through the client library (connector.client), so it follows a failover as our
Producer and Consumer do.

    ClusterLinks.routes(topic)        get_routes from the controller group (cached route_ttl_ms)
    ClusterLinks.user_routes(t, user) the same asked as `user` (the controller checks its ACLs)
    ClusterLinks.members(set)         the set's brokers, its alive master first (cluster_list)
    ClusterLinks.put(set, topic, b)   one produce batch on a pooled idempotent Producer of the
                                      set (at most producers_per_set puts at once per set)
    ClusterLinks.pull(set, ...)       one pull (reads stop at the confirm position)
    ClusterLinks.admin(set)           Admin of the set (topics, offsets)
    ClusterLinks.auth_data()          the controllers' users and ACLs (get_auth_data)

Identities: every call is signed with the keys of `clientConfig` (the proxy's own identity, a
Super user on a secured cluster: routes, members, the POP state topic, dead letters), except
the calls made for a RocketMQ client on a cluster with authentication (`user=`, the client's
Credentials): its puts and pulls are signed with that user's keys, so the brokers apply that
user's ACLs exactly as for a Flight client (Pub on the topic; Sub on the topic and group).
Producer pools are per (replica set, user), at most USER_POOLS_MAX (least recently used
closed first).

A Producer built on a set's members moves to the next member after NOT_MASTER or a broken
connection, so a put started before a failover reaches the new master within its deadline;
the pool is rebuilt when the controller names another master, so new puts start there.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import queue
import threading
import time
from typing import Any

import pyarrow as pa

from conf.signing import Credentials
from connector.client import (
    Admin,
    ClientConfig,
    Consumer,
    Producer,
    PullResult,
    controller_call,
    controller_cluster_list,
)
from connector.protocol import PutReply, RetriableError, status_for
from connector.rmq_proxy.config import ProxyConfig

__all__ = ["USER_POOLS_MAX", "ClusterLinks", "TopicRoute"]

logger = logging.getLogger(__name__)

USER_POOLS_MAX = 256  # (replica set, user) producer pools kept open


@dataclasses.dataclass(frozen=True, slots=True)
class TopicRoute:
    """Where a topic lives: (broker_name, read_queue_nums, write_queue_nums, perm) per set."""

    topic: str
    queues: tuple[tuple[str, int, int, int], ...]


class _ProducerPool:
    def __init__(self, members: tuple[str, ...], client: ClientConfig,
                 config: ProxyConfig) -> None:
        self.members = members
        self.credentials = client.credentials
        self._config = client
        self._idle: queue.LifoQueue[Producer] = queue.LifoQueue()
        self._slots = threading.BoundedSemaphore(config.producers_per_set)
        self.closed = False

    def put(self, topic: str, batch: pa.RecordBatch, timeout_s: float) -> PutReply:
        if not self._slots.acquire(timeout=timeout_s):
            raise RetriableError(status_for("BUSY"), "every producer of the replica set is busy")
        try:
            try:
                producer = self._idle.get_nowait()
            except queue.Empty:
                producer = Producer(self._config, idempotent=True)
            try:
                reply = producer.put(topic, batch)
            except BaseException:
                producer.close()
                raise
            if self.closed:
                producer.close()
            else:
                self._idle.put(producer)
            return reply
        finally:
            self._slots.release()

    def close(self) -> None:
        self.closed = True
        while True:
            try:
                self._idle.get_nowait().close()
            except queue.Empty:
                return


class ClusterLinks:
    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._routes: dict[str, tuple[float, TopicRoute | None]] = {}
        self._members: tuple[float, dict[str, tuple[str, ...]]] = (0.0, {})
        self._pools: collections.OrderedDict[tuple[str, str], _ProducerPool] = \
            collections.OrderedDict()
        self._base = _base_client(config)

    @property
    def credentials(self) -> Credentials | None:
        """The proxy's own keys (clientConfig); None on a cluster without authentication."""
        return self._base.credentials

    def _client(self, broker_name: str, members: tuple[str, ...] | None = None,
                user: Credentials | None = None) -> ClientConfig:
        keys: dict[str, Any] = {}
        if user is not None:
            keys = {"access_key": user.access_key, "secret_key": user.secret_key,
                    "credentials_file": None}
        return dataclasses.replace(self._base, controller=None,
                                   brokers=members or self.members(broker_name), **keys)

    def auth_data(self) -> dict[str, Any]:
        """The controllers' get_auth_data reply (users with secrets: never log it)."""
        return controller_call(self.config.controller_addr, "get_auth_data", None,
                               self.config.request_timeout_ms, self._base.tls,
                               self._base.credentials)

    def user_routes(self, topic: str, user: Credentials) -> TopicRoute | None:
        """The topic's route asked as `user` (not cached): the controller answers only a
        user with Pub, Sub or Get on the topic (FatalError NO_PERMISSION otherwise)."""
        reply = controller_call(self.config.controller_addr, "get_routes", {"topic": topic},
                                self.config.request_timeout_ms, self._base.tls, user)
        return _route_of(topic, reply)

    def routes(self, topic: str) -> TopicRoute | None:
        """The topic's route (None: the controllers know no replica set serving it)."""
        now_s = time.monotonic()
        with self._lock:
            cached = self._routes.get(topic)
        if cached is not None and now_s < cached[0]:
            return cached[1]
        reply = controller_call(self.config.controller_addr, "get_routes", {"topic": topic},
                                self.config.request_timeout_ms, self._base.tls,
                                self._base.credentials)
        route = _route_of(topic, reply)
        with self._lock:
            self._routes[topic] = (now_s + self.config.route_ttl_ms / 1000.0, route)
            if len(self._routes) > 100_000:
                self._routes.clear()
        return route

    def all_members(self) -> dict[str, tuple[str, ...]]:
        """brokerName -> its brokers' addresses, the alive master first."""
        now_s = time.monotonic()
        with self._lock:
            expires_s, members = self._members
        if members and now_s < expires_s:
            return members
        cluster = controller_cluster_list(self.config.controller_addr,
                                          self.config.request_timeout_ms, self._base.tls,
                                          self._base.credentials)
        members = {}
        for status in cluster.get("replica_sets", []):
            replica = status["replica"]
            alive = set(status.get("alive_broker_ids", []))
            master = replica.get("master_broker_id")
            members[str(replica["broker_name"])] = tuple(
                str(member["broker_address"]) for member in sorted(
                    replica.get("brokers", []),
                    key=lambda m: (m["broker_id"] != master or master not in alive,
                                   m["broker_id"] not in alive, m["broker_id"])))
        with self._lock:
            self._members = (now_s + self.config.route_ttl_ms / 1000.0, members)
        return members

    def members(self, broker_name: str) -> tuple[str, ...]:
        members = self.all_members().get(broker_name)
        if not members:
            raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                                 f"replica set {broker_name} is unknown to the controllers")
        return members

    def put(self, broker_name: str, topic: str, batch: pa.RecordBatch,
            user: Credentials | None = None) -> PutReply:
        """One put signed by `user` (None: the proxy's own keys)."""
        members = self.members(broker_name)
        key = (broker_name, user.access_key if user is not None else "")
        closed = []
        with self._lock:
            pool = self._pools.get(key)
            if pool is None or pool.members != members or (
                    user is not None and pool.credentials != user):  # (a changed secret)
                if pool is not None:
                    closed.append(pool)
                pool = self._pools[key] = _ProducerPool(
                    members, self._client(broker_name, members, user), self.config)
            self._pools.move_to_end(key)
            while len(self._pools) > USER_POOLS_MAX:
                closed.append(self._pools.popitem(last=False)[1])
        for old in closed:
            old.close()
        return pool.put(topic, batch, self.config.send_deadline_ms / 1000.0)

    def pull(self, broker_name: str, topic: str, queue_id: int, queue_offset: int, *,
             max_messages: int, tag_filter: str | None = None, max_wait_ms: int = 0,
             columns: tuple[str, ...] | None = None, user: Credentials | None = None,
             group: str | None = None) -> PullResult:
        """One pull signed by `user` (None: the proxy's own keys); `group` goes in the
        ticket, so the broker checks Sub on it too."""
        consumer = Consumer(self._client(broker_name, user=user), group=group)
        return consumer.pull(topic, queue_id, queue_offset, max_messages=max_messages,
                             tag_filter=tag_filter, max_wait_ms=max_wait_ms, columns=columns)

    def admin(self, broker_name: str) -> Admin:
        return Admin(self._client(broker_name))

    def close(self) -> None:
        with self._lock:
            pools = list(self._pools.values())
            self._pools.clear()
        for pool in pools:
            pool.close()

    def info(self) -> dict[str, Any]:
        with self._lock:
            return {"replica_sets": sorted(self._members[1])}


def _route_of(topic: str, reply: dict[str, Any]) -> TopicRoute | None:
    if reply.get("status") != "OK":
        return None
    return TopicRoute(topic, tuple(
        (str(q["broker_name"]), int(q["read_queue_nums"]), int(q["write_queue_nums"]),
         int(q["perm"])) for q in reply.get("queues", [])))


def _base_client(config: ProxyConfig) -> ClientConfig:
    """The client settings of every call the proxy makes (clientConfig: TLS on a secured
    cluster; the timeouts are the proxy's own)."""
    timeouts = {"controller": config.controller_addr,
                "request_timeout_ms": config.request_timeout_ms,
                "send_deadline_ms": config.send_deadline_ms}
    if config.client_config:
        return ClientConfig.from_properties(config.client_config, **timeouts)
    return ClientConfig(**timeouts)
