"""`/metrics` over HTTP(S) for a server process (broker, controller), with a registry of its own
holding the process's one collector.

Each process keeps its collector (what it reads at scrape time: ha/broker/metrics.py,
controller/metrics.py); how it is served is this one copy. A registry of its own, not
prometheus_client's global one: nothing registered at import time by some library leaks into
the scrape, and two servers in one process (tests) do not see each other's series.

Who may scrape (`MetricsAccess`, from the process's conf by `metrics_access`): on a secured
member (`tls.server.mode=enforcing`) the page is HTTPS with the member's certificate (reloaded
with the member's, conf/tls_reload.py), and a
scrape needs a client certificate signed by the cluster CA or, when `metricsBearerTokenFile`
names a token file, `Authorization: Bearer <token>`; anything else is 401. Plain HTTP there only
with `metricsPlaintext=true` (the token is still checked when set). A member without TLS serves
plain HTTP, checking the token when one is set.

Server-only: prometheus_client is a dependency of the servers, so conf/__init__.py does not
import this module and a client-only install can still import conf.
"""

from __future__ import annotations

import dataclasses
import logging
import ssl
import threading

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector

from conf.https import (
    ContextSource,
    HTTPServer,
    SecureHandler,
    bearer_token_matches,
    read_bearer_token,
)
from conf.tls import TLSSettings
from conf.tls_reload import ReloadingTLS, watch

__all__ = ["MetricsAccess", "MetricsServer", "metrics_access", "reloading_server_context",
           "serve_collector"]

logger = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 5.0  # close() waits this long for the server thread to end
SCRAPE_IDLE_TIMEOUT_S = 10.0  # per socket operation of one scrape (the handshake included)


@dataclasses.dataclass(frozen=True, slots=True)
class MetricsAccess:
    """How `/metrics` is served: TLS (`tls`: the context of the next connection, asking for
    an optional client certificate) or plain, and the bearer token a scrape may present
    ("" = none)."""

    tls: ContextSource | None = None
    bearer_token: str = ""

    @property
    def open(self) -> bool:
        """Anyone who reaches the port may scrape (plain, no token)."""
        return self.tls is None and not self.bearer_token


OPEN = MetricsAccess()


def metrics_access(tls: TLSSettings, bearer_token_file: str, plaintext: bool) -> MetricsAccess:
    """The access of a member's `/metrics` from its `tls.*`, `metricsBearerTokenFile` and
    `metricsPlaintext` settings. Raises ValueError (or OSError) naming the key at fault."""
    token = read_bearer_token(bearer_token_file, "metricsBearerTokenFile") \
        if bearer_token_file else ""
    if not tls.enabled or plaintext:
        return MetricsAccess(None, token)
    # its certificate, the cluster CA and CRL, reloaded as the member's; a scraper may hold a
    # certificate, or give the token
    return MetricsAccess(reloading_server_context(tls, "/metrics", ssl.CERT_OPTIONAL), token)


def reloading_server_context(tls: TLSSettings, what: str, verify_mode: ssl.VerifyMode
                             ) -> ContextSource:
    """The current server context of `tls`'s files (conf/tls_reload.py: reloaded when they
    change or on SIGHUP, a revoked client certificate refused at the next handshake), asking
    clients for a certificate as `verify_mode` says. Raises TLSConfigError naming the key."""
    reloading = watch(ReloadingTLS(tls, what=what))

    def current() -> ssl.SSLContext:
        context = reloading.server()  # this ReloadingTLS's own: no member link shares it
        context.verify_mode = verify_mode
        return context

    return current


class MetricsServer:
    """The `/metrics` HTTP(S) server on a daemon thread; `close()` stops it."""

    def __init__(self, server: HTTPServer, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"{self._server.scheme}://{self._server.host}:{self.port}/metrics"

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=CLOSE_TIMEOUT_S)


class _MetricsHandler(SecureHandler):
    registry: CollectorRegistry
    access: MetricsAccess
    server_version = "rocketha-metrics"
    timeout = SCRAPE_IDLE_TIMEOUT_S

    def do_GET(self) -> None:
        if not self._allowed():
            body = b"a client certificate of the cluster CA or a bearer token is required\n"
            self.send_response(401)
            self.send_header("WWW-Authenticate", 'Bearer realm="rocketha metrics"')
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        if self.path.split("?", 1)[0] not in ("/", "/metrics"):
            self.send_error(404)
            return
        encoder, content_type = choose_encoder(self.headers.get("Accept", ""))
        body = encoder(self.registry)
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _allowed(self) -> bool:
        if self.access.open or self.peer_certificate is not None:
            return True  # the TLS layer verified the certificate against the cluster CA
        return bool(self.access.bearer_token) and bearer_token_matches(
            self.headers.get("Authorization"), self.access.bearer_token)


def serve_collector(collector: Collector, host: str, port: int,
                    access: MetricsAccess = OPEN) -> MetricsServer:
    """Serve `/metrics` of `collector` alone on host:port (port 0: any free port, see
    `MetricsServer.port`) as `access` says. Raises OSError (e.g. the port is in use)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    handler = type("MetricsHandler", (_MetricsHandler,), {"registry": registry,
                                                          "access": access})
    server = HTTPServer((host, port), handler, access.tls)
    thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
    thread.start()
    return MetricsServer(server, thread)
