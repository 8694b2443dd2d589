"""Every package's public surface: a sorted `__all__` whose names all exist (httpx's check)."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = [
    "conf", "connector", "connector.admin", "connector.client", "connector.protocol",
    "connector.rmq_proxy", "connector.spark", "controller", "controller.admin", "controller.api",
    "controller.auth", "controller.console", "controller.raft", "examples", "examples.demo", "ha",
    "ha.broker", "ha.cluster", "ha.replication", "storage_engine",
    "storage_engine.tiered",
]


def _isort_key(name: str) -> tuple[int, str]:
    if name.isupper():
        return 0, name
    return (1 if name[:1].isupper() else 2), name


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    # ruff's RUF022 order (isort-style): CONSTANTS, then Classes, then functions, each by name
    assert exported == sorted(exported, key=_isort_key), f"{name}.__all__ is not sorted"
    assert len(set(exported)) == len(exported)
    missing = [member for member in exported if not hasattr(module, member)]
    assert not missing, f"{name}.__all__ names missing members: {missing}"
