"""`rocketha-proxy`: the command line, then the rocketmq extra's check, then the endpoint.

The entry-point shim pattern (conf/extras.py): the check runs before the import it guards,
and this package's __init__ imports nothing the extra provides. The command line is parsed
first (conf/process.py's server_parser, argparse only), so `--help` and a usage error answer
at once, before the process's modules (and the extra's) are imported.
"""

from __future__ import annotations

import sys

from conf.extras import require_extra
from conf.process import PROXY_PROGRAM, server_parser

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    # -h and usage errors exit here, before the slow imports
    server_parser(PROXY_PROGRAM).parse_args(sys.argv[1:] if argv is None else argv)
    require_extra("rocketha-proxy", "rocketmq")
    from connector.rmq_proxy.main import main as serve
    return serve(argv)
