"""`rocketha-cluster`'s command line: every subcommand, option and help line, and nothing else.

Kept apart from the commands (ha/cluster/main.py, plan.py), which import the broker, the
certificate code and the Flight client: this module imports only argparse and the leaf
`conf.cli_words`, so `rocketha-cluster --help` and every usage error answer before any of
that is loaded (ha/cluster_entry.py parses with it first). A new subcommand adds its parser
here and its work in its own module.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from conf.cli_words import DeprecatedOption

__all__ = ["CONTROLLER_COUNTS", "REPLICAS_MAX", "REPLICA_SETS_MAX", "add_add_set_arguments",
           "add_certs_arguments",
           "add_plan_arguments", "add_restart_arguments", "build_parser"]

CONTROLLER_COUNTS = (0, 1, 3, 5)  # a Raft group of 1, 3 or 5 (0: none, static roles)
REPLICA_SETS_MAX = 26  # broker-a .. broker-z
REPLICAS_MAX = 8  # brokers per replica set

DESCRIPTION = "Run a local rocketha cluster (brokers, controllers, gRPC endpoint) under one dir."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rocketha-cluster", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _up_arguments(commands.add_parser(
        "up", help="create or restart a local cluster under --dir (keeps data and ports)",
        description="Create a local cluster under --dir, or start what of it is not running."))
    status = commands.add_parser("status", help="every process of the cluster: role, "
                                 "endpoint, pid, alive or down")
    status.add_argument("--dir", required=True, type=Path, help="the cluster's directory")
    status.add_argument("--json", action="store_true",
                        help="one JSON document (console_url, grpc_endpoint, processes)")
    down = commands.add_parser("down", help="stop every process of the cluster (data kept)")
    down.add_argument("--dir", required=True, type=Path, help="the cluster's directory")
    add_plan_arguments(commands.add_parser(
        "plan", help="configs and systemd units for a cluster on several machines"))
    add_certs_arguments(commands.add_parser(
        "certs", help="list, rotate or revoke the cluster's certificates"))
    add_restart_arguments(commands.add_parser(
        "restart", help="restart every process, one at a time, under load (--rolling)"))
    add_add_set_arguments(commands.add_parser(
        "add-set", help="start one more replica set (broker-<next letter>) in a running "
        "cluster"))
    remove = commands.add_parser(
        "drop-set", help="stop and forget the last replica set once nothing is left on it "
        "(drained, read, tables caught up)")
    remove.add_argument("--dir", required=True, type=Path, help="the cluster's directory")
    return parser


def _up_arguments(up: argparse.ArgumentParser) -> None:
    up.add_argument("--dir", required=True, type=Path,
                    help="the cluster's directory (configs, data, logs, cluster.json)")
    up.add_argument("--replica-sets", dest="replica_sets", type=int, default=None, metavar="N",
                    help=f"replica sets broker-a, broker-b, ... (1..{REPLICA_SETS_MAX}; "
                    "default 1, or what the cluster has)")
    up.add_argument("--brokers", dest="replica_sets", type=int, action=DeprecatedOption,
                    replacement="--replica-sets", help=argparse.SUPPRESS)
    up.add_argument("--replicas", type=int, default=None, metavar="R",
                    help=f"brokers per replica set (1..{REPLICAS_MAX}; default 1, or what the "
                    "cluster has)")
    up.add_argument("--controllers", type=int, default=None, choices=CONTROLLER_COUNTS,
                    help="a Raft group of controllers, started before the brokers "
                    "(default: as many as the cluster already has)")
    up.add_argument("--no-wait", action="store_true",
                    help="with controllers: do not wait until every replica set has a master")
    up.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a broker key for every broker, checked and then kept for later ups")
    up.add_argument("--set-file", action="append", default=[], type=Path, metavar="FILE",
                    help="key=value lines for every broker, as --set (secrets go here: "
                    "never on the command line)")
    up.add_argument("--unset", action="append", default=[], metavar="KEY",
                    help="forget a broker key an earlier --set or --set-file kept")
    up.add_argument("--controller-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a controller key for every controller")
    up.add_argument("--grpc-port", type=int, default=None, metavar="PORT",
                    help="with controllers: the RocketMQ gRPC endpoint (rocketha-proxy) "
                    "listens here (default: a free port, kept; 0: no endpoint)")
    up.add_argument("--grpc-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a rocketha-proxy key (connector/rmq_proxy/config.py)")
    up.add_argument("--insecure", action="store_true",
                    help="no TLS and no authentication (the first up decides: by default a "
                    "cluster CA and member certificates are made under DIR/tls, every link "
                    "uses mutual TLS, and a generated admin user's keys are in "
                    "DIR/admin.credentials and DIR/client.properties)")
    up.add_argument("--hosts", action="store_true",
                    help="each controller and broker on its own test host (a network "
                    "namespace on a bridge, 198.18.0.0/15; needs root): ha/cluster/hosts.py")
    up.add_argument("--spare-hosts", type=int, default=0, metavar="N",
                    help="with --hosts: this many more hosts with nothing on them (for "
                    "clients, Spark workers; listed in cluster.json under hosts.spare)")


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """`plan`'s options (ha/cluster/plan.py does the work)."""
    parser.add_argument("--hosts", required=True, help="comma-separated host names or addresses")
    parser.add_argument("--replicas", type=int, default=3, help="brokers per replica set")
    parser.add_argument("--replica-sets", type=int, default=1,
                        help=f"replica sets broker-a, broker-b, ... (1..{REPLICA_SETS_MAX})")
    parser.add_argument("--controllers", type=int, default=3,
                        help="controllers (1, 3 or 5), one per host from the first (default 3)")
    parser.add_argument("--out", required=True, type=Path,
                        help="where to write each host's tree, the client's files and the CA")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a broker key for every broker")
    parser.add_argument("--controller-set", action="append", default=[], metavar="KEY=VALUE",
                        help="a controller key for every controller")
    parser.add_argument("--install-dir", default="/opt/rocketha",
                        help="where the venv with rocketha is on every machine (<dir>/venv)")
    parser.add_argument("--data-dir", default="/var/lib/rocketha",
                        help="stores: <data-dir>/<name>")
    parser.add_argument("--user", default="rocketha", help="the user the units run as")
    parser.add_argument("--insecure", action="store_true",
                        help="plaintext and no authentication (configs say allowInsecure=true)")


