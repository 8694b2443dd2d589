"""A framed HA link over a TCP socket (the IO half of ha/replication/frames.py).

Timeouts: one timeout, `io_timeout_s` (haFrameTimeoutMs), for every send and receive (a peer
that neither drains nor sends within it is gone); a frame, once its first byte is in, must also
be whole by a deadline of the same length from that byte (so a frame sent one byte at a time is
cut within two timeouts, where a per-receive timeout alone never cut it); waiting for the next
frame to start is a poll with its own idle timeout, so a reader's idle wait never shortens a
writer's sends.

Why the plain (non-TLS) path calls os.readv / os.writev on the descriptor: every socket call of
a Python socket with a timeout is a poll and then the call, each releasing and retaking the GIL,
and a frame was a poll, a 12-byte header and a body (five GIL round trips per frame, each
waiting for a busy master's other threads); a put's Transfer and a slave's Ack sat on every
acknowledged put's path twice. Now a frame is one poll and, most often, one receive: it reads
up to READ_AHEAD_BYTES into a buffer the link keeps (the frame and maybe the next ones, served
from the buffer without a poll), then exactly what the frame still lacks. A Transfer goes out as
one writev of its prefix and the CommitLog bytes (never copied into a frame). The descriptor is
non-blocking (Python's own setting for a socket with a timeout): a call that would block waits
in poll, bounded as above.

Receiving checks the 12-byte header (size against the limit) before the buffer grows for the
body; the buffer grows only up to header + limit, and a Transfer's data is a view into it,
valid until the next receive.

TLS (tls.server.mode=enforcing): the socket is an ssl.SSLSocket, already through its handshake
(`member_handshake`), read and written through its own calls; bytes OpenSSL has decrypted but
not handed out do not show in poll, so a receive asks `pending()` first. `shutdown()` shuts the
descriptor itself (not the TLS session), so a thread blocked in a read wakes at once. Sends take
a per-link lock (a link's reader and writer threads may both send); `close()` takes it too, so
no writer ever writes to a descriptor number after it was closed (and maybe reused).
"""

from __future__ import annotations

import contextlib
import os
import select
import socket
import ssl
import threading
import time

