"""Authentication, authorization and audit on a Flight server: the gate brokers and controllers
share (issue 16; one copy since issue 36, so the two services cannot drift apart).

Per call:

  1. The Flight ServerMiddleware (`middleware()`; a middleware, not a ServerAuthHandler: that
     would hide the TLS client certificate's identity) verifies the signature headers when there
     are any (conf/signing.py is the canon: known enabled user, HMAC, clock skew, replay) and
     keeps the outcome on the call. It never raises: the refusal is reported by step 2, where
     the caller's address is known for the audit log.
  2. Every handler first calls `gate.check(context, operation, method, target, request)`:
     - authentication off: the call is anonymous and allowed;
     - no signature headers: the TLS client certificate's identity (`context.peer_identity()`,
       a `rocketha://broker/...` or `rocketha://controller/...` URI, conf/tls.py) makes the
       caller a cluster member, allowed only operations the table marks `member`; a tool's
       `rocketha://client/...` certificate or no identity: UNAUTHENTICATED;
     - a refused signature, or a request that is not the one signed (digest): UNAUTHENTICATED
       (BUSY for the replay floor: sign again);
     - authorization on: the requirement of (service, operation) in conf/acl.py's OPERATIONS
       with the request's fields; refused: NO_PERMISSION; unmapped: NO_PERMISSION.
     Refusals and every admin action are written to the audit log (AuditLog, JSON lines).

`principal_of(context)` is the interface the TLS side relies on: given a handler's call context,
the verified principal ("User:<name>", "Member:<certificate identity>" or "anonymous").

What differs between the two services is left to a subclass (ha/broker/auth.py,
controller/auth/verify.py): `service` (the first half of the OPERATIONS keys), where the user
table comes from (`auth_data`, `_user`), and how a refusal is spelt on the wire
(`encode_refusal`: the broker's typed wire errors, the controller's `controller error NAME:`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import logging.handlers
import os
import threading
import time
from collections.abc import Mapping
from typing import Any, ClassVar

from pyarrow import flight

from conf.acl import ADMIN_OPERATIONS, AuthData, User, authorize, requirement_of
from conf.protocol import LOCAL, PROTOCOL_HEADER, refusal
from conf.signing import HEADER_SIGNATURE, ReplayGuard, SignatureError, target_digest, verify
from conf.tls import parse_identity
from conf.values import BadValueError, parse_bool

__all__ = ["ANONYMOUS", "GATE_KEYS", "MIDDLEWARE_KEY", "AuditLog", "FlightAuthGate",
           "GateSettings", "Principal", "parse_gate_settings", "source_address"]

MIDDLEWARE_KEY = "rocketha-auth"
VERSION_MIDDLEWARE_KEY = "rocketha-protocol"


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class GateSettings:
    """The settings every gate has; each service's AuthSettings adds its own."""

    authentication_enabled: bool = False  # authenticationEnabled
    authorization_enabled: bool = False  # authorizationEnabled
    clock_skew_ms: int = 120_000  # authenticationClockSkewMs
    replay_cache_max: int = 200_000  # authenticationReplayCacheMax (nonces remembered)
    audit_log_file: str = ""  # auditLogFile ("": audit lines go to the process log)
    audit_log_bytes_max: int = 100 << 20  # auditLogBytesMax
    audit_logs_kept: int = 5  # auditLogFilesKept


# key -> (GateSettings field, kind): "bool", "str", or the (low, high) range of an integer
GATE_KEYS: dict[str, tuple[str, Any]] = {
    "authenticationEnabled": ("authentication_enabled", "bool"),
    "authorizationEnabled": ("authorization_enabled", "bool"),
    "authenticationClockSkewMs": ("clock_skew_ms", (1_000, 86_400_000)),
    "authenticationReplayCacheMax": ("replay_cache_max", (1, 10_000_000)),
    "auditLogFile": ("audit_log_file", "str"),
    "auditLogBytesMax": ("audit_log_bytes_max", (4096, 1 << 40)),
    "auditLogFilesKept": ("audit_logs_kept", (1, 1000)),
}


def parse_gate_settings(properties: Mapping[str, str], keys: Mapping[str, tuple[str, Any]]
                        ) -> tuple[dict[str, Any], list[str]]:
    """(settings kwargs, errors as "key: reason") from the properties named in `keys` (GATE_KEYS
    plus a service's own, in the same shape)."""
    values: dict[str, Any] = {}
    errors = []
    for key, (field, kind) in keys.items():
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
    def __init__(self, gate: FlightAuthGate) -> None:
        self._gate = gate

    def start_call(self, info: Any, headers: dict[str, list[str]]) -> _CallAuth | None:
        if not self._gate.settings.authentication_enabled or HEADER_SIGNATURE not in headers:
            return None
        return self._gate.verify_headers(headers, info.method.name)


