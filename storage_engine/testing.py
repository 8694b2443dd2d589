"""Test helpers shipped with the package (like trio.testing): simulated power loss.

`simulate_power_loss(store, rng)` abandons an open store the way a power cut would: the flush
thread stops without flushing, and in every CommitLog and ConsumeQueue segment the bytes below
the segment's last fsync survive while of the unsynced range only a random prefix (possibly
none) does; the rest becomes zeros. With `flip_bits=True` one bit of the surviving unsynced
bytes of each CommitLog segment is also flipped (a write the disk garbled before the cut): the
record checksum must find it, and recovery must cut there, never serve it. File handles close
without a checkpoint and the `abort` marker stays, so the next open runs crash recovery.
"""

from __future__ import annotations

import random

from storage_engine.message_store import MessageStore
from storage_engine.segment import Segment

__all__ = ["simulate_power_loss"]


def simulate_power_loss(store: MessageStore, rng: random.Random, *,
                        flip_bits: bool = False) -> None:
    store._state.closed = True
    store._flush.stop()
    for segment in store._commit_log.segments:
        _drop_unsynced(segment, rng, flip_bits=flip_bits)
    for queue in store._queues.values():
        for segment in queue._segments.segments:
            _drop_unsynced(segment, rng, flip_bits=False)
    store._release(clean=False)


def _drop_unsynced(segment: Segment, rng: random.Random, *, flip_bits: bool) -> None:
    synced, written = segment.flushed_position, segment.write_position
    if written <= synced:
        return
    keep = rng.choice((0, rng.randint(0, written - synced), written - synced))
    start = synced + keep
    if start < written:
        segment.file.write_at(bytes(written - start), start)
    if flip_bits and keep > 0:
        position = rng.randrange(synced, start)
        byte = segment.file.read_at(position, 1)[0] ^ (1 << rng.randrange(8))
        segment.file.write_at(bytes((byte,)), position)
