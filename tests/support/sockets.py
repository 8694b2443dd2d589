"""Socket checks shared by the hostile-peer tests."""

from __future__ import annotations

import socket


def closed_within(sock: socket.socket, timeout_s: float) -> bool:
    """Did the peer close (or reset) `sock` within `timeout_s`, sending nothing?"""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True
