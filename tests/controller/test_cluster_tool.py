"""`rocketha-cluster up --controllers 3`: a local Raft group of controllers next to the brokers.

Goal: `up` starts three controllers (and the brokers), `status --json` lists each controller
with its role (exactly one leader, the others followers), a SIGKILLed leader is replaced and
a second `up` restarts it on the same ports, and `down` stops everything. Method: the tool as a
user runs it (`python -m ha.cluster`), in a temporary directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _tool(*args: str) -> str:
    result = subprocess.run([sys.executable, "-m", "ha.cluster", *args], capture_output=True,
                            text=True, timeout=120, cwd=ROOT, check=False)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _controllers(directory: Path) -> list[dict[str, Any]]:
    status = json.loads(_tool("status", "--dir", str(directory), "--json"))
    return [p for p in status["processes"] if p["kind"] == "controller"]


def _wait_one_leader(directory: Path, timeout_s: float = 15.0) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        controllers = _controllers(directory)
        roles = sorted(c["role"] for c in controllers if c["alive"])
        if roles.count("leader") == 1 and all(r in ("leader", "follower") for r in roles):
            return controllers
        time.sleep(0.1)
    raise AssertionError(f"no single leader: {_controllers(directory)}")


def _wait_broker_master(directory: Path) -> dict[str, Any]:
    """The broker in controller mode, once the controller has named it master of its set."""
    deadline = time.monotonic() + 20.0
    while time.monotonic() < deadline:
        status = json.loads(_tool("status", "--dir", str(directory), "--json"))
        brokers = [p for p in status["processes"] if p["kind"] == "broker"]
        if [b["controller_role"] for b in brokers] == ["master"]:
            return brokers[0]  # type: ignore[no-any-return]
        time.sleep(0.1)
    raise AssertionError(f"the broker was never named master: {brokers}")


def test_up_status_kill_and_down_with_three_controllers(tmp_path: Path) -> None:
    printed = _tool("up", "--dir", str(tmp_path), "--insecure", "--controllers", "3",
                    "--replica-sets", "1", "--set", "mappedFileSizeCommitLog=8388608")
    assert printed.count("controller-n") == 3 and "broker-a" in printed
    try:
        controllers = _wait_one_leader(tmp_path)
        assert [c["name"] for c in controllers] == [f"controller-n{i}" for i in (1, 2, 3)]
        assert all(c["alive"] and c["pid"] > 0 for c in controllers)
        broker = _wait_broker_master(tmp_path)
        assert broker["replica_set"] == "broker-a" and broker["role"] == "MASTER"
        leader = next(c for c in controllers if c["role"] == "leader")
        os.kill(leader["pid"], signal.SIGKILL)
        after = _wait_one_leader(tmp_path)
        assert next(c for c in after if c["role"] == "leader")["name"] != leader["name"]
        _tool("up", "--dir", str(tmp_path))  # restarts the killed one, same ports
        again = _wait_one_leader(tmp_path)
        assert all(c["alive"] for c in again)
        assert [c["endpoint"] for c in again] == [c["endpoint"] for c in controllers]
    finally:
        _tool("down", "--dir", str(tmp_path))
    assert not any(c["alive"] for c in _controllers(tmp_path))
