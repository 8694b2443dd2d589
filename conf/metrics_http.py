"""`/metrics` over HTTP for a server process (broker, controller): prometheus_client's HTTP
server on a daemon thread, with a registry of its own holding the process's one collector.

Each process keeps its collector (what it reads at scrape time: ha/broker/metrics.py,
controller/metrics.py); how it is served is this one copy. A registry of its own, not
prometheus_client's global one: nothing registered at import time by some library leaks into
the scrape, and two servers in one process (tests) do not see each other's series.

Server-only: prometheus_client is a dependency of the servers, so conf/__init__.py does not
import this module and a client-only install can still import conf.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.registry import Collector

__all__ = ["MetricsServer", "serve_collector"]

CLOSE_TIMEOUT_S = 5.0  # close() waits this long for the server thread to end


class MetricsServer:
    """prometheus_client's HTTP server on a daemon thread; `close()` stops it."""

    def __init__(self, server: Any, thread: threading.Thread) -> None:
        self._server = server
        self._thread = thread

    @property
    def port(self) -> int:
        return int(self._server.server_port)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=CLOSE_TIMEOUT_S)


def serve_collector(collector: Collector, host: str, port: int) -> MetricsServer:
    """Serve `/metrics` of `collector` alone on host:port (port 0: any free port, see
    `MetricsServer.port`). Raises OSError (e.g. the port is in use)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    server, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(server, thread)
