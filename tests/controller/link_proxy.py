"""A fault-injecting TCP proxy for one directed link between two controllers (tests only).

Node A's configuration names `127.0.0.1:<proxy port>` as node B's Raft address, so everything
A sends to B passes here. `cut()` closes the live connections and refuses new ones (A's
frames are lost, as behind a partition); `heal()` lets traffic through again. Threads: one
acceptor, two pumps per connection; all are daemons and stop with `close()`.
"""

from __future__ import annotations

import contextlib
import socket
import threading

BUFFER_BYTES = 65536
CONNECT_TIMEOUT_S = 1.0


class LinkProxy:
    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self._listener.getsockname()[1])
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._cut = False
        self._closed = False
        threading.Thread(target=self._accept, daemon=True, name=f"proxy-{self.port}").start()

    def cut(self) -> None:
        with self._lock:
            self._cut = True
            for sock in self._sockets:
                _close(sock)
            self._sockets.clear()

    def heal(self) -> None:
        with self._lock:
            self._cut = False

    def close(self) -> None:
        self.cut()
        self._closed = True
        _close(self._listener)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                if self._closed:
                    return
                continue  # a connection reset before accept(): keep serving the others
            with self._lock:
                if self._cut:
                    _close(client)
                    continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port),
                                                    CONNECT_TIMEOUT_S)
            except OSError:
                _close(client)
                continue
            # The connect timeout must not stay on the socket: Raft links carry nothing back,
            # and a 1 s recv timeout in the return pump closed every link after 1 s, losing
            # frames (all three controllers once sat in pre-vote for 15 s in CI).
            upstream.settimeout(None)
            with self._lock:
                self._sockets |= {client, upstream}
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while True:
                data = source.recv(BUFFER_BYTES)
                if not data:
                    break
                sink.sendall(data)
        except OSError:
            pass
        finally:
            _close(source)
            _close(sink)


def _close(sock: socket.socket) -> None:
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_RDWR)
    sock.close()
