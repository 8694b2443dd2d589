"""`rocketha-admin broker shutdown|elect --broker-name X --broker-id N`: planned moves.

Why through the broker and not a signal: an operator may not have a shell on the broker's
host. The broker's `shutdown` action stops it as SIGTERM does, so a master first hands its
role to an in-sync slave (ha/broker/handover.py) and its producers see a short pause rather
than failed puts. The command then waits (up to --wait-s) until the controller no longer
hears the broker, and prints who masters its replica set afterwards.

`elect` moves the master role to member N without stopping anything: the live master's
`handover` action hands over to N (N catches up to the sealed log end first) and keeps
running as N's slave. The controller's own `elect` (controller/admin) forces an election
instead, which waits out the old master's lease and makes it a crash victim: that one is for
a master that is gone.
"""

from __future__ import annotations

import time
from typing import Any

from connector.admin.output import Output
from connector.admin.target import Target
from connector.client import controller_cluster_list
from connector.errors import RoutesUnavailableError

__all__ = ["elect_broker", "shutdown_broker"]

POLL_S = 0.2  # how often the command asks the controller whether the broker is gone


def shutdown_broker(target: Target, broker_id: int | None, wait_s: float, out: Output) -> int:
    """Ask the named broker to stop; with the controller, wait until it is gone."""
    if target.broker is not None:  # one broker, named by its endpoint
        reply = target.admin_of((target.broker,)).action("shutdown")
        out.document(reply)
        return 0
    if target.broker_name is None or broker_id is None:
        raise RoutesUnavailableError("broker shutdown needs --broker-name and --broker-id "
                                     "(or --broker HOST:PORT)")
    endpoint = _member(_status_of(target), broker_id)
    if endpoint is None:
        raise RoutesUnavailableError(f"{target.broker_name} has no broker {broker_id}")
    started = time.monotonic()
    reply = target.admin_of((endpoint,)).action("shutdown")
    gone = False
    status: dict[str, Any] = {}
    while time.monotonic() - started < wait_s:
        status = _status_of(target)
        if broker_id not in status.get("alive_broker_ids", []):
            gone = True
            break
        time.sleep(POLL_S)
    replica = status.get("replica", {})
    out.document({**reply, "broker_id": broker_id, "stopped": gone,
                  "seconds": round(time.monotonic() - started, 3),
                  "master_broker_id": replica.get("master_broker_id"),
                  "master_address": replica.get("master_address"),
                  "master_epoch": replica.get("master_epoch")})
    return 0 if gone else 1


def elect_broker(target: Target, broker_id: int | None, wait_s: float, out: Output) -> int:
    """Ask the set's master to hand its role to member `broker_id`; wait until the controller
    names it master. A member outside the SyncStateSet is refused here, with one line."""
    if target.broker_name is None or broker_id is None or target.controller is None:
        raise RoutesUnavailableError("broker elect needs --controller (or --client-config), "
                                     "--broker-name and --broker-id")
    replica = _status_of(target)["replica"]
    members = sorted(replica.get("sync_state_set", []))
    if broker_id == replica.get("master_broker_id"):
        out.document(_master_of(replica, broker_id))
        return 0
    if broker_id not in members:
        raise RoutesUnavailableError(f"broker {broker_id} is not in {target.broker_name}'s "
                                     f"SyncStateSet {members}: it may lack acknowledged "
                                     "messages, so it cannot be elected")
    master = _member({"replica": replica}, replica.get("master_broker_id"))
    if master is None:
        raise RoutesUnavailableError(f"{target.broker_name} has no master to hand over; "
                                     "`rocketha-admin --controller ... elect` forces one")
    started = time.monotonic()
    reply = target.admin_of((master,)).action("handover", {"broker_id": broker_id})
    if not reply.get("handed_over"):
        raise RoutesUnavailableError(f"{target.broker_name}: {reply.get('result')}")
    while True:
        replica = _status_of(target)["replica"]
        if (replica.get("master_broker_id") == broker_id
                or time.monotonic() - started >= wait_s):
            break
        time.sleep(POLL_S)
    out.document({**_master_of(replica, broker_id), "result": reply.get("result"),
                  "seconds": round(time.monotonic() - started, 3)})
    return 0 if replica.get("master_broker_id") == broker_id else 1


def _master_of(replica: dict[str, Any], broker_id: int) -> dict[str, Any]:
    return {"broker_name": replica.get("broker_name"), "elected": broker_id,
            "master_broker_id": replica.get("master_broker_id"),
            "master_address": replica.get("master_address"),
            "master_epoch": replica.get("master_epoch")}


def _status_of(target: Target) -> dict[str, Any]:
    assert target.controller is not None
    reply = controller_cluster_list(target.controller, target.timeout_ms, target.tls,
                                    target.credentials)
    for status in reply.get("replica_sets", []):
        if status["replica"]["broker_name"] == target.broker_name:
            return dict(status)
    raise RoutesUnavailableError(f"no replica set named {target.broker_name!r}")


def _member(status: dict[str, Any], broker_id: int | None) -> str | None:
    for member in status["replica"].get("brokers", []):
        if member["broker_id"] == broker_id:
            return str(member["broker_address"])
    return None
