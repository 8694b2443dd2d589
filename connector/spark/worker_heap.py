"""Spare Spark's Python workers a full garbage collection of their whole heap after each task.

Why: PySpark's daemon (`pyspark/daemon.py`, Spark 4.2) calls `gc.collect()` after every task
of a reused Python worker. A worker that runs our reader or writer has imported PySpark,
pyarrow (Flight, compute), numpy and this package, ~50,000 objects the collector walks each
time: ~25 ms of CPU per task on this machine (`gc.callbacks` in the workers of `bench spark`'s
two-column read, 35 of 35 collections), paid between tasks on the cores the JVM uses for the
query's next stage. Without them a loop of 1 M-row reads ran ~16 % faster (README).

`gc.freeze()` moves every object the collector tracks to a permanent generation it never
walks again (it exists for exactly this: long-lived processes whose imported heap never
becomes garbage). Done once per worker process, at its first read or write task; objects made
afterwards are collected as before, so later tasks' cycles are still freed. What it costs: an
object alive at that moment that later becomes cyclic garbage stays in memory (module-level objects
rarely do; the first task's own reader and partition are a few KiB). The options
`workerGcFreeze=false` (source and sink) leave the worker's collector alone.
"""

from __future__ import annotations

import gc
import os

__all__ = ["freeze_worker_heap_once"]

_frozen_in_pid: int | None = None  # a forked child (Spark's daemon forks workers) starts over


def freeze_worker_heap_once() -> bool:
    """gc.freeze() the first time this process asks; True if this call froze the heap."""
    global _frozen_in_pid  # one flag per process, by design
    pid = os.getpid()
    if _frozen_in_pid == pid:
        return False
    _frozen_in_pid = pid
    gc.freeze()
    return True
