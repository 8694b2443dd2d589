"""`rocketha-cluster add-set` and `drop-set` on a secured cluster (the default: mutual TLS,
authentication and authorization).

Goal: the new set gets a member certificate from the cluster CA and the cluster's keys, so
it registers with the controller, is given a master, and answers the admin tool through
client.properties; a topic is extended onto it and drained from it with the admin user's
keys; `drop-set` is refused while the topic still takes writes there, then removes it.
Method: real processes (`rocketha-cluster up` without --insecure, the admin tool as a
subprocess with --client-config).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.failover_cluster import CLI_TIMEOUT_S, ROOT, _env, cluster_cli

pytestmark = pytest.mark.integration

TOPIC = "scale_out_secured"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=CLI_TIMEOUT_S, cwd=ROOT, env=_env(), check=False)


def admin_rows(directory: Path, *args: str) -> list[dict[str, Any]]:
    done = run("-m", "rocketha_admin", "--client-config", str(directory / "client.properties"),
               *args, "--json-lines")
    assert done.returncode == 0, (done.stdout, done.stderr)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_add_and_remove_a_set_on_a_secured_cluster(tmp_path: Path) -> None:
    directory = tmp_path / "cluster"
    cluster_cli("up", "--dir", str(directory), "--controllers", "1", "--grpc-port", "0",
                "--set", "brokerHeartbeatInterval=200")
    try:
        out = cluster_cli("add-set", "--dir", str(directory))
        assert "broker-b master" in out, out
        status = json.loads(cluster_cli("status", "--dir", str(directory), "--json"))
        roles = {p["name"]: (p["role"], p["alive"]) for p in status["processes"]
                 if p["kind"] == "broker"}
        assert roles == {"broker-a": ("MASTER", True), "broker-b": ("MASTER", True)}, roles
        manifest = json.loads((directory / "cluster.json").read_text())
        added = next(b for b in manifest["brokers"] if b["set"] == "broker-b")
        assert added["tls_cert"]["identity"] == f"rocketha://broker/broker-b/127.0.0.1:" \
            f"{added['port']}", added

        admin_rows(directory, "topic", "create", "--topic", TOPIC, "--queues", "2",
                   "--broker-name", "broker-a")
        extended = admin_rows(directory, "topic", "update", "--topic", TOPIC,
                              "--add-broker-name", "broker-b", "--queues", "3")
        assert [(r["replica_set"], r["read_queue_nums"]) for r in extended] == [
            ("broker-b", 3)], extended
        listed = admin_rows(directory, "topic", "list")
        assert sorted((r["replica_set"], r["write_queue_nums"]) for r in listed
                      if r["name"] == TOPIC) == [("broker-a", 2), ("broker-b", 3)]

        refused = run("-m", "ha.cluster", "drop-set", "--dir", str(directory))
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert f"topic {TOPIC} takes writes" in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr

        admin_rows(directory, "topic", "update", "--topic", TOPIC, "--remove-broker-name",
                   "broker-b")
        out = cluster_cli("drop-set", "--dir", str(directory))
        assert "broker-b removed" in out, out
        status = json.loads(cluster_cli("status", "--dir", str(directory), "--json"))
        assert {p["name"] for p in status["processes"] if p["kind"] == "broker"} == {
            "broker-a"}
        assert "broker-b" not in "".join(
            r["replica_set"] for r in admin_rows(directory, "topic", "list"))
    finally:
        cluster_cli("down", "--dir", str(directory))
