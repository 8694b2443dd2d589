"""Authentication, authorization and audit on the controller's Flight endpoint (issue 16).

The same two steps as the broker's (ha/broker/auth.py, which a broker cannot share: the
controller imports nothing of ha or the connector): a Flight ServerMiddleware verifies the
signature headers (conf.signing), and `ControllerService` calls `gate.check(context,
action, target, request)` before a request reaches the node. The table is the controller's own
replicated one (`node.state.auth`), plus the bootstrap user of `initAuthenticationUser` until
that user is in the table (the leader proposes it; ControllerNode._ensure_init_user).

`principal_of(context)`: the verified caller ("User:<name>", "Member:<certificate identity>"
from `context.peer_identity()` when the call is unsigned and the certificate names a broker or
a controller (conf/tls.py; a tool's rocketha://client/... is no member), or "anonymous"
with authentication off). Which broker may speak for which is checked apart from this, on the
certificate, by controller/auth/member_check.py (ControllerService).

Refusals are `controller error UNAUTHENTICATED: ...` (FlightUnauthenticatedError) and
`controller error NO_PERMISSION: ...` (FlightUnauthorizedError); BUSY for the replay floor.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import logging.handlers
import os
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pyarrow import flight

from conf import BadValueError, parse_bool
from conf.signing import (
    HEADER_SIGNATURE,
    ReplayGuard,
    SignatureError,
    target_digest,
    verify,
)
from conf.tls import parse_identity
from controller.auth.acl import ADMIN_OPERATIONS, AuthData, User, authorize, requirement_of

__all__ = ["AUTH_KEYS", "AuditLog", "AuthGate", "AuthSettings", "Principal", "init_user",
           "parse_auth_settings", "source_address"]

logger = logging.getLogger("rocketha.controller.auth")

MIDDLEWARE_KEY = "rocketha-auth"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class AuthSettings:
    authentication_enabled: bool = False  # authenticationEnabled
    authorization_enabled: bool = False  # authorizationEnabled
    clock_skew_ms: int = 120_000  # authenticationClockSkewMs
    replay_cache_max: int = 200_000  # authenticationReplayCacheMax (nonces remembered)
    # initAuthenticationUser: "name:accessKey" of the first Super user; its secret from
    # initAuthenticationUserSecretFile (a file only the owner reads; never a command line)
    init_user: str = ""
    init_user_secret_file: str = ""
    audit_log_file: str = ""  # auditLogFile ("": audit lines go to the process log)
    audit_log_bytes_max: int = 100 << 20  # auditLogBytesMax
    audit_logs_kept: int = 5  # auditLogFilesKept


AUTH_KEYS: dict[str, tuple[str, Any]] = {
    "authenticationEnabled": ("authentication_enabled", "bool"),
    "authorizationEnabled": ("authorization_enabled", "bool"),
    "authenticationClockSkewMs": ("clock_skew_ms", (1_000, 86_400_000)),
    "authenticationReplayCacheMax": ("replay_cache_max", (1, 10_000_000)),
    "initAuthenticationUser": ("init_user", "str"),
    "initAuthenticationUserSecretFile": ("init_user_secret_file", "str"),
    "auditLogFile": ("audit_log_file", "str"),
    "auditLogBytesMax": ("audit_log_bytes_max", (4096, 1 << 40)),
    "auditLogFilesKept": ("audit_logs_kept", (1, 1000)),
}


def parse_auth_settings(properties: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """(AuthSettings kwargs, errors as "key: reason") from the properties that are AUTH_KEYS."""
    values: dict[str, Any] = {}
    errors = []
    for key, (field, kind) in AUTH_KEYS.items():
        if key not in properties:
            continue
        text = properties[key].strip()
        if kind == "bool":
            try:
                values[field] = parse_bool(text, key)
            except BadValueError as err:
                errors.append(str(err))
        elif kind == "str":
            values[field] = text
        else:
            low, high = kind
            if not text.isdigit() or not low <= int(text) <= high:
                errors.append(f"{key}: {text!r} not an integer in [{low}, {high}]")
            else:
                values[field] = int(text)
    return values, errors


def _private_file(path: str, key: str) -> str:
    """The text of a secrets file; refused when other users may read it."""
    mode = os.stat(path).st_mode
    if mode & 0o077:
        raise ValueError(f"{key} {path}: mode {oct(mode & 0o777)} lets other users read "
                         "it (chmod 600)")
    return Path(path).read_text(encoding="utf-8")


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
    secret = _private_file(settings.init_user_secret_file,
                           "initAuthenticationUserSecretFile").strip()
    return User(name, access_key, secret, "Super")


class _PrivateRotatingFileHandler(logging.handlers.RotatingFileHandler):
    """Each file it opens (the first, and each after a rotation) is readable by its owner
    only: audit lines name users and addresses."""

    def _open(self) -> Any:
        stream = super()._open()
        os.chmod(self.baseFilename, 0o600)
        return stream


class AuditLog:
    """JSON lines: authentication failures, refused requests, admin actions (rotated by size,
    like logFile)."""

    def __init__(self, path: str, bytes_max: int, kept: int, service: str) -> None:
        self.service = service
        self._logger = logging.getLogger(f"rocketha.audit.{service}.{id(self)}")
        self._logger.propagate = not path
        self._logger.setLevel(logging.INFO)
        if path:
            handler = _PrivateRotatingFileHandler(
                path, maxBytes=bytes_max, backupCount=kept, encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(message)s"))
            self._logger.addHandler(handler)

    def record(self, event: str, principal: str, source: str, operation: str, resource: str,
               action: str, outcome: str, reason: str = "") -> None:
        self._logger.info(json.dumps({
            "time_ms": int(time.time() * 1000), "service": self.service, "event": event,
            "principal": principal, "source": source, "operation": operation,
            "resource": resource, "action": action, "outcome": outcome, "reason": reason[:300],
        }, sort_keys=True))

    def close(self) -> None:
        for handler in list(self._logger.handlers):
            handler.close()
            self._logger.removeHandler(handler)


@dataclasses.dataclass(frozen=True, slots=True)
class Principal:
    name: str  # "User:<name>", "Member:<identity>", "anonymous"
    user: User | None = None
    member: bool = False


ANONYMOUS = Principal("anonymous")


class _CallAuth(flight.ServerMiddleware):  # type: ignore[misc]
    """What step 1 found for one call."""

    def __init__(self, principal: Principal | None, digest: str, error: SignatureError | None
                 ) -> None:
        self.principal = principal
        self.digest = digest
        self.error = error


class _Factory(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    def __init__(self, gate: AuthGate) -> None:
        self._gate = gate

    def start_call(self, info: Any, headers: dict[str, list[str]]) -> _CallAuth | None:
        if not self._gate.settings.authentication_enabled or HEADER_SIGNATURE not in headers:
            return None
        return self._gate.verify_headers(headers, info.method.name)


def source_address(context: Any) -> str:
    """The caller's IP from a Flight peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000")."""
    peer = context.peer()
    peer = peer.decode() if isinstance(peer, bytes) else str(peer)
    _, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0] or rest
    return host.strip("[]")


