"""A port already in use stops a broker or a controller at start-up with one line, not a
traceback. Method: hold a listening socket on 127.0.0.1, start the real entry point with that
port as listenPort / metricsPort / consolePort, read its exit code and stderr."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from ha.cluster.processes import free_port
from tests.integration.operated_cluster import ROOT

pytestmark = pytest.mark.integration


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def _run(module: str, conf: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", module, "--conf", str(conf)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


def _one_error_line(result: subprocess.CompletedProcess[str], program: str) -> str:
    assert result.returncode == 2, result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith(program)]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0]


@pytest.mark.parametrize("key", ["listenPort", "metricsPort"])
def test_broker(tmp_path: Path, taken_port: int, key: str) -> None:
    ports = {"listenPort": free_port(), "metricsPort": free_port(), key: taken_port}
    conf = tmp_path / "broker.conf"
    conf.write_text(f"storePathRootDir={tmp_path / 'store'}\n"
                    + "".join(f"{name}={port}\n" for name, port in ports.items()))
    line = _one_error_line(_run("ha.broker", conf), "rocketha-broker:")
    assert key in line and "cannot listen" in line


@pytest.mark.parametrize("key", ["metricsPort", "consolePort"])
def test_controller(tmp_path: Path, taken_port: int, key: str) -> None:
    ports = {"metricsPort": free_port(), "consolePort": free_port(), key: taken_port}
    conf = tmp_path / "controller.conf"
    conf.write_text(f"controllerDLegerPeers=n1-127.0.0.1:{free_port()}\n"
                    f"controllerAddr=127.0.0.1:{free_port()}\n"
                    f"controllerStorePath={tmp_path / 'ctrl'}\n"
                    + "".join(f"{name}={port}\n" for name, port in ports.items()))
    line = _one_error_line(_run("controller", conf), "rocketha-controller:")
    assert key in line and str(taken_port) in line


@pytest.mark.parametrize("module", ["ha.broker", "controller"])
def test_a_readable_metrics_token_file_is_refused(tmp_path: Path, module: str) -> None:
    """metricsBearerTokenFile that others may read: one line naming the key, before any
    store is opened or port bound."""
    token = tmp_path / "metrics.token"
    token.write_text("a-token-long-enough-to-pass\n")
    token.chmod(0o644)
    conf = tmp_path / "node.conf"
    if module == "ha.broker":
        conf.write_text(f"storePathRootDir={tmp_path / 'store'}\nlistenPort={free_port()}\n"
                        f"metricsPort={free_port()}\nmetricsBearerTokenFile={token}\n")
    else:
        conf.write_text(f"controllerDLegerPeers=n1-127.0.0.1:{free_port()}\n"
                        f"controllerAddr=127.0.0.1:{free_port()}\n"
                        f"controllerStorePath={tmp_path / 'ctrl'}\n"
                        f"metricsPort={free_port()}\nmetricsBearerTokenFile={token}\n")
    program = "rocketha-broker:" if module == "ha.broker" else "rocketha-controller:"
    line = _one_error_line(_run(module, conf), program)
    assert "metricsBearerTokenFile" in line and "chmod 600" in line
    assert not (tmp_path / "store").exists()
