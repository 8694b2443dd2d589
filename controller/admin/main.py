"""`rocketha-admin --controller ...` (or `python -m controller.admin`): operate the controllers.

    python -m controller.admin --controller 'H:P;H:P;H:P' status
    python -m controller.admin --controller H:P cluster
    python -m controller.admin --controller H:P replica --broker-name broker-a
    python -m controller.admin --controller H:P elect --broker-name broker-a [--broker-id 2]
    python -m controller.admin --controller H:P clean --broker-name broker-a [--broker-id 3 ...]
    python -m controller.admin --controller H:P routes --topic TOPIC
    python -m controller.admin --controller 'H:P;H:P;H:P' transfer-leader [--to 2]
    python -m controller.admin --controller H:P user|acl ...   (controller/admin/users.py)

With authentication on, `--credentials-file FILE` (accessKey= and secretKey= lines, mode 0600)
or the keys of `--client-config FILE` (a client.properties, which also gives the tls.client.*
settings) sign every call; user and acl commands need a Super user.

Each command prints an aligned table (`--json`: the controller's JSON reply as it came,
`--json-lines`: one object per row). Requests find the leader with the shared leader search
(conf/controller_addresses.py): the listed addresses in order, `NOT_LEADER` hints followed
(LEADER_HOPS_MAX from each address), and while no leader is known (an election under way)
the list again every RETRY_INTERVAL_S, at most PASSES_MAX times and until --timeout-s; then
the tool fails naming every address it tried. Exit status: 0 when the reply's status is OK
(or MASTER_STILL_EXIST for `elect`), 1 for any other status, 2 for usage errors or
unreachable controllers. `status` asks every listed controller for its own view (no redirect).
The older positional spellings (`replica broker-a`, `routes TOPIC`) still work and print one
deprecation line (conf/cli_words.py: one vocabulary with the data commands).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from pyarrow import flight

from conf import read_credentials_file
from conf.cli_words import resolve_positional_alias
from conf.controller_addresses import (
    ANSWERED,
    LEADER_HOPS_MAX,
    LeaderSearch,
    NotLeader,
    Unavailable,
    controller_addresses,
)
from conf.protocol import VERSION_HEADER
from conf.signing import Credentials, action_target, sign_headers
from conf.tls import (
    NO_TLS,
    ClientTLS,
    client_tls_from_properties,
    connect_flight,
    read_properties,
)
from controller.admin.parser import SET_COMMANDS, build_parser
from controller.admin.tables import print_reply
from controller.admin.users import AUTH_COMMANDS, auth_request

__all__ = ["main"]

PASSES_MAX = 16  # passes over the listed addresses while no leader is known
RETRY_INTERVAL_S = 0.1  # between two passes (an election takes a few hundred ms)


def client_config(path: str) -> tuple[ClientTLS, Credentials | None]:
    """The tls.client.* settings and the user's keys of a client.properties: accessKey= and
    secretKey= in it (then the file must be its owner's only, as a credentials file) or
    credentialsFile= naming one. Raises ValueError naming the file."""
    try:
        properties = read_properties(path)
        tls = client_tls_from_properties(properties)
    except ValueError as err:  # TLSConfigError is a ValueError
        raise ValueError(f"--client-config {path}: {err}") from err
    if properties.get("secretKey"):
        return tls, read_credentials_file(path, "--client-config")
    if properties.get("credentialsFile"):
        return tls, read_credentials_file(properties["credentialsFile"],
                                          f"--client-config {path}: credentialsFile")
    return tls, None


def _call(endpoint: str, action: str, body: dict[str, Any], timeout_s: float,
          tls: ClientTLS = NO_TLS, credentials: Credentials | None = None) -> dict[str, Any]:
    client = connect_flight(endpoint, tls)
    try:
        payload = json.dumps(body).encode()
        headers = [] if credentials is None else sign_headers(
            credentials, "DO_ACTION", action_target(action, payload), int(time.time() * 1000))
        options = flight.FlightCallOptions(timeout=timeout_s, headers=[VERSION_HEADER, *headers])
        results = list(client.do_action(flight.Action(action, payload), options))
        return json.loads(results[0].body.to_pybytes())  # type: ignore[no-any-return]
    finally:
        client.close()


def call_leader(addresses: list[str], action: str, body: dict[str, Any],
                timeout_s: float, tls: ClientTLS = NO_TLS,
                credentials: Credentials | None = None) -> dict[str, Any]:
    """Call the leader (the module docstring says how it is found). Raises ConnectionError
    naming every address tried when none answered within timeout_s; a refused request
    (FlightServerError: BAD_REQUEST..., NO_PERMISSION, UNAUTHENTICATED) is raised at once."""
    deadline = time.monotonic() + timeout_s
    search = LeaderSearch(addresses, hops_max=LEADER_HOPS_MAX, passes_max=PASSES_MAX)
    while (step := search.next_address()) is not None:  # bounded by the search
        if step.pause_first:
            time.sleep(RETRY_INTERVAL_S)
        if time.monotonic() >= deadline:
            break
        try:
            reply = _call(step.address, action, body, max(0.1, deadline - time.monotonic()),
                          tls, credentials)
        except (flight.FlightServerError, flight.FlightUnauthenticatedError,
                flight.FlightUnauthorizedError):
            raise  # a refused request (BAD_REQUEST, NO_PERMISSION...): no point elsewhere
        except flight.FlightError as err:
            search.on_answer(step.address, Unavailable(f"unreachable ({err})"))
            continue
        if reply["status"] == "NOT_LEADER":
            search.on_answer(step.address, NotLeader(reply.get("leader_address")))
        elif reply["status"] == "BUSY":
            search.on_answer(step.address, Unavailable("BUSY"))
        else:
            search.on_answer(step.address, ANSWERED)
            return reply
    tried = ", ".join(search.addresses_tried())
    raise ConnectionError(f"no controller leader answered {action} within {timeout_s:g} s"
                          + (f" from {tried} ({search.describe()})" if tried else ""))


def _request(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    if args.command == "cluster":
        return "cluster_list", {}
    if args.command == "replica":
        return "get_replica_info", {"broker_name": args.broker_name}
    if args.command == "elect":
        return "elect_master", {"broker_name": args.broker_name,
                                "designated_broker_id": args.broker_id}
    if args.command == "clean":
        return "clean_broker_data", {"broker_name": args.broker_name,
                                     "broker_ids": args.broker_id or []}
    if args.command == "transfer-leader":
        return "transfer_leader", {"to_node_id": args.to}
    return "get_routes", {"topic": args.topic}


def main(argv: list[str] | None = None, prog: str = "python -m controller.admin") -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.command in SET_COMMANDS:  # the vocabulary of conf/cli_words.py
        resolve_positional_alias(parser, args, "old_broker_name", "--broker-name")
    elif args.command == "routes":
        resolve_positional_alias(parser, args, "old_topic", "--topic")
    try:
        tls, credentials = (client_config(args.client_config) if args.client_config
                            else (NO_TLS, None))
        if args.credentials_file:
            credentials = read_credentials_file(args.credentials_file, "--credentials-file")
        action, body = (auth_request(args) if args.command in AUTH_COMMANDS
                        else ("", {}) if args.command == "status" else _request(args))
    except (OSError, ValueError) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    addresses = list(controller_addresses(args.controller))
    if not addresses:
        parser.error("--controller names no address")
    if args.command == "status":
        views = []
        for address in addresses:
            try:
                views.append({"address": address, **_call(address, "controller_status", {},
                                                          args.timeout_s, tls, credentials)})
            except flight.FlightError as err:
                views.append({"address": address, "status": "UNREACHABLE", "error": str(err)})
        print_reply("status", views, args.output)
        return 0 if all(v["status"] == "OK" for v in views) else 1
    try:
        reply = call_leader(addresses, action, body, args.timeout_s, tls, credentials)
    except (ConnectionError, flight.FlightServerError, flight.FlightUnauthenticatedError,
            flight.FlightUnauthorizedError) as err:
        print(f"{prog}: {err}", file=sys.stderr)
        return 2
    print_reply(args.command, reply, args.output)
    good = ("OK", "MASTER_STILL_EXIST") if args.command == "elect" else ("OK",)
    return 0 if reply["status"] in good else 1


if __name__ == "__main__":
    sys.exit(main())
