"""rocketha's client library: Producer, Consumer and Admin over Arrow Flight.

Usable from Spark executors: `ClientConfig` is a frozen, picklable value; Flight connections are
opened lazily and cached per process (keyed by endpoint and checked against the pid, so a
forked worker opens its own). Every retry loop is bounded by a count and a deadline.

Retry policy (pure, unit-tested): a call that fails with a retriable status or error (see
connector.protocol.errors) is retried after `Backoff.delay_ms(attempt)` while attempts remain and
the deadline has not passed; with several brokers, an unordered send moves to the next broker
when one is unreachable or answers NOT_MASTER. With `ClientConfig(controller=...)` the brokers
are the alive masters the controller names (its `cluster_list`), fetched again after NOT_MASTER
or a broken connection, so clients follow a failover. TLS: `tls_trust_cert_path` (the cluster
CA) turns it on for every connection, `tls_cert_path`/`tls_key_path` add a client certificate
(brokers and controllers that require one). Authentication: `access_key`/`secret_key` (or
`credentials_file`) sign every call (conf/signing.py).
`ClientConfig.from_properties(path)` reads both from a client.properties (`rocketha-cluster up`
writes `<dir>/client.properties`).
Non-retriable put statuses (MESSAGE_ILLEGAL...) come back as results; request errors (BAD_SCHEMA, TOPIC_NOT_EXIST...)
raise `FatalError`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import os
import struct
import threading
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Self

import pyarrow as pa
from pyarrow import flight

from conf.credentials import read_credentials_file, read_private_file
from conf.signing import (
    Credentials,
    action_target,
    descriptor_target,
    sign_headers,
)
from conf.tls import (
    NO_TLS,
    ClientTLS,
    TLSConfigError,
    client_tls_from_properties,
    connect_flight,
    read_properties,
)
from connector.client.async_sender import AsyncSender, SendFuture
from connector.client.master_watch import RoundTrips, replacement_of
from connector.client.producer_core import (
    MESSAGE_OVERHEAD_BYTES,
    STORED_NOT_ACKED,
    Batch,
    LaneKey,
    Message,
    ProducerConfig,
    ProducerCore,
    QueueChooser,
    SendResult,
    message_size_bytes,
    put_results,
)
from connector.protocol import (
    IDEMPOTENCE_PROPERTY,
    PRODUCE_SCHEMA,
    FatalError,
    GetReply,
    GetTicket,
    PutIdempotence,
    PutReply,
    RetriableError,
    RocketHAError,
    decode_error_text,
    error_for_code,
    produce_descriptor_command,
    status_for,
)

__all__ = [
    "CONTROLLER_REDIRECTS_MAX",
    "STORED_NOT_ACKED",
    "Admin",
    "Backoff",
    "ClientConfig",
    "Consumer",
    "Producer",
    "ProducerConfig",
    "PullResult",
    "SendResult",
    "alive_members",
    "controller_addresses",
    "controller_call",
    "controller_cluster_list",
    "controller_masters",
    "controller_members",
    "signed_options",
    "with_marker",
]

logger = logging.getLogger(__name__)

INCOMPLETE_ROUTES_REFRESH_MS = 1000  # routes missing a set's master: fetched again this soon


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class ClientConfig:
    """Where the brokers are and how hard to try. Picklable (plain values only)."""

    brokers: tuple[str, ...] = ()  # "host:port" Arrow Flight endpoints
    controller: str | None = None  # or "host:port[,host:port...]" of the controllers
    request_timeout_ms: int = 10_000
    send_deadline_ms: int = 30_000  # a send gives up (raises) after this
    retries_max: int = 20
    backoff_initial_ms: int = 20
    backoff_max_ms: int = 1_000
    # An idempotent producer with `controller` asks the controller this often, while a put's
    # reply is late, whether its master was replaced, and if so sends it to the new one
    # (connector/client/master_watch.py).
    master_check_interval_ms: int = 200
    master_check_after_ms: int = 1000  # ... once a reply is this late (then every interval)
    # With `controller`: the routes are fetched again this often in the background, as
    # RocketMQ's clients poll the name server (pollNameServerInterval, 30 s), and every
    # INCOMPLETE_ROUTES_REFRESH_MS while a replica set the controller lists has no alive
    # master: without it a client sent nothing to a set whose master was elected after its
    # last fetch until some call failed (a chaos campaign: one set without writes for minutes).
    route_refresh_interval_ms: int = 30_000
    # TLS (README "Transport security"): the CA that signs the servers' certificates (set:
    # TLS on), and this client's certificate and key (servers with need.client.auth=require)
    tls_trust_cert_path: str = ""
    tls_cert_path: str = ""
    tls_key_path: str = ""
    # Authentication (issue 16): every call is signed with the secret key (the secret never
    # travels; conf/signing.py). Or `credentials_file`: a file only its owner
    # may read, with accessKey= and secretKey= lines (read once, here).
    access_key: str | None = None
    secret_key: str | None = dataclasses.field(default=None, repr=False)
    credentials_file: str | None = None

    def __post_init__(self) -> None:
        if self.credentials_file:
            found = read_credentials_file(self.credentials_file, "ClientConfig.credentials_file")
            object.__setattr__(self, "access_key", found.access_key)
            object.__setattr__(self, "secret_key", found.secret_key)
        if bool(self.access_key) != bool(self.secret_key):
            raise ValueError("ClientConfig: access_key and secret_key go together")
        if isinstance(self.brokers, str):
            object.__setattr__(self, "brokers", tuple(
                part.strip() for part in self.brokers.split(",") if part.strip()))
        if not self.brokers and not self.controller:
            raise ValueError("ClientConfig.brokers: at least one host:port is required "
                             "(or ClientConfig.controller)")
        for endpoint in self.brokers + controller_addresses(self.controller):
            host, sep, port = endpoint.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"ClientConfig.brokers: {endpoint!r} is not host:port")
        for name in ("request_timeout_ms", "send_deadline_ms", "backoff_initial_ms",
                     "backoff_max_ms", "master_check_interval_ms", "master_check_after_ms",
                     "route_refresh_interval_ms"):
            if getattr(self, name) <= 0:
                raise ValueError(f"ClientConfig.{name} must be > 0")
        if self.retries_max < 0:
            raise ValueError("ClientConfig.retries_max must be >= 0")
        if bool(self.tls_cert_path) != bool(self.tls_key_path):
            raise ValueError("ClientConfig.tls_cert_path and tls_key_path go together")
        if self.tls_cert_path and not self.tls_trust_cert_path:
            raise ValueError("ClientConfig.tls_trust_cert_path is required with tls_cert_path")

    @property
    def tls(self) -> ClientTLS:
        return ClientTLS(self.tls_trust_cert_path, self.tls_cert_path, self.tls_key_path)

    @classmethod
    def from_properties(cls, path: str | os.PathLike[str], **overrides: Any) -> ClientConfig:
        """A client from a client.properties file: `controllerAddr` (host:port[;...]) or
        `brokerAddr` (host:port[,...]), `tls.client.trustCertPath` / `certPath` /
        `keyPath`, and the user's `accessKey` + `secretKey` (then the file must be private
        to its owner, as a credentials file) or `credentialsFile` (a path to one).
        `overrides` set any other field. Raises ValueError naming the key."""
        try:
            properties = read_properties(path)
            tls = client_tls_from_properties(properties)
            if properties.get("secretKey"):
                read_private_file(str(path), "client config")
        except (OSError, TLSConfigError) as err:
            raise ValueError(f"client config {path}: {err}") from err
        values: dict[str, Any] = {"tls_trust_cert_path": tls.trust_cert_path,
                                  "tls_cert_path": tls.cert_path, "tls_key_path": tls.key_path}
        for key, field in (("accessKey", "access_key"), ("secretKey", "secret_key"),
                           ("credentialsFile", "credentials_file")):
            if properties.get(key):
                values[field] = properties[key]
        if bool(values.get("access_key")) != bool(values.get("secret_key")):
            raise ValueError(f"client config {path}: accessKey and secretKey go together")
        if properties.get("controllerAddr"):
            values["controller"] = properties["controllerAddr"]
        if properties.get("brokerAddr"):
            values["brokers"] = properties["brokerAddr"]
        return cls(**{**values, **overrides})

    @property
    def credentials(self) -> Credentials | None:
        if not self.access_key or not self.secret_key:
            return None
        return Credentials(self.access_key, self.secret_key)


def signed_options(credentials: Credentials | None, method: str, target: bytes,
                   timeout_s: float) -> flight.FlightCallOptions:
    """Call options with the timeout and, with credentials, the signature headers for this
    one call (`method` as Flight names it: DO_ACTION, DO_GET, DO_PUT...)."""
    if credentials is None:
        return flight.FlightCallOptions(timeout=timeout_s)
    headers = sign_headers(credentials, method, target, int(time.time() * 1000))
    return flight.FlightCallOptions(timeout=timeout_s, headers=headers)


def controller_addresses(controller: str | None) -> tuple[str, ...]:
    """`host:port[,host:port...]` (`;` also separates) -> the addresses."""
    return tuple(part.strip() for part in (controller or "").replace(";", ",").split(",")
                 if part.strip())


CONTROLLER_REDIRECTS_MAX = 3  # NOT_LEADER hops followed per configured controller address


def controller_cluster_list(controller: str, timeout_ms: int, tls: ClientTLS = NO_TLS,
                            credentials: Credentials | None = None) -> dict[str, Any]:
    """The controller group's `cluster_list` reply (see `controller_call`)."""
    return controller_call(controller, "cluster_list", None, timeout_ms, tls, credentials)


