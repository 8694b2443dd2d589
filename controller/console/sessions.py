"""The console's logins, sans-IO: cookies, the login form, sessions that expire, CSRF checks.

Why sessions and not HTTP Basic: a browser resends Basic credentials with every request and
never forgets them until it closes; a session cookie carries a random token instead of the
viewer's secret, expires (`consoleSessionSeconds`), and ends at "Log out". The cookie is
HttpOnly (no script reads it), SameSite=Strict (no other site's page sends it) and Secure when
the console speaks TLS.

State-changing requests are the POSTs (log in, log out). Each needs, besides SameSite, an
`Origin` (or `Referer`) of the console itself and a form token that only the console's own
pages hold: the session's CSRF token for "Log out", and for the login form (no session yet)
a token the form carries and a short-lived cookie repeats (a double submit: a page of another
site can post the form but cannot read or set the cookie).

Everything here parses what a browser (or anyone) sends and is fuzzed
(tests/fuzz/targets.py `console_sessions`): bad input is a `FormError` or a refusal, never
another exception.
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import time
import urllib.parse
from collections.abc import Callable, Mapping

from conf.signing import Credentials

__all__ = [
    "COOKIE_HEADER_BYTES_MAX",
    "FORM_BYTES_MAX",
    "LOGIN_COOKIE",
    "LOGIN_COOKIE_SECONDS",
    "SESSIONS_MAX",
    "SESSION_COOKIE",
    "FormError",
    "LoginForm",
    "LoginThrottle",
    "Session",
    "SessionTable",
    "cookie_header",
    "new_token",
    "parse_cookies",
    "parse_form",
    "parse_login_form",
    "same_origin",
    "tokens_match",
]

SESSION_COOKIE = "rocketha_console_session"
LOGIN_COOKIE = "rocketha_console_login"  # the login form's double-submit token
LOGIN_COOKIE_SECONDS = 600  # a login form must be posted within this long of being shown
COOKIE_HEADER_BYTES_MAX = 8192  # a longer Cookie header is ignored (no cookie)
COOKIES_MAX = 64  # cookies read from one header (browsers send a few)
FORM_BYTES_MAX = 4096  # a login form's body; longer is refused unread
FORM_FIELDS_MAX = 8
KEY_CHARS_MAX = 256  # an access key or secret key longer than this is not one
SESSIONS_MAX = 1024  # live sessions; at the limit the one nearest its expiry is dropped
LOGIN_FAILURES_MAX = 10  # failed logins per source address per LOGIN_FAILURES_WINDOW_S
LOGIN_FAILURES_WINDOW_S = 60.0  # (then 429 until the window has room: guessing is slow)
THROTTLED_ADDRESSES_MAX = 4096  # addresses remembered; beyond, the oldest is forgotten


class FormError(ValueError):
    """A request body or field that no console page sends; its text is shown to the viewer."""


@dataclasses.dataclass(frozen=True, slots=True)
class LoginForm:
    access_key: str
    secret_key: str
    csrf: str


@dataclasses.dataclass(frozen=True, slots=True)
class Session:
    """A logged-in viewer: the keys the console signs this viewer's calls with (so ACL 2.0
    decides what the viewer sees), the CSRF token of its pages, and when it ends."""

    credentials: Credentials
    csrf: str
    expires_at_s: float  # the table's clock (time.monotonic by default)


def parse_cookies(header: str | None) -> dict[str, str]:
    """The cookies of a `Cookie` header (the first of a repeated name wins); malformed pairs
    are skipped and an oversized header reads as no cookie."""
    if not header or len(header) > COOKIE_HEADER_BYTES_MAX:
        return {}
    cookies: dict[str, str] = {}
    for pair in header.split(";")[:COOKIES_MAX]:
        name, sep, value = pair.strip().partition("=")
        if sep and name and name not in cookies:
            cookies[name] = value.strip().strip('"')
    return cookies


def parse_form(body: bytes) -> dict[str, str]:
    """The fields of an application/x-www-form-urlencoded body (the first of a repeated name
    wins). Raises FormError when it is too long or not UTF-8."""
    if len(body) > FORM_BYTES_MAX:
        raise FormError(f"the form is over {FORM_BYTES_MAX} bytes")
    try:
        pairs = urllib.parse.parse_qsl(body.decode("utf-8", "strict"), keep_blank_values=True,
                                       max_num_fields=FORM_FIELDS_MAX)
    except (UnicodeDecodeError, ValueError) as err:
        raise FormError(f"the form cannot be read ({type(err).__name__})") from err
    fields: dict[str, str] = {}
    for name, value in pairs:
        fields.setdefault(name, value)
    return fields


def parse_login_form(body: bytes) -> LoginForm:
    """The login form's fields (access_key, secret_key, csrf). Raises FormError saying what is
    wrong."""
    fields = parse_form(body)
    access_key, secret_key = fields.get("access_key", ""), fields.get("secret_key", "")
    if not access_key or not secret_key:
        raise FormError("give an access key and a secret key")
    for what, value in (("access key", access_key), ("secret key", secret_key)):
        if len(value) > KEY_CHARS_MAX or not value.isprintable():
            raise FormError(f"that {what} is not one (over {KEY_CHARS_MAX} characters or "
                            "unprintable)")
    return LoginForm(access_key, secret_key, fields.get("csrf", ""))


def same_origin(headers: Mapping[str, str], scheme: str) -> bool:
    """Whether a POST comes from a page of this console: its `Origin` (else its `Referer`) is
    `scheme://<Host>`. A request naming neither is refused (browsers send Origin on POST)."""
    host = headers.get("Host", "")
    if not host or len(host) > 512:
        return False
    expected = f"{scheme}://{host}"
    origin = headers.get("Origin")
    if origin is not None:
        return origin == expected
    referer = headers.get("Referer") or ""
    return referer == expected or referer.startswith(expected + "/")


def tokens_match(given: str, expected: str) -> bool:
    """Constant-time equality of two tokens, False when either is empty."""
    return bool(given) and bool(expected) and secrets.compare_digest(
        given.encode("utf-8", "replace"), expected.encode("utf-8", "replace"))


def cookie_header(name: str, value: str, max_age_s: int, *, secure: bool) -> str:
    """A Set-Cookie value: HttpOnly, SameSite=Strict, Path=/, Secure when served over TLS;
    `max_age_s` 0 deletes the cookie."""
    return (f"{name}={value}; Max-Age={max_age_s}; Path=/; HttpOnly; SameSite=Strict"
            + ("; Secure" if secure else ""))


def new_token() -> str:
    return secrets.token_urlsafe(32)  # 256 random bits


def _key(token: str) -> str:
    """Sessions are found by a hash of their token: a lookup's timing says nothing of it."""
    return hashlib.sha256(token.encode("utf-8", "replace")).hexdigest()


