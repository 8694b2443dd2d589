"""`rocketha-admin --controller ... user|acl ...`: users and ACLs (issue 16), Super users only.

    user create --name N [--access-key AK] [--type Super|Normal] [--secret-file F | --secret-stdin]
    user update --name N [--access-key AK] [--type T] [--status enabled|disabled]
                [--secret-file F | --secret-stdin]
    user delete --name N          user list
    acl create|update --subject User:N --resources Topic:orders*,Group:g --actions Pub,Sub
                [--decision Allow|Deny] [--source-ips 10.0.0.0/8,...]
    acl delete --subject User:N [--resources R,...]          acl list [--subject User:N]

A secret never comes from the command line (every user sees command lines in `ps`): from a
file (`--secret-file`, read whole, one trailing newline dropped), standard input
(`--secret-stdin`), or a prompt (getpass) when creating a user from a terminal. The changes
go through the controller's Raft log; brokers pick them up within a heartbeat or two.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path
from typing import Any

__all__ = ["AUTH_COMMANDS", "add_auth_parsers", "auth_request"]

AUTH_COMMANDS = frozenset({"user", "acl"})


def add_auth_parsers(commands: Any, output: argparse.ArgumentParser) -> None:
    user = commands.add_parser("user", parents=[output],
                               help="create, update, delete or list users (a Super user's)")
    user.add_argument("action", choices=["create", "update", "delete", "list"],
                      help="what to do")
    user.add_argument("--name", default=None, help="the user's name")
    user.add_argument("--access-key", default="",
                      help="the user's access key (signed calls name it)")
    user.add_argument("--type", default="", choices=["", "Super", "Normal"],
                      help="Super (every right, ACLs bypassed) or Normal (ACLs decide)")
    user.add_argument("--status", default="", choices=["", "enabled", "disabled"],
                      help="a disabled user's calls are refused")
    secret = user.add_mutually_exclusive_group()
    secret.add_argument("--secret-file", default=None, help="the secret key, from this file")
    secret.add_argument("--secret-stdin", action="store_true",
                        help="the secret key, from standard input")
    acl = commands.add_parser("acl", parents=[output],
                              help="create, update, delete or list ACL 2.0 policies")
    acl.add_argument("action", choices=["create", "update", "delete", "list"],
                     help="what to do")
    acl.add_argument("--subject", default="", help="User:<name>")
    acl.add_argument("--resources", default="", help="Topic:<name>[*], Group:<name>[*], "
                     "Cluster or *, comma-separated")
    acl.add_argument("--actions", default="", help="Pub,Sub,Create,Update,Delete,Get,List,All")
    acl.add_argument("--decision", default="Allow", choices=["Allow", "Deny"],
                     help="Allow or Deny (a Deny wins)")
    acl.add_argument("--source-ips", default="", help="CIDRs, comma-separated (default: any)")


def _list(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _secret(args: argparse.Namespace, required: bool) -> str:
    if args.secret_file:
        text = Path(args.secret_file).read_text(encoding="utf-8")
        return text.removesuffix("\n")
    if args.secret_stdin:
        text = sys.stdin.read()
        return text.removesuffix("\n")
    if required and sys.stdin.isatty():
        return getpass.getpass(f"secret key for {args.name}: ")
    if required:
        raise ValueError("user create: give the secret with --secret-file, --secret-stdin or "
                         "at the prompt (never on the command line)")
    return ""


def auth_request(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    """(action, body) for a user/acl command; ValueError for misuse (the message says why)."""
    action = f"{args.command}_{args.action}"
    if args.command == "user":
        if args.action == "list":
            return action, {}
        if not args.name:
            raise ValueError(f"user {args.action}: --name is required")
        if args.action == "delete":
            return action, {"name": args.name}
        return action, {"name": args.name, "access_key": args.access_key,
                        "secret_key": _secret(args, args.action == "create"),
                        "type": args.type, "status": args.status}
    if args.action == "list":
        return action, {"subject": args.subject}
    if not args.subject:
        raise ValueError(f"acl {args.action}: --subject User:<name> is required")
    if args.action == "delete":
        return action, {"subject": args.subject, "resources": _list(args.resources)}
    if not _list(args.resources) or not _list(args.actions):
        raise ValueError(f"acl {args.action}: --resources and --actions are required")
    return action, {"subject": args.subject, "resources": _list(args.resources),
                    "actions": _list(args.actions), "decision": args.decision,
                    "source_ips": _list(args.source_ips)}
