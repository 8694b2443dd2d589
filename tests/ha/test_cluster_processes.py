"""Goal: listener ports never come from the ephemeral range (an outgoing connection could take
one before its process binds it) nor repeat within a process while remembered, and when
`rocketha-cluster up` sees a broker it started exit before it answers, it says how the process
ended: a crash in native code (a signal) prints no Python traceback, so the log tail alone can be
empty (the TLS cluster test's restart of 2026-11-26 ended so, unexplained). Method: real child
processes registered as `Cluster.start` registers its brokers; real binds."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

from ha.cluster import processes as local_processes
from ha.cluster.main import Cluster
from ha.cluster.processes import LISTEN_PORTS_SPAN, free_port, listen_port_range


def _ended(code: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, "-c", code])
    process.wait(30)
    return process


def test_the_exit_status_of_a_started_broker_is_named(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster._started["killed"] = _ended("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    cluster._started["refused"] = _ended("raise SystemExit(2)")
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    cluster._started["running"] = running
    try:
        assert cluster._exit_status({"name": "killed"}) == f" (killed by {signal.SIGSEGV.name})"
        assert cluster._exit_status({"name": "refused"}) == " (exit code 2)"
        assert cluster._exit_status({"name": "running"}) == ""
        assert cluster._exit_status({"name": "started-elsewhere"}) == ""
    finally:
        running.kill()
        running.wait()


def test_listener_ports_come_from_below_the_ephemeral_range() -> None:
    """An outgoing connection takes its port from ip_local_port_range: a listener port chosen
    there could be taken before its process binds it (a full run's controller failed so)."""
    ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    low, high = listen_port_range()
    assert high < ephemeral_low and high - low + 1 == min(LISTEN_PORTS_SPAN, high - 1023)
    taken = {free_port() for _ in range(20)}
    assert all(low <= port <= high for port in taken)
    port = free_port(taken)
    assert port not in taken


def test_a_port_handed_out_is_not_handed_out_again_while_remembered(monkeypatch) -> None:  # type: ignore
    """Ports are bound later, by child processes: two picks of one test session (a controller's
    raft and client ports, once) must not meet although both were free when probed. A narrow
    range makes a repeat near certain without the memory: 40 picks from 64 ports."""
    low = _free_span_low(64)
    monkeypatch.setattr(local_processes, "listen_port_range", lambda: (low, low + 63))
    monkeypatch.setattr(local_processes, "_handed_out", {})
    monkeypatch.setattr(local_processes, "HANDED_OUT_REMEMBERED", 40)
    picks = [free_port() for _ in range(40)]
    assert len(set(picks)) == 40
    free_port()  # the 41st pick: the oldest is forgotten, the memory stays bounded
    assert len(local_processes._handed_out) == 40 and picks[0] not in local_processes._handed_out


def _free_span_low(width: int) -> int:
    """The lowest port of the first `width` ports of the listener range all bindable now."""
    low, high = listen_port_range()
    start = low
    while start + width - 1 <= high:
        busy = next((port for port in range(start, start + width) if not _bindable(port)), None)
        if busy is None:
            return start
        start = busy + 1
    raise AssertionError(f"no {width} free ports in a row in {low}-{high}")


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
