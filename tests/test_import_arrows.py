"""The import arrows of docs/design.md §2, checked on the source (the re-cut's shape, kept).

Goal: no package imports against an arrow (storage_engine never imports ha, the controller never
imports the broker or the client, the wire protocol imports nothing of ours, conf is the leaf),
and no product module hides an import of ours inside a function (a cycle in disguise). Method:
parse every product module with `ast` (no import is executed) and compare each import of ours
with the table below; a new package or arrow is a line in RULES, next to its reason.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OURS = frozenset({"conf", "storage_engine", "ha", "controller", "connector", "spark_app",
                  "examples", "pyspark_rocketha", "rocketha_cold", "rocketha_admin"})

# importer prefix -> the prefixes of ours it may import (its own prefix always allowed); the
# longest matching importer prefix decides.
RULES: dict[str, tuple[str, ...]] = {
    "conf": (),  # the leaf
    "storage_engine": ("conf",),
    "controller": ("conf",),  # independent of ha, storage_engine and connector
    "connector.protocol": (),  # the wire: nothing of ours
    "connector": ("conf", "connector"),
    "ha": (),  # the package's own __init__ (a docstring)
    # console-script shims: the extra's check, then the real main (conf/extras.py)
    "ha.broker_entry": ("conf", "ha.broker"),
    "ha.cluster_entry": ("conf", "ha.cluster"),
    "controller.entry": ("conf", "controller"),
    "connector.rmq_proxy_entry": ("conf", "connector.rmq_proxy"),
    "ha.replication": ("conf", "storage_engine", "controller.api", "connector.protocol"),
    "ha.broker": ("conf", "storage_engine", "ha.replication", "controller.api",
                  "connector.protocol"),
    # an entry point: starts brokers and controllers, so it may reach both (design §10)
    "ha.cluster": ("conf", "storage_engine", "ha", "controller", "connector.protocol"),
    "spark_app": ("conf", "connector"),
    # composition roots and entry points outside the packages
    "pyspark_rocketha": ("connector", "rocketha_cold"),
    "rocketha_cold": ("conf", "connector", "storage_engine"),
    "rocketha_admin": ("conf", "connector", "controller.admin"),
    # the console scripts' shims: check the extra (conf.extras), then import the real main
    "examples": ("conf", "connector", "ha.cluster", "spark_app", "storage_engine"),
}
# Entry-point modules that load a command's heavy modules only when that command runs (the
# speed of `--help`), and the broker's topic tables, whose IO (deltalake) loads at the first
# table topic (a broker's start time, issue 42); neither is a cycle: each names what it loads
# late.
LATE_IMPORTS_ALLOWED = {"rocketha_admin": ("connector.admin.cli", "connector.admin.parser",
                                            "connector.admin.probe", "controller.admin.main",
                                            "controller.admin.parser"),
                        "ha.broker_entry": ("ha.broker.main",),
                        "ha.cluster_entry": ("ha.cluster.main",),
                        "controller.entry": ("controller.main",),
                        "controller.console.cli": ("controller.console.app",),
                        "connector.rmq_proxy_entry": ("connector.rmq_proxy.main",),
                        "ha.broker.topic_tables": ("ha.broker.table_maintenance",
                                                   "ha.broker.topic_table")}


def _modules() -> list[tuple[str, Path]]:
    paths: list[Path] = []
    for name in sorted(OURS):
        package, module = ROOT / name, ROOT / f"{name}.py"
        paths += sorted(package.rglob("*.py")) if package.is_dir() else [module]
    return [(".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"),
             path) for path in paths if path.exists()]


def _rule_for(module: str) -> tuple[str, tuple[str, ...]]:
    matches = [prefix for prefix in RULES if module == prefix or module.startswith(prefix + ".")]
    assert matches, f"{module}: no arrow rule names it (add its package to RULES)"
    prefix = max(matches, key=len)
    return prefix, RULES[prefix]


def _ours(node: ast.Import | ast.ImportFrom) -> list[str]:
    names = [node.module or ""] if isinstance(node, ast.ImportFrom) else [
        alias.name for alias in node.names]
    return [name for name in names if name.split(".")[0] in OURS]


def _under(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


def _module_level(tree: ast.Module) -> list[ast.stmt]:
    """Statements run at import: the module's own, and those inside its top-level try/if
    blocks (an optional dependency's import), never a function's or a class's body."""
    found, pending = [], list(tree.body)
    while pending:
        node = pending.pop()
        found.append(node)
        if isinstance(node, ast.Try | ast.If):
            pending += [*node.body, *node.orelse, *getattr(node, "finalbody", ()),
                        *(stmt for handler in getattr(node, "handlers", ())
                          for stmt in handler.body)]
    return found


MODULES = _modules()


def test_every_package_is_found() -> None:
    names = {module for module, _ in MODULES}
    for package in ("conf", "storage_engine", "ha.replication", "ha.broker", "ha.cluster",
                    "controller.raft", "controller.api", "connector.client", "connector.spark"):
        assert package in names, f"{package} is missing: the walk is broken"


@pytest.mark.parametrize(("module", "path"), MODULES, ids=[m for m, _ in MODULES])
def test_imports_follow_the_arrows(module: str, path: Path) -> None:
    prefix, allowed = _rule_for(module)
    tree = ast.parse(path.read_text(), filename=str(path))
    module_level = {id(node) for node in _module_level(tree)}
    late_allowed = LATE_IMPORTS_ALLOWED.get(module, ())
    for node in ast.walk(tree):
        if not isinstance(node, ast.Import | ast.ImportFrom) or getattr(node, "level", 0):
            continue
        for name in _ours(node):
            where = f"{path.relative_to(ROOT)}:{node.lineno}"
            assert _under(name, (prefix, *allowed)), \
                f"{where}: {module} imports {name}, against the arrows of docs/design.md §2"
            if id(node) not in module_level:
                assert name in late_allowed, \
                    f"{where}: {module} imports {name} inside a function (a hidden cycle?)"