def controller_call(controller: str, action: str, body: Mapping[str, Any] | None,
                    timeout_ms: int, tls: ClientTLS = NO_TLS,
                    credentials: Credentials | None = None) -> dict[str, Any]:
    """One DoAction JSON call answered by the controller group: any node answers or names its
    leader (NOT_LEADER + leader_address, followed at most CONTROLLER_REDIRECTS_MAX times per
    address). Returns the first OK reply (other actions: also a reply such as TOPIC_NOT_FOUND).
    Raises RetriableError SERVICE_NOT_AVAILABLE when no controller answers, FatalError
    UNAUTHENTICATED / NO_PERMISSION when none answered but one refused the caller."""
    failures = []
    refusal: FatalError | None = None
    payload = json.dumps(dict(body or {})).encode()
    for start in controller_addresses(controller):
        address: str | None = start
        for _ in range(CONTROLLER_REDIRECTS_MAX + 1):
            if address is None:
                break
            try:
                reply = _controller_call(address, action, payload, timeout_ms, tls,
                                         credentials)
            except (flight.FlightUnauthenticatedError, flight.FlightUnauthorizedError) as err:
                # an answer about the caller's keys or ACLs (another controller may not have
                # applied a new user yet: ask it too, but report the refusal, not an outage)
                refusal = FatalError(status_for(
                    "UNAUTHENTICATED" if isinstance(err, flight.FlightUnauthenticatedError)
                    else "NO_PERMISSION"), f"controller {address}: {err}")
                failures.append(f"{address}: {err}")
                break
            except (flight.FlightError, OSError, ValueError) as err:
                failures.append(f"{address}: {err}")
                break
            status = reply.get("status")
            if status == "OK" or (status != "NOT_LEADER" and action != "cluster_list"):
                return reply
            failures.append(f"{address}: {reply.get('status')}")
            address = reply.get("leader_address") if reply.get("status") == "NOT_LEADER" \
                else None
    if refusal is not None:
        raise refusal
    raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                         f"controller {controller}: no controller answered {action} ("
                         + "; ".join(failures[-4:]) + ")")


def _controller_call(address: str, action: str, payload: bytes, timeout_ms: int,
                     tls: ClientTLS = NO_TLS, credentials: Credentials | None = None
                     ) -> dict[str, Any]:
    """One DoAction JSON call to a controller's client endpoint; the reply is one object."""
    client = connect_flight(address, tls)
    try:
        options = signed_options(credentials, "DO_ACTION", action_target(action, payload),
                                 timeout_ms / 1000.0)
        results = list(client.do_action(flight.Action(action, payload), options))
        if len(results) != 1:
            raise ValueError(f"{action}: {len(results)} results")
        reply = json.loads(results[0].body.to_pybytes())
        if not isinstance(reply, dict):
            # (ValueError, not TypeError: the callers treat it as the bad reply it is)
            raise ValueError(f"{action}: reply is not a JSON object")  # noqa: TRY004
        return reply
    finally:
        client.close()


def controller_masters(controller: str, timeout_ms: int, tls: ClientTLS = NO_TLS,
                       credentials: Credentials | None = None) -> tuple[str, ...]:
    """The alive masters of every replica set the controller knows, by brokerName."""
    return _masters_of(controller_cluster_list(controller, timeout_ms, tls, credentials),
                       controller)


def _alive_masters(cluster: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(brokerName, master address) of each replica set whose master is alive, sorted."""
    masters = []
    for status in cluster.get("replica_sets", []):
        replica = status["replica"]
        if (replica.get("master_broker_id") in set(status.get("alive_broker_ids", []))
                and replica.get("master_address")):
            masters.append((str(replica["broker_name"]), str(replica["master_address"])))
    return sorted(masters)


def _masters_of(cluster: Mapping[str, Any], controller: str) -> tuple[str, ...]:
    """The alive masters' addresses in a cluster_list reply, by brokerName."""
    masters = _alive_masters(cluster)
    if not masters:
        raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                             f"controller {controller}: no replica set has an alive master")
    return tuple(address for _, address in masters)


def alive_members(status: Mapping[str, Any]) -> tuple[str, ...]:
    """The addresses of a `cluster_list` replica-set entry's alive brokers, the master first."""
    replica = status["replica"]
    alive = set(status.get("alive_broker_ids", []))
    members = sorted((member["broker_id"] != replica.get("master_broker_id"),
                      str(member["broker_address"]))
                     for member in replica.get("brokers", []) if member["broker_id"] in alive)
    return tuple(address for _, address in members)


