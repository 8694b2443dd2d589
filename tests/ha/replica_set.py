"""Test support: one replica set of real broker processes started through `rocketha-cluster`.

`ReplicaSet(dir, replicas, **settings)` runs `rocketha-cluster up --replicas R --set k=v ...`
(short HA timers so faults show within a second or two), then offers signals to one member
(SIGKILL, SIGSTOP, SIGCONT), restarts, produce/read helpers, and the after-scenario checks:
every acked message is readable on the replicas that counted, and all CommitLogs hold the
same bytes up to the master's confirm position (read from the store directories after `down`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyarrow import flight

from connector.client import Admin, ClientConfig, Consumer
from connector.protocol import PRODUCE_SCHEMA, PutReply, produce_descriptor_command
from ha.cluster.main import Cluster
from ha.cluster.main import main as cluster_main
from storage_engine import MessageStore, StoreConfig

SEGMENT_BYTES = 8 << 20
FAST_TIMERS = {
    "mappedFileSizeCommitLog": str(SEGMENT_BYTES), "maxMessageSize": str(1 << 20),
    "haSendHeartbeatInterval": "100", "haHousekeepingInterval": "1500",
    "haMaxTimeSlaveNotCatchup": "1500", "haReconnectInterval": "100",
    "haMetadataSyncInterval": "100", "syncFlushTimeout": "2000", "slaveReadEnable": "true",
}


def wait_for(condition: Callable[[], Any], timeout_s: float = 20.0, what: str = "", *,
             interval_s: float = 0.05) -> Any:
    """Poll `condition` (which may raise to end the wait early) until it returns something
    truthy, which is returned; fails the test at the deadline."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out after {timeout_s:.0f}s waiting for " \
            f"{what or condition}"
        time.sleep(interval_s)


