"""`rocketha-admin`'s first call: is the address given a live broker or controller?

A mistake (nothing listening, a broker given to --controller, a TLS endpoint called without
certificates) is then one line and exit code 2, instead of the command's own error after its
retries. Separate from rocketha_admin.py so that `--help` never imports the Flight client.
"""

from __future__ import annotations

import json

from pyarrow import flight

from conf.credentials import read_credentials_file
from conf.signing import Credentials, action_target
from conf.tls import (
    NO_TLS,
    ClientTLS,
    TLSConfigError,
    client_tls_from_properties,
    connect_flight,
    read_properties,
)
from connector.client import signed_options

__all__ = ["NO_TLS", "TLSConfigError", "client_tls_from_properties", "probe",
           "probe_credentials", "read_properties"]

PROBE_TIMEOUT_S = 5.0


def probe(address: str, expected: str, tls: ClientTLS = NO_TLS,
          credentials: Credentials | None = None) -> str | None:
    """None when `address` is a live `expected` ("broker" or "controller"), else the problem
    in one line. Signed when the command will be (so a secured cluster's audit log does not
    get an "unsigned request" refusal for every command)."""
    action = "broker_info" if expected == "broker" else "controller_status"
    client = connect_flight(address, tls)
    try:
        results = list(client.do_action(flight.Action(action, b"{}"), signed_options(
            credentials, "DO_ACTION", action_target(action, b"{}"), PROBE_TIMEOUT_S)))
        json.loads(results[0].body.to_pybytes())
        return None
    except flight.FlightError as err:
        text = str(err)
        if "UNKNOWN_ACTION" in text:
            other = "controller" if expected == "broker" else "broker"
            return (f"{address} is a {other}, not a {expected}: use --{other} {address}")
        if "socket closed" in text.lower():  # a TLS endpoint refusing plaintext or no cert
            hint = "its certificates" if tls.enabled else "--client-config FILE"
            return (f"{expected} {address} closed the connection at once: it requires TLS "
                    f"and a client certificate (check {hint}; rocketha-cluster up writes "
                    "DIR/client.properties)")
        if "refused" in text.lower() or "failed to connect" in text.lower():
            return f"cannot connect to {expected} {address}: connection refused"
        if isinstance(err, flight.FlightTimedOutError) or "deadline" in text.lower():
            return f"{expected} {address} did not answer within {PROBE_TIMEOUT_S:.0f}s"
        return None  # it answered something: let the command report it
    except (OSError, ValueError, IndexError) as err:
        return f"{address}: not a rocketha {expected} ({err})"
    finally:
        client.close()


def probe_credentials(credentials_file: str | None, client_config: str | None,
                       properties: dict[str, str]) -> Credentials | None:
    """The keys the command will sign with, for the probe; None when there are none or they
    cannot be read (the command itself then says why)."""
    path = credentials_file or (client_config if properties.get("secretKey")
                                else properties.get("credentialsFile"))
    if not path:
        return None
    try:
        return read_credentials_file(path)
    except (OSError, ValueError):
        return None