def controller_members(controller: str, timeout_ms: int, broker_name: str | None,
                       tls: ClientTLS = NO_TLS, credentials: Credentials | None = None
                       ) -> tuple[str, ...]:
    """The alive members of one replica set, its master first (when it has an alive one):
    where a consumer reads, on from a slave while the set has no master. `broker_name` None
    names the only replica set; with several, the consumer must say which (FatalError)."""
    sets = controller_cluster_list(controller, timeout_ms, tls, credentials).get(
        "replica_sets", [])
    names = sorted(str(status["replica"]["broker_name"]) for status in sets)
    if broker_name is None and len(names) > 1:
        raise FatalError(status_for("BAD_REQUEST"), f"controller {controller}: "
                         f"{len(names)} replica sets {names}; name one (broker_name=...)")
    for status in sets:
        if broker_name is not None and status["replica"]["broker_name"] != broker_name:
            continue
        members = alive_members(status)
        if members:
            return members
    raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"), f"controller {controller}: "
                         f"replica set {broker_name or names} has no alive broker")


@dataclasses.dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with a cap: 1x, 2x, 4x ... initial, never above the cap."""

    initial_ms: int
    max_ms: int

    def delay_ms(self, attempt: int) -> int:
        return min(self.max_ms, self.initial_ms * (1 << min(attempt, 20)))

    @staticmethod
    def remaining_ms(deadline_monotonic_s: float, now_s: float) -> int:
        return max(0, int((deadline_monotonic_s - now_s) * 1000))


@dataclasses.dataclass(frozen=True, slots=True)
class PullResult:
    table: pa.Table
    reply: GetReply

    @property
    def status(self) -> str:
        return self.reply.status

    @property
    def next_queue_offset(self) -> int:
        return self.reply.next_queue_offset


# -- connections: lazily opened, cached per process --------------------------------------------
_CONNECTIONS: dict[tuple[str, ClientTLS], flight.FlightClient] = {}
_CONNECTIONS_PID = os.getpid()
_CONNECTIONS_LOCK = threading.Lock()


def _connection(endpoint: str, tls: ClientTLS) -> flight.FlightClient:
    global _CONNECTIONS_PID
    with _CONNECTIONS_LOCK:
        if _CONNECTIONS_PID != os.getpid():  # forked: the parent's channels are not ours
            _CONNECTIONS.clear()
            _CONNECTIONS_PID = os.getpid()
        client = _CONNECTIONS.get((endpoint, tls))
        if client is None:
            client = _CONNECTIONS[(endpoint, tls)] = connect_flight(endpoint, tls)
        return client


def _drop_connection(endpoint: str, tls: ClientTLS) -> None:
    """Forget the cached connection to `endpoint`: the next call opens a fresh one (gRPC
    would wait out its reconnect backoff on the old channel). Not closed here: another
    thread (a Producer lane, a Consumer) may be about to call on it, and `close()` would
    fail that call ("FlightClient is closed"); the client closes its channel when the last
    reference goes (open streams do not need it)."""
    with _CONNECTIONS_LOCK:
        _CONNECTIONS.pop((endpoint, tls), None)


def as_rocketha_error(err: flight.FlightError) -> RocketHAError:
    """The typed error inside a Flight error; transport failures are retriable."""
    typed = decode_error_text(str(err), getattr(err, "extra_info", None))
    if typed is not None:
        return typed
    return error_for_code(status_for("SERVICE_NOT_AVAILABLE").code,
                          f"{type(err).__name__}: {str(err)[:300]}")


class _Routes:
    """Where a client's calls go, and what it learnt about that. One per Admin / Consumer;
    one per Producer, shared by its synchronous channel and every lane of its asynchronous
    sends, so that what one lane learns (NOT_MASTER, a broken connection, a master replaced
    while a put waited) every other lane uses at its next attempt. (Each lane on its own
    routes had to find a paused master out by itself, a stream deadline each: one message
    per key in turn stood still for lanes x deadline, tests/integration/test_paused_master.py.)
    Fields are read without a lock (a stale read costs a retry); a fetch from the controller
    holds `fetch_lock`, so lanes that find the routes stale together ask once."""

    def __init__(self, brokers: tuple[str, ...]) -> None:
        self.endpoints = brokers
        self.broker_index = 0
        self.stale = False  # with `controller`: fetch the endpoints again first
        # With `controller`, from the last cluster_list (producers): the replica set of each
        # member address, and the alive master of each set.
        self.set_of_member: dict[str, str] = {}
        self.master_of_set: dict[str, str] = {}
        self.fetch_lock = threading.Lock()
        self.refresh_at_s = 0.0  # monotonic: when a background fetch is due (`_Base.endpoint`)
        self.incomplete = False  # the last fetch named a replica set without an alive master

    def move_past(self, endpoint: str) -> None:
        """The next call goes to the endpoint after `endpoint`, if that is still the current
        one: lanes that fail on the same broker together move once (with two brokers, two
        lanes moving one each would land back on the failed one)."""
        with self.fetch_lock:
            endpoints = self.endpoints
            if endpoints and endpoints[self.broker_index % len(endpoints)] == endpoint:
                self.broker_index += 1


class _Base:
    def __init__(self, config: ClientConfig, routes: _Routes | None = None) -> None:
        self.config = config
        self._backoff = Backoff(config.backoff_initial_ms, config.backoff_max_ms)
        self._routes = routes if routes is not None else _Routes(config.brokers)

    @property
    def endpoint(self) -> str:
        """The broker to call: from `brokers`, or (with `controller`) those the controller
        names (`_controller_endpoints`), fetched again after NOT_MASTER or a broken
        connection."""
        routes = self._routes
        if not routes.endpoints or routes.stale:
            assert self.config.controller is not None
            with routes.fetch_lock:
                if not routes.endpoints or routes.stale:  # (not done meanwhile by another)
                    routes.stale = False
                    try:
                        routes.endpoints = self._controller_endpoints(self.config.controller)
                    except RetriableError:
                        if not routes.endpoints:
                            raise
                        # no controller answers: go on with the endpoints already known
                        # (DESIGN §5.6: the controller being down never stops a healthy
                        # replica set)
                    finally:
                        routes.refresh_at_s = time.monotonic() + self._refresh_interval_s()
        elif self.config.controller is not None and time.monotonic() >= routes.refresh_at_s:
            self._refresh_in_background()
        endpoints = routes.endpoints
        return endpoints[routes.broker_index % len(endpoints)]

    def _refresh_in_background(self) -> None:
        """Fetch the routes again on a thread of its own, while calls go on with the ones
        known (ClientConfig.route_refresh_interval_ms): a controller that is slow or down
        never holds a call up here. At most one fetch at a time (`fetch_lock`)."""
        routes = self._routes
        if not routes.fetch_lock.acquire(blocking=False):
            return  # a fetch is under way (it sets the next refresh_at_s when done)
        controller = self.config.controller
        assert controller is not None

        def fetch() -> None:
            try:
                routes.endpoints = self._controller_endpoints(controller)
            except RocketHAError as err:  # the known routes stay (DESIGN §5.6)
                logger.debug("routes not refreshed from %s: %s", controller, err)
            finally:
                routes.refresh_at_s = time.monotonic() + self._refresh_interval_s()
                routes.fetch_lock.release()
        threading.Thread(target=fetch, name="rocketha-routes", daemon=True).start()

    def _refresh_interval_s(self) -> float:
        interval_ms = self.config.route_refresh_interval_ms
        if self._routes.incomplete:
            interval_ms = min(interval_ms, INCOMPLETE_ROUTES_REFRESH_MS)
        return interval_ms / 1000.0

    def _controller_endpoints(self, controller: str) -> tuple[str, ...]:
        return controller_masters(controller, self.config.request_timeout_ms, self.config.tls,
                                  self.config.credentials)

    def _refresh_route(self, endpoint: str) -> None:
        _drop_connection(endpoint, self.config.tls)
        self._routes.move_past(endpoint)
        if self.config.controller is not None:
            self._routes.stale = True

    def _options(self, method: str, target: bytes, timeout_s: float | None = None
                 ) -> flight.FlightCallOptions:
        return signed_options(self.config.credentials, method, target,
                              timeout_s or self.config.request_timeout_ms / 1000.0)

    def _retry(self, call: Any, what: str) -> Any:
        """Run `call(endpoint)` with the retry policy; returns its value."""
        deadline = time.monotonic() + self.config.send_deadline_ms / 1000.0
        for attempt in range(self.config.retries_max + 1):
            endpoint = ""
            try:
                endpoint = self.endpoint
                return call(endpoint)
            except flight.FlightError as err:
                error = as_rocketha_error(err)
                if isinstance(err, flight.FlightUnavailableError) or error.refresh_route:
                    self._refresh_route(endpoint)
            except RetriableError as err:
                error = err
            except pa.ArrowInvalid as err:
                if "is closed" not in str(err):
                    raise
                # another thread closed the shared connection after a failure of its own
                # (_refresh_route): a new one on the next attempt (found by a chaos run)
                _drop_connection(endpoint, self.config.tls)
                error = RetriableError(status_for("SERVICE_NOT_AVAILABLE"), f"{endpoint}: {err}")
            if not error.retriable or attempt == self.config.retries_max:
                raise error
            delay_ms = self._backoff.delay_ms(attempt)
            if Backoff.remaining_ms(deadline, time.monotonic()) <= delay_ms:
                raise error
            logger.info("%s: %s; retry %d in %d ms", what, error, attempt + 1, delay_ms)
            time.sleep(delay_ms / 1000.0)
        raise AssertionError("unreachable")


class Admin(_Base):
    """Topics, offsets, groups and broker info (DoAction)."""

    def action(self, kind: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        payload = json.dumps(dict(body or {})).encode()

        def call(endpoint: str) -> dict[str, Any]:
            results = list(_connection(endpoint, self.config.tls).do_action(
                flight.Action(kind, payload),
                self._options("DO_ACTION", action_target(kind, payload))))
            return json.loads(results[0].body.to_pybytes())

        return self._retry(call, f"action {kind}")

    def create_topic(self, topic: str, *, queues: int | None = None,
                     read_queue_nums: int | None = None, write_queue_nums: int | None = None,
                     perm: int | None = None) -> dict[str, Any]:
        body: dict[str, Any] = {"topic": topic}
        for name, value in (("read_queue_nums", read_queue_nums or queues),
                            ("write_queue_nums", write_queue_nums or queues), ("perm", perm)):
            if value is not None:
                body[name] = value
        return self.action("create_topic", body)["topic"]

    def update_topic(self, topic: str, **fields: int) -> dict[str, Any]:
        return self.action("update_topic", {"topic": topic, **fields})["topic"]

    def delete_topic(self, topic: str) -> bool:
        return bool(self.action("delete_topic", {"topic": topic})["deleted"])

    def list_topics(self) -> list[dict[str, Any]]:
        return self.action("list_topics")["topics"]

    def get_topic(self, topic: str) -> dict[str, Any]:
        return self.action("get_topic", {"topic": topic})["topic"]

    def queue_offsets(self, topic: str) -> list[dict[str, int]]:
        return self.action("queue_offsets", {"topic": topic})["queues"]

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self.action("offset_for_timestamp", {
            "topic": topic, "queue_id": queue_id, "timestamp_ms": timestamp_ms})["queue_offset"]

    def commit_offset(self, group: str, topic: str, queue_id: int, queue_offset: int) -> None:
        self.action("commit_offset", {"group": group, "topic": topic, "queue_id": queue_id,
                                      "queue_offset": queue_offset})

    def query_offsets(self, group: str, topic: str) -> dict[int, int]:
        offsets = self.action("query_offsets", {"group": group, "topic": topic})["offsets"]
        return {int(queue_id): value for queue_id, value in offsets.items()}

    def broker_info(self) -> dict[str, Any]:
        return self.action("broker_info")

    def broker_stats(self) -> dict[str, Any]:
        return self.action("broker_stats")


def with_marker(batch: pa.RecordBatch, idempotence: PutIdempotence) -> pa.RecordBatch:
    """The batch with the idempotence marker added to its last row's properties."""
    count = batch.num_rows
    properties_type = PRODUCE_SCHEMA.field("properties").type
    if "properties" in batch.schema.names:
        column = batch.column("properties")
        last = column[count - 1].as_py() or []
    else:
        column, last = pa.nulls(count, properties_type), []
    last = [(k, v) for k, v in last if k != IDEMPOTENCE_PROPERTY]
    last.append((IDEMPOTENCE_PROPERTY, idempotence.marker()))
    properties = pa.concat_arrays([column.slice(0, count - 1),
                                   pa.array([last], properties_type)])
    names = [name for name in batch.schema.names if name != "properties"]
    return pa.RecordBatch.from_arrays([batch.column(name) for name in names] + [properties],
                                      names=names + ["properties"])