class ReplicaSet:
    def __init__(self, directory: Path, replicas: int, **settings: str) -> None:
        self.directory = directory
        merged = {**FAST_TIMERS, **settings}
        args = ["up", "--dir", str(directory), "--insecure", "--replicas", str(replicas)]
        for key, value in merged.items():
            args += ["--set", f"{key}={value}"]
        _cluster_cli(args)
        self.cluster = Cluster(directory)
        self.brokers = self.cluster.load()["brokers"]
        self.endpoints = [f"127.0.0.1:{broker['port']}" for broker in self.brokers]
        self._producers: dict[int, flight.FlightClient] = {}

    # -- processes --------------------------------------------------------------------------
    def pid(self, index: int) -> int:
        pid = self.cluster.pid_of(self.brokers[index])
        assert pid is not None, f"{self.brokers[index]['name']} is not running"
        return pid

    def signal(self, index: int, signum: int) -> None:
        pid = self.pid(index)
        os.kill(pid, signum)
        if signum == signal.SIGSTOP:  # delivery is asynchronous: wait until every thread stops
            wait_for(lambda: _all_threads_stopped(pid), 10, "the broker's threads to stop")
        if signum == signal.SIGKILL:
            wait_for(lambda: self.cluster.pid_of(self.brokers[index]) is None, 10,
                     "the killed broker to exit")

    def stop(self, index: int) -> None:
        self.cluster.stop(self.brokers[index])

    def restart(self) -> None:
        """Start every member that is not running (a second `up` keeps data and ports)."""
        _cluster_cli(["up", "--dir", str(self.directory)])

    def down(self) -> None:
        for index in range(len(self.brokers)):
            pid = self.cluster.pid_of(self.brokers[index])
            if pid is not None:
                os.kill(pid, signal.SIGCONT)  # a stopped process cannot handle SIGTERM
        for client in self._producers.values():
            client.close()
        self._producers.clear()
        cluster_command("down", "--dir", str(self.directory))

    # -- client side ------------------------------------------------------------------------
    def info(self, index: int) -> dict[str, Any]:
        return Admin(ClientConfig(brokers=(self.endpoints[index],), retries_max=0)).broker_info()

    def sync_state_set(self) -> list[int]:
        return self.info(0)["sync_state_set"]

    def wait_sync_state_set(self, members: list[int], timeout_s: float = 20.0) -> None:
        wait_for(lambda: self.sync_state_set() == members, timeout_s,
                 f"SyncStateSet {members} (now {self.sync_state_set()})")

    def put(self, topic: str, bodies: list[bytes], index: int = 0) -> dict[str, Any]:
        """One produce batch, no retries: the raw reply (status, queues, replication...)."""
        client = self._producers.get(index)
        if client is None:
            client = self._producers[index] = flight.FlightClient(
                f"grpc://{self.endpoints[index]}")
        descriptor = flight.FlightDescriptor.for_command(produce_descriptor_command(topic))
        batch = pa.record_batch({"body": pa.array(bodies, pa.binary())},
                                schema=pa.schema([PRODUCE_SCHEMA.field("body")]))
        writer, reader = client.do_put(descriptor, batch.schema,
                                       flight.FlightCallOptions(timeout=30))
        try:
            writer.write_batch(batch)
            metadata = reader.read()
            assert metadata is not None
            raw = json.loads(metadata.to_pybytes())
        finally:
            writer.done_writing()
            writer.close()
        reply = PutReply.decode(metadata.to_pybytes())
        raw["offsets"] = reply.row_offsets(len(bodies)) if reply.queues else []
        return raw

    def read_all(self, index: int, topic: str, queues: int) -> dict[tuple[int, int], bytes]:
        consumer = Consumer(ClientConfig(brokers=(self.endpoints[index],), retries_max=3))
        found: dict[tuple[int, int], bytes] = {}
        for queue_id in range(queues):
            for table in consumer.iter_queue(topic, queue_id, 0, until_idle_ms=200):
                for offset, body in zip(table.column("queue_offset").to_pylist(),
                                        table.column("body").to_pylist(), strict=True):
                    found[(queue_id, offset)] = body
        return found

    # -- after a scenario -------------------------------------------------------------------
    def check_acked_readable(self, acked: dict[tuple[int, int], bytes], indexes: list[int],
                             topic: str, queues: int) -> None:
        for index in indexes:
            found = self.read_all(index, topic, queues)
            missing = [key for key, body in acked.items() if found.get(key) != body]
            assert not missing, (f"{self.brokers[index]['name']} lacks {len(missing)} acked "
                                 f"messages, e.g. {missing[:3]}")

    def check_logs_identical(self, indexes: list[int]) -> int:
        """After `down`: CommitLog bytes equal on `indexes` up to the master's confirm."""
        store_config = StoreConfig(commit_log_segment_size_bytes=SEGMENT_BYTES,
                                   message_size_max_bytes=1 << 20)
        stores = [MessageStore(self.brokers[i]["store_dir"], store_config, auto_confirm=False)
                  for i in indexes]
        try:
            confirm = stores[0].confirm_log_position
            assert confirm > 0
            low = max(store.min_log_position for store in stores)
            reference = _log_bytes(stores[0], low, confirm)
            for index, store in zip(indexes[1:], stores[1:], strict=True):
                assert store.log_position_end >= confirm, (index, store.log_position_end)
                assert _log_bytes(store, low, confirm) == reference, index
            return confirm
        finally:
            for store in stores:
                store.close()


def _cluster_cli(args: list[str]) -> None:
    """Run rocketha-cluster as users do (brokers outlive it, detached in their own session)."""
    done = subprocess.run([sys.executable, "-m", "ha.cluster", *args], capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]


def cluster_command(*args: str) -> str:
    """`rocketha-cluster down` or `status` in this process, its printed output returned.
    Only for commands that start nothing: a test's many `down`s then cost no interpreter start
    and imports (~1 s of CPU each, the suite's longest part under load); `up`, `add-set` and
    `restart` stay subprocesses (`_cluster_cli`), so the brokers they start are not children
    of the test process."""
    assert args and args[0] in ("down", "status"), args
    printed, errors = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(errors):
            code = cluster_main(list(args))
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
        errors.write(f"{exit_.code}\n" if not isinstance(exit_.code, int) else "")
    assert code == 0, (args, errors.getvalue()[-3000:], printed.getvalue()[-2000:])
    return printed.getvalue()


def _log_bytes(store: MessageStore, start: int, end: int) -> bytes:
    out = bytearray()
    position = start
    while position < end:
        chunk = store.read_log(position, end - position)
        assert chunk, position
        out += chunk
        position += len(chunk)
    return bytes(out)


def _all_threads_stopped(pid: int) -> bool:
    """Every thread of `pid` is in state T (stopped), per /proc/<pid>/task/*/stat."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
        states = [(task / "stat").read_text().rsplit(")", 1)[1].split()[0] for task in tasks]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return bool(states) and all(state in ("T", "t") for state in states)
