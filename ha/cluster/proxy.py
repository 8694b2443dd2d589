"""The RocketMQ gRPC endpoint of a local `rocketha-cluster`: one `rocketha-proxy` process.

One per cluster (not one per replica set): the proxy is a client of the whole cluster (routes
name every replica set, and each set's POP state lives in that set); more proxies may share a
cluster (connector/rmq_proxy/state_store.py), but the local tool starts one. Under the cluster
directory:
`conf/proxy.conf`, `conf/proxy.key` (the receipt-handle HMAC key, 0600, kept across restarts so
handles survive a proxy restart), `logs/proxy.log`, `run/proxy.pid`; its port is kept in
`cluster.json` under "proxy". Started after the brokers, only with controllers (it takes
its routes from them); `status --json` shows it under "proxy" and "grpc_endpoint".
"""

from __future__ import annotations

import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conf import format_property
from ha.cluster.hosts import host_of, launcher_of
from ha.cluster.processes import (
    POLL_INTERVAL_S,
    exit_status,
    free_port,
    pid_from_file,
    ports_in,
    recorded_pid,
    stop_pid_file,
    write_private_text,
)

__all__ = ["LocalProxy"]

STARTUP_TIMEOUT_S = 60.0


class LocalProxy:
    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()

    def plan(self, manifest: dict[str, Any], port: int | None, controller_addr: str,
             overrides: dict[str, str], *, client_config: str = "",
             tls_server: dict[str, str] | None = None,
             authentication: bool = False) -> dict[str, Any] | None:
        """Add or update the proxy entry (port None: keep the one chosen, else a free one;
        0: no proxy) and write its configuration. On a secured cluster `client_config` is
        the client.properties the proxy's own calls use, and `tls_server` the tls.server.*
        keys of a certificate from the cluster CA for its gRPC port (RocketMQ clients then
        trust DIR/tls/ca.pem). `authentication`: every RocketMQ client signs with the keys of
        one of the controllers' users and the proxy calls the cluster as that user
        (grpcAuthenticationEnabled; it reads the users with client.properties' admin keys)."""
        proxy = manifest.get("proxy")
        if port == 0 or not controller_addr:
            manifest.pop("proxy", None)
            return None
        proxy = manifest.setdefault("proxy", {})
        for key, value in (("name", "proxy"),
                           ("conf", self.directory / "conf" / "proxy.conf"),
                           ("key_file", self.directory / "conf" / "proxy.key"),
                           ("log_file", self.directory / "logs" / "proxy.log"),
                           ("pid_file", self.directory / "run" / "proxy.pid")):
            proxy.setdefault(key, str(value))
        if port or not proxy.get("port"):
            proxy["port"] = port or free_port(ports_in(manifest))
        key_file = Path(proxy["key_file"])
        key_file.parent.mkdir(parents=True, exist_ok=True)
        if not key_file.exists():
            write_private_text(key_file, secrets.token_hex(32) + "\n")
        host = host_of(proxy)
        settings = {"grpcListenPort": str(proxy["port"]), "grpcBindAddress": host,
                    "grpcAdvertisedHost": host, "controllerAddr": controller_addr,
                    "grpcReceiptHandleKeyFile": proxy["key_file"],
                    "logFile": proxy["log_file"]}
        if client_config:
            settings["clientConfig"] = client_config
        if authentication:
            settings["grpcAuthenticationEnabled"] = "true"
            # (the admin-only key list of earlier versions: the proxy now checks every user)
            Path(self.directory / "conf" / "proxy.credentials").unlink(missing_ok=True)
        if tls_server:
            settings["grpcTlsCertFile"] = tls_server["tls.server.certPath"]
            settings["grpcTlsKeyFile"] = tls_server["tls.server.keyPath"]
        settings.update(overrides)
        lines = ["# written by rocketha-cluster (the RocketMQ gRPC endpoint)"]
        lines += [format_property(key, value) for key, value in settings.items()]
        write_private_text(proxy["conf"], "\n".join(lines) + "\n")
        return proxy

    def start(self, proxy: dict[str, Any]) -> None:
        if pid_from_file(proxy["pid_file"]) is not None:
            return
        Path(proxy["log_file"]).parent.mkdir(parents=True, exist_ok=True)
        Path(proxy["pid_file"]).parent.mkdir(parents=True, exist_ok=True)
        with open(proxy["log_file"], "ab") as log:
            process = subprocess.Popen(
                [*launcher_of(proxy), sys.executable, "-m", "connector.rmq_proxy", "--conf",
                 proxy["conf"]],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=str(Path(__file__).resolve().parents[1]))
        Path(proxy["pid_file"]).write_text(f"{process.pid}\n")

    def wait_ready(self, proxy: dict[str, Any]) -> str:
        """Wait until the port accepts connections; returns the endpoint."""
        endpoint = self.endpoint(proxy)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if pid_from_file(proxy["pid_file"]) is None:
                tail = Path(proxy["log_file"]).read_text(errors="replace")[-1500:]
                status = exit_status(recorded_pid(proxy["pid_file"]))
                raise SystemExit(f"rocketha-cluster: the proxy exited{status}; log tail:\n{tail}")
            try:
                with socket.create_connection((host_of(proxy), proxy["port"]), timeout=1.0):
                    return endpoint
            except OSError:
                time.sleep(POLL_INTERVAL_S)
        raise SystemExit(f"rocketha-cluster: the proxy did not listen on {endpoint} within "
                         f"{STARTUP_TIMEOUT_S:.0f}s (see {proxy['log_file']})")

    @staticmethod
    def endpoint(proxy: dict[str, Any]) -> str:
        return f"{host_of(proxy)}:{proxy['port']}"

    def status(self, manifest: dict[str, Any]) -> list[dict[str, Any]]:
        """The proxy's entry for `status` (under "proxy" in --json, not among "processes":
        those are the brokers and controllers)."""
        proxy = manifest.get("proxy")
        if proxy is None:
            return []
        pid = pid_from_file(proxy["pid_file"])
        return [{"name": "proxy", "kind": "proxy", "pid": pid, "role": "GRPC" if pid else "DOWN",
                 "broker_role": "", "endpoint": self.endpoint(proxy), "alive": pid is not None,
                 "log_file": proxy["log_file"]}]

    def stop(self, manifest: dict[str, Any]) -> bool:
        """Stop the endpoint; True when it was running."""
        proxy = manifest.get("proxy")
        return proxy is not None and stop_pid_file(proxy["pid_file"])
