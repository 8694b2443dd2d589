"""The tools' answers to bad input, one clear line each, and the shared vocabulary.

No cluster is started: `up`'s checks run before anything is written (the test asserts the
directory stays empty or cluster.json unchanged), `down` is given real processes (`sleep`)
through the pid files a cluster keeps, and the admin tool's address checks run before any
connection.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conf.cli_words import resolve_positional_alias
from controller.admin.parser import build_parser as controller_parser
from ha.cluster import main as cluster
from ha.cluster.cli import build_parser
from ha.cluster.controllers import LocalControllers
from ha.cluster.processes import exit_status, pid_alive

ROOT = Path(__file__).resolve().parents[2]


def _up_refusal(capsys: pytest.CaptureFixture[str], directory: Path, *argv: str) -> str:
    with pytest.raises(SystemExit) as exit_info:
        cluster.main(["up", "--dir", str(directory), "--insecure", *argv])
    assert exit_info.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    return lines[-1]  # argparse: the usage line, then the one message


def test_a_typo_in_set_suggests_the_key_and_saves_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    message = _up_refusal(capsys, tmp_path / "c", "--set", "listenPrt=10911")
    assert "did you mean 'listenPort'?" in message
    assert not (tmp_path / "c").exists(), "the refused up wrote files"


def test_a_typo_in_controller_set_suggests_the_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    message = _up_refusal(capsys, tmp_path / "c", "--controller-set", "raftTickIntervalMss=50")
    assert message.endswith("did you mean 'raftTickIntervalMs'?")
    assert not (tmp_path / "c").exists()


def test_a_bad_value_in_set_lists_the_allowed_values(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    message = _up_refusal(capsys, tmp_path / "c", "--set", "brokerRole=MASTER")
    assert "brokerRole" in message and "SYNC_MASTER" in message and "SLAVE" in message
    message = _up_refusal(capsys, tmp_path / "c", "--set", "flushDiskType=SYNC")
    assert "'ASYNC_FLUSH', 'SYNC_FLUSH'" in message


def test_a_bad_key_kept_by_an_older_up_names_unset_and_unset_removes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    manifest = {"brokers": [], "tls": False, "overrides": {"listenPrt": "1"}}
    (tmp_path / "cluster.json").write_text(json.dumps(manifest))
    message = _up_refusal(capsys, tmp_path)
    assert "up --unset listenPrt" in message
    assert json.loads((tmp_path / "cluster.json").read_text()) == manifest
    message = _up_refusal(capsys, tmp_path, "--unset", "listenPort")
    assert "--unset listenPort: not a kept broker key (kept: listenPrt)" in message


def test_replica_sets_is_the_word_and_brokers_a_deprecated_alias() -> None:
    parser = build_parser()
    assert parser.parse_args(["up", "--dir", "d", "--replica-sets", "3"]).replica_sets == 3
    err = io.StringIO()
    sys_stderr, sys.stderr = sys.stderr, err
    try:
        args = parser.parse_args(["up", "--dir", "d", "--brokers", "2"])
    finally:
        sys.stderr = sys_stderr
    assert args.replica_sets == 2
    assert err.getvalue() == ("rocketha-cluster up: --brokers is deprecated and will be "
                              "removed; use --replica-sets (same meaning)\n")
    up_help = parser._subparsers._group_actions[0].choices["up"].format_help()  # type: ignore[union-attr]
    assert "--replica-sets" in up_help and "--brokers" not in up_help


@pytest.mark.parametrize(("argv", "dest", "value"), [
    (["routes", "orders"], "topic", "orders"),
    (["replica", "broker-a"], "broker_name", "broker-a"),
    (["elect", "broker-a", "--broker-id", "1"], "broker_name", "broker-a")])
def test_controller_positionals_are_deprecated_aliases(argv: list[str], dest: str,
                                                       value: str) -> None:
    parser = controller_parser("rocketha-admin")
    old = parser.parse_args(["--controller", "h:1", *argv])
    stream = io.StringIO()
    resolve_positional_alias(parser, old, f"old_{dest}", f"--{dest.replace('_', '-')}",
                             stream=stream)
    assert getattr(old, dest) == value and not hasattr(old, f"old_{dest}")
    assert stream.getvalue().count("\n") == 1 and "deprecated" in stream.getvalue()
    new = parser.parse_args(["--controller", "h:1", argv[0], f"--{dest.replace('_', '-')}",
                             value, *argv[2:]])
    stream = io.StringIO()
    resolve_positional_alias(parser, new, f"old_{dest}", f"--{dest.replace('_', '-')}",
                             stream=stream)
    assert getattr(new, dest) == value and stream.getvalue() == ""


def test_a_missing_topic_is_a_usage_error() -> None:
    parser = controller_parser("rocketha-admin")
    args = parser.parse_args(["--controller", "h:1", "routes"])
    with pytest.raises(SystemExit):
        resolve_positional_alias(parser, args, "old_topic", "--topic")
    args = argparse.Namespace(old_topic="a", topic="b")
    with pytest.raises(SystemExit):
        resolve_positional_alias(parser, args, "old_topic", "--topic", stream=io.StringIO())


@pytest.mark.parametrize(("argv", "expected"), [
    (["--broker", "localhost", "topic", "list"],
     ("rocketha-admin: --broker: 'localhost' has no port: expected HOST:PORT (for example "
     "localhost:9878)")),
    (["--controller", "127.0.0.1:9878;ctrl2", "cluster"],
     ("rocketha-admin: --controller: 'ctrl2' has no port: expected HOST:PORT (for example "
     "ctrl2:9878)")),
    (["--broker", "h:http", "topic", "list"],
     "rocketha-admin: --broker: 'h:http': the port 'http' is not a number in 1..65535")])
def test_an_address_without_a_port_says_so(argv: list[str], expected: str) -> None:
    result = subprocess.run([sys.executable, "-m", "rocketha_admin", *argv], capture_output=True,
                            text=True, timeout=60, check=False, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 2
    assert result.stderr == expected + "\n"


def _sleeper(tmp_path: Path, name: str) -> tuple[subprocess.Popen[bytes], str]:
    process = subprocess.Popen(["sleep", "300"], start_new_session=True)
    pid_file = tmp_path / f"{name}.pid"
    pid_file.write_text(f"{process.pid}\n")
    return process, str(pid_file)


def test_down_counts_what_was_running(tmp_path: Path) -> None:
    running, running_pid = _sleeper(tmp_path, "broker-a")
    gone, gone_pid = _sleeper(tmp_path, "broker-b")
    gone.kill()
    gone.wait()
    controller, controller_pid = _sleeper(tmp_path, "controller-n1")
    try:
        manifest = {"brokers": [{"name": "broker-a", "pid_file": running_pid},
                                {"name": "broker-b", "pid_file": gone_pid}],
                    "controllers": [{"name": "controller-n1", "pid_file": controller_pid}]}
        (tmp_path / "cluster.json").write_text(json.dumps(manifest))
        local = cluster.Cluster(tmp_path)
        line = cluster.down_summary(local, LocalControllers(local.directory))
        assert line == ("stopped 2 process(es): 1 broker(s), 1 controller(s), 0 gRPC "
                        "endpoint(s); 1 were not running")
        assert running.wait(timeout=60) is not None and controller.wait(timeout=60) is not None
        again = cluster.down_summary(local, LocalControllers(local.directory))
        assert again.startswith("stopped 0 process(es)") and again.endswith("3 were not running")
    finally:
        for process in (running, controller):
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_failed_start_names_the_real_exit_code() -> None:
    """pid_alive sees an exited child as dead without reaping it, so the report can still
    read its status (reaping it there made Popen.poll() say 0 for a refusal's exit 2)."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(2)"])
    deadline = time.monotonic() + 60
    while pid_alive(child.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not pid_alive(child.pid)
    assert child.poll() == 2
    killed = os.posix_spawnp("sleep", ["sleep", "300"], os.environ)  # a bare child, no Popen
    os.kill(killed, signal.SIGKILL)
    while pid_alive(killed) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert exit_status(killed) == " (killed by SIGKILL)"
    assert exit_status(killed) == ""  # reaped: no longer ours to report
