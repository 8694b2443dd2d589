"""`rocketha-cluster`: parse the command line, then the server extra's check, then the command.

The entry-point shim pattern (conf/extras.py): the check runs before the import it guards,
and this package's __init__ imports nothing the extra provides. The command line is parsed
first with ha/cluster/cli.py, which imports nothing heavy, so `--help` (of the tool and of
every subcommand) and every usage error answer at once, without the extra installed.
"""

from __future__ import annotations

import sys

from conf.extras import require_extra
from ha.cluster.cli import build_parser

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)  # exits on -h, misuse
    require_extra("rocketha-cluster", "server")
    from ha.cluster.main import run
    return run(args, parser)
