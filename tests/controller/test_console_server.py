"""The console's HTTPS surface without a cluster: logins, sessions, CSRF refusals, hostile
clients, and `/metrics` over TLS with a bearer token or a client certificate.

Goal: what a browser or a stranger can do at the port. Unauthenticated requests are sent to
the login form (401 for the JSON); a login sets an HttpOnly, Secure, SameSite=Strict cookie
that expires; a Super user's keys get the login check's one line; a POST from another origin,
without the form's token, or a logout without the session's token is 403; garbage, plaintext on
the TLS port, a stalled handshake and oversized bodies never stop the server.
Method: a real ConsoleServer and metrics server on 127.0.0.1 with real TLS (a CA and
certificates made by rocketha-cluster's own CA code in the test's directory), a login check
that is a plain function (the controllers' check: tests/integration/test_console_secured.py),
controllers at a port nobody listens on, http.client."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.core import GaugeMetricFamily

from conf.metrics_http import MetricsAccess, serve_collector
from conf.signing import Credentials
from conf.tls import TLSSettings
from controller.console.app import ConsoleServer, console_ssl_context
from controller.console.login import SUPER_REFUSED
from ha.cluster.certs import ensure_ca
from tests.ha.replica_set import wait_for


def _dead_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    directory = tmp_path_factory.mktemp("tls")
    ca = ensure_ca(directory)
    member = ca.issue("controller-n1", "rocketha://controller/1", ["127.0.0.1"])
    client = ca.issue("client-prom", "rocketha://client/prom", ["127.0.0.1"])
    return {"ca": str(ca.cert_path), "cert": str(member.cert_path),
            "key": str(member.key_path), "client_cert": str(client.cert_path),
            "client_key": str(client.key_path)}


def _login(credentials: Credentials) -> str | None:
    if credentials.access_key == "admin":
        return SUPER_REFUSED
    return None if credentials == Credentials("viewer", "viewer-secret") else "wrong keys"


# Long enough for a login and four TLS requests on a machine at load 30 (2 s was not: the
# session ran out before the last request), short enough to wait out in one test.
SESSION_S = 8


@pytest.fixture
def console(pki: dict[str, str]) -> Iterator[ConsoleServer]:
    server = ConsoleServer([_dead_address()], "127.0.0.1", 0, login=_login, session_s=SESSION_S,
                           ssl_context=console_ssl_context(pki["cert"], pki["key"], pki["ca"]))
    try:
        yield server
    finally:
        server.close()


class Browser:
    """Enough of a browser: verifies the console's certificate, keeps its cookies, sends
    Origin on POST."""

    def __init__(self, port: int, ca: str) -> None:
        self.port = port
        self.context = ssl.create_default_context(cafile=ca)
        self.cookies: dict[str, str] = {}
        self.set_cookies: list[str] = []

    def request(self, method: str, path: str, body: bytes = b"",
                origin: str | None = "self") -> tuple[int, dict[str, str], bytes]:
        connection = http.client.HTTPSConnection("127.0.0.1", self.port, timeout=20,
                                                 context=self.context)
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.cookies.items())}
        if method == "POST":
            headers["Content-Type"] = "application/x-www-form-urlencoded"
            if origin is not None:
                headers["Origin"] = (f"https://127.0.0.1:{self.port}" if origin == "self"
                                     else origin)
        try:
            connection.request(method, path, body=body if method == "POST" else None,
                               headers=headers)
            response = connection.getresponse()
            self.set_cookies = response.headers.get_all("Set-Cookie") or []
            for cookie in self.set_cookies:
                name, _, rest = cookie.partition("=")
                value = rest.split(";", 1)[0]
                if "Max-Age=0" in cookie:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = value
            return response.status, dict(response.headers), response.read()
        finally:
            connection.close()

    def login(self, access_key: str, secret_key: str,
              origin: str | None = "self") -> tuple[int, dict[str, str], bytes]:
        _, _, page = self.request("GET", "/login")
        csrf = re.search(rb'name="csrf" value="([^"]+)"', page)
        assert csrf, page
        body = (f"access_key={access_key}&secret_key={secret_key}&csrf="
                f"{csrf.group(1).decode()}").encode()
        return self.request("POST", "/login", body, origin)


def test_a_viewer_logs_in_and_the_session_expires(console: ConsoleServer,
                                                  pki: dict[str, str]) -> None:
    assert console.url.startswith("https://127.0.0.1:")
    browser = Browser(console.port, pki["ca"])
    status, headers, _ = browser.request("GET", "/")
    assert status == 303 and headers["Location"] == "/login"
    assert browser.request("GET", "/api/cluster")[0] == 401
    assert browser.request("GET", "/healthz")[0] == 200
    status, headers, _ = browser.login("viewer", "viewer-secret")
    assert status == 303 and headers["Location"] == "/"
    (session_cookie,) = [c for c in browser.set_cookies
                         if c.startswith("rocketha_console_session=")]
    flags = {part.strip() for part in session_cookie.split(";")}
    assert {"HttpOnly", "Secure", "SameSite=Strict", f"Max-Age={SESSION_S}"} <= flags
    assert headers["Strict-Transport-Security"].startswith("max-age=")
    status, _, body = browser.request("GET", "/api/cluster")
    assert status == 200 and json.loads(body)["controllers"][0]["reachable"] is False
    status, _, body = browser.request("GET", "/api/session")
    assert status == 200 and json.loads(body)["user"] == "viewer"
    status, _, body = browser.request("GET", "/")
    assert status == 200 and b"/console.js" in body
    # the browser would drop the cookie at Max-Age; the server ends the session by itself
    wait_for(lambda: browser.request("GET", "/api/cluster")[0] == 401, 5 * SESSION_S,
             "the session to expire")


def test_a_super_users_keys_and_wrong_keys_get_one_line(console: ConsoleServer,
                                                        pki: dict[str, str]) -> None:
    browser = Browser(console.port, pki["ca"])
    status, _, page = browser.login("admin", "admin-secret")
    assert status == 401 and b"a Super user&#x27;s keys are not accepted" in page
    assert "rocketha_console_session" not in browser.cookies
    status, _, page = browser.login("viewer", "guess")
    assert status == 401 and b"wrong keys" in page
    assert browser.request("GET", "/api/cluster")[0] == 401


def test_repeated_failed_logins_are_slowed_down(console: ConsoleServer,
                                                pki: dict[str, str]) -> None:
    from controller.console.sessions import LOGIN_FAILURES_MAX

    browser = Browser(console.port, pki["ca"])
    for _ in range(LOGIN_FAILURES_MAX):
        assert browser.login("viewer", "guess")[0] == 401
    status, _, page = browser.login("viewer", "viewer-secret")  # right, but too late
    assert status == 429 and b"too many failed logins from 127.0.0.1" in page
    assert "rocketha_console_session" not in browser.cookies


def test_cross_site_and_tokenless_posts_are_refused(console: ConsoleServer,
                                                    pki: dict[str, str]) -> None:
    browser = Browser(console.port, pki["ca"])
    status, _, _ = browser.login("viewer", "viewer-secret", origin="https://evil.example")
    assert status == 403 and "rocketha_console_session" not in browser.cookies
    status, _, _ = browser.login("viewer", "viewer-secret", origin=None)  # neither header
    assert status == 403
    forged = b"access_key=viewer&secret_key=viewer-secret&csrf=made-up"
    status, _, page = browser.request("POST", "/login", forged)
    assert status == 403 and b"did not come from this console" in page
    assert browser.login("viewer", "viewer-secret")[0] == 303
    assert browser.request("POST", "/logout", b"csrf=wrong")[0] == 403
    assert browser.request("POST", "/logout", b"", origin="https://evil.example")[0] == 403
    assert browser.request("GET", "/api/cluster")[0] == 200  # still logged in
    csrf = json.loads(browser.request("GET", "/api/session")[2])["csrf"]
    status, headers, _ = browser.request("POST", "/logout", f"csrf={csrf}".encode())
    assert status == 303 and headers["Location"] == "/login"
    assert browser.request("GET", "/api/cluster")[0] == 401
    assert browser.request("POST", "/api/cluster", b"")[0] == 405


def test_hostile_clients_never_stop_the_console(console: ConsoleServer,
                                                pki: dict[str, str]) -> None:
    stalled = socket.create_connection(("127.0.0.1", console.port))  # no handshake, ever
    try:
        for junk in (b"GET / HTTP/1.1\r\n\r\n", os.urandom(4096), b"\x16\x03\x01\x00\x05hello"):
            with socket.create_connection(("127.0.0.1", console.port), timeout=10) as sock:
                try:  # whatever it answers, or a closed (reset) connection
                    sock.sendall(junk)
                    sock.shutdown(socket.SHUT_WR)
                    sock.recv(1024)
                except OSError:
                    pass
        browser = Browser(console.port, pki["ca"])
        assert browser.request("POST", "/login", b"x" * 5000)[0] == 413
        assert browser.request("POST", "/login", "access_key=\udcff".encode(
            "utf-8", "surrogateescape"))[0] == 400
        assert browser.login("viewer", "viewer-secret")[0] == 303  # served all along
    finally:
        stalled.close()


class _One:
    def collect(self):  # type: ignore[no-untyped-def]
        yield GaugeMetricFamily("rocketha_test_up", "A test gauge.", value=1)


def test_metrics_over_tls_need_a_token_or_a_client_certificate(pki: dict[str, str],
                                                              tmp_path: Path) -> None:
    from conf.metrics_http import metrics_access

    token_file = tmp_path / "metrics.token"
    token_file.write_text("prometheus-scrape-token-1\n")
    token_file.chmod(0o600)
    settings = TLSSettings(server_mode="enforcing", server_cert_path=pki["cert"],
                           server_key_path=pki["key"], server_trust_cert_path=pki["ca"],
                           need_client_auth="require")
    access = metrics_access(settings, str(token_file), plaintext=False)
    assert access.tls is not None and access.bearer_token
    server = serve_collector(_One(), "127.0.0.1", 0, access)
    try:
        assert server.url.startswith("https://")

        def scrape(context: ssl.SSLContext, headers: dict[str, str]) -> tuple[int, bytes]:
            connection = http.client.HTTPSConnection("127.0.0.1", server.port, timeout=20,
                                                     context=context)
            try:
                connection.request("GET", "/metrics", headers=headers)
                response = connection.getresponse()
                return response.status, response.read()
            finally:
                connection.close()

        anonymous = ssl.create_default_context(cafile=pki["ca"])
        assert scrape(anonymous, {})[0] == 401
        assert scrape(anonymous, {"Authorization": "Bearer wrong-token-of-length"})[0] == 401
        status, body = scrape(anonymous, {"Authorization": "Bearer prometheus-scrape-token-1"})
        assert status == 200 and b"rocketha_test_up 1.0" in body
        with_cert = ssl.create_default_context(cafile=pki["ca"])
        with_cert.load_cert_chain(pki["client_cert"], pki["client_key"])
        assert scrape(with_cert, {})[0] == 200
        stranger = ensure_ca(tmp_path / "other-ca").issue("x", "rocketha://client/x",
                                                          ["127.0.0.1"])
        foreign = ssl.create_default_context(cafile=pki["ca"])
        foreign.load_cert_chain(str(stranger.cert_path), str(stranger.key_path))
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            scrape(foreign, {})  # another CA's certificate: refused at the handshake
        plain = http.client.HTTPConnection("127.0.0.1", server.port, timeout=20)
        with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
            plain.request("GET", "/metrics")  # plaintext on the TLS port: no answer
            plain.getresponse().read()
        plain.close()
        assert scrape(with_cert, {})[0] == 200  # still serving
    finally:
        server.close()
    open_server = serve_collector(_One(), "127.0.0.1", 0, MetricsAccess())
    try:
        connection = http.client.HTTPConnection("127.0.0.1", open_server.port, timeout=20)
        connection.request("GET", "/metrics")
        assert connection.getresponse().status == 200
        connection.close()
    finally:
        open_server.close()


def test_a_tls_member_serves_https_unless_plain_is_asked(pki: dict[str, str],
                                                         tmp_path: Path) -> None:
    from conf.metrics_http import metrics_access
    from controller.config import ControllerConfig
    from controller.main import _console_context

    base = {"controllerDLegerPeers": "n1-127.0.0.1:9880", "controllerDLegerSelfId": "n1",
            "controllerAddr": "127.0.0.1:9876", "consolePort": "8443",
            "tls.server.mode": "enforcing", "tls.server.certPath": pki["cert"],
            "tls.server.keyPath": pki["key"], "tls.server.trustCertPath": pki["ca"]}
    config = ControllerConfig.from_properties(base)
    context = _console_context(config)
    assert context is not None and context().verify_mode == ssl.CERT_NONE  # browsers: no cert
    assert config.console_session_seconds == 3600
    assert _console_context(ControllerConfig.from_properties(
        {**base, "consolePlaintext": "true"})) is None
    assert _console_context(ControllerConfig.from_properties(
        {**base, "tls.server.mode": "disabled"})) is None
    with pytest.raises(ValueError, match="consoleCertPath and consoleKeyPath go together"):
        _console_context(ControllerConfig.from_properties(
            {**base, "consoleCertPath": pki["client_cert"]}))
    own = _console_context(ControllerConfig.from_properties(
        {**base, "consoleCertPath": pki["client_cert"], "consoleKeyPath": pki["client_key"]}))
    assert own is not None
    token_file = tmp_path / "token"
    token_file.write_text("a-token-long-enough-here")
    token_file.chmod(0o600)
    plain = metrics_access(config.tls, str(token_file), plaintext=True)
    assert plain.tls is None and plain.bearer_token == "a-token-long-enough-here"
    member = metrics_access(config.tls, "", plaintext=False)
    assert member.tls is not None and member.tls().verify_mode == ssl.CERT_OPTIONAL
    assert not member.open


def test_metrics_serve_a_rotated_certificate_without_a_restart(tmp_path: Path) -> None:
    """The member's certificate files rewritten (as `certs rotate` does): the next handshake
    presents the new certificate; the server keeps serving throughout."""
    from conf.metrics_http import metrics_access
    from conf.tls_reload import request_reload

    ca = ensure_ca(tmp_path / "tls")
    member = ca.issue("broker-a-0", "rocketha://broker/broker-a/127.0.0.1:1", ["127.0.0.1"])
    client = ca.issue("client-prom", "rocketha://client/prom", ["127.0.0.1"])
    settings = TLSSettings(server_mode="enforcing", server_cert_path=str(member.cert_path),
                           server_key_path=str(member.key_path),
                           server_trust_cert_path=str(ca.cert_path))
    server = serve_collector(_One(), "127.0.0.1", 0, metrics_access(settings, "", False))
    context = ssl.create_default_context(cafile=str(ca.cert_path))
    context.load_cert_chain(str(client.cert_path), str(client.key_path))

    def served_certificate() -> bytes:
        with socket.create_connection(("127.0.0.1", server.port), timeout=20) as raw, \
                context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            served = tls.getpeercert(binary_form=True)
            assert served is not None
            return served

    try:
        before = served_certificate()
        ca.issue("broker-a-0", "rocketha://broker/broker-a/127.0.0.1:1", ["127.0.0.1"])

        def rotated() -> bool:
            request_reload()
            return served_certificate() != before

        wait_for(rotated, 30, "the new certificate at the next handshake")
    finally:
        server.close()
