"""A local cluster as an operator runs it: `rocketha-cluster up --controllers 1 --replicas 3`.

Shared by the tests of the operator surfaces (metrics, console, admin tool): start it with
the tool, read `status --json`, find the master, SIGKILL it, scrape a `/metrics` endpoint and
parse it with prometheus_client's own parser. `status` (polled by the waits) and `down` run the
tool's code in this process (tests/ha/replica_set.py cluster_command): no interpreter start
per poll.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from tests.ha.replica_set import FAST_TIMERS, cluster_command, wait_for

ROOT = Path(__file__).resolve().parents[2]

__all__ = ["OperatedCluster", "Samples", "scrape", "wait_for"]

Samples = dict[str, list[tuple[dict[str, str], float]]]


def scrape(url: str) -> Samples:
    """Every sample of a /metrics page: name -> [(labels, value)] (parsed by prometheus_client)."""
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of the one sample of `name` whose labels include `labels` (None: none)."""
    found = [v for have, v in samples.get(name, []) if labels.items() <= have.items()]
    assert len(found) <= 1, f"{name} {labels}: {found}"
    return found[0] if found else None


def tool(module: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([sys.executable, "-m", module, *args], capture_output=True,
                            text=True, timeout=120, cwd=ROOT, check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"{module} {args} exited {result.returncode}: {result.stderr}")
    return result


class OperatedCluster:
    def __init__(self, directory: Path, replicas: int = 3, **settings: str) -> None:
        self.directory = directory
        args = ["up", "--dir", str(directory), "--insecure", "--controllers", "1", "--replicas",
                str(replicas)]
        for key, setting in {**FAST_TIMERS, **settings}.items():
            args += ["--set", f"{key}={setting}"]
        tool("ha.cluster", *args)

    def status(self) -> list[dict[str, Any]]:
        out = cluster_command("status", "--dir", str(self.directory), "--json")
        return json.loads(out)["processes"]  # type: ignore[no-any-return]

    def brokers(self) -> list[dict[str, Any]]:
        return [p for p in self.status() if p["kind"] == "broker"]

    def controller(self) -> dict[str, Any]:
        return next(p for p in self.status() if p["kind"] == "controller")

    def wait_master(self, not_name: str | None = None, timeout_s: float = 30.0
                    ) -> dict[str, Any]:
        """The broker that is MASTER (and not `not_name`), once exactly one is."""
        def master() -> dict[str, Any] | None:
            masters = [b for b in self.brokers() if b["role"] == "MASTER" and b["alive"]]
            if len(masters) == 1 and masters[0]["name"] != not_name:
                return masters[0]
            return None
        return wait_for(master, timeout_s, f"one master other than {not_name}")  # type: ignore

    def kill(self, process: dict[str, Any]) -> None:
        os.kill(process["pid"], signal.SIGKILL)
        wait_for(lambda: not any(b["name"] == process["name"] and b["alive"]
                                 for b in self.brokers()), 10, f"{process['name']} to die")

    def down(self) -> None:
        cluster_command("down", "--dir", str(self.directory))
