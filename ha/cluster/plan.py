"""`rocketha-cluster plan`: the files to run a cluster on several real machines.

    rocketha-cluster plan --hosts a,b,c --replicas 3 --controllers 3 --out DIR
                          [--replica-sets N] [--set KEY=VALUE ...] [--controller-set KEY=VALUE ...]
                          [--install-dir /opt/rocketha] [--data-dir /var/lib/rocketha]
                          [--user rocketha] [--insecure]

Writes, for each host, a tree to copy onto that machine's root (`rsync -a DIR/a/ root@a:/`):

    DIR/<host>/etc/rocketha/<name>.conf                 broker or controller config
    DIR/<host>/etc/systemd/system/rocketha-<name>.service   one unit per process
    DIR/<host>/etc/rocketha/PORTS                        TCP ports to open on this machine
    DIR/<host>/etc/rocketha/tls/                         ca.pem, crl.pem, <name>.pem, <name>-key.pem
    DIR/<host>/etc/rocketha/admin.secret                 (controller hosts) the admin's secret
    DIR/client/                                          client.properties, admin.credentials,
                                                         the tools' certificate (the operator's)
    DIR/ca/                                              the cluster CA's key: keep it offline
    DIR/plan.json                                       every process: host, ports, files

Secured like `rocketha-cluster up` unless `--insecure`: mutual TLS on every link with member
certificates of the plan's own CA (identities as `up` gives them, the host as IP/DNS SAN),
authentication and authorization on, and a generated Super user `admin` that the controllers
create at their first start (initAuthenticationUser; its secret only in admin.secret and in
DIR/client). Secrets and keys are written 0600; the units run as `--user`, so after copying,
`chown -R <user>: /etc/rocketha` on each machine. `--insecure` writes plaintext configs with
allowInsecure=true (they may listen beyond loopback only because they say so).

Placement: controller n<i> on host i (so `--controllers` <= number of hosts); the brokers of
replica set s (`broker-a`, `broker-b`, ...) with brokerId i on host (s + i) mod hosts, so no two
members of one set share a machine (`--replicas` <= number of hosts). Ports: RocketMQ's
defaults: a broker's listenPort 10911 and haListenPort 10912, plus 10 for each further broker
on the same host; a controller's client port 9878 and Raft port 9880.

Addresses: each host's name as given is its advertised address (brokerIP1 and the
controllers' peer list and controllerAddr), so give names or addresses the other machines
and the clients resolve to that machine; listeners bind to it (set `--set bindAddress=0.0.0.0`
to bind every interface). Every broker runs in controller mode with the quorum
`rocketha-cluster up` uses (a majority of the set acks a put, adaptive degradation).
Nothing here checks the machines: the configs are checked by the same loaders the processes
use when they start (tests/integration/test_cluster_plan.py).
"""

from __future__ import annotations

import argparse
import json
import secrets
import string
from pathlib import Path
from typing import Any

from conf import format_property
from conf.tls import broker_identity, client_identity, controller_identity
from ha.cluster.certs import ensure_ca
from ha.cluster.cli import CONTROLLER_COUNTS, REPLICA_SETS_MAX
from ha.cluster.processes import write_private_text

__all__ = ["SECURED_BROKER_DEFAULTS", "PlanError", "plan_cluster", "run", "unit_text", "write_plan"]

BROKER_PORT = 10911  # RocketMQ's listenPort; haListenPort is listenPort + 1
BROKER_PORT_STEP = 10  # a further broker on the same host
CONTROLLER_PORT = 9878  # client (Arrow Flight) port
CONTROLLER_RAFT_PORT = 9880
CLUSTER_NAME = "RocketHACluster"
ETC_DIR = "/etc/rocketha"  # where a host's tree puts the configs (units name it too)
ADMIN_NAME = "admin"
CLIENT_CERT_NAME = "client-admin"


EXTRA_PORT_KEYS = {"metricsPort": "metrics", "consolePort": "console"}  # 0 = off


def _extra_ports(settings: dict[str, str]) -> dict[str, int]:
    """The optional listeners a `--set` / `--controller-set` turned on, for PORTS."""
    values = {role: settings.get(key, "0") for key, role in EXTRA_PORT_KEYS.items()}
    return {role: int(value) for role, value in values.items()
            if value.isdigit() and int(value) > 0}


class PlanError(ValueError):
    """The plan cannot be made as asked (the message names the flag)."""


