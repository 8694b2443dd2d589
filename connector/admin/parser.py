"""`rocketha-admin`'s data commands: the command line (every subcommand, option and help line).

Apart from connector/admin/cli.py, which runs the commands with the client library (the
Flight client): this module imports only argparse, so `rocketha-admin <command> --help`
answers without loading it (rocketha_admin.py parses with it for help).
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["BATCH_MAX", "COUNT_MAX", "build_parser"]

DESCRIPTION = ("`rocketha-admin (--broker HOST:PORT | --controller 'H:P;H:P') <command>`: the "
               "data commands.")

COUNT_MAX = 100_000_000
BATCH_MAX = 65_536


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    formats = common.add_mutually_exclusive_group()
    formats.add_argument("--json", dest="output", action="store_const", const="json",
                         help="one JSON document")
    formats.add_argument("--json-lines", dest="output", action="store_const", const="json-lines",
                         help="one JSON object per line")
    common.add_argument("--broker-name", default=None,
                        help="with --controller: only this replica set")
    # the output and --broker-name options go after the command (argparse lets a subcommand's
    # defaults override the same option given before it)
    parser = argparse.ArgumentParser(prog="rocketha-admin", description=DESCRIPTION)
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--broker", help="HOST:PORT of one broker")
    where.add_argument("--controller", help="the controllers' client endpoints, ';'-separated")
    parser.add_argument("--timeout-s", type=float, default=10.0,
                        help="per call, in seconds (default 10)")
    parser.add_argument("--client-config", metavar="FILE", default=None,
                        help="client.properties: controllerAddr (when neither --broker nor "
                        "--controller is given), the tls.client.* settings and the user's "
                        "accessKey/secretKey (or credentialsFile)")
    parser.add_argument("--credentials-file", default=None,
                        help="accessKey= and secretKey= lines (mode 0600): sign every call "
                        "(instead of --client-config's keys)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _topic_parser(commands, common)
    _data_parsers(commands, common)
    offsets = commands.add_parser("offsets", parents=[common],
                                  help="a topic's queue offsets, a group's, or reset a group's")
    offsets.add_argument("action", nargs="?", choices=["show", "reset"], default="show",
                         help="show (default) or reset a group's offsets")
    offsets.add_argument("--topic", required=True, help="the topic")
    offsets.add_argument("--group", default=None, help="a consumer group")
    to = offsets.add_mutually_exclusive_group()
    to.add_argument("--to-earliest", action="store_true", help="reset to each queue's first")
    to.add_argument("--to-latest", action="store_true", help="reset to each queue's end")
    to.add_argument("--to-time", default=None, help="ms since the epoch or ISO-8601")
    group = commands.add_parser("group", parents=[common],
                                help="list, describe or delete consumer groups")
    group.add_argument("action", choices=["list", "describe", "delete"], help="what to do")
    group.add_argument("--group", default=None, help="the group (describe, delete)")
    broker = commands.add_parser("broker", parents=[common],
                                 help="a broker's info, statistics or runtime settings; stop "
                                 "a broker (a master hands over first); move a set's master "
                                 "to another member (elect)")
    broker.add_argument("action", choices=["info", "stats", "config", "shutdown", "elect"],
                        help="what to show, shutdown, or elect (the master hands its role "
                        "to --broker-id and stays as its slave)")
    broker.add_argument("config_action", nargs="?", choices=["get", "set"], default=None,
                        help="with config: show the settings, or set one (a live key applies "
                        "at once, any other at the next start; both are written to the conf "
                        "file)")
    broker.add_argument("setting", nargs="?", default=None, metavar="KEY=VALUE",
                        help="with config set: the key and its value (or --key and --value)")
    broker.add_argument("--key", default=None,
                        help="config get: only this key; config set: the key to set")
    broker.add_argument("--value", default=None, help="config set: the new value")
    broker.add_argument("--broker-id", type=int, default=None,
                        help="shutdown: which member; elect: the member to make master; "
                        "config: which member (default the master)")
    broker.add_argument("--all-members", action="store_true",
                        help="config: every alive member of the replica set(s), not the master")
    broker.add_argument("--wait-s", type=float, default=30.0,
                        help="shutdown: how long to wait for the broker to stop; elect: "
                        "for the controller to name the new master")
    return parser


def _topic_parser(commands: Any, common: argparse.ArgumentParser) -> None:
    topic = commands.add_parser("topic", parents=[common],
                                help="create, update, list, describe or delete topics")
    topic.add_argument("action", choices=["create", "update", "list", "describe", "delete"],
                       help="what to do")
    topic.add_argument("--topic", default=None, help="the topic (all but list)")
    topic.add_argument("--queues", type=int, default=None,
                       help="read and write queues per replica set")
    topic.add_argument("--read-queues", type=int, default=None, help="read queues only")
    topic.add_argument("--write-queues", type=int, default=None, help="write queues only")
    topic.add_argument("--perm", type=int, default=None, help="6 = read+write, 4 read, 2 write")
    topic.add_argument("--table", choices=["delta", "none", "default"], default=None,
                       help="materialize the topic as a Delta table under the tier (delta), "
                       "not (none), or as the broker's topicTableDefault says (default)")
    moving = topic.add_mutually_exclusive_group()
    moving.add_argument("--add-broker-name", default=None, metavar="SET",
                        help="update: extend the topic onto this replica set (its config "
                        "from a set that has it; --queues etc. on top)")
    moving.add_argument("--remove-broker-name", default=None, metavar="SET",
                        help="update: drain the topic from this replica set (write off, "
                        "reads go on) and list each group's lag there")
    topic.add_argument("--delete-table", action="store_true",
                       help="delete: remove the topic's Delta table under the tier too "
                       "(without it the table stays)")


def _data_parsers(commands: Any, common: argparse.ArgumentParser) -> None:
    produce_parser = commands.add_parser("produce", parents=[common],
                                         help="send messages (text, a file, stdin or synthetic)")
    produce_parser.add_argument("--topic", required=True, help="the topic")
    source = produce_parser.add_mutually_exclusive_group()
    source.add_argument("--body", default=None, help="one message with this body")
    source.add_argument("--file", default=None, help="one message per line of this file")
    source.add_argument("--count", type=int, default=None, help="synthetic messages")
    produce_parser.add_argument("--key", default=None, help="every message's key")
    produce_parser.add_argument("--tags", default=None, help="every message's tags")
    produce_parser.add_argument("--property", action="append", default=[], metavar="K=V",
                                help="a user property of every message (repeatable)")
    produce_parser.add_argument("--body-size", type=int, default=100,
                                help="with --count: bytes per synthetic body (default 100)")
    produce_parser.add_argument("--rate", type=float, default=0.0, help="messages/s, 0 = max")
    produce_parser.add_argument("--batch", type=int, default=1,
                                help="messages per put (default 1)")
    consume_parser = commands.add_parser("consume", parents=[common],
                                         help="read messages of a topic (every queue)")
    consume_parser.add_argument("--topic", required=True, help="the topic")
    consume_parser.add_argument("--from", dest="start", default="earliest",
                                help="earliest (default), latest or a queue offset")
    consume_parser.add_argument("--max-messages", type=int, default=COUNT_MAX,
                                help="stop after this many")
    consume_parser.add_argument("--until-idle-ms", type=int, default=2000,
                                help="stop after this long without a message (default 2000)")