QUEUE_LOOKUP_INTERVAL_S = 1.0  # a producer asks a topic's writeQueueNums at most this often


class _StoredNotAcked(RetriableError):
    """An idempotent producer's batch answered with a STORED_NOT_ACKED status."""

    def __init__(self, reply: PutReply) -> None:
        super().__init__(status_for(reply.status), reply.error or reply.status)
        self.reply = reply


@dataclasses.dataclass
class _Stream:
    endpoint: str
    schema: pa.Schema
    writer: flight.FlightStreamWriter
    reader: flight.FlightMetadataReader
    rotate_at_s: float  # monotonic time after which no new batch goes on this stream


class _PutChannel(_Base):
    """One sequence of put round trips: its DoPut streams (one per (topic, schema)) and
    (idempotent with a controller) its master watch; its routes are the Producer's, shared
    with its other channels. One thread at a time: the Producer's synchronous `put`, or one
    lane of its asynchronous sends."""

    def __init__(self, config: ClientConfig, *, idempotent: bool,
                 routes: _Routes | None = None) -> None:
        super().__init__(config, routes)
        self.idempotent = idempotent
        self._streams: dict[tuple[str, pa.Schema], _Stream] = {}
        # The last stream used, checked first (schema equality, ~0.7 us): hashing a pa.Schema
        # for the dict costs ~6 us, on every single send
        self._last_stream: tuple[str, pa.Schema, _Stream] | None = None
        self._round_trips = (RoundTrips(config.master_check_after_ms / 1000.0,
                                        config.master_check_interval_ms / 1000.0)
                             if idempotent and config.controller else None)
        # An idempotent batch is retried only in the replica set it was first sent to (its
        # idempotence table is per set); a lane of asynchronous sends (one queue, one
        # producer id) stays in the set of its first send.
        self._lane_home: list[str] = []

    def put(self, topic: str, batch: pa.RecordBatch) -> PutReply:
        """One batch with the retry policy (see Producer.put)."""
        home: list[str] = []  # the replica set of the first attempt (idempotent batches)

        def call(endpoint: str) -> PutReply:
            reply = self._round_trip(topic, batch, self._pinned(endpoint, home))
            if not status_for(reply.status).stored and status_for(reply.status).retriable:
                raise error_for_code(reply.code, reply.error or reply.status)
            if self.idempotent and reply.status in STORED_NOT_ACKED:
                raise _StoredNotAcked(reply)
            return reply

        try:
            reply: PutReply = self._retry(call, f"send to {topic}")
        except _StoredNotAcked as err:  # the deadline passed: the last answer stands
            reply = err.reply
        except pa.ArrowException as err:
            raise FatalError(status_for("BAD_SCHEMA"), str(err)) from err
        return reply

    def _controller_endpoints(self, controller: str) -> tuple[str, ...]:
        cluster = controller_cluster_list(controller, self.config.request_timeout_ms,
                                          self.config.tls, self.config.credentials)
        self._routes.set_of_member = {
            str(member["broker_address"]): str(status["replica"]["broker_name"])
            for status in cluster.get("replica_sets", [])
            for member in status["replica"].get("brokers", [])}
        self._routes.master_of_set = dict(_alive_masters(cluster))
        self._routes.incomplete = (len(self._routes.master_of_set)
                                   < len(cluster.get("replica_sets", [])))
        return _masters_of(cluster, controller)

    def _pinned(self, endpoint: str, home: list[str]) -> str:
        """Where an idempotent batch goes: on its first attempt `endpoint` (and its replica
        set becomes `home`); on a retry, the current master of `home`, never another set's
        (the idempotence table that recognises a retry is per replica set: a retry stored by
        another set would be stored twice)."""
        if not self.idempotent or self.config.controller is None:
            return endpoint
        if not home:
            name = self._routes.set_of_member.get(endpoint)
            if name is not None:
                home.append(name)
            return endpoint
        master = self._routes.master_of_set.get(home[0])
        if master is None:
            self._routes.stale = True
            raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                                 f"replica set {home[0]} has no alive master yet")
        return master

    def attempt(self, topic: str, batch: pa.RecordBatch) -> PutReply | RocketHAError:
        """One round trip, no retry (ProducerCore decides): the reply, or the error."""
        endpoint = ""
        try:
            endpoint = self._pinned(self.endpoint, self._lane_home)
            reply = self._round_trip(topic, batch, endpoint)
        except flight.FlightError as err:
            error = as_rocketha_error(err)
            if isinstance(err, flight.FlightUnavailableError) or error.refresh_route:
                self._refresh_route(endpoint)
            return error
        except RocketHAError as err:
            return err
        except pa.ArrowException as err:
            return FatalError(status_for("BAD_SCHEMA"), str(err))
        except OSError as err:
            return RetriableError(status_for("SERVICE_NOT_AVAILABLE"), f"{endpoint}: {err}")
        status = status_for(reply.status)
        if not status.stored and status.refresh_route:  # NOT_MASTER...: ask for routes again
            self._routes.move_past(endpoint)
            self._routes.stale = self.config.controller is not None
        return reply

    def _round_trip(self, topic: str, batch: pa.RecordBatch, endpoint: str) -> PutReply:
        try:
            return self._round_trip_on(topic, batch, endpoint)
        except pa.ArrowException as err:
            if "is closed" not in str(err):
                raise
            # another channel dropped the shared connection after a failure (_refresh_route)
            raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                                 f"{endpoint}: {err}") from err

    def _round_trip_on(self, topic: str, batch: pa.RecordBatch, endpoint: str) -> PutReply:
        """One put on the (topic, schema) stream to `endpoint`. With the master watch, the
        whole round trip runs under it, the opening of a new stream included: a stream opened
        to a paused master blocks in do_put until its deadline (gRPC queues the call while
        the channel connects), which a lane whose old stream had rotated, or that had not sent
        to this topic yet, used to wait out (the paused-master tests)."""
        key = (topic, batch.schema)
        reused = self._reusable_stream(key, endpoint)
        opened: list[_Stream] = []

        def job() -> pa.Buffer:
            stream = reused
            if stream is None:
                stream = self._open_stream(topic, batch.schema, endpoint)
                opened.append(stream)
            return _round_trip(stream, batch)

        def close_streams(_: object) -> None:
            for stream in (reused, *opened):
                if stream is not None:
                    _close_quietly(stream)

        try:
            if self._round_trips is None:
                metadata = job()
            else:
                metadata = self._round_trips.run(job, lambda: self._replaced(endpoint),
                                                 close_streams)
        except RoundTrips.Abandoned as abandoned:
            self._forget_stream(key)  # close_streams closes it once the job ends
            self._routes.stale = True
            raise RetriableError(status_for("NOT_MASTER"), str(abandoned)) from None
        except (flight.FlightError, RocketHAError, OSError, pa.ArrowException):
            self._forget_stream(key)
            close_streams(None)
            raise
        except BaseException:  # interrupted: the streams may still be in a worker's hands
            self._forget_stream(key)
            raise
        if opened:
            self._streams[key] = opened[0]
            self._last_stream = (topic, batch.schema, opened[0])
        reply = PutReply.decode(metadata.to_pybytes())
        if reply.status in STORED_NOT_ACKED and self.config.controller is not None:
            self._routes.stale = True  # maybe a deposed or cut-off master: ask again
        return reply

    def _replaced(self, endpoint: str) -> str | None:
        """Why to give up on a put waiting on `endpoint`: the controller names another alive
        master for its replica set (None: keep waiting, also when no controller answers)."""
        assert self.config.controller is not None
        try:
            cluster = controller_cluster_list(self.config.controller,
                                              self.config.master_check_interval_ms,
                                              self.config.tls, self.config.credentials)
        except RetriableError:
            return None
        replacement = replacement_of(cluster, endpoint)
        if replacement is None:
            return None
        return (f"the controller replaced master {endpoint} by {replacement} while a put "
                f"waited on it")

    def _reusable_stream(self, key: tuple[str, pa.Schema], endpoint: str) -> _Stream | None:
        """The open DoPut stream for `key` on `endpoint`, or None when a new one is needed.

        gRPC's deadline covers a whole stream, so a stream lives 2 x request_timeout_ms and
        takes no new batch after the first request_timeout_ms: every put gets its full
        timeout, and a busy stream is never cut mid-batch (that made the client re-send a
        batch the broker had stored). A stream replaced (rotated, or on another endpoint) is
        closed on a thread of its own: closing waits for the broker's final status, which a
        paused master never sends before the stream's deadline."""
        last = self._last_stream
        if last is not None and last[0] == key[0] and last[1] == key[1]:
            stream: _Stream | None = last[2]
        else:
            stream = self._streams.get(key)
        if stream is None:
            return None
        if stream.endpoint == endpoint and time.monotonic() < stream.rotate_at_s:
            self._last_stream = (key[0], key[1], stream)
            return stream
        self._forget_stream(key)
        threading.Thread(target=_close_quietly, args=(stream,), name="rocketha-close",
                         daemon=True).start()
        return None

    def _open_stream(self, topic: str, schema: pa.Schema, endpoint: str) -> _Stream:
        timeout_s = self.config.request_timeout_ms / 1000.0
        command = produce_descriptor_command(topic)
        descriptor = flight.FlightDescriptor.for_command(command)
        writer, reader = _connection(endpoint, self.config.tls).do_put(
            descriptor, schema, self._options("DO_PUT", descriptor_target(command, None),
                                              2 * timeout_s))
        return _Stream(endpoint, schema, writer, reader, time.monotonic() + timeout_s)

    def _forget_stream(self, key: tuple[str, pa.Schema]) -> None:
        self._last_stream = None
        self._streams.pop(key, None)

    def _close_stream(self, topic: str, schema: pa.Schema) -> None:
        self._last_stream = None
        stream = self._streams.pop((topic, schema), None)
        if stream is not None:
            _close_quietly(stream)

    def close(self) -> None:
        for topic, schema in list(self._streams):
            self._close_stream(topic, schema)
        if self._round_trips is not None:
            self._round_trips.close()


