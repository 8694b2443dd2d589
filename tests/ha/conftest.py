"""Fixtures of the tests/ha modules."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from storage_engine import MessageStore
from tests.support.scripted_put import open_small_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[MessageStore]:
    """A real store with small segments whose confirm position the test moves (the system
    logs' tests: tests/support/scripted_put.py)."""
    store = open_small_store(tmp_path / "store")
    try:
        yield store
    finally:
        store.close()
