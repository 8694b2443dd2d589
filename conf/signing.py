"""Signed requests: what a client sends instead of its secret, and how a server checks it.

The canon (version 1). A client with (access key, secret key) adds five Flight headers to
every call:

    x-rocketha-access-key   the user's access key
    x-rocketha-timestamp    milliseconds since the Unix epoch, decimal
    x-rocketha-nonce        32 lower-case hex characters, random per call
    x-rocketha-digest       hex SHA-256 of  METHOD "\\n" TARGET  (below)
    x-rocketha-signature    hex HMAC-SHA256(secret key, STRING_TO_SIGN)

    STRING_TO_SIGN = "ROCKETHA-HMAC-SHA256\\n" access_key "\\n" timestamp "\\n" nonce "\\n"
                     METHOD "\\n" digest                    (UTF-8)

METHOD is the Flight method's name as pyarrow spells it (`DO_ACTION`, `DO_GET`, `DO_PUT`,
`GET_FLIGHT_INFO`, `LIST_FLIGHTS`, `LIST_ACTIONS`, ...). TARGET is what the call is about:

    DO_ACTION                 action type, "\\n", action body
    DO_GET                    the ticket bytes
    DO_PUT, GET_FLIGHT_INFO,  the descriptor: b"cmd:" + command, or b"path:" + each path
      GET_SCHEMA              element as 4-byte big-endian length + bytes
    LIST_FLIGHTS              the criteria bytes
    anything else             empty

So a signature is bound to the user, the time, the method and the exact request; the secret
never travels. The batches of a DoPut stream are not signed (the descriptor is): their
integrity in transit is TLS's job, as is confidentiality.

A server checks in two steps: its Flight middleware (`verify`, with the caller's headers and
the method) checks the user, the signature, the clock skew (|now - timestamp| <=
authenticationClockSkewMs) and replays (ReplayGuard); the handler then checks that the
request it got is the one signed (`target_digest(method, target) == claimed digest`) and
authorizes it.

Replays: ReplayGuard remembers (access key, nonce) of every accepted call whose timestamp is
still inside the window, at most `entries_max`; when full it forgets the oldest and refuses,
from then on, every timestamp at or below the newest one it forgot (a "floor"), so a replay
of a forgotten call is still refused. Under a flood the floor nears now and honest calls with
a lagging clock are refused too (retriable BUSY: the client signs again). Replays are caught
per server process: a request captured on the wire could be replayed within the window to
another broker, which TLS prevents (no capture).

One module for every process: clients sign, brokers and the controller verify, and the
controller's own tools sign too.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import hmac
import os
import re
from collections.abc import Callable, Mapping, Sequence

__all__ = [
    "HEADER_ACCESS_KEY",
    "HEADER_DIGEST",
    "HEADER_NONCE",
    "HEADER_SIGNATURE",
    "HEADER_TIMESTAMP",
    "Credentials",
    "ReplayGuard",
    "SignatureError",
    "Verified",
    "action_target",
    "descriptor_target",
    "sign_headers",
    "target_digest",
    "verify",
]

SCHEME = "ROCKETHA-HMAC-SHA256"
HEADER_ACCESS_KEY = "x-rocketha-access-key"
HEADER_TIMESTAMP = "x-rocketha-timestamp"
HEADER_NONCE = "x-rocketha-nonce"
HEADER_DIGEST = "x-rocketha-digest"
HEADER_SIGNATURE = "x-rocketha-signature"
HEADER_VALUE_CHARS_MAX = 256


@dataclasses.dataclass(frozen=True, slots=True)
class Credentials:
    """An access key and its secret; the secret never shows in repr, str or logs."""

    access_key: str
    secret_key: str = dataclasses.field(repr=False)

    def __post_init__(self) -> None:
        if not self.access_key or not self.secret_key:
            raise ValueError("credentials need an access key and a secret key")


class SignatureError(Exception):
    """A request whose signature headers do not prove the caller. `busy` marks a refusal a
    fresh signature may pass (the replay floor), not a bad credential."""

    def __init__(self, reason: str, access_key: str = "", *, busy: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.access_key = access_key
        self.busy = busy


@dataclasses.dataclass(frozen=True, slots=True)
class Verified:
    access_key: str
    digest: str  # what the handler's request must hash to
    nonce: str = ""
    timestamp_ms: int = 0


def action_target(action_type: str, body: bytes) -> bytes:
    return action_type.encode() + b"\n" + body


def descriptor_target(command: bytes | None, path: Sequence[bytes] | None) -> bytes:
    if command is not None:
        return b"cmd:" + command
    parts = [len(part).to_bytes(4, "big") + part for part in path or ()]
    return b"path:" + b"".join(parts)


def target_digest(method: str, target: bytes) -> str:
    return hashlib.sha256(method.encode() + b"\n" + target).hexdigest()


def _string_to_sign(access_key: str, timestamp_ms: int, nonce: str, method: str,
                    digest: str) -> bytes:
    return "\n".join((SCHEME, access_key, str(timestamp_ms), nonce, method, digest)).encode()


def _signature(secret_key: str, message: bytes) -> str:
    return hmac.new(secret_key.encode(), message, hashlib.sha256).hexdigest()


def sign_headers(credentials: Credentials, method: str, target: bytes, now_ms: int,
                 nonce: str | None = None) -> list[tuple[bytes, bytes]]:
    """The five headers for one call (`nonce` given only by tests)."""
    nonce = nonce if nonce is not None else os.urandom(16).hex()
    digest = target_digest(method, target)
    signature = _signature(credentials.secret_key, _string_to_sign(
        credentials.access_key, now_ms, nonce, method, digest))
    return [(HEADER_ACCESS_KEY.encode(), credentials.access_key.encode()),
            (HEADER_TIMESTAMP.encode(), str(now_ms).encode()),
            (HEADER_NONCE.encode(), nonce.encode()),
            (HEADER_DIGEST.encode(), digest.encode()),
            (HEADER_SIGNATURE.encode(), signature.encode())]


def _header(headers: Mapping[str, Sequence[str | bytes]], name: str) -> str:
    values = headers.get(name) or ()
    if len(values) != 1:
        raise SignatureError(f"header {name} missing or repeated")
    value = values[0]
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    if not value or len(value) > HEADER_VALUE_CHARS_MAX or not value.isascii():
        raise SignatureError(f"header {name} is not a short ASCII value")
    return value


_HEX = {32: re.compile(r"[0-9a-f]{32}"), 64: re.compile(r"[0-9a-f]{64}")}


def _is_hex(text: str, length: int) -> bool:
    return _HEX[length].fullmatch(text) is not None


def verify(headers: Mapping[str, Sequence[str | bytes]], method: str,
           secret_of: Callable[[str], str | None], now_ms: int, clock_skew_ms: int,
           replays: ReplayGuard | None) -> Verified:
    """Check a call's signature headers (lower-case names, as Flight hands them to a
    middleware); `secret_of(access_key)` is the enabled user's secret or None. Raises
    SignatureError with a reason fit for the audit log (never the secret)."""
    access_key = _header(headers, HEADER_ACCESS_KEY)
    timestamp_text = _header(headers, HEADER_TIMESTAMP)
    nonce = _header(headers, HEADER_NONCE)
    digest = _header(headers, HEADER_DIGEST)
    signature = _header(headers, HEADER_SIGNATURE)
    if not timestamp_text.isdigit() or len(timestamp_text) > 15:
        raise SignatureError("timestamp is not milliseconds since the epoch", access_key)
    if not _is_hex(nonce, 32) or not _is_hex(digest, 64) or not _is_hex(signature, 64):
        raise SignatureError("nonce, digest or signature is not lower-case hex of the "
                             "right length", access_key)
    timestamp_ms = int(timestamp_text)
    if abs(now_ms - timestamp_ms) > clock_skew_ms:
        raise SignatureError(f"timestamp {timestamp_ms} is {now_ms - timestamp_ms} ms from "
                             f"this server's clock (allowed: {clock_skew_ms})", access_key)
    secret = secret_of(access_key)
    if secret is None:
        raise SignatureError("unknown or disabled access key", access_key)
    expected = _signature(secret, _string_to_sign(access_key, timestamp_ms, nonce, method,
                                                  digest))
    if not hmac.compare_digest(expected, signature):
        raise SignatureError("signature does not match", access_key)
    if replays is not None:  # (or the caller admits it: Verified has nonce and timestamp)
        replays.admit(access_key, nonce, timestamp_ms, now_ms, clock_skew_ms)
    return Verified(access_key, digest, nonce, timestamp_ms)


class ReplayGuard:
    """The (access key, nonce) pairs accepted inside the clock-skew window (bounded).

    Not thread-safe by itself: callers hold `lock` (a Flight server runs handlers on many
    threads)."""

    def __init__(self, entries_max: int) -> None:
        if entries_max < 1:
            raise ValueError("entries_max must be >= 1")
        self.entries_max = entries_max
        self._seen: collections.OrderedDict[tuple[str, str], int] = collections.OrderedDict()
        self.floor_ms = -1  # timestamps at or below this are refused (forgotten calls)

    def __len__(self) -> int:
        return len(self._seen)

    def admit(self, access_key: str, nonce: str, timestamp_ms: int, now_ms: int,
              clock_skew_ms: int) -> None:
        key = (access_key, nonce)
        if key in self._seen:
            raise SignatureError("replayed request (nonce seen before)", access_key)
        if timestamp_ms <= self.floor_ms:
            raise SignatureError("timestamp too old for the replay cache; sign again",
                                 access_key, busy=True)
        while self._seen:  # timestamps out of the window need no memory: refused anyway
            oldest_key, oldest_ms = next(iter(self._seen.items()))
            if oldest_ms >= now_ms - clock_skew_ms and len(self._seen) < self.entries_max:
                break
            del self._seen[oldest_key]
            if oldest_ms >= now_ms - clock_skew_ms:  # forgotten while still in the window
                self.floor_ms = max(self.floor_ms, oldest_ms)
        self._seen[key] = timestamp_ms
