"""`rocketha-cluster plan`: configs and systemd units for several machines.

Goal: what `plan` writes is what the processes accept and what systemd can run: every config
parses with the loader its process uses at start (BrokerConfig / ControllerConfig.from_file),
every unit's ExecStart names an entry point of pyproject.toml that resolves to a function, the
members of a replica set land on distinct hosts, PORTS lists every port a config listens on,
misuse names the flag; a plan is secured unless `--insecure` (member certificates of its own
CA with the identities the processes check, authentication on, secrets only in 0600 files and
never in a config or plan.json); and, on three test hosts (network namespaces, root only),
the planned processes started exactly as their units say (RocketMQ's fixed ports on each host)
elect a controller leader and a master with a full SyncStateSet, acknowledge a put from the
plan's client.properties and refuse an unsigned one.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import shlex
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from cryptography import x509

from connector import Admin, ClientConfig, Producer
from connector.protocol import RocketHAError
from controller.config import ControllerConfig
from ha.broker.config import BrokerConfig
from ha.cluster import main as cluster
from ha.cluster.plan import HA_LINK_TIMERS, QUORUM_KEYS, plan_cluster
from tests.ha.replica_set import wait_for

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ["10.0.0.11", "10.0.0.12", "rh-c.example"]


def run_plan(out: Path, *args: str) -> int:
    return cluster.main(["plan", "--out", str(out), *args])


def entry_points() -> dict[str, str]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]


def installed_conf(out: Path, process: dict[str, object]) -> Path:
    """The process's conf as it reads once its host's tree is copied onto that machine's root:
    here the tree stays under `out`, so /etc/rocketha/ paths point into it."""
    conf = out / str(process["files"]["conf"])  # type: ignore[index]
    root = out / str(process["host"])
    copy = conf.with_suffix(".installed.conf")
    copy.write_text(conf.read_text().replace("/etc/rocketha/", f"{root}/etc/rocketha/"))
    copy.chmod(0o600)
    return copy


def unit_command(unit: Path) -> list[str]:
    line = next(text for text in unit.read_text().splitlines() if text.startswith("ExecStart="))
    return shlex.split(line.removeprefix("ExecStart="))


def test_configs_parse_and_units_name_entry_points(tmp_path: Path) -> None:
    assert run_plan(tmp_path, "--hosts", ",".join(HOSTS), "--replicas", "3",
                    "--controllers", "3", "--replica-sets", "2",
                    "--set", "flushDiskType=SYNC_FLUSH") == 0
    plan = json.loads((tmp_path / "plan.json").read_text())["processes"]
    assert len(plan) == 3 + 6
    scripts = entry_points()
    sets: dict[str, set[str]] = {}
    for process in plan:
        conf, unit = installed_conf(tmp_path, process), tmp_path / process["files"]["unit"]
        if process["kind"] == "broker":
            config = BrokerConfig.from_file(conf)
            assert config.broker_ip == process["host"]
            assert config.listen_port == process["ports"]["client"]
            sets.setdefault(process["settings"]["brokerName"], set()).add(process["host"])
        else:
            config = ControllerConfig.from_file(conf)
            assert config.node_id == int(process["name"].removeprefix("controller-n"))
        argv = unit_command(unit)
        script = Path(argv[0]).name
        assert script == f"rocketha-{process['kind']}" and script in scripts, argv
        module, _, function = scripts[script].partition(":")
        assert callable(getattr(importlib.import_module(module), function))
        assert argv[1:] == ["--conf", f"/etc/rocketha/{process['name']}.conf"]
        ports = (tmp_path / process["host"] / "etc" / "rocketha" / "PORTS").read_text()
        for port in process["ports"].values():
            assert f"{port}/tcp\t{process['name']}" in ports
    assert all(len(hosts) == 3 for hosts in sets.values()), sets  # one member per machine
    # two brokers on one host get different ports
    on_a = [p for p in plan if p["kind"] == "broker" and p["host"] == HOSTS[0]]
    assert len({p["ports"]["client"] for p in on_a}) == len(on_a) == 2


def test_a_plan_is_secured_unless_insecure(tmp_path: Path) -> None:
    assert run_plan(tmp_path / "secure", "--hosts", ",".join(HOSTS), "--replicas", "3",
                    "--controllers", "3") == 0
    out = tmp_path / "secure"
    plan = json.loads((out / "plan.json").read_text())["processes"]
    secret = dict(line.split("=", 1) for line in (out / "client" / "admin.credentials")
                  .read_text().splitlines() if "=" in line)["secretKey"]
    for process in plan:
        settings, host = process["settings"], process["host"]
        tls_dir = out / host / "etc" / "rocketha" / "tls"
        assert settings["tls.server.mode"] == "enforcing"
        assert settings["tls.server.need.client.auth"] == "require"
        assert settings["authenticationEnabled"] == settings["authorizationEnabled"] == "true"
        assert "allowInsecure" not in settings
        key = tls_dir / f"{process['name']}-key.pem"
        assert key.stat().st_mode & 0o777 == 0o600
        cert = x509.load_pem_x509_certificate((tls_dir / f"{process['name']}.pem").read_bytes())
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert sans.get_values_for_type(x509.UniformResourceIdentifier) \
            == [process["tls_identity"]]
        if process["kind"] == "controller":
            assert (out / host / "etc" / "rocketha" / "admin.secret").read_text().strip() \
                == secret
            assert settings["initAuthenticationUser"].startswith("admin:")
    # the secret is only in the 0600 secret files, never in a config, a unit or plan.json
    for path in out.rglob("*"):
        if path.is_file() and path.name not in ("admin.secret", "admin.credentials",
                                                "client.properties"):
            assert secret not in path.read_text(errors="replace"), path
        if path.is_file() and path.name.endswith(("-key.pem", ".secret", ".credentials",
                                                  ".properties")):
            assert path.stat().st_mode & 0o777 == 0o600, path
    assert not list((out / "ca").glob("*-key.pem"))[1:], "only the CA's own key stays in ca/"
    assert not any((out / host / "etc" / "rocketha" / "tls" / "ca-key.pem").exists()
                   for host in HOSTS)
    # a second plan into the same directory would mint a second CA: refused
    assert run_plan(out, "--hosts", ",".join(HOSTS), "--controllers", "3") == 2

    assert run_plan(tmp_path / "open", "--hosts", ",".join(HOSTS), "--replicas", "3",
                    "--controllers", "3", "--insecure") == 0
    plan = json.loads((tmp_path / "open" / "plan.json").read_text())["processes"]
    assert all(p["settings"]["allowInsecure"] == "true" and not any(
        k.startswith(("tls.", "authentication")) for k in p["settings"])
        for p in plan)
    assert not (tmp_path / "open" / "client").exists()


def test_optional_listeners_are_in_ports(tmp_path: Path) -> None:
    processes = plan_cluster(["a", "b", "c"], replicas=3, controllers=3,
                             broker_overrides={"metricsPort": "5557"},
                             controller_overrides={"metricsPort": "5558"})
    assert all(p["ports"]["metrics"] == (5557 if p["kind"] == "broker" else 5558)
               for p in processes)


def test_quorum_matches_the_local_cluster_tool() -> None:
    for replicas in range(2, 6):
        broker = next(p for p in plan_cluster([f"h{i}" for i in range(replicas)],
                                              replicas=replicas, controllers=1)
                      if p["kind"] == "broker")
        settings = broker["settings"]
        assert {k: settings[k] for k in QUORUM_KEYS if k in settings} \
            == cluster.quorum_defaults(replicas)


def test_ha_link_timers_bound_a_paused_masters_failover() -> None:
    """A SIGSTOPped master is replaced once its slaves' links end (haHousekeepingInterval of
    silence): both tools shorten RocketMQ's 20 s to 3 s, and --set still wins."""
    brokers = [p for p in plan_cluster(["a", "b", "c"], replicas=3, controllers=1)
               if p["kind"] == "broker"]
    assert all(p["settings"]["haHousekeepingInterval"] == "3000" for p in brokers)
    overridden = plan_cluster(["a", "b", "c"], replicas=3, controllers=1,
                              broker_overrides={"haHousekeepingInterval": "9000"})
    assert all(p["settings"]["haHousekeepingInterval"] == "9000"
               for p in overridden if p["kind"] == "broker")
    local = cluster._broker_settings(
        {"name": "broker-a-0", "set": "broker-a", "broker_id": 0, "port": 1, "ha_port": 2,
         "store_dir": "/x", "log_file": "/x.log"}, 3, {}, controller_addr="127.0.0.1:9")
    assert {k: local[k] for k in HA_LINK_TIMERS} == HA_LINK_TIMERS
    config = BrokerConfig.from_properties({**brokers[0]["settings"], "allowInsecure": "true"})
    assert config.ha.housekeeping_interval_ms == 3000


