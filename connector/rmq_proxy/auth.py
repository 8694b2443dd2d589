"""RocketMQ 5 client authentication: the `authorization` request header (AK/SK, HMAC-SHA1).

What the official clients send with every call (rocketmq/v5/util/signature.py):

    x-mq-date-time: 20261125T153000Z          (the client's *local* clock, formatted so)
    authorization:  MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time,
                    Signature=<hex of HMAC-SHA1(key=sk, msg=x-mq-date-time value)>

`parse_authorization` is pure (a malformed header is an AuthError naming what is wrong);
`Authenticator.check(metadata)` returns the caller's Credentials (its access key and the
secret the proxy then signs the caller's Flight calls with, so the brokers enforce that user's
ACLs) or raises AuthError. Where secrets come from is a `SecretLookup` (access key -> secret
key or None): in production the controller's replicated users (users.py); `StaticSecrets`
for tests.

Clock skew: the signed date must be within `clock_skew_ms` of the proxy's clock. The clients
format their local time with a `Z` suffix, so the date is compared in each accepted UTC offset
(`utc_offsets_minutes`: by default UTC and this host's own offset; grpcAuthClientUtcOffsets
lists others, or "any": every offset from -12:00 to +14:00 in quarter hours, which only
refuses dates more than 14 hours off).

Replays: the signature covers the date (one-second resolution) and nothing else, so a client
sends the same header on every call within a second, and a replay cache (the Flight gate's
(access key, nonce) memory) cannot tell a replay from the next honest call. What bounds a
captured header is therefore the skew window (it signs any request for `clock_skew_ms`), and
what prevents the capture is TLS (grpcTlsCertFile; on by default on a secured local cluster).
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import hmac
import re
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Protocol

from conf.signing import Credentials

__all__ = ["ANY_UTC_OFFSET", "AuthError", "AuthUnavailable", "Authenticator", "Authorization",
           "SecretLookup", "StaticSecrets", "local_utc_offset_minutes", "parse_authorization",
           "parse_utc_offsets", "sign"]

SCHEME = "MQv2-HMAC-SHA1"
DATE_HEADER = "x-mq-date-time"
DATE_FORMAT = "%Y%m%dT%H%M%SZ"
HEADER_CHARS_MAX = 1024
ANY_UTC_OFFSET = "any"
_FIELD = re.compile(r"^\s*(Credential|SignedHeaders|Signature)=([^,\s]*)\s*$")
_OFFSET = re.compile(r"^([+-])(\d{2}):(\d{2})$")
_ANY_OFFSETS = tuple(range(-12 * 60, 14 * 60 + 1, 15))


class AuthError(Exception):
    """The request is not authenticated; the message says why (never the secret)."""


class AuthUnavailable(AuthError):
    """The users are not known yet (no controller answered): retry later, not a refusal."""


@dataclasses.dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str
    signed_headers: tuple[str, ...]
    signature: str


class SecretLookup(Protocol):
    def secret_key(self, access_key: str) -> str | None: ...


class StaticSecrets:
    """access key -> secret key from a mapping (tests)."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        self._secrets = dict(secrets)

    def secret_key(self, access_key: str) -> str | None:
        return self._secrets.get(access_key)


def sign(secret_key: str, date_time: str) -> str:
    return hmac.new(secret_key.encode(), date_time.encode(), hashlib.sha1).hexdigest()


def parse_authorization(header: str) -> Authorization:
    if len(header) > HEADER_CHARS_MAX:
        raise AuthError(f"authorization header longer than {HEADER_CHARS_MAX} characters")
    scheme, _, rest = header.strip().partition(" ")
    if scheme != SCHEME:
        raise AuthError(f"authorization scheme {scheme[:40]!r} is not {SCHEME}")
    fields: dict[str, str] = {}
    for part in rest.split(","):
        match = _FIELD.match(part)
        if match is None:
            raise AuthError(f"authorization: cannot parse {part.strip()[:60]!r}")
        fields[match.group(1)] = match.group(2)
    missing = {"Credential", "SignedHeaders", "Signature"} - fields.keys()
    if missing:
        raise AuthError(f"authorization: missing {', '.join(sorted(missing))}")
    if not fields["Credential"]:
        raise AuthError("authorization: empty Credential (no access key)")
    return Authorization(fields["Credential"],
                         tuple(h for h in fields["SignedHeaders"].split(";") if h),
                         fields["Signature"])


