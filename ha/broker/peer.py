"""Calls one broker makes to another broker's client endpoint (and the cluster tool to all).

`broker_info` (and `signed_action`, which the cluster tool also uses for the controllers'
`controller_status`): a slave in controller mode asks the master the controller named for
its haListenPort (the controller knows client endpoints only), and `rocketha-cluster` polls it
for readiness and status.
"""

from __future__ import annotations

import json
import time
from typing import Any

from pyarrow import flight

from conf.protocol import VERSION_HEADER
from conf.signing import Credentials, action_target, sign_headers
from conf.tls import NO_TLS, ClientTLS, connect_flight

__all__ = ["broker_info", "signed_action"]


def signed_action(endpoint: str, action: str, timeout_s: float = 2.0, tls: ClientTLS = NO_TLS,
                  credentials: Credentials | None = None) -> dict[str, Any] | None:
    """The JSON object a member's `action` (no body) answers at `endpoint`; None when it does
    not answer within `timeout_s` or the reply is not a JSON object. `credentials` sign the call
    (a broker's innerClientCredentialsFile, the cluster tool's admin user)."""
    try:
        client = connect_flight(endpoint, tls)
    except OSError:  # a certificate file is unreadable
        return None
    try:
        headers = [] if credentials is None else sign_headers(
            credentials, "DO_ACTION", action_target(action, b"{}"), int(time.time() * 1000))
        options = flight.FlightCallOptions(timeout=timeout_s, headers=[VERSION_HEADER, *headers])
        results = list(client.do_action(flight.Action(action, b"{}"), options))
        reply = json.loads(results[0].body.to_pybytes())
        return reply if isinstance(reply, dict) else None
    except (flight.FlightError, OSError, ValueError, IndexError):
        return None
    finally:
        client.close()


def broker_info(endpoint: str, timeout_s: float = 2.0, tls: ClientTLS = NO_TLS,
                credentials: Credentials | None = None) -> dict[str, Any] | None:
    """The `broker_info` action's reply from the broker at `endpoint` (signed_action)."""
    return signed_action(endpoint, "broker_info", timeout_s, tls, credentials)
