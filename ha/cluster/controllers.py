"""The controllers of a local `rocketha-cluster` (1, 3 or 5 `python -m controller` processes).

Under the cluster directory: `conf/controller-n<i>.conf` (Raft and client ports chosen once
and kept in `cluster.json` under "controllers"), `data/controller-n<i>/` (the Raft store),
`logs/controller-n<i>.log`, `run/controller-n<i>.pid`. Processes run detached (own session)
and are stopped by their pid. Only controller.api-level facts are used (the JSON reply of the
`controller_status` action), never controller internals (docs/design.md §2).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conf import format_property
from conf.signing import Credentials
from conf.tls import NO_TLS, ClientTLS
from ha.broker.peer import signed_action
from ha.cluster import auth as cluster_auth
from ha.cluster.cli import CONTROLLER_COUNTS
from ha.cluster.hosts import host_of, hosts_mode, launcher_of, place_on_hosts
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
from ha.cluster.security import client_tls, member_tls_settings

__all__ = ["CONTROLLER_COUNTS", "LocalControllers"]

STARTUP_TIMEOUT_S = 30.0



def controller_status(endpoint: str, timeout_s: float = 2.0, tls: ClientTLS = NO_TLS,
                      credentials: Credentials | None = None) -> dict[str, Any] | None:
    """The `controller_status` action's reply from the controller at `endpoint`, or None."""
    return signed_action(endpoint, "controller_status", timeout_s, tls, credentials)


