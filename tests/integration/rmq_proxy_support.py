"""Test support for the RocketMQ gRPC endpoint: a cluster with its proxy, the official client.

    ProxyCluster(dir, **grpc_settings)   `rocketha-cluster up --controllers 1 --replicas 3` with
                                         FailoverCluster's fast timers; `grpc_endpoint` from
                                         `status --json`; `kill_proxy()` / `restart_proxy()`
    rmq_config(endpoint, ak, sk)         the official client's ClientConfiguration
    stub(endpoint)                       a raw MessagingService stub (for what the client
                                         library refuses to send, e.g. a forged handle)
    receive_all(consumer, count, ...)    receive (and optionally ack) until `count` arrived
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from rocketmq import ClientConfiguration, Credentials
from rocketmq.grpc_protocol import service_pb2_grpc

from ha.cluster.processes import pid_alive, pid_from_file
from tests.integration.failover_cluster import FailoverCluster, cluster_cli

__all__ = ["ProxyCluster", "receive_all", "rmq_config", "stub"]

INVISIBLE_MIN_MS = 1000  # tests use invisible durations of a few seconds


class ProxyCluster(FailoverCluster):
    def __init__(self, directory: Path, **grpc_settings: str) -> None:
        self.grpc_settings = {"grpcInvisibleDurationMinMs": str(INVISIBLE_MIN_MS),
                              "grpcStateSnapshotIntervalMs": "500", **grpc_settings}
        args: list[str] = []
        for key, value in self.grpc_settings.items():
            args += ["--grpc-set", f"{key}={value}"]
        super().__init__(directory, controllers=1, replicas=3, cli_args=tuple(args))
        self._read_endpoint()

    def _read_endpoint(self) -> None:
        status = json.loads(cluster_cli("status", "--dir", str(self.directory), "--json"))
        self.grpc_endpoint: str = status["grpc_endpoint"]
        assert self.grpc_endpoint, status

    @property
    def proxy_pid_file(self) -> Path:
        return self.directory / "run" / "proxy.pid"

    def kill_proxy(self) -> None:
        pid = pid_from_file(self.proxy_pid_file)
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    def restart_proxy(self) -> None:
        cluster_cli("up", "--dir", str(self.directory))
        self._read_endpoint()


def rmq_config(endpoint: str, ak: str = "", sk: str = "") -> ClientConfiguration:
    return ClientConfiguration(endpoint, Credentials(ak, sk), request_timeout=5)


def stub(endpoint: str) -> service_pb2_grpc.MessagingServiceStub:
    return service_pb2_grpc.MessagingServiceStub(grpc.insecure_channel(endpoint))


def receive_all(consumer: Any, count: int, *, invisible_s: int = 30, ack: bool = True,
                timeout_s: float = 60.0, stop: Callable[[list[Any]], bool] | None = None
                ) -> list[Any]:
    """Receive until `count` messages arrived (or the deadline); acks each one if `ack`."""
    found: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while len(found) < count and time.monotonic() < deadline:
        for message in consumer.receive(32, invisible_s):
            found.append(message)
            if ack:
                consumer.ack(message)
        if stop is not None and stop(found):
            break
    return found
