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
"""

from __future__ import annotations

import logging
import os
import resource
from pathlib import Path

logger = logging.getLogger("rocketha.broker")

DESCRIPTORS_PER_QUEUE = 2  # its segment file and the duplicate its mapping holds
RESERVE_DESCRIPTORS = 1024  # client and HA sockets, the CommitLog's segments, logs, libraries


def needed_descriptors(queue_count: int) -> int:
    return queue_count * DESCRIPTORS_PER_QUEUE + RESERVE_DESCRIPTORS


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


def make_room(store_dir: Path) -> None:
    """Raise this process's soft RLIMIT_NOFILE to what `store_dir`'s queues need (up to the
    hard limit), logging one warning line when the hard limit is too small."""
    queues = queue_count(store_dir)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted, warning = soft_limit_for(queues, soft, hard)
    if wanted != soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
        logger.info("RLIMIT_NOFILE soft limit raised from %d to %d for %d queues", soft,
                    wanted, queues)
    if warning is not None:
        logger.warning(warning)