def local_utc_offset_minutes() -> int:
    """This host's UTC offset now (what a client on this host formats its dates in)."""
    offset = datetime.datetime.now().astimezone().utcoffset()
    return 0 if offset is None else int(offset.total_seconds()) // 60


def parse_utc_offsets(text: str) -> tuple[int, ...]:
    """grpcAuthClientUtcOffsets: "" (UTC and this host's offset), "any", or "+08:00,-05:30"
    (UTC is always accepted). ValueError names the bad part."""
    text = text.strip()
    if text == ANY_UTC_OFFSET:
        return _ANY_OFFSETS
    offsets = {0, local_utc_offset_minutes()}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        match = _OFFSET.match(part)
        if match is None or int(match.group(3)) >= 60:
            raise ValueError(f"{part!r} is not an offset like +08:00 or -05:30")
        minutes = int(match.group(2)) * 60 + int(match.group(3))
        if minutes > 14 * 60:
            raise ValueError(f"{part!r} is beyond +-14:00")
        offsets.add(minutes if match.group(1) == "+" else -minutes)
    return tuple(sorted(offsets))


class Authenticator:
    """Checks a request's signature against `secrets`; None: every request passes."""

    def __init__(self, secrets: SecretLookup | None, *, clock_skew_ms: int = 120_000,
                 utc_offsets_minutes: Iterable[int] = (0,),
                 now_ms: Callable[[], int] = lambda: int(time.time() * 1000)) -> None:
        self._secrets = secrets
        self._skew_ms = clock_skew_ms
        self._offsets_ms = tuple(minutes * 60_000 for minutes in utc_offsets_minutes)
        self._now_ms = now_ms

    @property
    def enabled(self) -> bool:
        return self._secrets is not None

    def check(self, metadata: Iterable[tuple[str, str | bytes]]) -> Credentials | None:
        """The authenticated caller's keys (None when authentication is off)."""
        if self._secrets is None:
            return None
        headers = {key.lower(): value if isinstance(value, str) else value.decode(
            errors="replace") for key, value in metadata}
        header = headers.get("authorization")
        if header is None:
            raise AuthError("no authorization header")
        auth = parse_authorization(header)
        if auth.signed_headers != (DATE_HEADER,):
            raise AuthError(f"SignedHeaders must be {DATE_HEADER}")
        date_time = headers.get(DATE_HEADER)
        if not date_time:
            raise AuthError(f"no {DATE_HEADER} header")
        self._check_date(date_time[:40])
        secret = self._secrets.secret_key(auth.access_key)
        expected = sign(secret, date_time) if secret is not None else ""
        # the same answer for an unknown user and a wrong secret: no user enumeration
        if secret is None or not hmac.compare_digest(expected, auth.signature.lower()):
            raise AuthError(f"signature of access key {auth.access_key[:64]!r} does not match")
        return Credentials(auth.access_key, secret)

    def _check_date(self, date_time: str) -> None:
        try:
            stated = datetime.datetime.strptime(date_time, DATE_FORMAT).replace(
                tzinfo=datetime.UTC)
        except ValueError:
            raise AuthError(f"{DATE_HEADER} {date_time!r} is not {DATE_FORMAT}") from None
        stated_ms = int(stated.timestamp() * 1000)
        now_ms = self._now_ms()
        # the client's local time = UTC + offset: within the window in one accepted offset
        if not any(abs(stated_ms - offset_ms - now_ms) <= self._skew_ms
                   for offset_ms in self._offsets_ms):
            raise AuthError(f"{DATE_HEADER} {date_time} is more than {self._skew_ms} ms from "
                            "this proxy's clock in every accepted UTC offset "
                            "(grpcAuthClockSkewMs, grpcAuthClientUtcOffsets)")
