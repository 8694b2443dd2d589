"""`rocketha-console`'s command line, and the console script's entry point.

Apart from controller/console/app.py, which serves the page and calls the controllers (the
Flight client): this module imports only argparse, so `rocketha-console --help` and a usage
error answer before app.py is imported (`main` parses first, then loads it).
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["PROGRAM", "build_parser", "main"]

PROGRAM = "rocketha-console"  # argparse's prog and the prefix of every refusal


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROGRAM, description="`rocketha-console --controller 'H:P;H:P' [--host H] --port "
        "P`: serve the controllers' read-only web console until Ctrl-C.")
    parser.add_argument("--controller", required=True,
                        help="client address(es) of the controllers, ';'- or ','-separated")
    parser.add_argument("--host", default="127.0.0.1",
                        help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8080,
                        help="the port to listen on (default 8080)")
    parser.add_argument("--client-config", metavar="FILE",
                        help="client.properties: the tls.client.* settings and the keys that "
                             "sign the console's calls (rocketha-cluster writes "
                             "<dir>/client.properties); with keys, viewers must give the same "
                             "keys (HTTP Basic)")
    return parser


def main(argv: list[str] | None = None) -> int:
    build_parser().parse_args(sys.argv[1:] if argv is None else argv)  # exits on -h, misuse
    from controller.console.app import main as serve
    return serve(argv)