class LocalControllers:
    """Reads and writes the "controllers" list of the cluster's `cluster.json`."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()
        self.manifest_path = self.directory / "cluster.json"

    def _load(self) -> dict[str, Any]:
        if not self.manifest_path.exists():
            return {"brokers": []}
        return json.loads(self.manifest_path.read_text())  # type: ignore[no-any-return]

    def up(self, count: int | None, overrides: dict[str, str] | None = None, *,
           hosts: bool = False) -> list[str]:
        """Plan (keeping ports), start what is not running, wait for a leader; returns one
        line per controller: name, client endpoint, role. `overrides` (controller keys, from
        `--controller-set`) are remembered, so a later `up` keeps them. `hosts`: each on its
        own test host (ha/cluster/hosts.py)."""
        manifest = self._load()
        existing = len(manifest.get("controllers", []))
        remembered = manifest.setdefault("controller_overrides", {})
        remembered.update(overrides or {})
        if hosts:
            manifest.setdefault("hosts", {})
        group = self.plan(manifest, existing if count is None else count, remembered)
        if not group:
            return []
        self.directory.mkdir(parents=True, exist_ok=True)
        write_private_text(self.manifest_path, json.dumps(manifest, indent=1))
        self.start_missing(group)
        leader = self.wait_leader(group, client_tls(self.directory, manifest))
        return [f"{c['name']} {host_of(c)}:{c['port']} "
                f"{'leader' if c is leader else 'follower'}" for c in group]

    def stop_all(self) -> int:
        """Stop every controller; how many were running."""
        return sum(self.stop(controller) for controller in self._load().get("controllers", []))

    def plan(self, manifest: dict[str, Any], count: int,
             overrides: dict[str, str]) -> list[dict[str, Any]]:
        """Add controllers up to `count` (never removes any) and (re)write their confs."""
        controllers: list[dict[str, Any]] = manifest.setdefault("controllers", [])
        if controllers and count and len(controllers) != count:
            raise SystemExit(f"rocketha-cluster: this cluster has {len(controllers)} "
                             f"controllers; it cannot become {count}")
        for node_id in range(len(controllers) + 1, count + 1):
            name = f"controller-n{node_id}"
            controllers.append({
                "name": name, "node_id": node_id, "raft_port": free_port(),
                "port": free_port(), "conf": str(self.directory / "conf" / f"{name}.conf"),
                "store_dir": str(self.directory / "data" / name),
                "log_file": str(self.directory / "logs" / f"{name}.log"),
                "pid_file": str(self.directory / "run" / f"{name}.pid"),
            })
        for controller in controllers:  # ports kept across restarts
            for key in ("metrics_port", "console_port"):
                if not controller.get(key):
                    controller[key] = free_port(ports_in(manifest))
        if hosts_mode(manifest) and controllers:  # brokers only: their plan places them
            place_on_hosts(self.directory, manifest)
        peers = ";".join(f"n{c['node_id']}-{host_of(c)}:{c['raft_port']}" for c in controllers)
        for controller in controllers:
            settings = {
                "controllerDLegerPeers": peers,
                "controllerDLegerSelfId": f"n{controller['node_id']}",
                "controllerAddr": self.addresses(manifest),
                "controllerStorePath": controller["store_dir"],
                "metricsPort": str(controller["metrics_port"]),
                "consolePort": str(controller["console_port"]),
                "logFile": controller["log_file"],  # rotated by size (logFileBytesMax)
            }
            settings.update(member_tls_settings(self.directory, manifest, controller))
            settings.update(cluster_auth.controller_settings(self.directory, controller["name"]))
            settings.update(overrides)
            lines = ["# written by rocketha-cluster (--controllers)"]
            lines += [format_property(key, value) for key, value in settings.items()]
            Path(controller["conf"]).parent.mkdir(parents=True, exist_ok=True)
            write_private_text(controller["conf"], "\n".join(lines) + "\n")
        return controllers

    @staticmethod
    def addresses(manifest: dict[str, Any]) -> str:
        """The value brokers use as `controllerAddr`."""
        return ";".join(f"{host_of(c)}:{c['port']}" for c in manifest.get("controllers", []))

    def pid_of(self, controller: dict[str, Any]) -> int | None:
        return pid_from_file(controller["pid_file"])

    def start_missing(self, controllers: list[dict[str, Any]]) -> None:
        for controller in controllers:
            if self.pid_of(controller) is not None:
                continue
            Path(controller["log_file"]).parent.mkdir(parents=True, exist_ok=True)
            Path(controller["pid_file"]).parent.mkdir(parents=True, exist_ok=True)
            with open(controller["log_file"], "ab") as log:
                process = subprocess.Popen(
                    [*launcher_of(controller), sys.executable, "-m", "controller", "--conf",
                     controller["conf"]],
                    stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    start_new_session=True, cwd=str(Path(__file__).resolve().parents[1]),
                )
            Path(controller["pid_file"]).write_text(f"{process.pid}\n")

    def wait_leader(self, controllers: list[dict[str, Any]],
                    tls: ClientTLS = NO_TLS) -> dict[str, Any]:
        """Wait until every controller answers and one of them leads; returns the leader."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            for controller in controllers:
                if self.pid_of(controller) is None:
                    tail = Path(controller["log_file"]).read_text(errors="replace")[-1500:]
                    status = exit_status(recorded_pid(controller["pid_file"]))
                    raise SystemExit(f"rocketha-cluster: {controller['name']} exited{status}; "
                                     f"log tail:\n{tail}")
            credentials = cluster_auth.admin_credentials(self.directory)
            statuses = [controller_status(f"{host_of(c)}:{c['port']}", 1.0, tls, credentials)
                        for c in controllers]
            leaders = [c for c, s in zip(controllers, statuses, strict=True)
                       if s and s["role"] == "leader"]
            if all(statuses) and len(leaders) == 1:
                return leaders[0]
            time.sleep(POLL_INTERVAL_S)
        raise SystemExit(f"rocketha-cluster: no controller leader within {STARTUP_TIMEOUT_S:.0f}s")

    def status(self) -> list[dict[str, Any]]:
        processes = []
        manifest = self._load()
        tls = client_tls(self.directory, manifest)
        scheme = "https" if manifest.get("tls") else "http"  # TLS members: HTTPS pages only
        for controller in manifest.get("controllers", []):
            pid = self.pid_of(controller)
            endpoint = f"{host_of(controller)}:{controller['port']}"
            info = controller_status(endpoint, 2.0, tls, cluster_auth.admin_credentials(
                self.directory)) if pid is not None else None
            processes.append({
                "name": controller["name"], "kind": "controller", "pid": pid,
                "role": (info or {}).get("role", "unknown" if pid else "DOWN"),
                "broker_role": "",  # a column of `status` shared with brokers
                "term": (info or {}).get("term"), "endpoint": endpoint,
                "version": (info or {}).get("version"),
                "store_dir": controller["store_dir"], "log_file": controller["log_file"],
                "alive": info is not None,
                "metrics_endpoint": f"{scheme}://{host_of(controller)}:"
                f"{controller['metrics_port']}/metrics"
                if controller.get("metrics_port") else None,
                "console_url": f"{scheme}://{host_of(controller)}:{controller['console_port']}/"
                if controller.get("console_port") else None,
            })
        return processes

    def stop(self, controller: dict[str, Any]) -> bool:
        return stop_pid_file(controller["pid_file"])
