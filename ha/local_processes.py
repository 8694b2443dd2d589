"""Process bookkeeping shared by `rocketha-cluster`'s brokers and controllers (127.0.0.1 only).

Each process it starts has a pid file; these helpers read it, tell whether that pid is still a
live process (a zombie, ours or an unreaped orphan's, counts as dead: a SIGKILLed process
lingers as one until reaped), stop it (SIGTERM, then SIGKILL after STOP_TIMEOUT_S), and pick
free ports. Files that may hold a secret (configurations, the manifest with `--set` values) are
written with `write_private_text`: mode 0600, also when the file existed with another mode.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

__all__ = ["POLL_INTERVAL_S", "STOP_TIMEOUT_S", "free_port", "pid_alive", "pid_from_file",
           "stop_pid_file", "write_private_text"]

STOP_TIMEOUT_S = 20.0
POLL_INTERVAL_S = 0.05


def write_private_text(path: str | Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only (0600, whatever it was before)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as dead
        if os.waitpid(pid, os.WNOHANG) != (0, 0):
            return False
    except ChildProcessError:
        pass
    try:  # so does someone else's zombie (a SIGKILLed orphan not yet reaped)
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[0] != "Z"


def pid_from_file(pid_file: str | Path) -> int | None:
    """The live pid recorded in `pid_file`, or None (no file, garbage, or the process is gone)."""
    try:
        pid = int(Path(pid_file).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def stop_pid_file(pid_file: str | Path) -> None:
    """SIGTERM the recorded process, SIGKILL it after STOP_TIMEOUT_S, remove the pid file."""
    pid = pid_from_file(pid_file)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(POLL_INTERVAL_S)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    Path(pid_file).unlink(missing_ok=True)
