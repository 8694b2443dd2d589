"""connector/protocol/tls.py `tune_grpc`: gRPC's older IO paths unless the environment says.

Each case runs a fresh Python process (gRPC reads GRPC_EXPERIMENTS once per process) that opens
a Flight client with `connect_flight` and makes one call to a closed port; gRPC's own log line
(GRPC_VERBOSITY=DEBUG with a tracer on) says which experiments it runs with.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_CLIENT = """
import os
from pyarrow import flight
from connector.protocol.tls import connect_flight
client = connect_flight("127.0.0.1:1")
try:
    client.list_actions(options=flight.FlightCallOptions(timeout=0.1))
except flight.FlightError:
    pass
print("GRPC_EXPERIMENTS=" + repr(os.environ.get("GRPC_EXPERIMENTS")))
"""


def _run(env_experiments: str | None) -> tuple[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "GRPC_EXPERIMENTS"}
    env.update(PYTHONPATH=str(ROOT), GRPC_VERBOSITY="DEBUG", GRPC_TRACE="api")
    if env_experiments is not None:
        env["GRPC_EXPERIMENTS"] = env_experiments
    done = subprocess.run([sys.executable, "-c", _CLIENT], cwd=ROOT, env=env, text=True,
                          capture_output=True, timeout=60, check=True)
    found = re.search(r"gRPC experiments: ([^;\n]*)", done.stderr)
    return done.stdout.strip(), found.group(1) if found else ""


def test_a_client_process_runs_grpc_without_the_event_engine_paths() -> None:
    stdout, experiments = _run(None)
    assert stdout == "GRPC_EXPERIMENTS='-event_engine_client,-event_engine_listener," \
                     "-event_engine_callback_cq'"
    for name in ("event_engine_client", "event_engine_listener", "event_engine_callback_cq"):
        assert f"{name}:off" in experiments, experiments


def test_what_the_environment_says_stands() -> None:
    stdout, experiments = _run("")  # empty: gRPC's own defaults
    assert stdout == "GRPC_EXPERIMENTS=''"
    assert "event_engine_client:off" not in experiments
    stdout, experiments = _run("-event_engine_listener")
    assert stdout == "GRPC_EXPERIMENTS='-event_engine_listener'"
    assert "event_engine_listener:off" in experiments
    assert "event_engine_client:off" not in experiments
