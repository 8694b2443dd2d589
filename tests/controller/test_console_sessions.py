"""The console's login rules, sans-IO: cookies, the login form, sessions that expire, the
same-origin check, the failed-login throttle, and /metrics' bearer-token check and token file.

Method: the pure functions and SessionTable with an injected clock (no sleeps)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conf.https import BEARER_TOKEN_CHARS_MIN, bearer_token_matches, read_bearer_token
from conf.signing import Credentials
from controller.console.sessions import (
    FORM_BYTES_MAX,
    FormError,
    LoginThrottle,
    SessionTable,
    cookie_header,
    parse_cookies,
    parse_login_form,
    same_origin,
    tokens_match,
)

VIEWER = Credentials("AK_viewer", "viewer-secret")


class Clock:
    def __init__(self) -> None:
        self.now_s = 1000.0

    def __call__(self) -> float:
        return self.now_s


def test_a_session_ends_at_its_lifetime_and_at_logout() -> None:
    clock = Clock()
    table = SessionTable(3600, clock=clock)
    token, session = table.create(VIEWER)
    assert table.lookup(token) is session and session.credentials == VIEWER
    assert len(token) >= 40 and token != session.csrf  # two independent random tokens
    clock.now_s += 3599.9
    assert table.lookup(token) is session
    clock.now_s += 0.1
    assert table.lookup(token) is None and len(table) == 0  # expired: gone
    token, _ = table.create(VIEWER)
    table.end(token)
    assert table.lookup(token) is None
    assert table.lookup(None) is None and table.lookup("") is None
    assert table.lookup("x" * 10_000) is None


def test_the_session_limit_drops_the_one_nearest_its_end() -> None:
    clock = Clock()
    table = SessionTable(100, sessions_max=2, clock=clock)
    first, _ = table.create(VIEWER)
    clock.now_s += 1
    second, _ = table.create(VIEWER)
    third, _ = table.create(VIEWER)
    assert len(table) == 2 and table.lookup(first) is None
    assert table.lookup(second) is not None and table.lookup(third) is not None


def test_cookies_are_parsed_leniently_and_bounded() -> None:
    assert parse_cookies('a=1; rocketha_console_session=tok; a=2; junk; ="x"') == {
        "a": "1", "rocketha_console_session": "tok"}
    assert parse_cookies(None) == {} and parse_cookies("") == {}
    assert parse_cookies("a=" + "x" * 9000) == {}  # oversized: no cookie at all


def test_the_session_cookie_is_httponly_strict_and_secure_over_tls() -> None:
    value = cookie_header("rocketha_console_session", "tok", 3600, secure=True)
    parts = [p.strip() for p in value.split(";")]
    assert parts[0] == "rocketha_console_session=tok"
    assert {"HttpOnly", "SameSite=Strict", "Secure", "Max-Age=3600", "Path=/"} <= set(parts)
    assert "Secure" not in cookie_header("n", "v", 1, secure=False)


def test_the_login_form_is_read_or_refused_with_one_line() -> None:
    form = parse_login_form(b"access_key=AK_viewer&secret_key=s%26cret&csrf=t&access_key=x")
    assert (form.access_key, form.secret_key, form.csrf) == ("AK_viewer", "s&cret", "t")
    for body, says in ((b"access_key=a", "give an access key and a secret key"),
                       (b"\xff\xfe", "cannot be read"),
                       (b"a=1&" * 20, "cannot be read"),  # too many fields
                       (b"x" * (FORM_BYTES_MAX + 1), "over"),
                       (b"access_key=a&secret_key=" + b"s" * 300, "is not one")):
        with pytest.raises(FormError, match=says):
            parse_login_form(body)


def test_same_origin_needs_the_console_as_origin_or_referer() -> None:
    host = {"Host": "127.0.0.1:8443"}
    assert same_origin({**host, "Origin": "https://127.0.0.1:8443"}, "https")
    assert not same_origin({**host, "Origin": "https://evil.example"}, "https")
    assert not same_origin({**host, "Origin": "http://127.0.0.1:8443"}, "https")
    assert not same_origin({**host, "Origin": "null"}, "https")
    assert same_origin({**host, "Referer": "https://127.0.0.1:8443/login"}, "https")
    assert not same_origin({**host, "Referer": "https://127.0.0.1:8443.evil/"}, "https")
    assert not same_origin(host, "https")  # neither: refused
    assert not same_origin({"Origin": "https://x"}, "https")  # no Host


def test_tokens_match_in_constant_time_and_never_when_empty() -> None:
    assert tokens_match("abc", "abc") and not tokens_match("abc", "abd")
    assert not tokens_match("", "") and not tokens_match("\udcff", "x")


def test_bearer_token_check() -> None:
    token = "t" * BEARER_TOKEN_CHARS_MIN
    assert bearer_token_matches(f"Bearer {token}", token)
    assert bearer_token_matches(f"bearer  {token} ", token)
    for header in (None, "", token, f"Basic {token}", f"Bearer {token}x", "Bearer ",
                   "Bearer " + "t" * 5000, "Bearer \udcff"):
        assert not bearer_token_matches(header, token), header
    assert not bearer_token_matches("Bearer ", "")


def test_the_token_file_must_be_private_and_the_token_long(tmp_path: Path) -> None:
    path = tmp_path / "metrics.token"
    path.write_text("s3cr3t-token-of-enough-length\n")
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match=r"metricsBearerTokenFile .*\(chmod 600\)"):
        read_bearer_token(str(path), "metricsBearerTokenFile")
    os.chmod(path, 0o600)
    assert read_bearer_token(str(path), "metricsBearerTokenFile") == \
        "s3cr3t-token-of-enough-length"
    for bad in ("short", "two words here and more", ""):
        path.write_text(bad)
        with pytest.raises(ValueError, match="at least 16 visible"):
            read_bearer_token(str(path), "metricsBearerTokenFile")


def test_failed_logins_from_one_address_wait_for_the_window() -> None:
    clock = Clock()
    throttle = LoginThrottle(failures_max=3, window_s=60, addresses_max=2, clock=clock)
    for _ in range(3):
        assert throttle.wait_s("10.0.0.1") == 0
        throttle.failed("10.0.0.1")
        clock.now_s += 1
    assert throttle.wait_s("10.0.0.1") == pytest.approx(57)  # the first failure + 60 s
    assert throttle.wait_s("10.0.0.2") == 0  # another address is not held up
    clock.now_s += 57
    assert throttle.wait_s("10.0.0.1") == 0  # the oldest failure left the window
    throttle.failed("10.0.0.1")
    assert throttle.wait_s("10.0.0.1") == pytest.approx(1)
    throttle.succeeded("10.0.0.1")
    assert throttle.wait_s("10.0.0.1") == 0
    for address in ("a", "b", "c"):  # at most addresses_max remembered
        throttle.failed(address)
    assert len(throttle._failures) <= 2
