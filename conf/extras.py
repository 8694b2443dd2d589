"""Which optional install ("extra") each command needs, checked before its modules are imported.

`pip install rocketha` is the client library and the Spark connector; everything else is an
extra of pyproject.toml (docs/install.md):

    extra      modules it brings        needed by
    server     prometheus_client,       rocketha-broker, rocketha-controller, rocketha-cluster
               cryptography
    s3         s3fs                     tieredStoreUrl=s3://... (brokers), readColdFromTier from
                                        S3 (Spark executors)
    spark      pyspark, deltalake       the connector inside Spark, rocketha-pipeline submit
    tables     deltalake                topic tables on brokers (a table topic without it
                                        reports the missing package: docs/topic-tables.md)
    rocketmq   grpc, rocketmq           rocketha-proxy

rocketha-admin and rocketha-console need the base install only.

The entry-point shim pattern: a console script's entry point is a module beside its package's
main (ha/broker_entry.py, ha/cluster_entry.py, controller/entry.py, connector/rmq_proxy_entry.py)
whose first statement is `require_extra(...)` and whose next is the import of the real main,
so a missing extra is one line on standard error and exit status 2 (conf/process.py's refusal)
instead of an ImportError traceback from deep inside the server's import graph. The check only
looks modules up (importlib.util.find_spec), it imports nothing. tests/test_install_roles.py
keeps EXTRA_MODULES equal to pyproject.toml's extras.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from typing import cast

from conf.process import Program, refuse, server_parser

__all__ = ["EXTRA_MODULES", "extra_refusal", "missing_modules", "require_extra",
           "server_entry"]

# extra -> the top-level modules its distributions install (the names `import` sees)
EXTRA_MODULES: dict[str, tuple[str, ...]] = {
    "rocketmq": ("cryptography", "grpc", "rocketmq"),
    "s3": ("s3fs",),
    "server": ("cryptography", "prometheus_client"),
    "spark": ("deltalake", "pyspark"),
    "tables": ("deltalake",),
}


def missing_modules(extra: str) -> tuple[str, ...]:
    """The modules of `extra` this Python cannot import (found by name, nothing imported)."""
    return tuple(name for name in EXTRA_MODULES[extra] if importlib.util.find_spec(name) is None)


def extra_refusal(program: str, extra: str, *, purpose: str = "") -> str | None:
    """The one line that says `program` needs `extra` (None when it is installed).

    Args:
        program: the command's name ("rocketha-broker").
        extra: a key of EXTRA_MODULES.
        purpose: what needs it, when not the whole command ("tieredStoreUrl s3://b/t").
    """
    missing = missing_modules(extra)
    if not missing:
        return None
    what = f"{purpose} needs" if purpose else "needs"
    return (f"{what} the {extra} extra (no module {', '.join(missing)}): "
            f"pip install 'rocketha[{extra}]'")


def require_extra(program: str, extra: str) -> None:
    """Exit with status 2 and one line on standard error unless `extra` is installed."""
    message = extra_refusal(program, extra)
    if message is not None:
        raise SystemExit(refuse(program, message))


def server_entry(program: Program, extra: str, main_module: str,
                 argv: list[str] | None) -> int:
    """A server's console script: its command line parsed first (argparse only, so `--help`
    and usage errors answer at once), then the extra's check, then `main_module`'s main,
    imported only now (ha/broker_entry.py, controller/entry.py, connector/rmq_proxy_entry.py)."""
    server_parser(program).parse_args(sys.argv[1:] if argv is None else argv)
    require_extra(program.name, extra)
    serve = cast(Callable[[list[str] | None], int],
                 importlib.import_module(main_module).main)
    return serve(argv)