class SessionTable:
    """Live sessions by token. Not thread-safe: the console holds a lock around it."""

    def __init__(self, lifetime_s: float, sessions_max: int = SESSIONS_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if lifetime_s <= 0 or sessions_max <= 0:
            raise ValueError("a session lifetime and a session limit must be positive")
        self.lifetime_s = lifetime_s
        self._sessions_max = sessions_max
        self._clock = clock
        self._sessions: dict[str, Session] = {}

    def __len__(self) -> int:
        return len(self._sessions)

    def create(self, credentials: Credentials) -> tuple[str, Session]:
        """A new session for a viewer whose keys were checked: (its cookie token, it)."""
        self._expire()
        while len(self._sessions) >= self._sessions_max:
            oldest = min(self._sessions, key=lambda k: self._sessions[k].expires_at_s)
            del self._sessions[oldest]
        token = new_token()
        session = Session(credentials, new_token(), self._clock() + self.lifetime_s)
        self._sessions[_key(token)] = session
        return token, session

    def lookup(self, token: str | None) -> Session | None:
        """The live session of a cookie token (None: unknown, expired or no token)."""
        if not token or len(token) > KEY_CHARS_MAX:
            return None
        key = _key(token)
        session = self._sessions.get(key)
        if session is not None and session.expires_at_s <= self._clock():
            del self._sessions[key]
            return None
        return session

    def end(self, token: str | None) -> None:
        if token:
            self._sessions.pop(_key(token), None)

    def _expire(self) -> None:
        now = self._clock()
        for key in [k for k, s in self._sessions.items() if s.expires_at_s <= now]:
            del self._sessions[key]


class LoginThrottle:
    """Failed logins per source address in a sliding window: at LOGIN_FAILURES_MAX the
    address waits (each guess of a secret also costs the controllers a signed call). Not
    thread-safe: the console holds its sessions lock around it."""

    def __init__(self, failures_max: int = LOGIN_FAILURES_MAX,
                 window_s: float = LOGIN_FAILURES_WINDOW_S,
                 addresses_max: int = THROTTLED_ADDRESSES_MAX,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._failures_max = failures_max
        self._window_s = window_s
        self._addresses_max = addresses_max
        self._clock = clock
        self._failures: dict[str, list[float]] = {}  # address -> failure times, oldest first

    def _recent(self, address: str) -> list[float]:
        since = self._clock() - self._window_s
        times = [t for t in self._failures.get(address, []) if t > since]
        if times:
            self._failures[address] = times
        else:
            self._failures.pop(address, None)
        return times

    def wait_s(self, address: str) -> float:
        """Seconds until `address` may try again (0: now)."""
        times = self._recent(address)
        if len(times) < self._failures_max:
            return 0.0
        return max(0.0, times[-self._failures_max] + self._window_s - self._clock())

    def failed(self, address: str) -> None:
        times = self._recent(address)
        if not times and len(self._failures) >= self._addresses_max:
            self._failures.pop(next(iter(self._failures)))
        self._failures[address] = [*times[-(self._failures_max - 1):], self._clock()]

    def succeeded(self, address: str) -> None:
        self._failures.pop(address, None)
