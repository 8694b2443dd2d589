"""A SIGTERMed broker stops within its grace, whatever its clients hold open, losing no PUT_OK.

Goal: a broker told to stop ends its busy produce streams at their next batch (refused, so
never acknowledged), answers its long polls at once, waits `shutdownGraceMs` for the calls
left, then closes its store cleanly although an idle produce stream is still open (that
stream ends only at its client's deadline: before, the broker took puts and stayed up until
then, 2 x requestTimeoutMs, 20 s by default). Every acknowledged message is there after the
restart, once. Method: a real broker process; a raw Flight DoPut stream left idle with a 120 s
deadline, a long poll of 30 s, and a producer putting in a loop, all open at the SIGTERM.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest
from pyarrow import flight

from connector import Admin, ClientConfig, Consumer, Producer
from connector.protocol import PutReply, RocketHAError, produce_descriptor_command
from tests.integration.broker_process import BrokerProcess
from tests.integration.failover_cluster import read_topic

pytestmark = pytest.mark.integration

IDLE_STREAM_DEADLINE_S = 120.0
LONG_POLL_MS = 30_000
GRACE_MS = 1000
EXIT_WITHIN_S = 15.0  # far below the idle stream's deadline and the long poll's wait


def _idle_stream(endpoint: str, topic: str) -> tuple[flight.FlightClient, object]:
    """A DoPut stream that put one batch (acknowledged) and then sends nothing."""
    client = flight.FlightClient(f"grpc://{endpoint}")
    batch = pa.record_batch({"body": pa.array([b"idle-0"])})
    descriptor = flight.FlightDescriptor.for_command(produce_descriptor_command(topic))
    writer, reader = client.do_put(descriptor, batch.schema,
                                   flight.FlightCallOptions(timeout=IDLE_STREAM_DEADLINE_S))
    writer.write_batch(batch)
    assert PutReply.decode(reader.read().to_pybytes()).status == "PUT_OK"
    return client, writer


def test_sigterm_stops_within_the_grace_and_keeps_every_put_ok(tmp_path: Path) -> None:
    broker = BrokerProcess(tmp_path / "b", shutdownGraceMs=str(GRACE_MS)).start()
    config = ClientConfig(brokers=(broker.endpoint,), retries_max=0, request_timeout_ms=10_000)
    admin = Admin(config)
    admin.create_topic("stop", queues=2)
    admin.create_topic("quiet", queues=1)
    client, idle_writer = _idle_stream(broker.endpoint, "stop")
    acked: list[bytes] = [b"idle-0"]
    refused: list[str] = []
    polled: list[float] = []

    def produce() -> None:
        with Producer(config) as producer:
            for seq in range(1_000_000):
                bodies = [b"p-%d-%d" % (seq, row) for row in range(20)]
                try:
                    status = producer.put("stop", pa.record_batch(
                        {"body": pa.array(bodies)})).status
                except RocketHAError as err:  # the stopping broker refuses: not acknowledged
                    refused.append(str(err))
                    return
                if status != "PUT_OK":
                    refused.append(status)
                    return
                acked.extend(bodies)

    def long_poll() -> None:
        started = time.monotonic()
        with contextlib.suppress(RocketHAError):  # answered, or cut by the stop: it ended
            Consumer(config).pull("quiet", 0, 0, max_wait_ms=LONG_POLL_MS)
        polled.append(time.monotonic() - started)

    threads = [threading.Thread(target=produce), threading.Thread(target=long_poll)]
    for thread in threads:
        thread.start()
    try:
        time.sleep(1.0)
        assert broker.process is not None and len(acked) > 1
        stop_sent = time.monotonic()
        broker.process.send_signal(signal.SIGTERM)
        assert broker.process.wait(EXIT_WITHIN_S + 20) == 0
        stopped_s = time.monotonic() - stop_sent
        for thread in threads:
            thread.join(30)
    finally:
        client.close()
    log = broker.log.read_text()
    assert stopped_s < EXIT_WITHIN_S, f"stopped after {stopped_s:.1f} s:\n{log[-2000:]}"
    assert "stopped cleanly" in log and "1 idle produce stream" in log, log[-2000:]
    assert not (broker.store_dir / "abort").exists(), "the store was closed cleanly"
    assert refused, "the producer's stream was refused its next batch"
    assert polled and polled[0] < EXIT_WITHIN_S, "the long poll answered at the stop"
    del idle_writer
    broker.start()
    try:
        stored = list(read_topic(broker.endpoint, "stop").values())
        assert len(stored) == len(set(stored)), "nothing stored twice"
        missing = set(acked) - set(stored)
        assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {sorted(missing)[:3]}"
    finally:
        broker.stop()
