"""What the controller group says: its `cluster_list` (replica sets, their members and alive
masters), and from it where a client sends (the alive masters) or reads (one set's members).

Any controller answers or names its leader; which one to ask next is the shared leader search
(conf/controller_addresses.py), one pass per call: a call that finds no leader raises
RetriableError and the caller's own retry loop (connector/client/broker_calls.py) tries again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pyarrow import flight

from conf.controller_addresses import (
    ANSWERED,
    LEADER_HOPS_MAX,
    LeaderSearch,
    NotLeader,
    Unavailable,
    controller_addresses,
)
from conf.signing import Credentials, action_target
from conf.tls import NO_TLS, ClientTLS, connect_flight
from connector.client.connections import signed_options
from connector.protocol import FatalError, RetriableError, status_for

__all__ = [
    "alive_members",
    "controller_call",
    "controller_cluster_list",
    "controller_masters",
    "controller_members",
]


def controller_cluster_list(controller: str, timeout_ms: int, tls: ClientTLS = NO_TLS,
                            credentials: Credentials | None = None) -> dict[str, Any]:
    """The controller group's `cluster_list` reply (see `controller_call`)."""
    return controller_call(controller, "cluster_list", None, timeout_ms, tls, credentials)


def controller_call(controller: str, action: str, body: Mapping[str, Any] | None,
                    timeout_ms: int, tls: ClientTLS = NO_TLS,
                    credentials: Credentials | None = None) -> dict[str, Any]:
    """One DoAction JSON call answered by the controller group: one pass of the leader search
    over `controller`'s addresses (conf/controller_addresses.py: a NOT_LEADER hint followed at
    most LEADER_HOPS_MAX times from each address). Returns the first OK reply (other actions:
    also a reply such as TOPIC_NOT_FOUND; cluster_list: any node's OK, since every node keeps
    the replicated state). Raises RetriableError SERVICE_NOT_AVAILABLE when no controller
    answers, naming each address tried, FatalError UNAUTHENTICATED / NO_PERMISSION when none
    answered but one refused the caller."""
    refusal: FatalError | None = None
    payload = json.dumps(dict(body or {})).encode()
    addresses = controller_addresses(controller)
    if not addresses:
        raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                             f"controller {controller!r}: no controller address")
    search = LeaderSearch(addresses, hops_max=LEADER_HOPS_MAX)
    while (step := search.next_address()) is not None:  # bounded by the search
        address = step.address
        try:
            reply = _controller_call(address, action, payload, timeout_ms, tls, credentials)
        except (flight.FlightUnauthenticatedError, flight.FlightUnauthorizedError) as err:
            # an answer about the caller's keys or ACLs (another controller may not have
            # applied a new user yet: ask it too, but report the refusal, not an outage)
            refusal = FatalError(status_for(
                "UNAUTHENTICATED" if isinstance(err, flight.FlightUnauthenticatedError)
                else "NO_PERMISSION"), f"controller {address}: {err}")
            search.on_answer(address, Unavailable(str(err)))
            continue
        except (flight.FlightError, OSError, ValueError) as err:
            search.on_answer(address, Unavailable(str(err)))
            continue
        status = reply.get("status")
        if status == "NOT_LEADER":
            search.on_answer(address, NotLeader(reply.get("leader_address")))
        elif status == "OK" or action != "cluster_list":
            search.on_answer(address, ANSWERED)
            return reply
        else:
            search.on_answer(address, Unavailable(str(status)))
    if refusal is not None:
        raise refusal
    raise RetriableError(status_for("SERVICE_NOT_AVAILABLE"),
                         f"controller {controller}: no controller answered {action} ("
                         + search.describe() + ")")


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
