"""The console's HTTP(S) requests: the page, its JSON, and logins (controller/console/sessions.py
says how sessions and CSRF checks work; login.py how keys are checked).

    GET  /healthz          always (a load balancer's probe)
    GET  /login            the login form, with a fresh double-submit token in a cookie
    POST /login            keys + token: a session cookie and 303 to /, or the form again
                           with one line saying why (401; 429 after LOGIN_FAILURES_MAX failures
                           from one address within a minute), or 403 from another site
    POST /logout           the session's CSRF token: the session ends, 303 to /login
    GET  /api/session      {"user", "csrf", "lifetime_s"} for the page's "Log out"
    GET  /, assets, /api/cluster   with a live session (without: 303 to /login, 401 for /api)

Without a login check (a console of a cluster without authentication) there are no sessions:
everything but POST is served to anyone who reaches the port.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from typing import Any

from conf.https import SecureHandler
from conf.signing import Credentials
from controller.console.login import LoginCheck
from controller.console.page import CONSOLE_CSS, CONSOLE_HTML, CONSOLE_JS, login_page
from controller.console.sessions import (
    FORM_BYTES_MAX,
    LOGIN_COOKIE,
    LOGIN_COOKIE_SECONDS,
    SESSION_COOKIE,
    FormError,
    LoginThrottle,
    Session,
    SessionTable,
    cookie_header,
    new_token,
    parse_cookies,
    parse_form,
    parse_login_form,
    same_origin,
    tokens_match,
)

__all__ = ["CLIENT_IDLE_TIMEOUT_S", "REQUESTS_INFLIGHT_MAX", "ConsoleHandler", "ViewSource"]

logger = logging.getLogger("controller.console")

REQUESTS_INFLIGHT_MAX = 32  # HTTP requests served at once (then 503)
CLIENT_IDLE_TIMEOUT_S = 10.0  # per socket operation of one HTTP connection (and handshake)


class ViewSource:
    """What `/api/cluster` answers for a viewer (app.py's cache); `None`: unsigned calls."""

    def get(self, credentials: Credentials | None) -> bytes:
        raise NotImplementedError


_STATIC = {
    "/": ("text/html; charset=utf-8", CONSOLE_HTML.encode()),
    "/index.html": ("text/html; charset=utf-8", CONSOLE_HTML.encode()),
    "/console.js": ("text/javascript; charset=utf-8", CONSOLE_JS.encode()),
    "/console.css": ("text/css; charset=utf-8", CONSOLE_CSS.encode()),
}
_PUBLIC = frozenset({"/healthz", "/login", "/console.css", "/favicon.ico"})  # no session


class ConsoleHandler(SecureHandler):
    """One connection's requests. Class attributes are set per server (app.ConsoleServer)."""

    views: ViewSource
    slots: threading.BoundedSemaphore
    login: LoginCheck | None
    sessions: SessionTable
    throttle: LoginThrottle  # failed logins per address (under sessions_lock too)
    sessions_lock: threading.Lock
    scheme: str  # http | https: the origin POSTs must come from, and the cookies' Secure
    server_version = "rocketha-console"
    timeout = CLIENT_IDLE_TIMEOUT_S  # a silent or slow client loses its connection (thread)

    def do_GET(self) -> None:
        self._one_at_most(self._get)

    def do_POST(self) -> None:
        self._one_at_most(self._post)

    def _one_at_most(self, serve: Any) -> None:
        if not self.slots.acquire(blocking=False):
            self._send(503, "text/plain", b"busy\n")
            return
        try:
            serve()
        finally:
            self.slots.release()

    # -- GET ----------------------------------------------------------------------------------
    def _get(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self._send(200, "text/plain", b"ok\n")
            return
        if path == "/login":
            self._login_form("", 200)
            return
        session = self._session()
        if self.login is not None and session is None and path not in _PUBLIC:
            if path.startswith("/api/"):
                self._send(401, "application/json", b'{"error": "log in first"}\n')
            else:
                self._redirect("/login")
            return
        if path == "/api/cluster":
            self._send(200, "application/json",
                       self.views.get(None if session is None else session.credentials))
        elif path == "/api/session":
            self._send(200, "application/json", self._session_json(session))
        elif path in _STATIC:
            self._send(200, *_STATIC[path])
        else:
            self._send(404, "text/plain", b"not found\n")

    def _session_json(self, session: Session | None) -> bytes:
        if session is None:
            return b'{"user": null}\n'
        with self.sessions_lock:
            lifetime_s = self.sessions.lifetime_s
        return json.dumps({"user": session.credentials.access_key, "csrf": session.csrf,
                           "lifetime_s": lifetime_s}).encode()

    # -- POST ---------------------------------------------------------------------------------
    def _post(self) -> None:
        path = self.path.split("?", 1)[0]
        if path not in ("/login", "/logout") or self.login is None:
            self._send(405, "text/plain", b"the console accepts no such request\n",
                       ("Allow", "GET"))
            return
        if not same_origin(dict(self.headers.items()), self.scheme):
            self._send(403, "text/plain", b"refused: the request does not come from a page of "
                       b"this console\n")
            return
        body = self._body()
        if body is None:
            return
        if path == "/logout":
            self._logout(body)
        else:
            self._login(body)

    def _body(self) -> bytes | None:
        length_text = self.headers.get("Content-Length")
        try:
            length = int(length_text) if length_text is not None else -1
        except ValueError:
            length = -1
        if length < 0:
            self._send(411, "text/plain", b"a Content-Length is required\n")
            return None
        if length > FORM_BYTES_MAX:
            self._send(413, "text/plain", f"a form is at most {FORM_BYTES_MAX} bytes\n".encode(),
                       ("Connection", "close"))
            self.close_connection = True
            return None
        return self.rfile.read(length)

    def _login(self, body: bytes) -> None:
        assert self.login is not None
        try:
            form = parse_login_form(body)
        except FormError as err:
            self._login_form(str(err), 400)
            return
        cookies = parse_cookies(self.headers.get("Cookie"))
        if not tokens_match(form.csrf, cookies.get(LOGIN_COOKIE, "")):
            self._login_form("the login form expired or did not come from this console: "
                             "try again", 403)
            return
        address = self.client_address[0]
        with self.sessions_lock:
            wait_s = self.throttle.wait_s(address)
        if wait_s > 0:
            self._login_form(f"too many failed logins from {address}: try again in "
                             f"{math.ceil(wait_s)} s", 429)
            return
        credentials = Credentials(form.access_key, form.secret_key)
        refusal = self.login(credentials)
        if refusal is not None:
            logger.info("console login refused for access key %s from %s: %s",
                        form.access_key, self.address_string(), refusal)
            with self.sessions_lock:
                self.throttle.failed(address)
            self._login_form(refusal, 401)
            return
        with self.sessions_lock:
            self.throttle.succeeded(address)
            token, _ = self.sessions.create(credentials)
            lifetime_s = int(self.sessions.lifetime_s)
        logger.info("console login of access key %s from %s", form.access_key,
                    self.address_string())
        secure = self.scheme == "https"
        self._redirect("/", ("Set-Cookie", cookie_header(SESSION_COOKIE, token, lifetime_s,
                                                         secure=secure)),
                       ("Set-Cookie", cookie_header(LOGIN_COOKIE, "", 0, secure=secure)))

    def _logout(self, body: bytes) -> None:
        token = parse_cookies(self.headers.get("Cookie")).get(SESSION_COOKIE)
        session = self._session()
        try:
            csrf = parse_form(body).get("csrf", "")
        except FormError:
            csrf = ""
        if session is None or not tokens_match(csrf, session.csrf):
            self._send(403, "text/plain", b"refused: no session, or not this session's form\n")
            return
        with self.sessions_lock:
            self.sessions.end(token)
        self._redirect("/login", ("Set-Cookie", cookie_header(
            SESSION_COOKIE, "", 0, secure=self.scheme == "https")))

    # -- helpers ------------------------------------------------------------------------------
    def _session(self) -> Session | None:
        if self.login is None:
            return None
        token = parse_cookies(self.headers.get("Cookie")).get(SESSION_COOKIE)
        with self.sessions_lock:
            return self.sessions.lookup(token)

    def _login_form(self, refusal: str, code: int) -> None:
        if self.login is None:
            self._redirect("/")
            return
        # one token per browser while its cookie lives: a second tab, or a favicon request
        # redirected here, must not invalidate the form already shown
        csrf = parse_cookies(self.headers.get("Cookie")).get(LOGIN_COOKIE, "")
        if not 32 <= len(csrf) <= 64 or not csrf.replace("-", "").replace("_", "").isalnum():
            csrf = new_token()
        self._send(code, "text/html; charset=utf-8", login_page(csrf, refusal).encode(),
                   ("Set-Cookie", cookie_header(LOGIN_COOKIE, csrf, LOGIN_COOKIE_SECONDS,
                                                secure=self.scheme == "https")))

    def _redirect(self, location: str, *headers: tuple[str, str]) -> None:
        self._send(303, "text/plain", b"", ("Location", location), *headers)

    def _send(self, code: int, content_type: str, body: bytes,
              *headers: tuple[str, str]) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Content-Security-Policy",
                         "default-src 'self'; frame-ancestors 'none'; form-action 'self'")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("Referrer-Policy", "same-origin")
        if self.scheme == "https":
            self.send_header("Strict-Transport-Security", "max-age=31536000")
        for name, value in headers:
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