def _refusal(name: str, message: str) -> flight.FlightError:
    text = f"controller error {name}: {message}"
    if name == "UNAUTHENTICATED":
        return flight.FlightUnauthenticatedError(text)
    if name == "BUSY":
        return flight.FlightUnavailableError(text)
    return flight.FlightUnauthorizedError(text)


class AuthGate:
    """The broker's (or a test's) checks; `auth_data` is replaced whole on every refresh."""

    service = "controller"

    def __init__(self, settings: AuthSettings, table: Callable[[], AuthData], *,
                 bootstrap: User | None = None, audit: AuditLog | None = None) -> None:
        self.settings = settings
        self._table = table
        self.bootstrap = bootstrap
        self.audit = audit or AuditLog("", 0, 0, self.service)
        self._replays = ReplayGuard(settings.replay_cache_max)
        self._lock = threading.Lock()
        self.refused = 0

    @property
    def enabled(self) -> bool:
        return self.settings.authentication_enabled

    def middleware(self) -> dict[str, flight.ServerMiddlewareFactory]:
        return {MIDDLEWARE_KEY: _Factory(self)}

    @property
    def auth_data(self) -> AuthData:
        return self._table()

    def _user(self, access_key: str) -> User | None:
        user = self.auth_data.user_by_access_key(access_key)
        if user is None and self.bootstrap is not None and (
                self.bootstrap.access_key == access_key
                and self.auth_data.user(self.bootstrap.name) is None):
            return self.bootstrap  # until the leader has put it in the table
        return user

    def _secret_of(self, access_key: str) -> str | None:
        user = self._user(access_key)
        return user.secret_key if user is not None and user.enabled else None

    def verify_headers(self, headers: Mapping[str, Any], method: str) -> _CallAuth:
        now_ms = int(time.time() * 1000)
        skew_ms = self.settings.clock_skew_ms
        try:
            verified = verify(headers, method, self._secret_of, now_ms, skew_ms, None)
            with self._lock:  # the replay cache is shared by every handler thread
                self._replays.admit(verified.access_key, verified.nonce,
                                    verified.timestamp_ms, now_ms, skew_ms)
        except SignatureError as err:
            return _CallAuth(None, "", err)
        user = self._user(verified.access_key)
        if user is None:  # removed between the two lookups
            return _CallAuth(None, "", SignatureError("unknown access key", verified.access_key))
        return _CallAuth(Principal(f"User:{user.name}", user), verified.digest, None)

    def principal_of(self, context: Any, method: str = "", target: bytes = b"") -> Principal:
        """The verified caller of this call (raises the typed refusal when there is none)."""
        if not self.enabled:
            return ANONYMOUS
        found = context.get_middleware(MIDDLEWARE_KEY)
        if found is None:
            identity = context.peer_identity()
            identity = identity.decode("utf-8", "replace") if isinstance(identity, bytes) \
                else str(identity or "")
            member = parse_identity(identity)  # a tool's rocketha://client/... is no member
            if member is not None and member.kind in ("broker", "controller"):
                return Principal(f"Member:{identity}", member=True)
            raise self._refuse(context, "", "unsigned request", "UNAUTHENTICATED")
        if found.error is not None:
            err = found.error
            raise self._refuse(context, f"AccessKey:{err.access_key}" if err.access_key else "",
                               err.reason, "BUSY" if err.busy else "UNAUTHENTICATED")
        assert found.principal is not None
        if method and target_digest(method, target) != found.digest:
            raise self._refuse(context, found.principal.name,
                               "the request is not the one signed (digest)", "UNAUTHENTICATED")
        return found.principal

    def _refuse(self, context: Any, principal: str, reason: str, name: str) -> flight.FlightError:
        self.refused += 1
        self.audit.record("authentication", principal, source_address(context), "", "", "",
                          "refused", reason)
        return _refusal(name, f"authentication failed: {reason}")

    def check(self, context: Any, operation: str, method: str, target: bytes,
              request: Mapping[str, Any]) -> Principal:
        """Authenticate and authorize one call; raises the typed Flight refusal."""
        principal = self.principal_of(context, method, target)
        if not self.enabled:
            return principal
        requirement = requirement_of(self.service, operation)
        admin = (self.service, operation) in ADMIN_OPERATIONS
        if requirement is None:
            self._deny(context, principal, operation, "", "", "operation not in the ACL table")
        assert requirement is not None
        if principal.member:
            if not requirement.member:
                self._deny(context, principal, operation, "", "", "not a member operation")
            return principal
        assert principal.user is not None
        if not self.settings.authorization_enabled:
            return principal
        decision, resource, action = authorize(self.auth_data, principal.user, requirement,
                                               request, source_address(context))
        if not decision.allowed:
            self._deny(context, principal, operation, resource, action, decision.reason)
        if admin:
            self.audit.record("admin", principal.name, source_address(context), operation,
                              resource, action, "allowed", decision.reason)
        return principal

    def _deny(self, context: Any, principal: Principal, operation: str, resource: str,
              action: str, reason: str) -> None:
        self.refused += 1
        self.audit.record("authorization", principal.name, source_address(context), operation,
                          resource, action, "denied", reason)
        raise _refusal("NO_PERMISSION", f"{principal.name} may not {operation}"
                       f"{' on ' + resource if resource else ''}: {reason}")
