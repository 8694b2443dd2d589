"""Start and stop real broker processes for tests (the same entry point users run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from pyarrow import flight

from conf.signing import Credentials, action_target, sign_headers
from ha.cluster.processes import free_port  # listener ports outside the ephemeral range

STARTUP_TIMEOUT_S = 20.0


class BrokerProcess:
    """One `python -m ha.broker --conf FILE` subprocess with its own store directory."""

    def __init__(self, directory: Path, *, name: str = "broker-a", host: str = "127.0.0.1",
                 launcher: list[str] | None = None, credentials: Credentials | None = None,
                 **overrides: str) -> None:
        """`host`: brokerIP1 (advertised, and dialled by these helpers); `launcher`: a command
        prefix (`ip netns exec NS` runs it on a test host, tests/support/hosts.py);
        `credentials`: sign this helper's own calls (authenticationEnabled=true)."""
        self.directory = directory
        self.credentials = credentials
        self.host = host
        self.launcher = list(launcher or [])
        self.port = free_port()
        self.store_dir = directory / "store"
        self.conf = directory / "broker.conf"
        self.log = directory / "broker.log"
        settings = {
            "brokerName": name, "brokerId": "0", "brokerIP1": host, "listenPort": str(self.port),
            "storePathRootDir": str(self.store_dir), "mappedFileSizeCommitLog": str(8 << 20),
            "maxMessageSize": str(1 << 20),
            "allowInsecure": "true",  # plaintext test brokers, also on test hosts' addresses
        }
        settings.update(overrides)
        directory.mkdir(parents=True, exist_ok=True)
        self.conf.write_text("".join(f"{key}={value}\n" for key, value in settings.items()))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, *, wait: bool = True) -> BrokerProcess:
        """Run the broker; with `wait`, until it answers this helper's broker_info."""
        with open(self.log, "ab") as log:  # the child has its own copy of the descriptor
            self.process = subprocess.Popen(
                [*self.launcher, sys.executable, "-m", "ha.broker", "--conf", str(self.conf)],
                stdout=log, stderr=subprocess.STDOUT, cwd=Path(__file__).resolve().parents[2],
            )
        if not wait:
            return self
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited {self.process.returncode}: "
                                   f"{self.log.read_text()[-2000:]}")
            try:
                # another test's broker may hold the port (free_port races between processes):
                # only our own process counts as started
                if self.action("broker_info").get("pid") == self.process.pid:
                    return self
            except flight.FlightError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"broker did not answer within {STARTUP_TIMEOUT_S}s")

    def action(self, kind: str, body: dict | None = None) -> dict:  # type: ignore[type-arg]
        client = flight.FlightClient(f"grpc://{self.endpoint}")
        try:
            payload = json.dumps(body or {}).encode()
            headers = [] if self.credentials is None else sign_headers(
                self.credentials, "DO_ACTION", action_target(kind, payload),
                int(time.time() * 1000))
            options = flight.FlightCallOptions(timeout=5.0, headers=headers)
            results = list(client.do_action(flight.Action(kind, payload), options))
            return json.loads(results[0].body.to_pybytes())
        finally:
            client.close()

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        self.process.wait(10)

    def stop(self) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(10)

    def pause(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self.process is not None
        os.kill(self.process.pid, signal.SIGCONT)
