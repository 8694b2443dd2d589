"""Which broker may make which controller call: a pure function over the caller's identity.

With tls.server.need.client.auth=require every caller of the controller's client endpoint has
a certificate of the cluster CA, and its identity (conf/tls.py, a URI SAN) is what
`context.peer_identity()` returns. The calls that change what the controller believes about
one broker are accepted only from that broker (no broker speaks for another):

    action                 caller must be                      checked against
    register_broker        rocketha://broker/<name>/<endpoint>  request broker_name, broker_address
    broker_heartbeat       the same                            also: the id's registered address
    alter_sync_state_set   the same                            the master id's registered address
    elect_master,          a broker only for its own set;      request broker_name
    clean_broker_data      any other caller (tools) passes
                           (users' rights: their ACLs, conf/acl.py)

A client certificate (`rocketha://client/<name>`) or one naming a controller cannot make the
three member calls at all. Without client certificates (need.client.auth=none or TLS off)
nothing can be checked here, and the controller says so once at start-up.
"""

from __future__ import annotations

from collections.abc import Callable

from conf.tls import MemberIdentity
from controller.api import (
    AlterSyncStateSetRequest,
    BrokerHeartbeat,
    CleanBrokerDataRequest,
    ElectMasterRequest,
    HandoverRequest,
    JsonMessage,
    RegisterBrokerRequest,
)

__all__ = ["MEMBER_ACTIONS", "member_refusal"]

MEMBER_ACTIONS = frozenset({"register_broker", "broker_heartbeat", "alter_sync_state_set",
                            "handover_master"})

AddressOf = Callable[[str, int], "str | None"]  # (brokerName, brokerId) -> registered address


def member_refusal(caller: MemberIdentity | None, action: str, request: JsonMessage | None,
                   address_of: AddressOf) -> str | None:
    """None when `caller` may make this call, else why not (for the log and the error)."""
    if action in MEMBER_ACTIONS:
        assert isinstance(request, RegisterBrokerRequest | BrokerHeartbeat
                          | AlterSyncStateSetRequest | HandoverRequest), request
        if caller is None or caller.kind != "broker":
            return f"{action} is a broker's own call; the caller's certificate names no broker"
        if caller.name != request.broker_name:
            return (f"a broker of {caller.name} cannot make {action} for "
                    f"{request.broker_name}")
        if isinstance(request, AlterSyncStateSetRequest):
            registered = address_of(request.broker_name, request.master_broker_id)
            if registered is not None and registered != caller.endpoint:
                return (f"{caller.endpoint} is not broker {request.master_broker_id} "
                        f"({registered}) of {request.broker_name}")
            return None
        if request.broker_address != caller.endpoint:
            return f"{caller.endpoint} cannot make {action} for {request.broker_address}"
        if isinstance(request, BrokerHeartbeat | HandoverRequest):
            registered = address_of(request.broker_name, request.broker_id)
            if registered is not None and registered != caller.endpoint:
                return (f"{caller.endpoint} is not broker {request.broker_id} ({registered}) "
                        f"of {request.broker_name}")
        return None
    if isinstance(request, ElectMasterRequest | CleanBrokerDataRequest) and (
            caller is not None and caller.kind == "broker"
            and caller.name != request.broker_name):
        return f"a broker of {caller.name} cannot make {action} for {request.broker_name}"
    return None
