"""`rocketha-broker`: the command line, then the server extra's check, then ha.broker.main.

The entry-point shim pattern (conf/extras.py's server_entry): the check runs before the import
it guards, and this package's __init__ imports nothing the extra provides.
"""

from __future__ import annotations

from conf.extras import server_entry
from conf.process import BROKER_PROGRAM

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    return server_entry(BROKER_PROGRAM, "server", "ha.broker.main", argv)
