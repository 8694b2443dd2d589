"""How a call reaches a server: Flight connections opened lazily and cached per process, the
signed options of each call, and the typed error inside a failed one.

The cache is keyed by (endpoint, TLS settings) and checked against the pid, so a forked worker
(Spark's Python workers) opens its own connections instead of sharing its parent's channels.
"""

from __future__ import annotations

import os
import threading
import time

from pyarrow import flight

from conf.protocol import VERSION_HEADER
from conf.signing import Credentials, sign_headers
from conf.tls import ClientTLS, connect_flight
from connector.protocol import RocketHAError, decode_error_text, error_for_code, status_for

__all__ = ["as_rocketha_error", "signed_options"]


def signed_options(credentials: Credentials | None, method: str, target: bytes,
                   timeout_s: float) -> flight.FlightCallOptions:
    """Call options with the timeout, this client's protocol version and, with credentials,
    the signature headers for this one call (`method` as Flight names it: DO_ACTION, DO_GET,
    DO_PUT...)."""
    headers = [VERSION_HEADER]
    if credentials is not None:
        headers += sign_headers(credentials, method, target, int(time.time() * 1000))
    return flight.FlightCallOptions(timeout=timeout_s, headers=headers)


# -- connections: lazily opened, cached per process --------------------------------------------
_CONNECTIONS: dict[tuple[str, ClientTLS], flight.FlightClient] = {}
_CONNECTIONS_PID = os.getpid()
_CONNECTIONS_LOCK = threading.Lock()


def _connection(endpoint: str, tls: ClientTLS) -> flight.FlightClient:
    global _CONNECTIONS_PID
    with _CONNECTIONS_LOCK:
        if os.getpid() != _CONNECTIONS_PID:  # forked: the parent's channels are not ours
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
