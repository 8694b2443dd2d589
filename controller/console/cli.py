"""`rocketha-console`'s command line, and the console script's entry point.

Apart from controller/console/app.py, which serves the page and calls the controllers (the
Flight client): this module imports only argparse, so `rocketha-console --help` and a usage
error answer before app.py is imported (`main` parses first, then loads it).
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["PROGRAM", "SESSION_S_DEFAULT", "build_parser", "main"]

PROGRAM = "rocketha-console"  # argparse's prog and the prefix of every refusal
SESSION_S_DEFAULT = 3600  # consoleSessionSeconds: a login lasts an hour (docs/security.md)
DESCRIPTION = """`rocketha-console --controller 'H:P;H:P' [--host H] --port P`: serve until Ctrl-C.

With a secured cluster's --client-config (TLS or keys), viewers log in with their own keys
(never a Super user's) and the console serves HTTPS with --cert-file/--key-file, or plain
HTTP only with --plaintext-http."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROGRAM, description=DESCRIPTION)
    parser.add_argument("--controller", required=True,
                        help="client address(es) of the controllers, ';'- or ','-separated")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on")
    parser.add_argument("--client-config", metavar="FILE",
                        help="client.properties: the tls.client.* settings of the console's "
                             "calls (rocketha-cluster writes <dir>/client.properties); a "
                             "secured cluster's (TLS or keys) makes viewers log in")
    parser.add_argument("--cert-file", metavar="PEM",
                        help="the console's HTTPS certificate (required on a secured cluster "
                             "unless --plaintext-http)")
    parser.add_argument("--key-file", metavar="PEM", help="its private key (mode 0600)")
    parser.add_argument("--plaintext-http", action="store_true",
                        help="serve plain HTTP even on a secured cluster (logins then cross "
                             "the network readable: a loopback or trusted network only)")
    parser.add_argument("--session-seconds", type=int, default=SESSION_S_DEFAULT,
                        help=f"how long a login lasts (default {SESSION_S_DEFAULT})")
    return parser


def main(argv: list[str] | None = None) -> int:
    build_parser().parse_args(sys.argv[1:] if argv is None else argv)  # exits on -h, misuse
    from controller.console.app import main as serve
    return serve(argv)
