"""`rocketha-admin`: one operator tool for brokers and controllers (in the spirit of mqadmin).

    rocketha-admin --broker HOST:PORT <topic|offsets|broker|produce|consume> ...
    rocketha-admin --controller 'H:P;H:P;H:P' <status|cluster|replica|elect|clean|routes> ...

With `--broker` the commands of `connector.admin_cli` run against one broker; with
`--controller` those of `controller.admin` run against the controller group (cluster list,
replica-set info with its SyncStateSet, elect a master, optionally a chosen broker, clean a
broker's data, topic routes). The two tools live in packages that may not import each other
(DESIGN §2), so this top-level module, outside every package, is the one that knows both.
"""

from __future__ import annotations

import sys

__all__ = ["main"]

USAGE = """usage: rocketha-admin --broker HOST:PORT {topic,offsets,broker,produce,consume} ...
       rocketha-admin --controller 'H:P[;H:P...]' {status,cluster,replica,elect,clean,routes} ...
(add -h after either form for its commands)"""


def _names(argv: list[str], option: str) -> bool:
    return any(arg == option or arg.startswith(option + "=") for arg in argv)


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    to_broker, to_controller = _names(args, "--broker"), _names(args, "--controller")
    if to_broker and to_controller:
        print(f"rocketha-admin: give --broker or --controller, not both\n{USAGE}",
              file=sys.stderr)
        return 2
    if to_controller:
        from controller.admin import main as controller_main
        return controller_main(args, prog="rocketha-admin")
    if to_broker:
        from connector.admin_cli import main as broker_main
        return broker_main(args)
    if args in (["-h"], ["--help"]):
        print(f"{USAGE}\n\n{__doc__}")
        return 0
    print(f"rocketha-admin: name a broker (--broker) or the controllers (--controller)\n{USAGE}",
          file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
