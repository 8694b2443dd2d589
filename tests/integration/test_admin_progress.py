"""Progress bars of `rocketha-admin produce` / `consume`: drawn on a terminal, never in a pipe.

Method: the real tool against a real standalone broker (the `broker` fixture), run twice per
command: once with standard error on a pseudo-terminal (python's pty module: the child sees a
TTY, the test reads what a person would see), once with it piped. Sending is rate-limited so
the run outlasts a few redraw intervals.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time

import pytest

from tests.integration.broker_process import BrokerProcess
from tests.integration.operated_cluster import ROOT

pytestmark = pytest.mark.integration

MESSAGES = 1500
RATE_PER_S = 2500  # ~0.6 s of sending: several redraws (every 0.2 s)


def _admin(broker: BrokerProcess, *args: str) -> list[str]:
    return [sys.executable, "-m", "rocketha_admin", "--broker", broker.endpoint, *args]


def _on_a_terminal(command: list[str]) -> tuple[int, str]:
    """Run `command` with stderr on a pty; returns (exit code, what the terminal showed)."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(command, cwd=ROOT, stdin=subprocess.DEVNULL,
                               stdout=subprocess.DEVNULL, stderr=terminal)
    os.close(terminal)
    shown = bytearray()
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(controller, 4096)
                except OSError:  # EIO: the child closed its end
                    chunk = b""
                if not chunk and process.poll() is not None:
                    break
                shown += chunk
            elif process.poll() is not None:
                break
        return process.wait(timeout=30), shown.decode()
    finally:
        os.close(controller)
        if process.poll() is None:
            process.kill()


def test_produce_and_consume_draw_a_bar_on_a_terminal_only(broker: BrokerProcess) -> None:
    produce = _admin(broker, "produce", "--topic", "progress", "--count", str(MESSAGES),
                     "--rate", str(RATE_PER_S), "--batch", "50")
    code, shown = _on_a_terminal(produce)
    assert code == 0, shown
    assert "\rproduced [" in shown and f"{MESSAGES:,}/{MESSAGES:,} 100%" in shown, shown
    piped = subprocess.run(produce, cwd=ROOT, capture_output=True, text=True, timeout=120,
                           check=False)
    assert piped.returncode == 0, piped.stderr
    assert "\r" not in piped.stderr and "[#" not in piped.stderr + piped.stdout

    consume = _admin(broker, "consume", "--topic", "progress", "--until-idle-ms", "500")
    code, shown = _on_a_terminal(consume)
    assert code == 0, shown
    total = 2 * MESSAGES  # both produce runs
    assert "\rconsumed [" in shown and f"{total:,}/{total:,} 100%" in shown, shown
    piped = subprocess.run(consume, cwd=ROOT, capture_output=True, text=True, timeout=120,
                           check=False)
    assert piped.returncode == 0 and "\r" not in piped.stderr, piped.stderr
