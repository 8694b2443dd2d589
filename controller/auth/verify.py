"""Authentication, authorization and audit on the controller's Flight endpoint (issue 16).

The gate itself (signature middleware, member certificates, the ACL decision, the audit log)
is conf/auth_gate.py, shared with the brokers. What is the controller's own: its settings
(`initAuthenticationUser`), where the table comes from (its replicated one,
`node.state.auth`, plus the bootstrap user of `initAuthenticationUser` until that user is in
the table: the leader proposes it, ControllerNode._ensure_init_user), and how a refusal reads.
`ControllerService` calls `gate.check(context, action, method, target, request)` before a
request reaches the node. Which broker may speak for which is checked apart from this, on the
certificate, by controller/auth/member_check.py (ControllerService).

Refusals are `controller error UNAUTHENTICATED: ...` (FlightUnauthenticatedError) and
`controller error NO_PERMISSION: ...` (FlightUnauthorizedError); BUSY for the replay floor.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from conf import read_private_file
from conf.acl import AuthData, User
from conf.auth_gate import (
    GATE_KEYS,
    AuditLog,
    FlightAuthGate,
    GateSettings,
    Principal,
    parse_gate_settings,
    source_address,
)

__all__ = ["AUTH_KEYS", "AuditLog", "AuthGate", "AuthSettings", "Principal", "init_user",
           "parse_auth_settings", "source_address"]


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AuthSettings(GateSettings):
    # initAuthenticationUser: "name:accessKey" of the first Super user; its secret from
    # initAuthenticationUserSecretFile (a file only the owner reads; never a command line)
    init_user: str = ""
    init_user_secret_file: str = ""


AUTH_KEYS: dict[str, tuple[str, Any]] = {
    **GATE_KEYS,
    "initAuthenticationUser": ("init_user", "str"),
    "initAuthenticationUserSecretFile": ("init_user_secret_file", "str"),
}


def parse_auth_settings(properties: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """(AuthSettings kwargs, errors as "key: reason") from the properties that are AUTH_KEYS."""
    return parse_gate_settings(properties, AUTH_KEYS)


def init_user(settings: AuthSettings) -> User | None:
    """The Super user of initAuthenticationUser (None when unset); raises ValueError naming
    the key when the value or its secret file is not usable."""
    if not settings.init_user:
        return None
    name, sep, access_key = settings.init_user.partition(":")
    if not sep:
        raise ValueError("initAuthenticationUser: expected name:accessKey")
    if not settings.init_user_secret_file:
        raise ValueError("initAuthenticationUserSecretFile: required with "
                         "initAuthenticationUser (the secret is never in the conf file)")
    secret = read_private_file(settings.init_user_secret_file,
                           "initAuthenticationUserSecretFile").strip()
    return User(name, access_key, secret, "Super")


class AuthGate(FlightAuthGate):
    """The controller's gate: its table is the replicated one (`table()`, read on every
    call), plus the bootstrap user until the leader has put that user in the table."""

    service = "controller"

    def __init__(self, settings: AuthSettings, table: Callable[[], AuthData], *,
                 bootstrap: User | None = None, audit: AuditLog | None = None) -> None:
        super().__init__(settings, audit=audit)
        self._table = table
        self.bootstrap = bootstrap

    @property
    def auth_data(self) -> AuthData:  # type: ignore[override]
        return self._table()

    def encode_refusal(self, name: str, message: str) -> tuple[str, bytes]:
        return f"controller error {name}: {message}", b""

    def _user(self, access_key: str) -> User | None:
        user = self.auth_data.user_by_access_key(access_key)
        if user is None and self.bootstrap is not None and (
                self.bootstrap.access_key == access_key
                and self.auth_data.user(self.bootstrap.name) is None):
            return self.bootstrap  # until the leader has put it in the table
        return user
