"""Room for the store's file descriptors, checked before the store opens.

Why: a broker holds a descriptor per segment file it has open, and a mapped segment holds a
second one (CPython's `mmap` duplicates the descriptor it maps). After a restart each
ConsumeQueue held two (measured: 4,002 descriptors for 2,000 written queues; the start maps
every queue's segment): a broker of 10,000 written queues needs over 20,000 descriptors, and
under a smaller `RLIMIT_NOFILE` its start died in recovery with `EMFILE` and a traceback
(found by `bench scale` with every queue written, 2026-12-03). RocketMQ's brokers hold a
descriptor per mapped file too, and its docs ask for a large `nofile`; this module raises the
soft limit towards the hard one when the store needs it, and says in one line what to raise
when the hard limit is short.

The queues a broker may hold are bounded too (`queuesMax`; 0, the default, derives it from the
hard limit: what a restart could open, 2 descriptors per queue plus the reserve): a topic
create, update or auto-create past it is refused with one line. Before (found 2026-12-03), a
broker whose queues outgrew its descriptors while it ran kept answering PUT_OK while every
checkpoint failed with `Too many open files`, and so did its links to the controller. The soft
limit is raised at start to what `queuesMax` queues need (within the hard limit), so queues
created while the broker runs find room.
"""

from __future__ import annotations

import logging
import os
import resource
from pathlib import Path

logger = logging.getLogger("rocketha.broker")

DESCRIPTORS_PER_QUEUE = 2  # its segment file and the duplicate its mapping holds
RESERVE_DESCRIPTORS = 1024  # client and HA sockets, the CommitLog's segments, logs, libraries


QUEUES_MAX_FLOOR = 64  # a derived queuesMax never below this (a hard limit near the reserve)
QUEUES_MAX_UNBOUNDED = 1 << 30  # queuesMax derived from an unlimited hard limit
ROOM_QUEUES_MAX = 65_536  # the soft limit is raised at start for at most this many queues


def needed_descriptors(queue_count: int) -> int:
    return queue_count * DESCRIPTORS_PER_QUEUE + RESERVE_DESCRIPTORS


def queues_max_for(configured: int, hard: int) -> int:
    """The queues a broker may hold: `configured` (queuesMax) when set, else what the hard
    RLIMIT_NOFILE leaves room for after a restart (at least QUEUES_MAX_FLOOR). Sans-IO."""
    if configured > 0:
        return configured
    if hard == resource.RLIM_INFINITY:
        return QUEUES_MAX_UNBOUNDED
    return max(QUEUES_MAX_FLOOR, (hard - RESERVE_DESCRIPTORS) // DESCRIPTORS_PER_QUEUE)


def queues_max(configured: int) -> int:
    """`queues_max_for` this process's hard RLIMIT_NOFILE (read at each call: a topic change
    is rare, and the limit can be changed from outside, `prlimit`)."""
    return queues_max_for(configured, resource.getrlimit(resource.RLIMIT_NOFILE)[1])


def queue_limit_refusal(name: str, adding: int, total: int, limit: int, configured: int) -> str:
    """The one line a topic change past queuesMax is refused with."""
    origin = ("set" if configured > 0 else
              f"derived from the hard RLIMIT_NOFILE of "
              f"{resource.getrlimit(resource.RLIMIT_NOFILE)[1]}: {DESCRIPTORS_PER_QUEUE} file "
              f"descriptors per queue after a restart, plus {RESERVE_DESCRIPTORS}")
    return (f"topic {name!r} would bring this broker to {total} queues ({adding} more), past "
            f"queuesMax {limit} ({origin}); delete topics, or raise queuesMax and the broker's "
            f"nofile limit (docs/operations.md, \"Open files\")")


def soft_limit_for(queue_count: int, soft: int, hard: int) -> tuple[int, str | None]:
    """(the soft RLIMIT_NOFILE to run with, a warning line or None). Sans-IO.

    The soft limit is raised only when the store needs more, and never past the hard limit
    (an unprivileged process cannot); a hard limit too small gets the warning."""
    needed = needed_descriptors(queue_count)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return soft, None
    if hard == resource.RLIM_INFINITY or hard >= needed:
        return needed, None
    return hard, (f"the store holds {queue_count} queues and a broker keeps up to "
                  f"{DESCRIPTORS_PER_QUEUE} file descriptors per queue it reads: about {needed} "
                  f"with sockets, above the hard RLIMIT_NOFILE of {hard}; raise it (ulimit -n, "
                  f"LimitNOFILE= in a systemd unit) or the start may fail with 'Too many open "
                  f"files'")


def queue_count(store_dir: Path) -> int:
    """The queue directories under `store_dir`/consumequeue (one scandir per topic)."""
    root = store_dir / "consumequeue"
    try:
        topics = [entry.path for entry in os.scandir(root) if entry.is_dir()]
    except FileNotFoundError:
        return 0
    count = 0
    for topic in topics:
        try:
            count += sum(1 for entry in os.scandir(topic) if entry.is_dir())
        except FileNotFoundError:  # a topic deleted meanwhile
            continue
    return count


def make_room(store_dir: Path, configured_queues_max: int = 0) -> None:
    """Raise this process's soft RLIMIT_NOFILE to what `store_dir`'s queues need, and the
    queues queuesMax allows (up to the hard limit), logging one warning line when the hard
    limit is too small for the queues the store holds."""
    queues = queue_count(store_dir)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    _, warning = soft_limit_for(queues, soft, hard)  # (a short hard limit: the store's need)
    allowed = min(queues_max_for(configured_queues_max, hard), ROOM_QUEUES_MAX)
    wanted, _ = soft_limit_for(max(queues, allowed), soft, hard)
    if wanted != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        logger.info("RLIMIT_NOFILE soft limit raised from %d to %d for the %d queues the "
                    "store holds and the %d queuesMax allows", soft, wanted, queues, allowed)
    if warning is not None:
        logger.warning(warning)
