"""TopicTables: the `topic-tables` thread, materializing opted-in topics while master.

    every topicTableIntervalMs (at once again while a commit limit left messages behind):
      master_epoch()                       None (slave, fenced, changing role) -> standby
      for each topic whose table is delta  (its `table` attribute, else topicTableDefault)
        backing off after a failure?       -> skip it this time
        fenced under this epoch?           -> skip it (a newer master writes the table)
        the table past the store's end?    -> no commit; `ahead_queues` says which (a topic
                                              created again under the same name)
        TopicTableWriter.run_pass          (ha/broker/topic_table.py: one Delta commit)
          CommitFailedError                -> another writer committed first: plan again,
                                              up to COMMIT_ATTEMPTS_MAX in this pass
          any other error                  -> count, keep as last_error, log; retry after
                                              backoff_ms (the interval, doubling, to
                                              RETRY_BACKOFF_MAX_MS)
        upkeep due (every topicTableMaintenanceIntervalMs, after a pass that was not fenced)
          run_maintenance                  (ha/broker/table_maintenance.py: retention,
                                              compaction, vacuum; an error is kept as
                                              maintenance_error and tried next interval)

The thread runs nicer than the broker's other threads by topicTableNice (set as it starts), and
so do delta-rs's threads: delta-rs starts its tokio runtime at its first call in the process and
Linux gives a new thread the nice of the thread creating it; every deltalake call of the broker
is made here (tests/integration/test_table_nice.py checks the threads' nice). Under CPU
saturation the puts get the cores and the tables lag, catching up when the load ends.

Nothing here is on a put's path: the thread only reads the store (confirmed messages, through
the normal read path) and writes the object store, so an object store that is down delays the
tables, never a put. It runs on every broker and does work only on the master; a deposed
master's pass is refused by the table itself (the fence, ha/broker/table_plan.py).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from ha.broker.config import BrokerConfig
from ha.broker.metadata import TopicConfig
from ha.broker.table_lag import table_lag
from ha.broker.table_removal import remove_table
from ha.broker.topic_log import TopicLog
from storage_engine import MessageStore
from storage_engine.tiered import backoff_ms

_TABLE_IO_MISSING = ""  # why topic tables cannot run here (set when deltalake is missing)
_NOT_LOADED: Any = object()
# ha.broker.topic_table and table_maintenance, imported at the first table topic (`_table_io`):
# with deltalake, pyarrow.parquet and pyarrow.compute under them they cost a broker's start
# 0.2 to 0.6 s (measured at load 14, issue 42), and most brokers have no table topic.
table_io: Any = _NOT_LOADED
table_maintenance: Any = _NOT_LOADED
_LOADING = threading.Lock()


def _table_io() -> Any:
    """ha.broker.topic_table, imported now if not yet; None when deltalake is not installed
    (an optional dependency, `rocketha[tables]`: a broker runs without it; _TABLE_IO_MISSING
    says why)."""
    global table_io, table_maintenance, _TABLE_IO_MISSING
    with _LOADING:
        if table_io is _NOT_LOADED:
            try:
                import ha.broker.table_maintenance as maintenance
                import ha.broker.topic_table as io
            except ModuleNotFoundError as err:
                table_io = table_maintenance = None
                _TABLE_IO_MISSING = (f"topic tables need the deltalake package (pip install "
                                     f"'rocketha[tables]'): {err}")
            else:
                table_io, table_maintenance = io, maintenance
        return table_io

__all__ = ["TopicTables"]

logger = logging.getLogger(__name__)

COMMIT_ATTEMPTS_MAX = 3  # commits of one topic lost to other writers before the next pass
RETRY_BACKOFF_MAX_MS = 60_000  # longest wait after failures in a row (object store down)
NICE_MAX = 19  # the kernel's least priority


@dataclasses.dataclass
class _TopicState:
    writer: table_io.TopicTableWriter | None  # None: deltalake is not installed
    failures: int = 0
    retry_at_ms: int = 0
    fenced_epoch: int | None = None  # the epoch a newer master's fence was seen under
    commits: int = 0
    rows: int = 0
    lost_races: int = 0
    skipped: int = 0
    pending: int | None = None  # confirmed messages not in the table (last pass)
    last_commit_ms: int | None = None
    last_version: int | None = None
    last_error: dict[str, Any] | None = None
    maintenance_at_ms: int | None = None  # when upkeep is due next (set by the first pass)
    last_maintenance: dict[str, Any] | None = None  # what the last upkeep did, and when
    maintenance_error: dict[str, Any] | None = None
    ends: dict[int, int] = dataclasses.field(default_factory=dict)  # the table's, last pass
    queue_ids: tuple[int, ...] = ()  # the topic's queues, last pass
    ahead: tuple[int, ...] = ()  # queues the table is past the store's end in (no commits)


class TopicTables:
    """The broker's topic tables (see the module doc). `start()` / `stop()`; `run_pass()`
    for tests and tools."""

    def __init__(self, config: BrokerConfig, store: MessageStore, topics: TopicLog, *,
                 master_epoch: Callable[[], int | None],
                 clock_ms: Callable[[], int] | None = None) -> None:
        self.config = config
        self.store = store
        self.topics = topics
        self.master_epoch = master_epoch
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._storage_options: dict[str, str] | None = None  # set with the first writer
        self._states: dict[str, _TopicState] = {}
        self._lock = threading.Lock()  # _states and counters, against stats() readers
        self._writing = threading.Lock()  # held through one topic's pass: remove_table waits
        self._stop = threading.Event()
        self._wake = threading.Event()  # stop() or a live config change: end the wait now
        self._thread: threading.Thread | None = None
        self._role = "standby"
        self._passes = 0

    def start(self) -> TopicTables:
        self._thread = threading.Thread(target=self._loop, name="topic-tables", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop after the commit in progress (a commit is bounded by the commit limits)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()

    def set_config(self, config: BrokerConfig) -> None:
        """A live change (`broker config set`): the next pass, and the next wait, read it; the
        wait in progress ends now, so a shorter topicTableIntervalMs needs no old interval."""
        self.config = config
        self._wake.set()

    def _loop(self) -> None:
        """A pass every interval, start to start (a pass's own time is not added to the wait,
        so a row waits at most about one interval plus one pass: the lag bound). A live change
        of the interval (set_config) ends the wait in progress."""
        self._yield_cpu()
        wait_s = self.config.topic_table_interval_ms / 1000.0
        while True:
            self._wake.wait(wait_s)
            self._wake.clear()
            if self._stop.is_set():
                return
            started_s = time.monotonic()
            try:
                more = self.run_pass()
            except Exception:  # the thread must survive anything
                logger.exception("topic tables: pass failed")
                more = False
            interval_s = self.config.topic_table_interval_ms / 1000.0
            wait_s = 0.0 if more else max(0.0, interval_s - (time.monotonic() - started_s))

    def _yield_cpu(self) -> None:
        """This thread (and the threads it creates: delta-rs's) topicTableNice nicer, at most
        the kernel's 19; raising one's own nice needs no privilege."""
        if self.config.topic_table_nice <= 0:
            return
        thread_id = threading.get_native_id()
        try:
            nice = os.getpriority(os.PRIO_PROCESS, thread_id) + self.config.topic_table_nice
            os.setpriority(os.PRIO_PROCESS, thread_id, min(NICE_MAX, nice))
        except OSError as err:  # not Linux-like: the tables share the CPU with the puts
            logger.warning("topic tables: cannot lower the thread's priority "
                           "(topicTableNice %d): %s", self.config.topic_table_nice, err)

    def enabled(self, topic: TopicConfig) -> bool:
        return topic.table_format(self.config.topic_table_default) == "delta"

    def run_pass(self) -> bool:
        """One commit per table topic, if this broker is the master; returns whether a
        limit left messages behind (the next pass should follow at once)."""
        epoch = self.master_epoch()
        with self._lock:
            self._passes += 1
            self._role = "standby" if epoch is None else "master"
        if epoch is None:
            return False
        more = False
        for topic in self.topics.all():
            if self._stop.is_set():
                break
            with self._writing:
                current = self.topics.get(topic.name)  # deleted meanwhile: no pass
                if current is not None and self.enabled(current):
                    more |= self._topic_pass(current, epoch)
        return more

    def remove_table(self, topic: str) -> bool:
        """Remove a deleted topic's table from the tier (ha/broker/table_removal.py); whether
        there was one. Waits for a pass in progress, and refuses while the topic exists here:
        its next pass would start the table again."""
        with self._writing:
            if self.topics.get(topic) is not None:
                raise ValueError(f"topic {topic!r} still exists: delete it before its table")
            with self._lock:
                self._states.pop(topic, None)
            return remove_table(self.config.store, self.config.store_dir, topic)

    def _state(self, topic: TopicConfig) -> _TopicState:
        with self._lock:
            state = self._states.get(topic.name)
            if state is None:
                io = _table_io()
                if io is not None and self._storage_options is None:
                    self._storage_options = io.table_storage_options(self.config.store)
                writer = None if io is None else io.TopicTableWriter(
                    self.store, topic=topic.name, broker_name=self.config.broker_name,
                    uri=io.tier_table_uri(self.config.store, self.config.store_dir,
                                          topic.name),
                    storage_options=self._storage_options,
                    limits=io.TableLimits(self.config.topic_table_commit_rows_max,
                                          self.config.topic_table_commit_bytes_max))
                state = self._states[topic.name] = _TopicState(writer)
            return state

    def _topic_pass(self, topic: TopicConfig, epoch: int) -> bool:
        state = self._state(topic)
        now_ms = self._clock_ms()
        if state.retry_at_ms > now_ms or state.fenced_epoch == epoch:
            return False
        if state.writer is None:
            self._failed(state, topic.name, RuntimeError(_TABLE_IO_MISSING), now_ms)
            return False
        queue_ids = {queue_id for name, queue_id in self.store.queues() if name == topic.name}
        queue_ids.update(range(topic.read_queue_nums))
        with self._lock:
            state.queue_ids = tuple(sorted(queue_ids))
        for attempt in range(1, COMMIT_ATTEMPTS_MAX + 1):
            try:
                result = state.writer.run_pass(epoch, queue_ids)
            except table_io.CommitFailedError as err:
                with self._lock:
                    state.lost_races += 1
                logger.info("topic table %s: commit attempt %d/%d lost to another writer "
                            "(%s): planning again", topic.name, attempt, COMMIT_ATTEMPTS_MAX,
                            err)
                continue
            except Exception as err:  # noqa: BLE001 - reported; retried after a backoff
                self._failed(state, topic.name, err, now_ms)
                return False
            self._done(state, topic.name, result, epoch)
            if result.outcome != "fenced":
                self._maintain(state, topic.name)
            return bool(result.more)
        return True  # lost every attempt: try again at once

    def _done(self, state: _TopicState, topic: str, result: table_io.PassResult,
              epoch: int) -> None:
        with self._lock:
            ahead_before, state.ahead = state.ahead, tuple(result.ahead)
            state.failures = 0
            state.retry_at_ms = 0
            state.pending = result.pending_count
            if result.outcome == "fenced":
                state.fenced_epoch = epoch
            else:
                state.ends = dict(result.ends)
            if result.outcome == "committed":
                state.commits += 1
                state.rows += result.rows
                state.skipped += result.skipped_count
                state.last_commit_ms = self._clock_ms()
                state.last_version = result.table_version
        if result.outcome == "fenced":
            logger.warning("topic table %s: a newer master (epoch %s) writes it; this broker "
                           "(epoch %d) stops writing it", topic, result.table_epoch, epoch)
        if result.skipped_count:
            logger.warning("topic table %s: %d message(s) were gone from the log and the tier "
                           "before the table got them", topic, result.skipped_count)
        if result.ahead != ahead_before:
            if result.ahead:
                logger.warning("topic table %s: the table holds offsets past this store's end "
                               "in queue(s) %s (the topic deleted and created again under the "
                               "same name?): no commits while it is; move the table away to "
                               "start a new one", topic, list(result.ahead))
            else:
                logger.info("topic table %s: no queue is behind the table any more", topic)

    def _maintain(self, state: _TopicState, topic: str) -> None:
        """Retention, compaction and vacuum of the table, when due (after a pass)."""
        now_ms = self._clock_ms()
        interval_ms = self.config.topic_table_maintenance_interval_ms
        if state.maintenance_at_ms is None:
            state.maintenance_at_ms = now_ms + interval_ms
        if now_ms < state.maintenance_at_ms or state.writer is None:
            return
        state.maintenance_at_ms = now_ms + interval_ms
        settings = table_maintenance.MaintenanceSettings(
            self.config.topic_table_target_file_bytes, self.config.topic_table_vacuum_hours,
            self.config.topic_table_retention_hours)
        try:
            done = table_maintenance.run_maintenance(state.writer.uri, self._storage_options,
                                                     settings, now_ms)
        except Exception as err:  # noqa: BLE001 - reported; tried again next interval
            with self._lock:
                state.maintenance_error = {"kind": type(err).__name__,
                                           "message": str(err)[:500], "at_ms": now_ms}
            logger.warning("topic table %s: upkeep failed (next try in %d ms): %s", topic,
                           interval_ms, err)
            return
        with self._lock:
            state.maintenance_error = None
            state.last_maintenance = None if done is None else {**done.as_dict(),
                                                                "at_ms": now_ms}
        if done is not None:
            logger.info("topic table %s: upkeep %s", topic, done.as_dict())

    def _failed(self, state: _TopicState, topic: str, err: Exception, now_ms: int) -> None:
        with self._lock:
            state.failures += 1
            wait_ms = backoff_ms(state.failures, min_ms=self.config.topic_table_interval_ms,
                                 max_ms=max(RETRY_BACKOFF_MAX_MS,
                                            self.config.topic_table_interval_ms))
            state.retry_at_ms = now_ms + wait_ms
            state.last_error = {"kind": type(err).__name__, "message": str(err)[:500],
                                "at_ms": now_ms}
        logger.warning("topic table %s: pass failed (%d in a row; next try in %d ms): %s",
                       topic, state.failures, wait_ms, err)

    def stats(self) -> dict[str, Any]:
        """For `broker info` and the metrics: the role seen last, and per table topic its
        progress and, on the master, its lag behind the confirm position (table_lag.py)."""
        with self._lock:
            topics = {name: {"uri": state.writer and state.writer.uri, "commits": state.commits,
                             "rows": state.rows, "pending_messages": state.pending,
                             "last_commit_ms": state.last_commit_ms,
                             "last_version": state.last_version,
                             "lost_races": state.lost_races, "skipped_messages": state.skipped,
                             "failures_in_a_row": state.failures,
                             "fenced_epoch": state.fenced_epoch,
                             "ahead_queues": list(state.ahead),
                             "last_error": state.last_error,
                             "last_maintenance": state.last_maintenance,
                             "maintenance_error": state.maintenance_error}
                      for name, state in sorted(self._states.items())}
            lag_inputs = {name: (dict(state.ends), state.queue_ids)
                          for name, state in self._states.items()
                          if state.writer is not None and state.fenced_epoch is None}
            role = self._role
            result = {"role": role, "passes": self._passes,
                      "interval_ms": self.config.topic_table_interval_ms,
                      "default": self.config.topic_table_default, "topics": topics}
        now_ms = self._clock_ms()
        for name, topic_stats in topics.items():
            lag = None
            if role == "master" and name in lag_inputs:
                try:
                    lag = table_lag(self.store, name, *lag_inputs[name], now_ms)
                except Exception:  # the store closing under a scrape: no lag this time
                    logger.debug("topic table %s: lag unavailable", name, exc_info=True)
            topic_stats["lag_messages"] = None if lag is None else lag.messages
            topic_stats["lag_seconds"] = None if lag is None else round(lag.seconds, 3)
        return result
