"""`Producer.send` from several threads on one Producer (its docstring says thread-safe).

Goal: concurrent synchronous sends all end PUT_OK and the process lives. Before the fix two
threads wrote the Producer's one DoPut stream at once and gRPC aborted the whole process
(GRPC_CALL_ERROR_TOO_MANY_OPERATIONS, SIGABRT), found by `bench grpc`. Method: the sends run in
a child process (an abort must fail this test, not end the test run) against the module's
broker process.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.broker_process import BrokerProcess

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
THREADS = 8
SENDS_PER_THREAD = 100

CHILD = """
import sys, threading
from connector import ClientConfig, Producer
endpoint, threads, sends = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
producer = Producer(ClientConfig(brokers=(endpoint,)))
statuses = []
def loop():
    for _ in range(sends):
        statuses.append(producer.send("threads", b"x" * 100, tags="t").status)
workers = [threading.Thread(target=loop) for _ in range(threads)]
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
producer.close()
print(len(statuses), sorted(set(statuses)))
"""


def test_concurrent_sends_on_one_producer(broker: BrokerProcess) -> None:
    done = subprocess.run([sys.executable, "-c", CHILD, broker.endpoint, str(THREADS),
                           str(SENDS_PER_THREAD)], capture_output=True, text=True,
                          timeout=300, check=False, cwd=ROOT)
    assert done.returncode == 0, f"exit {done.returncode}: {done.stderr[-1500:]}"
    assert done.stdout.split()[0] == str(THREADS * SENDS_PER_THREAD)
    assert "['PUT_OK']" in done.stdout