class Producer:
    """Sends messages: `send_async` (batched in the background, a future per message),
    `send` (the same, waited for), `send_batch` / `put` (a batch the caller built).

    `send_async` appends the message to its lane's batch, (topic, queue: the given queue_id,
    else crc32(key) % writeQueueNums or a sticky queue for keyless messages, see
    connector/client/producer_core.py), and returns at once; batches leave when full (`ProducerConfig.batch_messages` / `batch_bytes`),
    `linger_ms` after their first message, or on `flush()`, at most `max_in_flight` at a time
    and one per lane, so order holds per queue and per key (connector/client/producer_core.py says
    why, and what the broker's idempotence allows). Messages waiting for an answer hold at
    most `buffer_bytes`; past that `send_async` blocks up to `max_block_ms`, then raises
    ProducerBufferFullError. `send` marks its lane urgent (no linger) and runs the round trip
    on the calling thread when the lane is idle, so its latency is a round trip's.

    With `idempotent=True` every batch carries (producer id, sequence) in its last row, so a
    retry of a batch the broker already stored (the reply was lost, e.g. its master died
    after replicating it) is answered from the broker's idempotence table instead of being
    stored twice; the table survives restarts and failover (rebuilt from the log). With
    `controller` too, a put whose master is replaced while it waits (the master was paused or
    cut off) is sent again to the new master instead of waiting out the old one
    (connector/client/master_watch.py). An idempotent producer also retries a batch answered with a
    status that means "stored here, not acknowledged" (FLUSH_SLAVE_TIMEOUT,
    SLAVE_NOT_AVAILABLE, FLUSH_DISK_TIMEOUT: e.g. a deposed master whose slaves left it) until
    the send deadline: the retry is answered PUT_OK only once the batch is as durable as an
    acknowledged one (on the new master if there is one), and never stored twice. When the
    deadline passes the last such reply is returned, as without idempotence.

    `send_async`, `send`, `flush` and `close` are thread-safe; `send_batch` and `put` are
    not (one thread at a time; they do not wait for, nor order with, asynchronous sends).
    """

    def __init__(self, config: ClientConfig, *, idempotent: bool = False,
                 batching: ProducerConfig | None = None) -> None:
        self.config = config
        self.batching = batching or ProducerConfig()
        self.idempotent = idempotent
        self._producer_id = uuid.uuid4().hex if idempotent else None
        self._sequence = 0
        self._routes = _Routes(config.brokers)  # shared by every channel below
        self._channel = _PutChannel(config, idempotent=idempotent, routes=self._routes)
        self._lane_channels: dict[LaneKey, _PutChannel] = {}
        self._lock = threading.Lock()
        # `send_batch` and `put` are thread-safe: their round trips share self._channel's DoPut
        # stream, and two threads writing one stream abort the process (gRPC
        # GRPC_CALL_ERROR_TOO_MANY_OPERATIONS); an idempotent sequence must also be taken and
        # sent by one thread at a time (two batches with one sequence: the second would be
        # answered as a duplicate without being stored). `send` goes through the lanes, one
        # batch in flight per lane (connector/client/async_sender.py).
        self._send_lock = threading.RLock()
        self._sender: AsyncSender | None = None
        self._chooser = QueueChooser(self.batching.batch_messages)
        self._lookup_config = dataclasses.replace(config, retries_max=0)
        self._lookup_lock = threading.Lock()
        self._lookup_after: dict[str, float] = {}
        self._found_counts: dict[str, int] = {}  # looked up, not applied yet

    @property
    def endpoint(self) -> str:
        """The broker `send_batch` / `put` send to (routes as in Admin and Consumer)."""
        return self._channel.endpoint

    # -- asynchronous ---------------------------------------------------------------------
    def send_async(self, topic: str, body: bytes | str, *, key: str | None = None,
                   tags: str | None = None, properties: Mapping[str, str] | None = None,
                   queue_id: int | None = None) -> Future[SendResult]:
        """Queue one message; the future gets its SendResult (PUT_OK with its queue offset,
        or the broker's other status), or the typed error its batch ended with
        (RocketHAError after the retries and the send deadline). A message larger than
        batch_bytes goes in a batch of its own (the broker's maxMessageSize decides). Raises at
        once ProducerBufferFullError (no room within max_block_ms), ProducerClosedError, or
        ValueError (a message larger than buffer_bytes)."""
        return self._send_async(topic, body, key, tags, properties, queue_id, inline=False)

    def send(self, topic: str, body: bytes | str, *, key: str | None = None,
             tags: str | None = None, properties: Mapping[str, str] | None = None,
             queue_id: int | None = None) -> SendResult:
        """`send_async(...).result()`, without waiting for linger_ms."""
        return self._send_async(topic, body, key, tags, properties, queue_id,
                                inline=True).result()

    def _send_async(self, topic: str, body: bytes | str, key: str | None, tags: str | None,
                    properties: Mapping[str, str] | None, queue_id: int | None, *,
                    inline: bool) -> Future[SendResult]:
        sender = self._sender or self._start_sender()
        if isinstance(body, str):
            body = body.encode()
        if key is None and tags is None and not properties:  # the common case, inlined
            future = SendFuture(body, None, None, None, len(body) + MESSAGE_OVERHEAD_BYTES)
        else:
            future = SendFuture(body, key, tags,
                                tuple(properties.items()) if properties else None,
                                message_size_bytes(body, key, tags, properties))
        if queue_id is None:
            if inline and key is None:
                # a keyless send() leaves the queue to the broker: its lane then carries no
                # queue_id column, the broker's cheapest path; keyless messages have no order
                # to keep with the sticky lanes, and keyed ones never enter that lane once
                # the producer picks their queues
                return sender.send((topic, None), future, inline)
            queue_id = self._chooser.choose(topic, key)
        if queue_id is not None:
            return sender.send((topic, queue_id), future, inline)
        # The topic's queue count is not known yet: the broker picks. Every append to the
        # broker-picks lane and the switch away from it happen under _lookup_lock, and the
        # switch only while that lane holds no keyed message waiting for its answer, so a key
        # never has messages in two lanes.
        with self._lookup_lock:
            found = self._found_counts.pop(topic, 0)
            if found and self._chooser.queue_count(topic) is None:
                if not sender.lane_has_keys((topic, None)):
                    self._chooser.learn(topic, found)
                else:
                    self._found_counts[topic] = found  # try again on a later send
            queue_id = self._chooser.choose(topic, key)
            if queue_id is None:
                self._look_up_queues(topic)
                return sender.send((topic, None), future, inline)
        return sender.send((topic, queue_id), future, inline)

    def _look_up_queues(self, topic: str) -> None:
        """Ask for the topic's writeQueueNums on a thread of its own (never on the caller's:
        a controller that does not answer would hold the send), at most every
        QUEUE_LOOKUP_INTERVAL_S per topic. Caller holds _lookup_lock."""
        now_s = time.monotonic()
        if now_s < self._lookup_after.get(topic, 0.0):
            return
        self._lookup_after[topic] = now_s + QUEUE_LOOKUP_INTERVAL_S

        def look_up() -> None:
            try:
                count = int(Admin(self._lookup_config).get_topic(topic)["write_queue_nums"])
            except (RocketHAError, KeyError, TypeError, ValueError, OSError,
                    flight.FlightError) as err:
                logger.debug("queue count of %s unknown (%s): the broker picks", topic, err)
                return
            if count >= 1:
                with self._lookup_lock:
                    self._found_counts[topic] = count

        threading.Thread(target=look_up, name="rocketha-queues", daemon=True).start()

    def flush(self, timeout_ms: int | None = None) -> bool:
        """Send what `send_async` queued now (no linger) and wait until every message queued
        before this call has its result; False if `timeout_ms` passed first."""
        if self._sender is None:
            return True
        return self._sender.flush(None if timeout_ms is None else timeout_ms / 1000.0)

    def _start_sender(self) -> AsyncSender:
        with self._lock:
            if self._sender is None:
                core = ProducerCore(
                    self.batching, producer_id=self._producer_id,
                    retries_max=self.config.retries_max,
                    send_deadline_ms=self.config.send_deadline_ms,
                    backoff_ms=Backoff(self.config.backoff_initial_ms,
                                       self.config.backoff_max_ms).delay_ms)
                self._sender = AsyncSender(core, self._run_batch)
            return self._sender

    def _run_batch(self, batch: Batch) -> PutReply | RocketHAError:
        """One attempt of a lane's batch, on that lane's channel (one thread at a time: the
        core keeps one batch per lane in flight)."""
        topic, queue_id = batch.lane
        if batch.wire is None:
            marker = (None if batch.producer_id is None
                      else PutIdempotence(batch.producer_id, batch.sequence))
            batch.wire = _messages_to_batch(batch.messages, queue_id, marker)
        return self._lane_channel(batch.lane).attempt(topic, batch.wire)

    def _lane_channel(self, lane: LaneKey) -> _PutChannel:
        """The channel of a lane (its streams and master watch; the routes are shared)."""
        channel = self._lane_channels.get(lane)
        if channel is None:
            with self._lock:
                channel = self._lane_channels.get(lane)
                if channel is None:
                    channel = self._lane_channels[lane] = _PutChannel(
                        self.config, idempotent=self.idempotent, routes=self._routes)
        return channel

    # -- synchronous batches ----------------------------------------------------------------
    def send_batch(self, topic: str, batch: pa.RecordBatch | pa.Table
                   | Sequence[Mapping[str, Any]]) -> list[SendResult]:
        """Send rows (an Arrow batch/table with PRODUCE_SCHEMA columns, or dicts with `body`,
        `key`, `tags`, `properties`, `queue_id`); one result per row, in order."""
        if not isinstance(batch, (pa.RecordBatch, pa.Table)):
            batch = _rows_to_batch(batch)
        batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
        results: list[SendResult] = []
        for record_batch in batches:
            results += self._send_one_batch(topic, record_batch)
        return results

    def _send_one_batch(self, topic: str, batch: pa.RecordBatch) -> list[SendResult]:
        with self._send_lock:  # the sequence and its round trip together (see __init__)
            if self._producer_id is not None:
                batch = with_marker(batch, PutIdempotence(self._producer_id, self._sequence))
                self._sequence += 1
            reply = self.put(topic, batch)
        return put_results(reply, batch.num_rows)  # (a duplicate's: the original's positions)

    def put(self, topic: str, batch: pa.RecordBatch) -> PutReply:
        """Send one Arrow batch (PRODUCE_SCHEMA columns) and return the broker's reply, with
        the retry policy; non-stored statuses that are not retriable come back as replies."""
        with self._send_lock:  # one round trip at a time on the shared stream (see __init__)
            return self._channel.put(topic, batch)

    def close(self, timeout_ms: int | None = None) -> None:
        """Wait for every pending `send_async` (up to `timeout_ms`: those still unsent then
        get ProducerClosedError), then close the streams."""
        if self._sender is not None:
            self._sender.close(None if timeout_ms is None else timeout_ms / 1000.0)
        self._channel.close()
        with self._lock:
            channels = list(self._lane_channels.values())
            self._lane_channels.clear()
        for channel in channels:
            channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _round_trip(stream: _Stream, batch: pa.RecordBatch) -> pa.Buffer:
    """Write one batch on a produce stream and read the broker's reply to it."""
    stream.writer.write_batch(batch)
    metadata = stream.reader.read()
    if metadata is None:
        stream.writer.close()  # raises the server's error
        raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                             "produce stream closed without a reply")
    return metadata


