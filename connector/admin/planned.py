"""`rocketha-admin broker shutdown --broker-name X --broker-id N`: stop one broker gracefully.

Why through the broker and not a signal: an operator may not have a shell on the broker's
host. The broker's `shutdown` action stops it as SIGTERM does, so a master first hands its
role to an in-sync slave (ha/broker/handover.py) and its producers see a short pause rather
than failed puts. The command then waits (up to --wait-s) until the controller no longer
hears the broker, and prints who masters its replica set afterwards.
"""

from __future__ import annotations

import time
from typing import Any

from connector.admin.output import Output
from connector.admin.target import Target
from connector.client import controller_cluster_list
from connector.errors import RoutesUnavailableError

__all__ = ["shutdown_broker"]

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


def _status_of(target: Target) -> dict[str, Any]:
    assert target.controller is not None
    reply = controller_cluster_list(target.controller, target.timeout_ms, target.tls,
                                    target.credentials)
    for status in reply.get("replica_sets", []):
        if status["replica"]["broker_name"] == target.broker_name:
            return dict(status)
    raise RoutesUnavailableError(f"no replica set named {target.broker_name!r}")


def _member(status: dict[str, Any], broker_id: int) -> str | None:
    for member in status["replica"].get("brokers", []):
        if member["broker_id"] == broker_id:
            return str(member["broker_address"])
    return None