def _quorum(replicas: int) -> dict[str, str]:
    """What `rocketha-cluster up` gives a set when --set names no quorum key (ha/cluster/main.py
    quorum_defaults: a majority, adaptive degradation)."""
    if replicas == 1:
        return {}
    return {"inSyncReplicas": str(replicas // 2 + 1), "enableAutoInSyncReplicas": "true",
            "minInSyncReplicas": "1"}


# A slave reports a lost master (and only then may the controller replace it:
# controller/election.py positions_final) when its HA link ends: at once for a crash, after
# haHousekeepingInterval of silence for a stopped or cut-off master. RocketMQ's 20 s would make
# that the failover time of a SIGSTOPped master; 3 s matches controllerHeartbeatTimeoutMs.
# The link's keep-alive (haSendHeartbeatInterval, both ways) must be well inside it.
HA_LINK_TIMERS = {"haSendHeartbeatInterval": "1000", "haHousekeepingInterval": "3000"}

QUORUM_KEYS = frozenset({"inSyncReplicas", "minInSyncReplicas", "enableAutoInSyncReplicas",
                         "allAckInSyncStateSet"})


# What a secured cluster's brokers get unless --set says otherwise: no topic is created by its
# first produce (RocketMQ's production advice). With authentication on, creating a topic is an
# act the ACLs decide (Create), and a typo in a producer's topic name should fail with a hint,
# not make a new 8-queue topic. An --insecure development cluster keeps the broker default
# (true), so a first produce just works there.
SECURED_BROKER_DEFAULTS = {"autoCreateTopicEnable": "false"}


def _security(name: str, kind: str, admin_access_key: str | None) -> dict[str, str]:
    """The tls.* and auth keys of one member (paths as installed under ETC_DIR); with no
    admin key (`--insecure`), allowInsecure=true instead."""
    if admin_access_key is None:
        return {"allowInsecure": "true"}
    tls = f"{ETC_DIR}/tls"
    settings = {"tls.server.mode": "enforcing", "tls.server.need.client.auth": "require",
                "tls.server.certPath": f"{tls}/{name}.pem",
                "tls.server.keyPath": f"{tls}/{name}-key.pem",
                "tls.server.trustCertPath": f"{tls}/ca.pem",
                "tls.crlPath": f"{tls}/crl.pem",  # revocation: docs/security.md
                "authenticationEnabled": "true", "authorizationEnabled": "true"}
    if kind == "broker":
        settings.update(SECURED_BROKER_DEFAULTS)
    if kind == "controller":
        settings.update({"initAuthenticationUser": f"{ADMIN_NAME}:{admin_access_key}",
                         "initAuthenticationUserSecretFile": f"{ETC_DIR}/admin.secret"})
    return settings


def plan_cluster(hosts: list[str], *, replicas: int, controllers: int, replica_sets: int = 1,
                 broker_overrides: dict[str, str] | None = None,
                 controller_overrides: dict[str, str] | None = None,
                 data_dir: str = "/var/lib/rocketha",
                 admin_access_key: str | None = None) -> list[dict[str, Any]]:
    """Every process of the cluster: kind, name, host, ports, config settings, and (secured:
    `admin_access_key` given) its certificate identity under "tls_identity"."""
    if not hosts or len(set(hosts)) != len(hosts) or any(not h.strip() for h in hosts):
        raise PlanError(f"--hosts {','.join(hosts)!r}: distinct, non-empty names")
    if controllers not in CONTROLLER_COUNTS[1:] or controllers > len(hosts):
        raise PlanError(f"--controllers {controllers}: one of {CONTROLLER_COUNTS[1:]}, at most "
                        f"the {len(hosts)} hosts (one controller per machine)")
    if not 1 <= replicas <= len(hosts):
        raise PlanError(f"--replicas {replicas}: 1 to the {len(hosts)} hosts (no two members "
                        "of a set on one machine)")
    if not 1 <= replica_sets <= REPLICA_SETS_MAX:
        raise PlanError(f"--replica-sets {replica_sets}: 1 to {REPLICA_SETS_MAX}")
    processes: list[dict[str, Any]] = []
    ids = range(1, controllers + 1)
    peers = ";".join(f"n{i}-{hosts[i - 1]}:{CONTROLLER_RAFT_PORT}" for i in ids)
    controller_addr = ";".join(f"{hosts[i - 1]}:{CONTROLLER_PORT}" for i in ids)
    for node_id in ids:
        name = f"controller-n{node_id}"
        identity = controller_identity(node_id)
        settings = {"controllerDLegerPeers": peers, "controllerDLegerSelfId": f"n{node_id}",
                    "controllerAddr": controller_addr,
                    "controllerStorePath": f"{data_dir}/{name}",
                    **_security(name, "controller", admin_access_key),
                    **(controller_overrides or {})}
        processes.append({"kind": "controller", "name": name, "host": hosts[node_id - 1],
                          "ports": {"client": CONTROLLER_PORT, "raft": CONTROLLER_RAFT_PORT,
                                    **_extra_ports(settings)},
                          "settings": settings, "tls_identity": identity})
    on_host = dict.fromkeys(hosts, 0)
    overrides = broker_overrides or {}
    for set_index in range(replica_sets):
        set_name = f"broker-{string.ascii_lowercase[set_index]}"
        for broker_id in range(replicas):
            host = hosts[(set_index + broker_id) % len(hosts)]
            port = BROKER_PORT + BROKER_PORT_STEP * on_host[host]
            on_host[host] += 1
            name = set_name if replicas == 1 else f"{set_name}-{broker_id}"
            settings = {"brokerClusterName": CLUSTER_NAME, "brokerName": set_name,
                        "brokerId": str(broker_id), "brokerIP1": host,
                        "listenPort": str(port), "storePathRootDir": f"{data_dir}/{name}",
                        "enableControllerMode": "true", "controllerAddr": controller_addr,
                        "brokerRole": "SYNC_MASTER"}
            identity = broker_identity(set_name, f"{host}:{port}")
            settings.update(_security(name, "broker", admin_access_key))
            if replicas > 1:
                settings.update({"totalReplicas": str(replicas), "haListenPort": str(port + 1),
                                 **HA_LINK_TIMERS})
            settings.update(overrides)
            if not QUORUM_KEYS & overrides.keys():
                settings.update(_quorum(replicas))
            ports = {"client": port, **({"ha": port + 1} if replicas > 1 else {}),
                     **_extra_ports(settings)}
            processes.append({"kind": "broker", "name": name, "host": host, "ports": ports,
                              "settings": settings, "tls_identity": identity})
    return processes


def unit_text(process: dict[str, Any], *, install_dir: str, user: str,
              data_dir: str = "/var/lib/rocketha") -> str:
    """A systemd unit running one process from the install's venv (entry points of
    pyproject.toml: rocketha-broker / rocketha-controller). Under /var/lib, systemd makes the
    data directory (StateDirectory) owned by `user`; elsewhere it must exist."""
    kind, name = process["kind"], process["name"]
    state = data_dir.removeprefix("/var/lib/").strip("/")
    state_lines = [f"StateDirectory={state}"] if data_dir.startswith("/var/lib/") else []
    return "\n".join([
        "[Unit]",
        f"Description=rocketha {kind} {name}",
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"User={user}",
        f"ExecStart={install_dir}/venv/bin/rocketha-{kind} --conf /etc/rocketha/{name}.conf",
        "Restart=on-failure",
        "RestartSec=2",
        "TimeoutStopSec=60",  # a clean stop flushes and syncs the store
        "KillSignal=SIGTERM",
        "LimitNOFILE=65536",
        *state_lines,
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def _write_secrets(processes: list[dict[str, Any]], out: Path, admin_access_key: str
                   ) -> list[Path]:
    """The CA (DIR/ca, never copied to a host), each member's certificate and key and the CA
    certificate in its host's tls/, the admin's secret on the controllers' hosts, and the
    operator's DIR/client (client.properties, admin.credentials, the tools' certificate)."""
    ca = ensure_ca(out / "ca")
    secret = secrets.token_urlsafe(24)
    written: list[Path] = []

    def place(source: Path, target: Path) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        write_private_text(target, source.read_text())
        written.append(target)

    for process in processes:
        etc = out / process["host"] / ETC_DIR.lstrip("/")
        issued = ca.issue(process["name"], process["tls_identity"], [process["host"]])
        place(issued.cert_path, etc / "tls" / f"{process['name']}.pem")
        place(issued.key_path, etc / "tls" / f"{process['name']}-key.pem")
        issued.key_path.unlink()  # the member's key lives only in its host's tree
        place(ca.cert_path, etc / "tls" / "ca.pem")
        place(ca.ensure_crl(), etc / "tls" / "crl.pem")
        if process["kind"] == "controller":
            write_private_text(etc / "admin.secret", secret + "\n")
            written.append(etc / "admin.secret")
    client = (out / "client").resolve()
    client.mkdir(parents=True, exist_ok=True)
    issued = ca.issue(CLIENT_CERT_NAME, client_identity(ADMIN_NAME), ["127.0.0.1"])
    for source in (ca.cert_path, issued.cert_path, issued.key_path):
        place(source, client / source.name)
    issued.key_path.unlink()
    credentials = f"accessKey={admin_access_key}\nsecretKey={secret}\n"
    write_private_text(client / "admin.credentials",
                       f"# the cluster's Super user {ADMIN_NAME}\n{credentials}")
    controller_addr = next(p["settings"]["controllerAddr"] for p in processes
                           if p["kind"] == "controller")
    write_private_text(client / "client.properties", "\n".join([
        "# rocketha client settings, written by rocketha-cluster plan (mode 0600); the paths",
        "# are where plan wrote them: edit them if this directory moves",
        f"controllerAddr={controller_addr}",
        f"tls.client.trustCertPath={client / 'ca.pem'}",
        f"tls.client.certPath={client / (CLIENT_CERT_NAME + '.pem')}",
        f"tls.client.keyPath={client / (CLIENT_CERT_NAME + '-key.pem')}",
        f"# the Super user {ADMIN_NAME}", credentials]))
    written += [client / "admin.credentials", client / "client.properties"]
    return written


def write_plan(processes: list[dict[str, Any]], out: Path, *, install_dir: str,
               user: str, data_dir: str = "/var/lib/rocketha",
               admin_access_key: str | None = None) -> list[Path]:
    """Write the per-host trees and plan.json (with `admin_access_key`: the certificates and
    secrets of a secured plan too); returns the files written."""
    written: list[Path] = []
    by_host: dict[str, list[dict[str, Any]]] = {}
    for process in processes:
        by_host.setdefault(process["host"], []).append(process)
        root = out / process["host"]
        conf = root / "etc" / "rocketha" / f"{process['name']}.conf"
        unit = root / "etc" / "systemd" / "system" / f"rocketha-{process['name']}.service"
        conf.parent.mkdir(parents=True, exist_ok=True)
        unit.parent.mkdir(parents=True, exist_ok=True)
        lines = [(f"# {process['kind']} {process['name']} on {process['host']}, written by "
                  "rocketha-cluster plan")]
        lines += [format_property(key, value) for key, value in process["settings"].items()]
        conf.write_text("\n".join(lines) + "\n")
        unit.write_text(unit_text(process, install_dir=install_dir, user=user,
                                  data_dir=data_dir))
        process["files"] = {"conf": str(conf.relative_to(out)), "unit": str(unit.relative_to(out))}
        written += [conf, unit]
    for host, members in by_host.items():
        ports = out / host / "etc" / "rocketha" / "PORTS"
        lines = [(f"# TCP ports to open on {host} (from clients, Spark executors and the "
                  "other hosts of the cluster)")]
        for process in members:
            for role, port in process["ports"].items():
                lines.append(f"{port}/tcp\t{process['name']} {role}")
        ports.write_text("\n".join(lines) + "\n")
        written.append(ports)
    if admin_access_key is not None:
        written += _write_secrets(processes, out, admin_access_key)
    (out / "plan.json").write_text(json.dumps({"processes": processes}, indent=1))
    written.append(out / "plan.json")
    return written


def _pairs(pairs: list[str], flag: str) -> dict[str, str]:
    settings = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise PlanError(f"{flag} expects KEY=VALUE, got {pair!r}")
        settings[key.strip()] = value.strip()
    return settings


def run(args: argparse.Namespace) -> int:
    """`plan`: prints one line per process, then where the files are."""
    hosts = [h.strip() for h in args.hosts.split(",")]
    admin_access_key = None if args.insecure else f"rocketha-{secrets.token_hex(6)}"
    try:
        processes = plan_cluster(
            hosts, replicas=args.replicas, controllers=args.controllers,
            replica_sets=args.replica_sets, broker_overrides=_pairs(args.set, "--set"),
            controller_overrides=_pairs(args.controller_set, "--controller-set"),
            data_dir=args.data_dir, admin_access_key=admin_access_key)
    except PlanError as err:
        print(f"rocketha-cluster plan: {err}")
        return 2
    if admin_access_key is not None and (args.out / "ca").exists():
        print(f"rocketha-cluster plan: {args.out}/ca exists: a new plan gets a new CA "
              "(choose another --out)")
        return 2
    write_plan(processes, args.out, install_dir=args.install_dir, user=args.user,
               data_dir=args.data_dir, admin_access_key=admin_access_key)
    for process in processes:
        ports = ", ".join(f"{role} {port}" for role, port in process["ports"].items())
        print(f"{process['host']}\t{process['name']}\t{ports}")
    print(f"wrote {args.out}/<host>/etc/... for {len(set(hosts))} hosts and {args.out}/plan.json")
    if admin_access_key is not None:
        print(f"secured: copy each tree, then `chown -R {args.user}: {ETC_DIR}` there (keys and "
              f"secrets are 0600); tools use {args.out}/client/client.properties; keep "
              f"{args.out}/ca (the CA key) off the hosts")
    return 0