def _close_quietly(stream: _Stream) -> None:
    try:
        stream.writer.done_writing()
        stream.writer.close()
    except (flight.FlightError, OSError, pa.ArrowException):
        pass  # the stream is already broken; the error was (or will be) reported


_PROPERTIES_TYPE = PRODUCE_SCHEMA.field("properties").type


def _messages_to_batch(messages: Sequence[Message], queue_id: int | None,
                       marker: PutIdempotence | None) -> pa.RecordBatch:
    """The produce batch of a lane's messages; `marker` goes into the last row."""
    if len(messages) == 1 and marker is None and queue_id is None:  # a keyless send()
        only = messages[0]
        if only.key is None and only.tags is None and only.properties is None:
            return pa.RecordBatch.from_arrays([_one_body(only.body)], schema=_BODY_SCHEMA)
    names = ["body"]
    arrays = [pa.array([message.body for message in messages], pa.binary())]
    # (a list and its count(None) cost about half of an any() over a generator)
    keys = [message.key for message in messages]
    if keys.count(None) != len(keys):
        names.append("key")
        arrays.append(pa.array(keys, pa.string()))
    tags = [message.tags for message in messages]
    if tags.count(None) != len(tags):
        names.append("tags")
        arrays.append(pa.array(tags, pa.string()))
    properties: list[Any] = [message.properties for message in messages]
    if marker is not None or properties.count(None) != len(properties):
        properties = [None if value is None else list(value) for value in properties]
        if marker is not None:
            last = [(k, v) for k, v in properties[-1] or () if k != IDEMPOTENCE_PROPERTY]
            properties[-1] = last + [(IDEMPOTENCE_PROPERTY, marker.marker())]
        names.append("properties")
        arrays.append(pa.array(properties, _PROPERTIES_TYPE))
    if queue_id is not None:
        names.append("queue_id")
        arrays.append(_queue_ids(queue_id, len(messages)))
    return pa.RecordBatch.from_arrays(arrays, schema=_produce_schema(tuple(names)))


