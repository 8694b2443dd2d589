"""Authentication, authorization and audit on the broker's Flight endpoint (issue 16).

The gate itself (signature middleware, member certificates, the ACL decision with the
requirements of ("broker", operation), the audit log; the steps per call) is
conf/auth_gate.py, shared with the controller. What is the broker's own: its settings
(`aclFile`, `innerClientCredentialsFile`), where the user table (AuthData) comes from (the
controller in controller mode, replaced whole when a heartbeat reply reports a newer version;
`aclFile` in static mode), refusals as the client wire's typed errors
(connector.protocol.encode_error_info), and `visible()`: the topics a listing may show.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

from conf import read_private_file
from conf.acl import AuthData, decide
from conf.auth_gate import (
    GATE_KEYS,
    AuditLog,
    FlightAuthGate,
    GateSettings,
    Principal,
    parse_gate_settings,
    source_address,
)
from connector.protocol import encode_error_info

__all__ = ["AUTH_KEYS", "AuditLog", "AuthGate", "AuthSettings", "Principal", "load_acl_file",
           "parse_auth_settings", "source_address"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AuthSettings(GateSettings):
    acl_file: str = ""  # aclFile (static mode: users and policies, JSON, not world-readable)
    inner_credentials_file: str = ""  # innerClientCredentialsFile (accessKey=, secretKey=)


AUTH_KEYS: dict[str, tuple[str, Any]] = {
    **GATE_KEYS,
    "aclFile": ("acl_file", "str"),
    "innerClientCredentialsFile": ("inner_credentials_file", "str"),
}


def parse_auth_settings(properties: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """(AuthSettings kwargs, errors as "key: reason") from the properties that are AUTH_KEYS."""
    return parse_gate_settings(properties, AUTH_KEYS)


def load_acl_file(path: str) -> AuthData:
    """Static mode's users and policies: the JSON of AuthData.to_json()."""
    try:
        return AuthData.from_json(json.loads(read_private_file(path, "aclFile")))
    except (ValueError, RecursionError) as err:  # AclError and JSONDecodeError are ValueErrors
        raise ValueError(f"aclFile {path}: {err}") from None


class AuthGate(FlightAuthGate):
    """The broker's gate; `auth_data` is replaced whole on every refresh."""

    service = "broker"

    def __init__(self, settings: AuthSettings, auth_data: AuthData | None = None, *,
                 audit: AuditLog | None = None) -> None:
        super().__init__(settings, audit=audit)
        self.auth_data = auth_data or AuthData()

    def encode_refusal(self, name: str, message: str) -> tuple[str, bytes]:
        return encode_error_info(name, message)

    def visible(self, principal: Principal, topic: str) -> bool:
        """May this caller see `topic` in a listing (Pub, Sub or Get on it)?"""
        user = principal.user
        if user is None or not self.settings.authorization_enabled:
            return True  # anonymous (authentication off) or a cluster member
        return any(decide(self.auth_data, user, "Topic", topic, action, None).allowed
                   for action in ("Pub", "Sub", "Get"))