def add_certs_arguments(parser: argparse.ArgumentParser) -> None:
    """`certs`' subcommands (ha/cluster/cert_ops.py does the work)."""
    actions = parser.add_subparsers(dest="certs_command", required=True)
    listing = actions.add_parser("list", help="every certificate: serial, expiry, revoked")
    listing.add_argument("--dir", required=True, type=Path, help="the cluster's directory")
    rotate = actions.add_parser("rotate", help="issue new certificates (same identities)")
    rotate.add_argument("--dir", required=True, type=Path, help="the cluster's directory")
    rotate.add_argument("names", nargs="*", metavar="NAME",
                        help="holders to rotate (default: all; see `certs list`)")
    revoke = actions.add_parser("revoke", help="put certificates in the CRL (tls.crlPath)")
    where = revoke.add_mutually_exclusive_group(required=True)
    where.add_argument("--dir", type=Path, help="a cluster of `up`")
    where.add_argument("--ca", type=Path, metavar="DIR",
                       help="a CA directory (`plan`'s DIR/ca), with --serial only: then copy "
                       "its crl.pem to every machine")
    revoke.add_argument("names", nargs="*", metavar="NAME",
                        help="holders whose current certificate is revoked")
    revoke.add_argument("--serial", action="append", default=[], metavar="HEX",
                        help="a serial to revoke (a certificate this tool did not make)")
    revoke.add_argument("--no-reissue", action="store_true",
                        help="do not issue the holder a new certificate first (it is then "
                        "refused by its peers until one is issued: `certs rotate NAME`)")


def add_restart_arguments(parser: argparse.ArgumentParser) -> None:
    """`restart`'s options (ha/cluster/rolling.py does the work)."""
    parser.add_argument("--dir", required=True, type=Path, help="the cluster's directory")
    parser.add_argument("--rolling", action="store_true", required=True,
                        help="one process at a time (the only kind of restart)")
    parser.add_argument("--json", action="store_true", help="only the JSON report line")


def add_add_set_arguments(parser: argparse.ArgumentParser) -> None:
    """`add-set`'s options (ha/cluster/add_set.py does the work)."""
    parser.add_argument("--dir", required=True, type=Path, help="the cluster's directory")
    parser.add_argument("--no-wait", action="store_true",
                        help="with controllers: do not wait until the new set has a master")
