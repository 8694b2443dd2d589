"""HTTP(S) for the operator pages (the web console, `/metrics`): one server, TLS optional.

Why a module of its own: the console (base install) and `/metrics` (servers) both need TLS
without letting one client hold the others up. `ssl.SSLContext.wrap_socket` on the listening
socket would run every handshake inside `accept()`, on the one thread that accepts: a client
that connects and says nothing would stall every other viewer and scraper. Here the listening
socket hands out TLS sockets whose handshake has not started, and each connection's own thread
runs it under the handler's timeout (`SecureHandler.setup`).

Also here, sans-IO and fuzzed (tests/fuzz/targets.py `http_access`): the bearer-token check of
an `Authorization` header and the token file's reading.
"""

from __future__ import annotations

import hmac
import logging
import socket
import ssl
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from conf.credentials import read_private_file

__all__ = ["AUTHORIZATION_BYTES_MAX", "BEARER_TOKEN_CHARS_MIN", "ContextSource", "HTTPServer",
           "SecureHandler",
           "bearer_token_matches", "browser_ssl_context", "read_bearer_token"]

logger = logging.getLogger(__name__)

AUTHORIZATION_BYTES_MAX = 4096  # a longer Authorization header is refused unread
BEARER_TOKEN_CHARS_MIN = 16  # a shorter token is refused at start-up (guessable)


def read_bearer_token(path: str, key: str) -> str:
    """The token in the file `path` (the whole text, stripped): the file must be its owner's
    only (0600) and the token at least BEARER_TOKEN_CHARS_MIN visible ASCII characters.
    Raises ValueError (or OSError) naming `key` and the path."""
    token = read_private_file(path, key).strip()
    if len(token) < BEARER_TOKEN_CHARS_MIN or not token.isascii() or not token.isprintable() \
            or any(c.isspace() for c in token):
        raise ValueError(f"{key} {path}: the token must be one word of at least "
                         f"{BEARER_TOKEN_CHARS_MIN} visible ASCII characters")
    return token


def bearer_token_matches(authorization: str | None, token: str) -> bool:
    """Whether an `Authorization` header value is `Bearer <token>` (constant-time compare)."""
    if not authorization or not token or len(authorization) > AUTHORIZATION_BYTES_MAX:
        return False
    scheme, _, given = authorization.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode("utf-8", "replace"), token.encode())


def browser_ssl_context(context: ssl.SSLContext) -> ssl.SSLContext:
    """`context` (conf.tls.server_ssl_context: a member's certificate, client certificates
    required) made to serve browsers: no client certificate asked for."""
    context.verify_mode = ssl.CERT_NONE
    return context


ContextSource = Callable[[], ssl.SSLContext]  # the context for the next connection


class _TLSListener(socket.socket):
    """The listening socket's accept() returns TLS sockets whose handshake has not run yet,
    each with the context current at its accept (certificates reloaded: conf/tls_reload.py)."""

    context_of: ContextSource

    def accept(self) -> tuple[socket.socket, Any]:
        conn, address = super().accept()
        return self.context_of().wrap_socket(conn, server_side=True,
                                             do_handshake_on_connect=False), address


class HTTPServer(ThreadingHTTPServer):
    """A threading HTTP server, speaking TLS when given an `ssl_context` (a context, or a
    callable giving the current one at each connection). A broken client (a failed
    handshake, garbage, a reset) ends its own connection, logged at debug level."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 ssl_context: ssl.SSLContext | ContextSource | None = None) -> None:
        super().__init__(address, handler)  # OSError: the port is in use
        self.ssl_context = ssl_context
        if ssl_context is not None:
            listener = _TLSListener(self.socket.family, self.socket.type,
                                    fileno=self.socket.detach())
            listener.context_of = ssl_context if callable(ssl_context) \
                else (lambda: ssl_context)
            self.socket = listener

    @property
    def host(self) -> str:
        return str(self.server_address[0])

    @property
    def scheme(self) -> str:
        return "http" if self.ssl_context is None else "https"

    def handle_error(self, request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]  # called from socketserver's except clause
        logger.debug("HTTP client %s: connection ended by %s", client_address,
                     type(error).__name__ if error else "an error")


class SecureHandler(BaseHTTPRequestHandler):
    """A request handler whose TLS handshake runs on its connection's thread, under `timeout`.
    `peer_certificate` is the client's verified certificate (None: none was asked or given)."""

    timeout = 10.0  # per socket operation, the handshake included
    peer_certificate: dict[str, Any] | None = None

    def setup(self) -> None:
        super().setup()  # applies self.timeout to the socket
        if isinstance(self.connection, ssl.SSLSocket):
            self.connection.do_handshake()  # raises on a bad client: handle_error logs it
            self.peer_certificate = self.connection.getpeercert() or None

    def log_message(self, format: str, *args: Any) -> None:
        if logger.isEnabledFor(logging.DEBUG):  # http.server's own %-format, then ours
            logger.debug("%s %s %s", type(self).__name__, self.address_string(), format % args)
