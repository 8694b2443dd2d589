"""Every package's public surface: a sorted `__all__` whose names all exist (httpx's check)."""

from __future__ import annotations

import importlib

import pytest

PACKAGES = ["storage_engine", "storage_engine.tiered", "connector", "connector.protocol", "ha", "ha.broker"]

PACKAGES += ["controller", "controller.raft"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert exported == sorted(exported), f"{name}.__all__ is not sorted"
    assert len(set(exported)) == len(exported)
    missing = [member for member in exported if not hasattr(module, member)]
    assert not missing, f"{name}.__all__ names missing members: {missing}"
