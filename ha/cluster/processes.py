"""Process bookkeeping shared by `rocketha-cluster`'s brokers and controllers (127.0.0.1 only).

Each process it starts has a pid file; these helpers read it, tell whether that pid is still a
live process (a zombie, ours or an unreaped orphan's, counts as dead: a SIGKILLed process
lingers as one until reaped), stop it (SIGTERM, then SIGKILL after STOP_TIMEOUT_S), and pick
free ports for listeners, below the kernel's ephemeral range: a port from that range can be
taken by any outgoing connection between its choice and the bind, or while its process is
down for a restart (a full test run saw a controller fail to start on "Address already in
use"). Files that may hold a secret (configurations, the manifest with `--set` values) are
written with `write_private_text`: mode 0600, also when the file existed with another mode.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = ["POLL_INTERVAL_S", "STOP_TIMEOUT_S", "exit_status", "free_port", "listen_port_range",
           "pid_alive", "pid_from_file", "ports_in", "recorded_pid", "stop_pid_file",
           "write_private_text"]

STOP_TIMEOUT_S = 20.0
PORT_PICKS_MAX = 100
LISTEN_PORTS_SPAN = 12_000  # listener ports: this many just below the ephemeral range
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
POLL_INTERVAL_S = 0.05
# Ports `free_port` handed out, oldest first: not picked again while remembered (half the span,
# so a pick still finds a free port in a few tries).
HANDED_OUT_REMEMBERED = LISTEN_PORTS_SPAN // 2
_handed_out: dict[int, None] = {}
_handed_out_lock = threading.Lock()


def write_private_text(path: str | Path, text: str) -> None:
    """Write `text` to `path`, readable by its owner only (0600, whatever it was before)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def free_port(taken: Iterable[int] = ()) -> int:
    """A port free now, not in `taken`, and not handed out by this process lately.

    The kernel may hand a port out again as soon as the probing socket is closed, and a port
    handed out here is often bound only later by a child process (or held by one still
    stopping): so every pick is remembered (the last HANDED_OUT_REMEMBERED of them) and never
    picked again meanwhile. Two clusters of one test session, or the raft and client ports of
    one controller, then never get the same port (a full run once saw a controller fail to
    start on "Address already in use" after two such picks met)."""
    avoid = set(taken)
    low, high = listen_port_range()
    with _handed_out_lock:
        for _ in range(PORT_PICKS_MAX):
            port = random.randint(low, high)
            if port in avoid or port in _handed_out:
                continue
            with socket.socket() as sock:
                try:
                    sock.bind(("127.0.0.1", port))
                except OSError:
                    continue  # in use
            _remember_handed_out(port)
            return port
    raise OSError(f"no free port in {low}-{high} outside {len(avoid)} taken ones and "
                  f"{len(_handed_out)} handed out lately, in {PORT_PICKS_MAX} tries")


def _remember_handed_out(port: int) -> None:
    """Record `port` as handed out, forgetting the oldest beyond HANDED_OUT_REMEMBERED."""
    _handed_out[port] = None
    while len(_handed_out) > HANDED_OUT_REMEMBERED:
        del _handed_out[next(iter(_handed_out))]


def listen_port_range() -> tuple[int, int]:
    """The ports `free_port` picks from: LISTEN_PORTS_SPAN ports just below the kernel's
    ephemeral range (ip_local_port_range; 32768 when unreadable), never below 1024."""
    try:
        ephemeral_low = int(EPHEMERAL_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32_768
    high = max(ephemeral_low - 1, 2047)
    return max(1024, high - LISTEN_PORTS_SPAN + 1), high


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours counts as dead; WNOWAIT leaves it unreaped, so whoever
        # reports the failure still reads its exit status (exit_status, Popen.poll)
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
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
    pid = recorded_pid(pid_file)
    return pid if pid is not None and pid_alive(pid) else None


def recorded_pid(pid_file: str | Path) -> int | None:
    """The pid written in `pid_file`, alive or not (None: no file, or garbage)."""
    try:
        return int(Path(pid_file).read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def exit_status(pid: int | None) -> str:
    """' (exit code N)' or ' (killed by SIGX)' for a child of this process that has exited
    (reaped here), else '' (still running, or not our child: its status is not ours to read).
    A failure report names it: a crash in native code prints no Python traceback, and exit
    code 2 is a refusal the log explains."""
    if pid is None:
        return ""
    try:
        result = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG)
    except ChildProcessError:
        return ""
    if result is None:
        return ""
    if result.si_code == os.CLD_EXITED:
        return f" (exit code {result.si_status})"
    try:
        return f" (killed by {signal.Signals(result.si_status).name})"
    except ValueError:
        return f" (killed by signal {result.si_status})"


def stop_pid_file(pid_file: str | Path) -> bool:
    """SIGTERM the recorded process, SIGKILL it after STOP_TIMEOUT_S, remove the pid file.
    True when a running process was stopped (`down` counts them), False when none ran."""
    pid = pid_from_file(pid_file)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline and pid_alive(pid):
            time.sleep(POLL_INTERVAL_S)
        if pid_alive(pid):
            os.kill(pid, signal.SIGKILL)
    Path(pid_file).unlink(missing_ok=True)
    return pid is not None


PORT_KEYS = ("port", "ha_port", "raft_port", "metrics_port", "console_port")


def ports_in(manifest: dict[str, Any]) -> set[int]:
    """Every port a cluster manifest (`cluster.json`) already gives to a process."""
    processes = manifest.get("brokers", []) + manifest.get("controllers", []) + (
        [manifest["proxy"]] if manifest.get("proxy") else [])
    return {process[key] for process in processes for key in PORT_KEYS if process.get(key)}
