"""A framed HA link over a blocking TCP socket (the IO half of ha/frames.py).

Timeouts: the socket keeps one timeout, `io_timeout_s` (haFrameTimeoutMs), for every send and
receive (a peer that neither drains nor sends within it is gone); a frame, once its first byte
is in, must also be whole by a deadline of the same length from that byte, checked between
receives (so a frame sent one byte at a time is cut within two timeouts, where a per-receive
timeout alone never cut it); waiting for the next frame to start is a poll with its own idle
timeout, so a reader's idle wait never shortens a writer's sends.

TLS (tls.server.mode=enforcing): the socket is an ssl.SSLSocket, already through its handshake
(`member_handshake`); bytes OpenSSL has decrypted but not handed out do not show in poll, so
`recv_frame` asks `pending()` first. `shutdown()` shuts the descriptor itself (not the TLS
session), so a thread blocked in a read wakes at once.

Sending: whole frames under a per-link lock (a link's reader and writer threads may both send).
A Transfer goes out as its prefix then the CommitLog bytes, so the data is never copied into a
frame. Receiving: the 12-byte header first, checked (size against the limit) before the body
buffer is allocated; the body lands in a reused buffer that grows only up to the limit, and a
Transfer's data is a view into it, valid until the next receive.
"""

from __future__ import annotations

import select
import socket
import ssl
import threading
import time

from connector.protocol.tls import identity_of_peercert, parse_identity
from ha.errors import FrameError, LinkClosedError
from ha.frames import (
    FRAME_HEADER,
    Frame,
    Transfer,
    decode_body,
    decode_header,
    encode_frame,
    encode_transfer_prefix,
)

__all__ = ["FrameSocket", "MemberRefused", "member_handshake"]

SOCKET_BUFFER_BYTES = 4 << 20


class FrameSocket:
    def __init__(self, sock: socket.socket, *, body_bytes_max: int, peer: str,
                 io_timeout_s: float) -> None:
        self._sock = sock
        self._io_timeout_s = io_timeout_s
        sock.settimeout(io_timeout_s)
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._body_bytes_max = body_bytes_max
        self.peer = peer
        self._send_lock = threading.Lock()
        self._header = bytearray(FRAME_HEADER.size)
        self._buffer = bytearray(0)
        self._closed = False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)

    def send_frame(self, frame: Frame) -> None:
        data = encode_frame(frame)
        with self._send_lock:
            self._sock.sendall(data)

    def send_transfer(self, transfer: Transfer, data: bytes | memoryview) -> None:
        prefix = encode_transfer_prefix(transfer, data)
        with self._send_lock:
            self._sock.sendall(prefix)
            self._sock.sendall(data)

    def recv_frame(self, *, idle_timeout_s: float) -> Frame | None:
        """The next frame; None when nothing at all arrived within `idle_timeout_s`. Once a
        frame has started, each part must arrive within the socket's io timeout."""
        header = memoryview(self._header)
        pending = self._sock.pending() if isinstance(self._sock, ssl.SSLSocket) else 0
        if not pending and not self._poll.poll(int(idle_timeout_s * 1000)):
            return None
        first = self._sock.recv_into(header, FRAME_HEADER.size)
        if first == 0:
            raise LinkClosedError(f"{self.peer} closed the link")
        deadline = time.monotonic() + self._io_timeout_s
        self._recv_exact(header[first:], deadline)
        parsed = decode_header(header, self._body_bytes_max)
        size = parsed.body_size_bytes
        if len(self._buffer) < size:
            self._buffer = bytearray(max(size, min(2 * len(self._buffer), self._body_bytes_max)))
        body = memoryview(self._buffer)[:size]
        self._recv_exact(body, deadline)
        return decode_body(parsed, header[:8], body)

    def _recv_exact(self, view: memoryview, deadline: float) -> None:
        while view:
            if time.monotonic() > deadline:  # one byte at a time: cut after the deadline
                raise FrameError(f"{self.peer}: frame not complete within "
                                 f"{self._io_timeout_s:.1f} s (haFrameTimeoutMs)")
            try:
                received = self._sock.recv_into(view)
            except TimeoutError as err:
                raise FrameError(f"{self.peer}: frame cut short: nothing for "
                                 f"{self._io_timeout_s:.1f} s (haFrameTimeoutMs)") from err
            if received == 0:
                raise LinkClosedError(f"{self.peer} closed the link inside a frame")
            view = view[received:]

    def shutdown(self) -> None:
        """Unblock any thread stuck in this socket (callable from any thread)."""
        try:  # the descriptor, also under TLS (SSLSocket.shutdown would drop the session)
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)
        except OSError:
            pass  # already disconnected

    def close(self) -> None:
        """Shut down and release the socket (by the thread that owns the link)."""
        if self._closed:
            return
        self._closed = True
        self.shutdown()
        self._sock.close()


class MemberRefused(Exception):
    """A peer on the HA link is not a broker of this replica set; `identity` is what its
    certificate says ("" when it had none)."""

    def __init__(self, identity: str, reason: str) -> None:
        super().__init__(reason)
        self.identity = identity


def member_handshake(sock: socket.socket, context: ssl.SSLContext, *, broker_name: str,
                     timeout_s: float, server_hostname: str | None = None) -> ssl.SSLSocket:
    """The TLS handshake on a connected socket (server side when `server_hostname` is None),
    within `timeout_s`; then the peer's certificate must name a broker of `broker_name`
    (`rocketha://broker/<brokerName>/<endpoint>`). Raises ssl.SSLError / OSError (handshake)
    or MemberRefused (a valid certificate of someone else); the socket is closed then."""
    sock.settimeout(timeout_s)
    try:
        tls = context.wrap_socket(sock, server_side=server_hostname is None,
                                  server_hostname=server_hostname)
    except OSError:
        sock.close()
        raise
    identity = identity_of_peercert(tls.getpeercert())
    member = parse_identity(identity)
    if member is None or member.kind != "broker" or member.name != broker_name:
        tls.close()
        raise MemberRefused(identity, f"not a broker of {broker_name}")
    return tls
