"""The controller commands' command line (`rocketha-admin --controller ... <command>`).

Apart from controller/admin/main.py, which calls the controllers (the Flight client): this
module imports only argparse and controller/admin/users.py's parsers, so `--help` answers
without loading the client.
"""

from __future__ import annotations

import argparse

from controller.admin.users import add_auth_parsers

__all__ = ["SET_COMMANDS", "build_parser"]

DESCRIPTION = "Operate the controllers: Raft status, replica sets, elections, routes, users, ACLs."
# The commands about one replica set (`--broker-name`), with their help lines.
SET_COMMANDS = {"replica": "one replica set's master, epoch and SyncStateSet",
                "elect": "force an election in a replica set (optionally of a given broker); "
                         "to move a live master, `broker elect` hands over instead",
                "clean": "forget brokers of a replica set (all, or the given --broker-id)"}


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description=DESCRIPTION)
    parser.add_argument("--controller", required=True,
                        help="client address(es) of the controllers, ';'- or ','-separated")
    parser.add_argument("--timeout-s", type=float, default=10.0,
                        help="per call, in seconds (default 10)")
    parser.add_argument("--client-config", metavar="FILE",
                        help="client.properties (controllerAddr, tls.client.*, the user's "
                             "accessKey/secretKey or credentialsFile)")
    parser.add_argument("--credentials-file", default=None,
                        help="accessKey= and secretKey= lines (mode 0600): sign every call "
                             "(instead of --client-config's keys)")
    output = argparse.ArgumentParser(add_help=False)
    formats = output.add_mutually_exclusive_group()
    formats.add_argument("--json", dest="output", action="store_const", const="json",
                         default="table", help="the controller's reply as JSON")
    formats.add_argument("--json-lines", dest="output", action="store_const",
                         const="json-lines", help="one JSON object per table row")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("status", parents=[output],
                        help="each controller's Raft view: role, term, leader, log")
    commands.add_parser("cluster", parents=[output],
                        help="every replica set: master, epoch, SyncStateSet")
    for name, line in SET_COMMANDS.items():
        sub = commands.add_parser(name, parents=[output], help=line)
        sub.add_argument("--broker-name", default=None, metavar="NAME",
                         help="the replica set (broker-a, ...)")
        sub.add_argument("old_broker_name", nargs="?", default=None, help=argparse.SUPPRESS)
        if name == "elect":
            sub.add_argument("--broker-id", type=int, default=None,
                             help="the broker to make master (default: the controller picks)")
        if name == "clean":
            sub.add_argument("--broker-id", type=int, action="append",
                             help="a broker of the set to forget (repeatable; default: all)")
    transfer = commands.add_parser("transfer-leader", parents=[output],
                                   help="the Raft leader hands its role to a follower at once "
                                   "(before stopping it, say)")
    transfer.add_argument("--to", type=int, default=None, metavar="NODE_ID",
                          help="the follower to lead (default: the one with the longest log)")
    routes = commands.add_parser("routes", parents=[output],
                                 help="a topic's queues on each replica set")
    routes.add_argument("--topic", default=None, help="the topic")
    routes.add_argument("old_topic", nargs="?", default=None, help=argparse.SUPPRESS)
    add_auth_parsers(commands, output)
    return parser