class _VersionFactory(flight.ServerMiddlewareFactory):  # type: ignore[misc]
    """Refuses a call whose PROTOCOL_HEADER (absent: 0.1) the rule of conf/protocol.py refuses,
    as the service spells a refusal (status VERSION_REFUSED)."""

    def __init__(self, gate: FlightAuthGate) -> None:
        self._gate = gate

    def start_call(self, info: Any, headers: dict[str, list[str]]) -> None:
        values: list[Any] = headers.get(PROTOCOL_HEADER) or [None]
        text = values[0].decode(errors="replace") if isinstance(values[0], bytes) else values[0]
        line = refusal(LOCAL, text, f"{info.method.name} call to this {self._gate.service}")
        if line is not None:
            message, extra = self._gate.encode_refusal("VERSION_REFUSED", line)
            raise flight.FlightServerError(message, extra_info=extra)


def source_address(context: Any) -> str:
    """The caller's IP from a Flight peer string ("ipv4:127.0.0.1:5000", "ipv6:[::1]:5000")."""
    peer = context.peer()
    peer = peer.decode() if isinstance(peer, bytes) else str(peer)
    _, _, rest = peer.partition(":")
    host = rest.rpartition(":")[0] or rest
    return host.strip("[]")


class FlightAuthGate:
    """One service's checks (the steps in the module docstring). A subclass names its
    `service`, provides `auth_data` (an attribute replaced whole on every refresh, or a property
    reading the service's own table) and `encode_refusal`."""

    service: ClassVar[str] = ""
    auth_data: AuthData  # the user table: set or computed by the subclass

    def __init__(self, settings: GateSettings, *, audit: AuditLog | None = None) -> None:
        assert self.service, "a FlightAuthGate subclass names its service"
        self.settings = settings
        self.audit = audit or AuditLog("", 0, 0, self.service)
        self._replays = ReplayGuard(settings.replay_cache_max)
        self._lock = threading.Lock()
        self.refused = 0
        # False while the user table may lack users the source already has (a broker in
        # controller mode before its first fetch): an unknown access key then gets BUSY, a
        # retriable "not ready", not UNAUTHENTICATED (set_table_current)
        self.table_current = True

    def encode_refusal(self, name: str, message: str) -> tuple[str, bytes]:
        """(text, extra_info) of the Flight error refusing a call with status `name`."""
        raise NotImplementedError

    @property
    def enabled(self) -> bool:
        return self.settings.authentication_enabled

    def middleware(self) -> dict[str, flight.ServerMiddlewareFactory]:
        return {MIDDLEWARE_KEY: _Factory(self), VERSION_MIDDLEWARE_KEY: _VersionFactory(self)}

    def _user(self, access_key: str) -> User | None:
        return self.auth_data.user_by_access_key(access_key)

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
            if not self.table_current and err.access_key and \
                    self._user(err.access_key) is None:
                err = SignatureError(f"{err.reason}: the user table is not loaded yet "
                                     f"(this {self.service} started moments ago); retry",
                                     err.access_key, busy=True)
            return _CallAuth(None, "", err)
        user = self._user(verified.access_key)
        if user is None:  # removed between the two lookups
            return _CallAuth(None, "", SignatureError("unknown access key", verified.access_key))
        return _CallAuth(Principal(f"User:{user.name}", user), verified.digest, None)

    def principal_of(self, context: Any, method: str = "", target: bytes = b"") -> Principal:
        """The verified caller of this call (raises the typed refusal when there is none)."""
        if not self.enabled:
            return ANONYMOUS
        found: _CallAuth | None = context.get_middleware(MIDDLEWARE_KEY)
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

    def _refusal(self, name: str, message: str) -> flight.FlightError:
        text, info = self.encode_refusal(name, message)
        if name == "UNAUTHENTICATED":
            return flight.FlightUnauthenticatedError(text, info)
        if name == "BUSY":
            return flight.FlightUnavailableError(text, info)
        return flight.FlightUnauthorizedError(text, info)

    def _refuse(self, context: Any, principal: str, reason: str, name: str) -> flight.FlightError:
        self.refused += 1
        self.audit.record("authentication", principal, source_address(context), "", "", "",
                          "refused", reason)
        return self._refusal(name, f"authentication failed: {reason}")

    def _deny(self, context: Any, principal: Principal, operation: str, resource: str,
              action: str, reason: str) -> None:
        self.refused += 1
        self.audit.record("authorization", principal.name, source_address(context), operation,
                          resource, action, "denied", reason)
        raise self._refusal("NO_PERMISSION", f"{principal.name} may not {operation}"
                            f"{' on ' + resource if resource else ''}: {reason}")