@pytest.mark.parametrize(("args", "flag"), [
    (["--hosts", "a,b", "--replicas", "3", "--controllers", "1"], "--replicas"),
    (["--hosts", "a,b,c", "--replicas", "3", "--controllers", "2"], "--controllers"),
    (["--hosts", "a,a,b", "--replicas", "1", "--controllers", "1"], "--hosts"),
    (["--hosts", "a,b,c", "--controllers", "1", "--set", "novalue"], "--set"),
])
def test_misuse_names_the_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                               args: list[str], flag: str) -> None:
    assert run_plan(tmp_path / "out", *args) == 2
    assert flag in capsys.readouterr().out
    assert not (tmp_path / "out").exists()


def test_planned_processes_run_on_three_hosts(tmp_path: Path, test_hosts) -> None:  # type: ignore
    network = test_hosts(3)
    addresses = [host.address for host in network.hosts]
    out = tmp_path / "plan"
    assert run_plan(out, "--hosts", ",".join(addresses), "--replicas", "3",
                    "--controllers", "3", "--data-dir", str(tmp_path / "data"),
                    "--set", "flushDiskType=ASYNC_FLUSH") == 0
    plan = json.loads((out / "plan.json").read_text())["processes"]
    venv_bin = Path(sys.executable).parent
    started: list[subprocess.Popen[bytes]] = []
    try:
        for process in sorted(plan, key=lambda p: p["kind"] != "controller"):
            argv = unit_command(out / process["files"]["unit"])
            host = network.hosts[addresses.index(process["host"])]
            command = [*host.launcher(), str(venv_bin / Path(argv[0]).name), "--conf",
                       str(installed_conf(out, process))]
            with (tmp_path / f"{process['name']}.log").open("wb") as log:
                started.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))
        brokers = [f"{a}:10911" for a in addresses]
        config = ClientConfig.from_properties(out / "client" / "client.properties")

        def full_master() -> dict[str, object] | None:
            for endpoint in brokers:
                try:
                    info = Admin(dataclasses.replace(
                        config, brokers=(endpoint,), controller=None, request_timeout_ms=1000,
                        retries_max=0)).broker_info()
                except RocketHAError:  # not up yet
                    info = {}
                if info.get("role") == "MASTER" and len(info.get("sync_state_set", ())) == 3:
                    return info
            return None

        wait_for(full_master, 90, "a master with 3 in its SyncStateSet")
        Admin(config).create_topic("planned", queues=2)
        with Producer(config) as producer:
            assert producer.send("planned", b"hello").status == "PUT_OK"
        # the same TLS without the admin's keys: refused (authentication is on)
        unsigned = dataclasses.replace(config, access_key=None, secret_key=None,
                                       credentials_file=None, retries_max=0)
        with pytest.raises(RocketHAError, match="UNAUTHENTICATED"):
            Admin(unsigned).create_topic("refused", queues=1)
    finally:
        for process in started:
            process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)
