"""RocketMQ 5 client authentication: the `authorization` request header (AK/SK, HMAC-SHA1).

What the official clients send with every call (rocketmq/v5/util/signature.py):

    x-mq-date-time: 20261125T153000Z          (the client's local clock, formatted so)
    authorization:  MQv2-HMAC-SHA1 Credential=<ak>, SignedHeaders=x-mq-date-time,
                    Signature=<hex of HMAC-SHA1(key=sk, msg=x-mq-date-time value)>

`parse_authorization` is pure (a malformed header is an AuthError naming what is wrong);
`Authenticator.check(metadata)` returns the access key of a valid signature or raises
AuthError. Where secrets come from is a `SecretLookup` (access key -> secret key or None):
`StaticSecrets` reads `accessKey=secretKey` lines (grpcCredentialsFile); the controller's
replicated users (the security work) plug in here as another SecretLookup. The date is not
checked against the server's clock: the clients format their *local* time with a `Z` suffix,
so a skew check would refuse every client outside UTC.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Protocol

__all__ = ["AuthError", "Authenticator", "Authorization", "SecretLookup", "StaticSecrets",
           "parse_authorization", "sign"]

SCHEME = "MQv2-HMAC-SHA1"
DATE_HEADER = "x-mq-date-time"
HEADER_CHARS_MAX = 1024
_FIELD = re.compile(r"^\s*(Credential|SignedHeaders|Signature)=([^,\s]*)\s*$")


class AuthError(Exception):
    """The request is not authenticated; the message says why (never the secret)."""


@dataclasses.dataclass(frozen=True, slots=True)
class Authorization:
    access_key: str
    signed_headers: tuple[str, ...]
    signature: str


class SecretLookup(Protocol):
    def secret_key(self, access_key: str) -> str | None: ...


class StaticSecrets:
    """access key -> secret key from `accessKey=secretKey` lines."""

    def __init__(self, secrets: Mapping[str, str]) -> None:
        self._secrets = dict(secrets)

    @classmethod
    def from_file(cls, path: str | Path) -> StaticSecrets:
        secrets = {}
        for line in Path(path).read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                access_key, _, secret = line.partition("=")
                secrets[access_key.strip()] = secret.strip()
        return cls(secrets)

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


class Authenticator:
    """Checks a request's signature against `secrets`; None: every request passes."""

    def __init__(self, secrets: SecretLookup | None) -> None:
        self._secrets = secrets

    @property
    def enabled(self) -> bool:
        return self._secrets is not None

    def check(self, metadata: Iterable[tuple[str, str | bytes]]) -> str | None:
        """The authenticated access key (None when authentication is off)."""
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
        secret = self._secrets.secret_key(auth.access_key)
        expected = sign(secret, date_time) if secret is not None else ""
        # the same answer for an unknown user and a wrong secret: no user enumeration
        if secret is None or not hmac.compare_digest(expected, auth.signature.lower()):
            raise AuthError(f"signature of access key {auth.access_key[:64]!r} does not match")
        return auth.access_key
