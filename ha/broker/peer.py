"""Calls one broker makes to another broker's client endpoint (and the cluster tool to all).

Only `broker_info` for now: a slave in controller mode asks the master the controller named for
its haListenPort (the controller knows client endpoints only), and `rocketha-cluster` polls it
for readiness and status.
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow.flight as flight

from connector.protocol.tls import NO_TLS, ClientTLS, connect_flight

__all__ = ["broker_info"]


def broker_info(endpoint: str, timeout_s: float = 2.0,
                tls: ClientTLS = NO_TLS) -> dict[str, Any] | None:
    """The `broker_info` action's reply from the broker at `endpoint`; None when it does not
    answer within `timeout_s` or the reply does not decode."""
    try:
        client = connect_flight(endpoint, tls)
    except OSError:  # a certificate file is unreadable
        return None
    try:
        options = flight.FlightCallOptions(timeout=timeout_s)
        results = list(client.do_action(flight.Action("broker_info", b"{}"), options))
        reply = json.loads(results[0].body.to_pybytes())
        return reply if isinstance(reply, dict) else None
    except (flight.FlightError, OSError, ValueError, IndexError):
        return None
    finally:
        client.close()
