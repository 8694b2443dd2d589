"""`rocketha-admin`: one operator tool for brokers and controllers (in the spirit of mqadmin).

    rocketha-admin --controller 'H:P;H:P' <topic|produce|consume|offsets|group|broker> ...
    rocketha-admin --broker HOST:PORT     <topic|produce|consume|offsets|group|broker> ...
    rocketha-admin --controller 'H:P;H:P' <status|cluster|replica|elect|clean|routes|
                                           transfer-leader> ...
    rocketha-admin --client-config DIR/client.properties <any of the above> ...

`--client-config FILE` (like Kafka's --command-config): a client.properties, as
`rocketha-cluster up` writes one; its controllerAddr (else its first brokerAddr) is used when
neither --broker nor --controller is given, its tls.client.* settings for every connection (a
secure cluster answers nothing without them), and its accessKey/secretKey (or credentialsFile)
sign every call (--credentials-file FILE: another user's keys instead).

The data commands (connector/admin/cli.py) work against one broker (`--broker`) or, through the
controllers (`--controller`, the name service like `mqadmin -n`), against the current master
of every replica set. The controller commands (controller/admin/main.py) show and steer the
controller group: Raft status, replica sets, SyncStateSets, elections, cleaning, routes. The
two live in packages that may not import each other (the dependency arrows in the README's
Layout section), so this top-level module is the one that knows both.

Before anything else the address is checked, so a mistake is one line and exit code 2: nothing
listening there, a broker given to --controller, a controller given to --broker
(connector/admin/probe.py). `--help`, alone or after a command, answers before any of that and
before the Flight client is imported, so it is instant.
"""

from __future__ import annotations

import sys

from conf.controller_addresses import controller_addresses
from conf.values import parse_host_port

__all__ = ["main"]

CONTROLLER_COMMANDS = frozenset({"status", "cluster", "replica", "elect", "clean", "routes",
                                 "transfer-leader", "user", "acl"})
DATA_COMMANDS = frozenset({"topic", "produce", "consume", "offsets", "group", "broker"})
USAGE = ("usage: rocketha-admin [--client-config FILE] --controller 'H:P[;H:P...]' "
         "{topic,produce,consume,offsets,group,broker} ...\n"
         "       rocketha-admin --broker HOST:PORT "
         "{topic,produce,consume,offsets,group,broker} ...\n"
         "       rocketha-admin --controller 'H:P[;H:P...]' "
         "{status,cluster,replica,elect,clean,routes,transfer-leader,user,acl} ...\n"
         "(with authentication on: --credentials-file FILE, accessKey=/secretKey= lines, "
         "mode 0600)\n"
         "(add -h after a command for its options)")


def _option(argv: list[str], option: str) -> str | None:
    for index, arg in enumerate(argv):
        if arg == option and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1]
    return None


def _command(argv: list[str]) -> str | None:
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--broker", "--controller", "--timeout-s", "--client-config",
                     "--credentials-file"):
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    broker, controller = _option(args, "--broker"), _option(args, "--controller")
    if args in (["-h"], ["--help"]) or not args:
        print(f"{USAGE}\n\n{__doc__}")
        return 0 if args else 2
    command = _command(args)
    if ("-h" in args or "--help" in args) and command is not None:  # no address needed
        if command in CONTROLLER_COMMANDS:
            from controller.admin.parser import build_parser as controller_parser
            controller_parser("rocketha-admin").parse_args(args)
        else:
            from connector.admin.parser import build_parser as data_parser
            data_parser().parse_args(args)
        return 0  # (argparse printed the help and exited)
    from connector.admin.probe import (
        NO_TLS,
        TLSConfigError,
        client_tls_from_properties,
        probe,
        probe_credentials,
        read_properties,
    )
    tls = NO_TLS
    client_config = _option(args, "--client-config")
    properties: dict[str, str] = {}
    if client_config is not None:
        try:
            properties = read_properties(client_config)
            tls = client_tls_from_properties(properties)
        except (OSError, TLSConfigError) as err:
            print(f"rocketha-admin: --client-config {client_config}: {err}", file=sys.stderr)
            return 2
        if broker is None and controller is None and properties.get("controllerAddr"):
            controller = properties["controllerAddr"]
            args = ["--controller", controller, *args]
        elif broker is None and controller is None and properties.get("brokerAddr"):
            broker = properties["brokerAddr"].split(",")[0].strip()  # a static cluster
            args = ["--broker", broker, *args]
    credentials = probe_credentials(_option(args, "--credentials-file"), client_config,
                                    properties)
    if broker is not None and controller is not None:
        print(f"rocketha-admin: give --broker or --controller, not both\n{USAGE}",
              file=sys.stderr)
        return 2
    if broker is None and controller is None:
        print(f"rocketha-admin: name a broker (--broker) or the controllers (--controller)\n"
              f"{USAGE}", file=sys.stderr)
        return 2
    given = (("--broker", [broker]) if broker is not None
             else ("--controller", list(controller_addresses(controller))))
    for address in given[1]:
        try:
            parse_host_port(address or "", given[0])
        except ValueError as err:
            print(f"rocketha-admin: {err}", file=sys.stderr)
            return 2
    # a usage error (unknown command, -h) is the parser's to report, before any probe
    help_asked = "-h" in args or "--help" in args or command not in (
        DATA_COMMANDS | CONTROLLER_COMMANDS)
    if controller is not None:
        addresses = controller_addresses(controller)
        problems = [probe(address, "controller", tls, credentials) for address in addresses] \
            if addresses and not help_asked and command != "status" else []
        if problems and all(problems):
            print(f"rocketha-admin: {problems[0]}", file=sys.stderr)
            return 2
        if command in CONTROLLER_COMMANDS:
            from controller.admin.main import main as controller_main
            return controller_main(args, prog="rocketha-admin")
    elif broker is not None and not help_asked:
        problem = probe(broker, "broker", tls, credentials)
        if problem:
            print(f"rocketha-admin: {problem}", file=sys.stderr)
            return 2
    from connector.admin.cli import main as data_main
    return data_main(args)


if __name__ == "__main__":
    sys.exit(main())