@functools.lru_cache(maxsize=64)
def _produce_schema(names: tuple[str, ...]) -> pa.Schema:
    return pa.schema([PRODUCE_SCHEMA.field(name) for name in names])


_BODY_SCHEMA = _produce_schema(("body",))
_BINARY = pa.binary()
_INT32_MAX = 2**31 - 1
_ONE_BODY_OFFSETS = struct.Struct("<ii")  # int32 offsets of a 1-row binary array: 0, size


def _one_body(body: bytes) -> pa.Array:
    """`pa.array([body], pa.binary())` from its buffers (offsets 0 and len(body), the bytes
    shared, not copied): ~1.3 us instead of ~3.2 us for the sequence conversion
    (tests/connector/test_client_unit.py holds the two equal)."""
    size = len(body)
    if type(body) is not bytes or size > _INT32_MAX:  # (mutable: copied; huge: refused)
        return pa.array([body], _BINARY)
    return pa.Array.from_buffers(_BINARY, 1, [None, pa.py_buffer(_ONE_BODY_OFFSETS.pack(
        0, size)), pa.py_buffer(body)])



@functools.lru_cache(maxsize=1024)
def _queue_ids(queue_id: int, rows: int) -> pa.Array:
    """A queue_id column (immutable, so shared: single sends and full batches repeat)."""
    return pa.array([queue_id] * rows, pa.int32())