from conf.tls import identity_of_peercert, parse_identity
from ha.replication.errors import FrameError, LinkClosedError
from ha.replication.frames import (
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
# One receive takes up to this much: a small frame (an Ack, one put's Transfer) whole, and the
# start of what follows it
READ_AHEAD_BYTES = 64 << 10
# Under TLS a Transfer up to this size leaves as one buffer: copying a few KiB costs less than
# the second call (each one releases and retakes the GIL)
SEND_JOINED_BYTES_MAX = 64 << 10


class FrameSocket:
    def __init__(self, sock: socket.socket, *, body_bytes_max: int, peer: str,
                 io_timeout_s: float) -> None:
        self._sock = sock
        self._io_timeout_s = io_timeout_s
        sock.settimeout(io_timeout_s)
        self._tls = isinstance(sock, ssl.SSLSocket)
        assert self._tls or not os.get_blocking(sock.fileno())  # (settimeout's doing)
        self._poll = select.poll()
        self._poll.register(sock, select.POLLIN)
        self._poll_out = select.poll()
        self._poll_out.register(sock, select.POLLOUT)
        self._body_bytes_max = body_bytes_max
        self.peer = peer
        self._send_lock = threading.Lock()
        self._buffer = bytearray(READ_AHEAD_BYTES)
        self._start = 0  # where the next frame begins in _buffer
        self._end = 0  # end of the bytes received
        self._closed = False
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for option in (socket.SO_SNDBUF, socket.SO_RCVBUF):
            sock.setsockopt(socket.SOL_SOCKET, option, SOCKET_BUFFER_BYTES)

    # -- sending ------------------------------------------------------------------------------
    def send_frame(self, frame: Frame) -> None:
        data = encode_frame(frame)
        with self._send_lock:
            if self._tls:
                self._sock.sendall(data)
            else:
                self._write([data])

    def send_transfer(self, transfer: Transfer, data: bytes | memoryview) -> None:
        prefix = encode_transfer_prefix(transfer, data)
        with self._send_lock:
            if not self._tls:
                self._write([prefix, data])  # one system call, no copy
            elif len(data) <= SEND_JOINED_BYTES_MAX:
                self._sock.sendall(prefix + data)
            else:
                self._sock.sendall(prefix)
                self._sock.sendall(data)

    def _write(self, parts: list[bytes | memoryview]) -> None:
        """All of `parts`, in order (caller holds the send lock). Raises OSError, TimeoutError
        when the peer takes nothing for io_timeout_s."""
        views = [memoryview(part) for part in parts if len(part)]
        while views:
            try:
                written = os.writev(self._sock.fileno(), views)  # -1 once closed: EBADF
            except BlockingIOError:
                if not self._poll_out.poll(int(self._io_timeout_s * 1000)):
                    raise TimeoutError(f"{self.peer} took nothing for "
                                       f"{self._io_timeout_s:.1f} s (haFrameTimeoutMs)"
                                       ) from None
                continue
            while views and written >= len(views[0]):
                written -= len(views[0])
                views.pop(0)
            if written:
                views[0] = views[0][written:]

    # -- receiving ----------------------------------------------------------------------------
    def recv_frame(self, *, idle_timeout_s: float) -> Frame | None:
        """The next frame; None when nothing at all arrived within `idle_timeout_s`. Once a
        frame has started, the rest must arrive within the socket's io timeout."""
        if self._start == self._end:  # nothing buffered: wait for a frame to start
            self._start = self._end = 0
            if not self._wait_first_bytes(idle_timeout_s):
                return None
        deadline = time.monotonic() + self._io_timeout_s
        self._make_room(FRAME_HEADER.size)  # (a header cut at the buffer's end)
        self._receive_until(FRAME_HEADER.size, deadline)
        start = self._start
        view = memoryview(self._buffer)
        parsed = decode_header(view[start:start + FRAME_HEADER.size], self._body_bytes_max)
        size = FRAME_HEADER.size + parsed.body_size_bytes
        if self._end - start < size:
            self._make_room(size)
            self._receive_until(size, deadline)
            start = self._start
            view = memoryview(self._buffer)
        self._start = start + size
        return decode_body(parsed, view[start:start + 8],
                           view[start + FRAME_HEADER.size:start + size])

    def _wait_first_bytes(self, idle_timeout_s: float) -> bool:
        """Receive what has arrived once something has, within `idle_timeout_s`."""
        idle_deadline = time.monotonic() + idle_timeout_s
        while True:
            if not (self._tls and self._sock.pending()):
                remaining_s = idle_deadline - time.monotonic()
                if remaining_s <= 0 or not self._poll.poll(int(remaining_s * 1000)):
                    return False
            received = self._receive_into(memoryview(self._buffer)[:READ_AHEAD_BYTES])
            if received == 0:
                raise LinkClosedError(f"{self.peer} closed the link")
            if received > 0:
                self._end = received
                return True
            # readable, yet nothing to read (a spurious wake-up): wait again

    def _receive_until(self, size_bytes: int, deadline: float) -> None:
        """Receive until the buffer holds `size_bytes` from the frame's start (exactly that:
        the bytes of the next frame stay in the socket), by `deadline`."""
        while self._end - self._start < size_bytes:
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:  # one byte at a time: cut after the deadline
                raise FrameError(f"{self.peer}: frame not complete within "
                                 f"{self._io_timeout_s:.1f} s (haFrameTimeoutMs)")
            view = memoryview(self._buffer)[self._end:self._start + size_bytes]
            received = self._receive_into(view)
            if received == 0:
                raise LinkClosedError(f"{self.peer} closed the link inside a frame")
            if received > 0:
                self._end += received
            else:  # nothing there: wait for more, at most until the deadline (checked above)
                self._poll.poll(int(remaining_s * 1000) + 1)

    def _receive_into(self, view: memoryview) -> int:
        """Bytes received into `view`: 0 at the end of the stream, -1 when none are there."""
        if not self._tls:
            try:
                return os.readv(self._sock.fileno(), [view])
            except BlockingIOError:
                return -1
        try:  # the TLS socket waits (its timeout) for a whole TLS record
            return self._sock.recv_into(view)
        except TimeoutError as err:
            raise FrameError(f"{self.peer}: frame cut short: nothing for "
                             f"{self._io_timeout_s:.1f} s (haFrameTimeoutMs)") from err

    def _make_room(self, size_bytes: int) -> None:
        """Room in the buffer for a whole frame of `size_bytes` from its start: the frame's
        first bytes move to the front, the buffer grows up to header + limit (the header was
        checked). A new buffer, never a resize: the last frame's views may still be alive."""
        buffered = self._end - self._start
        if self._start + size_bytes <= len(self._buffer):
            return
        if size_bytes <= len(self._buffer):
            self._buffer[:buffered] = bytes(self._buffer[self._start:self._end])
        else:
            grown = bytearray(max(size_bytes, min(2 * len(self._buffer),
                                                  FRAME_HEADER.size + self._body_bytes_max)))
            grown[:buffered] = self._buffer[self._start:self._end]
            self._buffer = grown
        self._start, self._end = 0, buffered

    # -- ending -------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Unblock any thread stuck in this socket (callable from any thread)."""
        # the descriptor, also under TLS (SSLSocket.shutdown would drop the session);
        # OSError: already disconnected
        with contextlib.suppress(OSError):
            socket.socket.shutdown(self._sock, socket.SHUT_RDWR)

    def close(self) -> None:
        """Shut down and release the socket (by the thread that owns the link: the one that
        reads; writers are kept out by the send lock)."""
        if self._closed:
            return
        self._closed = True
        self.shutdown()
        with self._send_lock:
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
