"""Two real MessageStores as an HA link joins them, and a hook inside a store's truncation.

    ship(source, replica, up_to=None)          what the HA link does: the source's bytes from
                                               the replica's end (read_log, one segment at a
                                               time), appended and indexed on the replica
    during_queue_zeroing(monkeypatch, topic, action)
                                               run `action` once, inside the next truncation
                                               of `topic`'s ConsumeQueue: after its entries
                                               were zeroed, at the fsync that follows (the
                                               window chaos seed 606 hit: reads take no lock)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import storage_engine.segment
from storage_engine import MessageStore

__all__ = ["during_queue_zeroing", "ship"]


def ship(source: MessageStore, replica: MessageStore, up_to: int | None = None) -> None:
    """The source's bytes until the replica holds `up_to` (default: the source's end)."""
    end = source.log_position_end if up_to is None else up_to
    while replica.log_position_end < end:
        data = source.read_log(replica.log_position_end, end - replica.log_position_end)
        replica.append_replicated(replica.log_position_end, data)
    replica.dispatch_replicated()


def during_queue_zeroing(monkeypatch: pytest.MonkeyPatch, topic: str,
                         action: Callable[[], None]) -> list[int]:
    """Patch the store's segment IO so `action` runs once inside the next truncation of
    `topic`'s ConsumeQueue; the returned list is non-empty once it ran."""
    fired: list[int] = []
    zeroing: list[Path] = []
    real_sync = storage_engine.segment.sync_file
    real_zero_from = storage_engine.segment.Segment.zero_from

    def zero_from(segment: storage_engine.segment.Segment, position: int) -> None:
        zeroing.append(segment.path)
        try:
            real_zero_from(segment, position)
        finally:
            zeroing.pop()

    def sync_file(file: Any, path: Path, **kwargs: Any) -> None:
        real_sync(file, path, **kwargs)
        if not fired and path in zeroing and f"consumequeue/{topic}/" in str(path):
            fired.append(1)
            action()

    monkeypatch.setattr(storage_engine.segment.Segment, "zero_from", zero_from)
    monkeypatch.setattr(storage_engine.segment, "sync_file", sync_file)
    return fired