def _rows_to_batch(rows: Sequence[Mapping[str, Any]]) -> pa.RecordBatch:
    if not rows:
        raise ValueError("send_batch: no rows")
    names = ["body"] + [name for name in ("key", "tags", "properties", "queue_id")
                        if any(row.get(name) is not None for row in rows)]
    columns = {}
    for name in names:
        values = [row.get(name) for row in rows]
        if name == "body":
            values = [value.encode() if isinstance(value, str) else value for value in values]
        if name == "properties":
            values = [None if value is None else list(dict(value).items()) for value in values]
        columns[name] = pa.array(values, PRODUCE_SCHEMA.field(name).type)
    return pa.record_batch(columns)


class Consumer(_Base):
    """Pulls by (topic, queue, queue_offset), with long polling.

    With `controller`, a consumer reads from one replica set (`broker_name`; None when the
    cluster has only one): its master first, and its slaves after the master fails, so reads
    go on during a failover (a slave serves up to its confirm position, never past it); the
    members are fetched again after each failure, so the new master is found.

    `group` (optional) names the consumer group in each ticket: with authorization on, the
    broker then requires Sub on the group as well as on the topic."""

    def __init__(self, config: ClientConfig, *, broker_name: str | None = None,
                 group: str | None = None) -> None:
        super().__init__(config)
        self.broker_name = broker_name
        self.group = group

    def _controller_endpoints(self, controller: str) -> tuple[str, ...]:
        return controller_members(controller, self.config.request_timeout_ms, self.broker_name,
                                  self.config.tls, self.config.credentials)

    def pull(self, topic: str, queue_id: int, queue_offset: int, *, max_messages: int = 1024,
             max_bytes: int = 8 << 20, tag_filter: str | None = None,
             max_wait_ms: int = 0, columns: Sequence[str] | None = None) -> PullResult:
        """Messages from `queue_offset` on. `columns` (CONSUME_SCHEMA names, None: all) are
        the only columns the broker builds and sends, in CONSUME_SCHEMA's order; an unknown
        name raises FatalError BAD_REQUEST."""
        ticket = GetTicket(topic, queue_id, queue_offset, max_messages, max_bytes, tag_filter,
                           max_wait_ms, None if columns is None else tuple(columns), self.group)
        timeout_s = (self.config.request_timeout_ms + max_wait_ms) / 1000.0

        def call(endpoint: str) -> PullResult:
            encoded = ticket.encode()
            reader = _connection(endpoint, self.config.tls).do_get(
                flight.Ticket(encoded), self._options("DO_GET", encoded, timeout_s))
            batches, reply = [], None
            for chunk in reader:
                batches.append(chunk.data)
                reply = GetReply.decode(chunk.app_metadata.to_pybytes())
            if reply is None:
                raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"), "empty DoGet stream")
            return PullResult(pa.Table.from_batches(batches), reply)

        return self._retry(call, f"pull {topic}/{queue_id}@{queue_offset}")

    def iter_queue(self, topic: str, queue_id: int, queue_offset: int, *,
                   until_idle_ms: int = 1000, max_messages_total: int = 1 << 40,
                   tag_filter: str | None = None) -> Iterator[pa.Table]:
        """Tables of messages from `queue_offset` on, until none arrives for `until_idle_ms`
        or `max_messages_total` were read."""
        read = 0
        idle_since = time.monotonic()
        while read < max_messages_total:
            result = self.pull(topic, queue_id, queue_offset, tag_filter=tag_filter,
                               max_messages=min(4096, max_messages_total - read),
                               max_wait_ms=min(until_idle_ms, 1000))
            if result.status in ("OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY"):
                queue_offset = result.next_queue_offset
                continue
            if result.table.num_rows:
                read += result.table.num_rows
                idle_since = time.monotonic()
                yield result.table
            queue_offset = result.next_queue_offset
            if result.table.num_rows == 0 and \
                    (time.monotonic() - idle_since) * 1000 >= until_idle_ms:
                return
