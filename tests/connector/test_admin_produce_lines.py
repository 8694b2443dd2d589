"""`rocketha-admin produce` sends each stdin line without waiting for a batch to fill.

Goal (issue 23): lines go through `Producer.send_async`, so a slow pipe (`tail -f log |
rocketha-admin produce`) has each line stored within the producer's linger, not once 1024
lines have come. Method: the tool as a subprocess against a real broker, one line written and
stdin left open; the line must be readable on the broker while the tool still waits for more.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from connector import Admin, ClientConfig, Consumer
from tests.integration.operated_cluster import ROOT

pytestmark = pytest.mark.integration

STORED_WITHIN_S = 15.0  # the tool's start-up (imports pyarrow) plus linger_ms


def test_a_line_is_stored_while_stdin_stays_open(broker) -> None:  # type: ignore
    config = ClientConfig(brokers=(broker.endpoint,))
    Admin(config).create_topic("lines", queues=1)
    tool = subprocess.Popen([sys.executable, "-m", "rocketha_admin", "--broker",
                             broker.endpoint, "produce", "--topic", "lines", "--json-lines"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, cwd=ROOT)
    try:
        assert tool.stdin is not None
        tool.stdin.write(b"first\n")
        tool.stdin.flush()
        deadline = time.monotonic() + STORED_WITHIN_S
        bodies: list[bytes] = []
        while not bodies and time.monotonic() < deadline:
            time.sleep(0.1)
            table = Consumer(config).pull("lines", 0, 0).table
            bodies = table.column("body").to_pylist() if table.num_rows else []
        assert bodies == [b"first"], "the line waited for more lines"
        assert tool.poll() is None  # still reading stdin
        stdout, stderr = tool.communicate(b"second\n", timeout=60)
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait(10)
    assert tool.returncode == 0, stderr
    rows = [json.loads(line) for line in stdout.splitlines()]
    assert [(row["seq"], row["status"], row["queue_offset"]) for row in rows] == [
        (0, "PUT_OK", 0), (1, "PUT_OK", 1)]
