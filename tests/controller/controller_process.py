"""Real controller processes for integration tests (`python -m controller --conf FILE`).

`ControllerGroup(directory, size)` writes one properties file per node (free ports on
127.0.0.1, chosen once so restarts keep them), starts, kills (SIGKILL), stops (SIGTERM) and
restarts nodes by their own pid, and calls actions on a node or on whichever node leads.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from pyarrow import flight

from conf.signing import Credentials, action_target, sign_headers
from ha.cluster.processes import free_port  # listener ports outside the ephemeral range
from tests.controller.link_proxy import LinkProxy

STARTUP_TIMEOUT_S = 20.0
CALL_TIMEOUT_S = 5.0
ROOT = Path(__file__).resolve().parents[2]


def call(endpoint: str, action: str, body: dict[str, Any] | None = None,
         timeout_s: float = CALL_TIMEOUT_S, credentials: Credentials | None = None
         ) -> dict[str, Any]:
    """One DoAction; signed with `credentials` (conf.signing) when given."""
    client = flight.FlightClient(f"grpc://{endpoint}")
    try:
        payload = json.dumps(body or {}).encode()
        headers = [] if credentials is None else sign_headers(
            credentials, "DO_ACTION", action_target(action, payload), int(time.time() * 1000))
        options = flight.FlightCallOptions(timeout=timeout_s, headers=headers)
        results = list(client.do_action(flight.Action(action, payload), options))
        return json.loads(results[0].body.to_pybytes())  # type: ignore[no-any-return]
    finally:
        client.close()


class ControllerGroup:
    def __init__(self, directory: Path, size: int, *, proxied: bool = False,
                 hosts: dict[int, str] | None = None,
                 launchers: dict[int, list[str]] | None = None,
                 credentials: Credentials | None = None, **overrides: str) -> None:
        """`hosts`: each node's advertised host (default 127.0.0.1); `launchers`: a command
        prefix per node (`ip netns exec NS` runs it on a test host, tests/support/hosts.py);
        `credentials`: sign this helper's own calls (authenticationEnabled=true)."""
        self.directory = directory
        self.credentials = credentials
        self.ids = list(range(1, size + 1))
        self.hosts = {n: (hosts or {}).get(n, "127.0.0.1") for n in self.ids}
        self.launchers = {n: list((launchers or {}).get(n, [])) for n in self.ids}
        self.raft_ports = {n: free_port() for n in self.ids}
        self.client_ports = {n: free_port() for n in self.ids}
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        # With `proxied`, node a reaches node b through links[(a, b)] (cut/heal per direction).
        self.links = {
            (a, b): LinkProxy(self.raft_ports[b])
            for a in self.ids for b in self.ids if a != b and proxied
        }
        addresses = ";".join(self.endpoint(n) for n in self.ids)
        directory.mkdir(parents=True, exist_ok=True)
        for n in self.ids:
            peers = ";".join(
                f"n{m}-{self.hosts[m] if (n, m) not in self.links else '127.0.0.1'}:"
                f"{self.links[(n, m)].port if (n, m) in self.links else port}"
                for m, port in self.raft_ports.items()
            )
            settings = {
                "controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{n}",
                "controllerAddr": addresses,
                "controllerStorePath": str(directory / f"store-n{n}"),
                "controllerHeartbeatTimeoutMs": "1500", "scanNotActiveBrokerIntervalMs": "200",
                "raftTickIntervalMs": "50", "raftElectionTimeoutTicks": "6",
                "allowInsecure": "true",  # plaintext test controllers, also on test hosts
            }
            settings.update(overrides)
            self.conf(n).write_text("".join(f"{k}={v}\n" for k, v in settings.items()))

    def conf(self, node_id: int) -> Path:
        return self.directory / f"controller-n{node_id}.conf"

    def log(self, node_id: int) -> Path:
        return self.directory / f"controller-n{node_id}.log"

    def endpoint(self, node_id: int) -> str:
        return f"{self.hosts[node_id]}:{self.client_ports[node_id]}"

    def start(self, node_id: int | None = None) -> ControllerGroup:
        for n in [node_id] if node_id is not None else self.ids:
            with open(self.log(n), "ab") as log:
                self.processes[n] = subprocess.Popen(
                    [*self.launchers[n], sys.executable, "-m", "controller", "--conf",
                     str(self.conf(n))],
                    stdout=log, stderr=subprocess.STDOUT, cwd=ROOT,
                )
        try:
            for n in [node_id] if node_id is not None else self.ids:
                self._wait_answering(n)
        except BaseException:
            self.stop_all()  # no controller outlives a start that failed (or the next test
            raise  # reports its Popen as still running)
        return self

    def _wait_answering(self, node_id: int) -> None:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            process = self.processes[node_id]
            if process.poll() is not None:
                raise RuntimeError(f"controller n{node_id} exited {process.returncode}: "
                                   f"{self.log(node_id).read_text()[-3000:]}")
            try:
                call(self.endpoint(node_id), "controller_status", timeout_s=1.0,
                     credentials=self.credentials)
                return
            except flight.FlightError:
                time.sleep(0.05)
        raise RuntimeError(f"controller n{node_id} did not answer in {STARTUP_TIMEOUT_S} s")

    def kill(self, node_id: int) -> None:
        process = self.processes.pop(node_id)
        process.kill()
        process.wait(10)

    def isolate(self, node_id: int) -> None:
        for (a, b), link in self.links.items():
            if node_id in (a, b):
                link.cut()

    def heal(self) -> None:
        for link in self.links.values():
            link.heal()

    def stop_all(self) -> None:
        for link in self.links.values():
            link.close()
        for node_id in list(self.processes):
            process = self.processes.pop(node_id)
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)

    def statuses(self) -> dict[int, dict[str, Any]]:
        result = {}
        for n in self.processes:
            try:
                result[n] = call(self.endpoint(n), "controller_status", timeout_s=1.0,
                                 credentials=self.credentials)
            except flight.FlightError:
                continue
        return result

    def wait_leader(self, timeout_s: float = 15.0, *, not_id: int | None = None) -> int:
        """The node every running node agrees leads (polls until one does)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            statuses = self.statuses()
            leaders = [n for n, s in statuses.items() if s["role"] == "leader" and n != not_id]
            if len(leaders) == 1:
                term = statuses[leaders[0]]["term"]
                if all(s["leader_id"] == leaders[0] and s["term"] == term
                       for s in statuses.values()):
                    return leaders[0]
            time.sleep(0.05)
        raise AssertionError(f"no agreed leader within {timeout_s} s: {self.statuses()}")

    def call_leader(self, action: str, body: dict[str, Any] | None = None,
                    timeout_s: float = 15.0) -> dict[str, Any]:
        """Call any node and follow NOT_LEADER redirects / retry BUSY until the deadline."""
        deadline = time.monotonic() + timeout_s
        turn = 0
        endpoint = self.endpoint(next(iter(self.processes)))
        reply: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                reply = call(endpoint, action, body, credentials=self.credentials)
            except flight.FlightError:
                reply = {"status": "UNREACHABLE", "leader_address": None}
            if reply["status"] in ("NOT_LEADER", "UNREACHABLE"):
                if reply["leader_address"] and reply["leader_address"] != endpoint:
                    endpoint = reply["leader_address"]
                else:  # leader unknown here: ask the next running node
                    turn += 1
                    running = sorted(self.processes)
                    endpoint = self.endpoint(running[turn % len(running)])
                    time.sleep(0.05)
                continue
            if reply["status"] == "BUSY":
                time.sleep(0.05)
                continue
            return reply
        raise AssertionError(f"{action} got no answer from a leader: last {reply}")
