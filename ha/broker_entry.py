"""`rocketha-broker`: the command line, then the server extra's check, then ha.broker.main.

The entry-point shim pattern (conf/extras.py): the check runs before the import it guards,
and this package's __init__ imports nothing the extra provides. The command line is parsed
first (conf/process.py's server_parser, argparse only), so `--help` and a usage error answer
at once, before the process's modules (and the extra's) are imported.
"""

from __future__ import annotations

import sys

from conf.extras import require_extra
from conf.process import BROKER_PROGRAM, server_parser

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    # -h and usage errors exit here, before the slow imports
    server_parser(BROKER_PROGRAM).parse_args(sys.argv[1:] if argv is None else argv)
    require_extra("rocketha-broker", "server")
    from ha.broker.main import main as serve
    return serve(argv)
