"""Test helpers shipped with the package (like trio.testing): simulated power loss.

`simulate_power_loss(store, rng)` abandons an open store the way a power cut would: the flush
thread stops without flushing, and in every CommitLog and ConsumeQueue segment the bytes below
the segment's last fsync survive while of the unsynced range only a random prefix (possibly
none) does; the rest becomes zeros. File handles close without a checkpoint and the `abort`
marker stays, so the next open runs crash recovery.
"""

from __future__ import annotations

import os
import random

from storage_engine.message_store import MessageStore
from storage_engine.segment import Segment

__all__ = ["simulate_power_loss"]


def simulate_power_loss(store: MessageStore, rng: random.Random) -> None:
    store._closed = True
    store._flush.stop()
    segments: list[Segment] = list(store._commit_log.segments)
    for queue in store._queues.values():
        segments += queue._segments.segments
    for segment in segments:
        _drop_unsynced(segment, rng)
    store._release(clean=False)


def _drop_unsynced(segment: Segment, rng: random.Random) -> None:
    synced, written = segment.flushed_position, segment.write_position
    if written <= synced:
        return
    keep = rng.choice((0, rng.randint(0, written - synced), written - synced))
    start = synced + keep
    if start < written:
        os.pwrite(segment.fd, bytes(written - start), start)
