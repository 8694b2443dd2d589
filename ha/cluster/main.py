"""`rocketha-cluster`: run a local cluster of brokers on 127.0.0.1 under one directory.

    rocketha-cluster up --dir DIR [--replica-sets N] [--replicas R] [--controllers C]
                        [--set key=value ...] [--set-file FILE ...] [--unset KEY ...]
                        [--controller-set key=value ...] [--hosts] [--insecure]
                        [--grpc-port P] [--grpc-set key=value ...]
    rocketha-cluster status --dir DIR [--json]
    rocketha-cluster down --dir DIR
    rocketha-cluster add-set --dir DIR      one more replica set (ha/cluster/add_set.py)
    rocketha-cluster drop-set --dir DIR     the last set, once drained (ha/cluster/drop_set.py)
    rocketha-cluster plan --hosts a,b,c --replicas 3 --controllers 3 --out DIR   (several
                          machines: configs and systemd units to copy; ha/cluster/plan.py)

Layout under DIR: `conf/<name>.conf` (RocketMQ key=value, free ports chosen once and kept),
`data/<name>/` (store), `logs/<name>.log`, `run/<name>.pid`, and `cluster.json` (what `up`
created; it and the conf files are mode 0600, as they may hold `--set-file` secrets such as
tieredS3SecretAccessKey, which `--set` refuses: a command line is visible to every user), so a
second `up` restarts what is not running and keeps data and ports). Brokers run detached (own
session), so this tool can exit. `--controllers C` (1, 3 or 5) also runs a Raft group of
controllers, started before the brokers (ha/cluster/controllers.py); `status` lists them with their
role (leader/follower). With controllers, every broker runs in controller mode
(enableControllerMode, controllerAddr): the controller names each set's master and changes it when
the master dies (`status --json`: replica_set, role, controller_role).

With controllers, `up` also starts the RocketMQ 5 gRPC endpoint, one `rocketha-proxy` for the
cluster (ha/cluster/proxy.py; `--grpc-port 0`: none); `status --json` names it `grpc_endpoint`.
Without the rocketmq extra it says so in one line and starts none (`--grpc-port N`: refused).

Security (ha/cluster/security.py, ha/cluster/auth.py) is on unless the first `up` says
`--insecure` (later `up`s keep the choice): a cluster CA and member certificates under
`DIR/tls/` (every link with mutual TLS), and authentication and authorization with a
generated Super user "admin" (keys in DIR/admin.credentials, mode 0600). `up` writes
`DIR/client.properties` (0600: the controllers' or brokers' addresses, the trust certificate,
the tools' client certificate and the admin's keys), which `rocketha-admin --client-config`,
the pipelines, the Spark option clientConfig and `ClientConfig.from_properties` read.

`--hosts` (root): each controller and broker runs on its own test host, a network namespace
with an address from 198.18.0.0/15 (ha/cluster/hosts.py); every address in the configs and in
`status` is then that host's, and `down` removes the hosts.

Replica sets (`--replicas R`, R > 1): each of the N sets `broker-x` runs R brokers named
`broker-x-<brokerId>`. Static roles (no controllers): brokerId 0 is the master (brokerRole
SYNC_MASTER unless `--set brokerRole=ASYNC_MASTER`), the others are SLAVEs following the
master's haListenPort. Controller mode: each broker has its own haListenPort, and roles come
from the controller. `totalReplicas` defaults to R; quorum keys (inSyncReplicas,
minInSyncReplicas, ...) come from `--set` and apply to every member; when `--set` names none, a set
of R > 1 acknowledges a put once a majority holds it, with adaptive degradation (`quorum_defaults`).
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from conf import PropertiesError, format_property, parse_properties
from conf.extras import extra_refusal
from ha.broker.peer import broker_info
from ha.cluster import add_set, cert_ops, drop_set, rolling
from ha.cluster import auth as cluster_auth
from ha.cluster import plan as cluster_plan
from ha.cluster.cli import REPLICA_SETS_MAX, REPLICAS_MAX, build_parser
from ha.cluster.controllers import LocalControllers
from ha.cluster.hosts import host_of, hosts_mode, launcher_of, place_on_hosts, remove_hosts
from ha.cluster.overrides import (
    broker_overrides_problem,
    controller_overrides_problem,
    unset_overrides,
)
from ha.cluster.processes import (
    POLL_INTERVAL_S,
    free_port,
    pid_from_file,
    ports_in,
    stop_pid_file,
    write_private_text,
)
from ha.cluster.proxy import LocalProxy
from ha.cluster.security import (
    choose_tls,
    client_tls,
    member_tls_settings,
    proxy_tls_settings,
    write_client_properties,
)

__all__ = ["main", "run"]

STARTUP_TIMEOUT_S = 30.0  # for a master per replica set, once its brokers answer
# A broker answers only after recovering its log (a CRC scan of the tail after an unclean
# stop): on a large store or a loaded host that took 38 s (chaos seed 303, a store on the
# power-loss FUSE layer at load 40). The wait ends at once if the process exits.
BROKER_STARTUP_TIMEOUT_S = 120.0
SECRET_KEY = re.compile(r"(?i)secret|password|token")  # keys never taken from --set


class Cluster:
    def __init__(self, directory: Path) -> None:
        self.directory = directory.resolve()
        self.manifest_path = self.directory / "cluster.json"
        self._started: dict[str, subprocess.Popen[bytes]] = {}  # by this command, by name

    def load(self) -> dict[str, Any]:
        if not self.manifest_path.exists():
            return {"brokers": []}
        return json.loads(self.manifest_path.read_text())

    def save(self, manifest: dict[str, Any]) -> None:
        write_private_text(self.manifest_path, json.dumps(manifest, indent=1))

    def plan(self, broker_count: int, overrides: dict[str, str], replicas: int = 1,
             controller_addr: str = "", *, hosts: bool = False,
             spare_hosts: int = 0) -> dict[str, Any]:
        manifest = self.load()
        if hosts:
            manifest.setdefault("hosts", {})
        replicas = manifest.setdefault("replicas", replicas)
        # `--set` overrides are remembered, so a later `up` (a restart) keeps them.
        manifest["overrides"] = {**manifest.get("overrides", {}), **overrides}
        overrides = manifest["overrides"]
        existing = {broker["name"] for broker in manifest["brokers"]}
        for index in range(broker_count):
            set_name = f"broker-{string.ascii_lowercase[index]}"
            shared_ha_port = free_port() if replicas > 1 else 0
            for broker_id in range(replicas):
                # static roles: the master's port, known to its slaves; controller mode: any
                # broker may become master, so each listens on its own
                ha_port = free_port() if replicas > 1 and controller_addr else shared_ha_port
                name = set_name if replicas == 1 else f"{set_name}-{broker_id}"
                if name in existing:
                    continue
                manifest["brokers"].append({
                    "name": name, "set": set_name, "broker_id": broker_id,
                    "port": free_port(), "ha_port": ha_port,
                    "conf": str(self.directory / "conf" / f"{name}.conf"),
                    "store_dir": str(self.directory / "data" / name),
                    "log_file": str(self.directory / "logs" / f"{name}.log"),
                    "pid_file": str(self.directory / "run" / f"{name}.pid"),
                })
        for broker in manifest["brokers"]:
            if not broker.get("metrics_port"):  # kept across restarts
                broker["metrics_port"] = free_port(ports_in(manifest))
        for sub in ("conf", "data", "logs", "run"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        if hosts_mode(manifest):
            place_on_hosts(self.directory, manifest, spare_hosts)
        masters = {b["set"]: host_of(b) for b in manifest["brokers"] if b.get("broker_id") == 0}
        for broker in manifest["brokers"]:
            settings = _broker_settings(broker, replicas, overrides, controller_addr,
                                        masters.get(broker.get("set", "")))
            if manifest.get("tls"):  # secured: a --set of the same key wins
                settings.update({key: value for key, value in
                                 cluster_plan.SECURED_BROKER_DEFAULTS.items()
                                 if key not in overrides})
            settings.update(member_tls_settings(self.directory, manifest, broker))
            settings.update(cluster_auth.broker_settings(
                self.directory, broker["name"], controller_mode=bool(controller_addr),
                member_certificates=bool(manifest.get("tls"))))
            lines = ["# written by rocketha-cluster; --set overrides apply to every broker"]
            lines += [format_property(key, value) for key, value in settings.items()]
            write_private_text(broker["conf"], "\n".join(lines) + "\n")
        self.save(manifest)
        return manifest

    def pid_of(self, broker: dict[str, Any]) -> int | None:
        return pid_from_file(broker["pid_file"])

    def start(self, broker: dict[str, Any]) -> int:
        with open(broker["log_file"], "ab") as log:  # the child has its own descriptor
            process = subprocess.Popen(
                [*launcher_of(broker), sys.executable, "-m", "ha.broker", "--conf",
                 broker["conf"]],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True, cwd=str(Path(__file__).resolve().parents[1]),
            )
        Path(broker["pid_file"]).write_text(f"{process.pid}\n")
        self._started[broker["name"]] = process
        return process.pid

    def _exit_status(self, broker: dict[str, Any]) -> str:
        """' (exit code N)' or ' (killed by SIGX)' for a broker this command started (a
        crash in native code prints no Python traceback), else ''."""
        process = self._started.get(broker["name"])
        code = None if process is None else process.poll()
        if code is None:
            return ""
        if code < 0:
            return f" (killed by {signal.Signals(-code).name})"
        return f" (exit code {code})"

    def wait_ready(self, broker: dict[str, Any]) -> None:
        deadline = time.monotonic() + BROKER_STARTUP_TIMEOUT_S
        endpoint = f"{host_of(broker)}:{broker['port']}"
        while time.monotonic() < deadline:
            if self.pid_of(broker) is None and broker["name"] not in self._started:
                # alive when `up` looked, but stopping (a SIGTERMed master hands over first,
                # then stops): it is gone now, so start it as `up` would have
                self.start(broker)
                continue
            if self.pid_of(broker) is None:
                tail = Path(broker["log_file"]).read_text(errors="replace")[-1500:]
                raise SystemExit(f"rocketha-cluster: {broker['name']} exited"
                                 f"{self._exit_status(broker)}; log tail:\n{tail}")
            if broker_info(endpoint, 1.0, client_tls(self.directory, self.load()),
                           cluster_auth.admin_credentials(self.directory)) is not None:
                return
            time.sleep(POLL_INTERVAL_S)
        tail = Path(broker["log_file"]).read_text(errors="replace")[-1500:]
        raise SystemExit(f"rocketha-cluster: {broker['name']} (pid {self.pid_of(broker)}) did "
                         f"not answer on {endpoint} within {BROKER_STARTUP_TIMEOUT_S:.0f}s; log "
                         f"tail:\n{tail}")

    def status(self) -> list[dict[str, Any]]:
        processes = []
        manifest = self.load()
        tls = client_tls(self.directory, manifest)
        for broker in manifest["brokers"]:
            pid = self.pid_of(broker)
            endpoint = f"{host_of(broker)}:{broker['port']}"
            info = (broker_info(endpoint, 2.0, tls, cluster_auth.admin_credentials(
                self.directory)) if pid is not None else None)
            processes.append({
                "name": broker["name"], "kind": "broker", "pid": pid,
                "broker_id": broker.get("broker_id", 0),
                "replica_set": broker.get("set", broker["name"]),
                "controller_role": ((info or {}).get("controller") or {}).get("role"),
                "role": (info or {}).get("role", "UNKNOWN" if pid else "DOWN"),
                "broker_role": (info or {}).get("broker_role", ""),
                "master_epoch": (info or {}).get("master_epoch", -1),
                "max_log_position": (info or {}).get("max_log_position", -1),
                "confirm_log_position": (info or {}).get("confirm_log_position", -1),
                "version": (info or {}).get("version"),
                "endpoint": endpoint, "store_dir": broker["store_dir"],
                "log_file": broker["log_file"], "alive": info is not None,
                "metrics_endpoint": _metrics_endpoint(broker, bool(manifest.get("tls"))),
            })
        return processes

    def wait_masters(self) -> list[str]:
        """Controller mode: wait until each replica set has one MASTER; one line per set."""
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while True:
            brokers = self.status()
            sets = sorted({b["replica_set"] for b in brokers})
            masters = {s: [b for b in brokers if b["replica_set"] == s and b["role"] == "MASTER"]
                       for s in sets}
            if all(len(found) == 1 for found in masters.values()):
                return [f"{s} master {found[0]['name']} {found[0]['endpoint']}"
                        for s, found in masters.items()]
            if time.monotonic() >= deadline:
                missing = [s for s, found in masters.items() if len(found) != 1]
                raise SystemExit(f"rocketha-cluster: no master for {missing} within "
                                 f"{STARTUP_TIMEOUT_S:.0f}s (see logs/; `up --no-wait` skips "
                                 "this wait)")
            time.sleep(POLL_INTERVAL_S * 4)

    def stop(self, broker: dict[str, Any]) -> bool:
        return stop_pid_file(broker["pid_file"])


def _metrics_endpoint(process: dict[str, Any], secured: bool) -> str | None:
    port = process.get("metrics_port")  # a secured member serves it over TLS only
    scheme = "https" if secured else "http"
    return f"{scheme}://{host_of(process)}:{port}/metrics" if port else None


def _broker_settings(broker: dict[str, Any], replicas: int, overrides: dict[str, str],
                     controller_addr: str = "", master_host: str | None = None
                     ) -> dict[str, str]:
    settings = {"brokerClusterName": "LocalCluster",
                "brokerName": broker.get("set", broker["name"]),
                "brokerId": str(broker.get("broker_id", 0)), "brokerIP1": host_of(broker),
                "listenPort": str(broker["port"]), "storePathRootDir": broker["store_dir"]}
    if broker.get("metrics_port"):
        settings["metricsPort"] = str(broker["metrics_port"])
    settings["logFile"] = broker["log_file"]  # rotated by size (logFileBytesMax)
    if replicas > 1:
        settings["totalReplicas"] = str(replicas)
        settings["haListenPort"] = str(broker["ha_port"])
    if controller_addr:
        settings["enableControllerMode"] = "true"
        settings["controllerAddr"] = controller_addr
        if replicas > 1:
            settings.update(cluster_plan.HA_LINK_TIMERS)  # a paused master's failover time
    settings.update(overrides)
    # a quorum key in --set: exactly what was said
    if replicas > 1 and not cluster_plan.QUORUM_KEYS & overrides.keys():
        settings.update(quorum_defaults(replicas))
    if controller_addr:
        settings.setdefault("brokerRole", "SYNC_MASTER")  # the role itself comes at runtime
    elif replicas > 1 and broker["broker_id"] != 0:
        settings["brokerRole"] = "SLAVE"
        settings["haMasterAddress"] = f"{master_host or host_of(broker)}:{broker['ha_port']}"
    elif replicas > 1:
        settings.setdefault("brokerRole", "SYNC_MASTER")
    return settings


def quorum_defaults(replicas: int) -> dict[str, str]:
    """The quorum a replica set of `replicas` brokers gets when `--set` names none of
    plan.QUORUM_KEYS (naming one means: the brokers' defaults for the others, as in RocketMQ).

    Why not the brokers' own defaults (RocketMQ's inSyncReplicas=1): with them a put is
    acknowledged once the master alone holds it, so any failover (a crash, a pause, a
    partition) may drop the last acknowledged messages, which is what the fault run of issue
    15 showed (2 and 4 of ~117,000). A majority with adaptive degradation acknowledges a put
    once a majority holds it, and degrades to fewer only when the controller has accepted
    the smaller SyncStateSet, which then is the only set an election may pick from, so no
    failover loses an acknowledged message, and a set that lost its slaves keeps
    accepting writes."""
    return {"inSyncReplicas": str(replicas // 2 + 1), "enableAutoInSyncReplicas": "true",
            "minInSyncReplicas": "1"}


def _parse_overrides(pairs: list[str], parser: argparse.ArgumentParser,
                     files: list[Path] | None = None) -> dict[str, str]:
    """`--set key=value` pairs, then the lines of each `--set-file` (which may hold secrets:
    a secret key given with --set is refused, since `ps` shows every command line)."""
    overrides = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            parser.error(f"--set expects key=value, got {pair!r}")
        if SECRET_KEY.search(key):
            parser.error(f"--set {key.strip()}=...: a secret on the command line is visible "
                         "to every user (ps); put it in a file given with --set-file")
        overrides[key.strip()] = value.strip()
    for path in files or []:
        try:
            text = path.read_text()
        except OSError as err:
            parser.error(f"--set-file {path}: {err.strerror}")
        try:
            overrides.update(parse_properties(text, f"--set-file {path}"))
        except PropertiesError as err:
            parser.error(str(err))
    return overrides


def _check_replicas(args: argparse.Namespace, cluster: Cluster,
                    parser: argparse.ArgumentParser) -> None:
    """`--replicas` defaults to what the cluster has; a different value cannot be honoured."""
    existing = cluster.load().get("replicas")
    if args.replicas is None:
        args.replicas = existing or 1
    if not 1 <= args.replicas <= REPLICAS_MAX:
        parser.error(f"--replicas must be 1..{REPLICAS_MAX}")
    if existing is not None and args.replicas != existing:
        raise SystemExit(f"rocketha-cluster: this cluster has {existing} broker(s) per "
                         f"replica set; it cannot become {args.replicas} (down, then up in a "
                         "new --dir)")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    return run(parser.parse_args(argv), parser)


def run(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """The parsed command (ha/cluster/cli.py parses; ha/cluster_entry.py parses first)."""
    if args.command == "plan":
        return cluster_plan.run(args)
    if args.command == "certs":
        return cert_ops.run(args)
    cluster = Cluster(args.dir)
    if args.command == "restart":
        return rolling.run(args, cluster)
    if args.command == "add-set":
        return add_set.run(args, cluster)
    if args.command == "drop-set":
        return drop_set.run(args, cluster)
    if (args.command == "up" and args.spare_hosts
            and not (args.hosts or hosts_mode(cluster.load()))):
        parser.error("--spare-hosts: only with --hosts")
    controllers = LocalControllers(cluster.directory)
    if args.command == "up":
        _check_replicas(args, cluster, parser)
        # misuse (a secret on --set) is refused before anything is written
        broker_overrides = _parse_overrides(args.set, parser, args.set_file)
        controller_overrides = _parse_overrides(args.controller_set, parser)
        manifest = cluster.load()
        # what later ups keep is checked before it is saved (ha/cluster/overrides.py)
        kept, problem = unset_overrides(manifest.get("overrides", {}), args.unset)
        problem = problem or broker_overrides_problem({**kept, **broker_overrides},
                                                      manifest.get("overrides", {}),
                                                      args.replicas)
        problem = problem or controller_overrides_problem(controller_overrides)
        if problem:
            parser.error(problem)
        manifest["overrides"] = kept
        choose_tls(manifest, args.insecure)
        cluster.directory.mkdir(parents=True, exist_ok=True)
        cluster.save(manifest)
        # authentication follows the same choice (a cluster from before security: neither)
        if cluster_auth.prepare(cluster.directory, insecure=not manifest["tls"]):
            print(f"rocketha-cluster: TLS and authentication on; client settings and the "
                  f"admin user's keys are in {cluster.directory / 'client.properties'}",
                  file=sys.stderr)
        for line in controllers.up(args.controllers, controller_overrides, hosts=args.hosts):
            print(line)
    if args.command == "up":
        replica_sets = 1 if args.replica_sets is None else args.replica_sets
        if not 1 <= replica_sets <= REPLICA_SETS_MAX:
            parser.error(f"--replica-sets must be 1..{REPLICA_SETS_MAX}")
        controller_addr = ";".join(c["endpoint"] for c in controllers.status())
        manifest = cluster.plan(replica_sets, broker_overrides,
                                args.replicas, controller_addr, hosts=args.hosts,
                                spare_hosts=args.spare_hosts)
        for broker in manifest["brokers"]:
            if cluster.pid_of(broker) is None:
                cluster.start(broker)
        for broker in manifest["brokers"]:
            cluster.wait_ready(broker)
            print(f"{broker['name']} {host_of(broker)}:{broker['port']}")
        if controller_addr and not args.no_wait:
            for line in cluster.wait_masters():
                print(line)
        properties = write_client_properties(
            cluster.directory, manifest, controller_addr,
            [f"{host_of(b)}:{b['port']}" for b in manifest["brokers"]])
        print(f"client settings: {properties} (TLS {'on' if manifest.get('tls') else 'off'})")
        _proxy_up(cluster, args, controller_addr, parser,
                  str(properties) if manifest.get("tls") else "")
        return 0
    if args.command == "status":
        if not cluster.manifest_path.exists():
            raise SystemExit(f"rocketha-cluster: no cluster in {cluster.directory} (no "
                             "cluster.json); start one with `rocketha-cluster up --dir ...`")
        processes = cluster.status()
        processes += controllers.status()
        proxies = LocalProxy(cluster.directory).status(cluster.load())
        if args.json:
            consoles = [p["console_url"] for p in processes
                        if p["kind"] == "controller" and p["alive"] and p.get("console_url")]
            print(json.dumps({"dir": str(cluster.directory),
                              "console_url": consoles[0] if consoles else None,
                              "grpc_endpoint": proxies[0]["endpoint"] if proxies else None,
                              "proxy": proxies[0] if proxies else None,
                              "processes": processes}))
        else:
            for process in processes:
                state = "alive" if process["alive"] else "down"
                print(f"{process['name']}\t{process['role']}\t{process['broker_role']}\t"
                      f"{process['endpoint']}\t"
                      f"pid {process['pid']}\t{state}")
            for proxy in proxies:
                print(f"proxy\t{proxy['role']}\t\t{proxy['endpoint']}\tpid {proxy['pid']}\t"
                      f"{'alive' if proxy['alive'] else 'down'}")
        return 0
    print(down_summary(cluster, controllers))
    return 0


def down_summary(cluster: Cluster, controllers: LocalControllers) -> str:
    """`down`: stop the endpoint, the brokers, then the controllers, remove test hosts; one
    line counting what was running (a second `down` says nothing was)."""
    manifest = cluster.load()
    proxy = LocalProxy(cluster.directory).stop(manifest)
    brokers = sum(cluster.stop(broker) for broker in manifest["brokers"])
    controller_count = controllers.stop_all()
    remove_hosts(cluster.load())
    known = len(manifest["brokers"]) + len(manifest.get("controllers", [])) + bool(
        manifest.get("proxy"))
    stopped = brokers + controller_count + proxy
    return (f"stopped {stopped} process(es): {brokers} broker(s), {controller_count} "
            f"controller(s), {int(proxy)} gRPC endpoint(s); {known - stopped} were not running")


def _proxy_up(cluster: Cluster, args: argparse.Namespace, controller_addr: str,
              parser: argparse.ArgumentParser, client_config: str) -> None:
    """Plan, start and wait for the RocketMQ gRPC endpoint (ha/cluster/proxy.py); on a
    secured cluster (`client_config` set) it calls the cluster with those settings and
    serves TLS with a certificate from the cluster CA."""
    if args.grpc_port is not None and args.grpc_port and not controller_addr:
        parser.error("--grpc-port: only with --controllers (the endpoint takes its routes "
                     "from them)")
    refusal = (extra_refusal("rocketha-proxy", "rocketmq")
               if controller_addr and args.grpc_port != 0 else None)
    if refusal is not None:  # asked for: refuse; by default: a cluster without the endpoint
        if args.grpc_port is not None:
            parser.error(f"--grpc-port: rocketha-proxy {refusal}")
        print(f"no RocketMQ gRPC endpoint: rocketha-proxy {refusal}")
        return
    local = LocalProxy(cluster.directory)
    manifest = cluster.load()
    overrides = {**manifest.get("proxy_overrides", {}), **_parse_overrides(args.grpc_set, parser)}
    manifest["proxy_overrides"] = overrides
    tls_server = None
    if client_config and args.grpc_port != 0 and controller_addr:
        proxy_entry = manifest.setdefault("proxy", {"name": "proxy"})
        proxy_entry.setdefault("name", "proxy")
        tls_server = proxy_tls_settings(cluster.directory, proxy_entry)
    keys = cluster_auth.admin_credentials(cluster.directory) if client_config else None
    proxy = local.plan(manifest, args.grpc_port, controller_addr, overrides,
                       client_config=client_config, tls_server=tls_server,
                       authentication=keys is not None)
    cluster.save(manifest)
    if proxy is not None:
        local.start(proxy)
        print(f"proxy {local.wait_ready(proxy)} (RocketMQ gRPC endpoint)")


if __name__ == "__main__":
    sys.exit(main())
