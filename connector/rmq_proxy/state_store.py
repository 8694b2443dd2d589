"""The POP state's home in the cluster: the internal topic STATE_TOPIC, one queue on each
replica set, holding the records of pop_core.py for the consumer-group queues of that set.

Writes go through the same put path as any message (quorum-acknowledged, replicated with the
set's CommitLog), so the state of a set's queues fails over with the set's data. A record
counts only once it is answered PUT_OK; the proxy applies it to its PopState only then, and
only then answers the client (`StateStore.write`). Writes of one set are serialized (a lock
per set around put + apply), so the log order is the order of application.

Replay (`StateStore.open_set`, at start and for a set first seen later): read STATE_TOPIC from
the offset committed for the internal group STATE_GROUP (the latest snapshot record; its
commit reaches the slaves within haMetadataSyncInterval, and an older snapshot replays to the
same state since records are idempotent) to the queue's end, applying every record in order.
A record that does not decode is logged and skipped (the topic is writable by any client with
put rights: it can cost deliveries, never crash the proxy). Every snapshot_interval_ms a set
whose state changed gets a snapshot record, whose queue offset is then committed; with it the
proxy also commits each consumer group's `committed` as the group's offset on the data queue
(so `rocketha-admin` shows the group's lag).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from connector.protocol import RocketHAError
from connector.rmq_proxy.cluster_io import ClusterLinks
from connector.rmq_proxy.pop_core import (
    PopState,
    QueueKey,
    RecordError,
    decode_records,
    encode_records,
)

__all__ = ["STATE_GROUP", "STATE_TOPIC", "StateStore", "StateWriteError"]

logger = logging.getLogger(__name__)

STATE_TOPIC = "rmq_sys_rocketha_pop_state"
STATE_GROUP = "rocketha-proxy"
REPLAY_BATCH_MESSAGES = 1024
REPLAY_PULLS_MAX = 1 << 20  # bounds the replay loop (1G records)


class StateWriteError(Exception):
    """A state record was not acknowledged PUT_OK (the status or error is in the message)."""


class StateStore:
    def __init__(self, links: ClusterLinks, pop: PopState, snapshot_interval_ms: int,
                 clock_s: Callable[[], float] = time.monotonic) -> None:
        self.links = links
        self.pop = pop
        self._snapshot_interval_s = snapshot_interval_ms / 1000.0
        self._clock_s = clock_s
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()
        self._open: set[str] = set()
        self._missing: set[str] = set()  # opened sets without STATE_TOPIC yet
        self._dirty: dict[str, float] = {}  # set -> when its state first changed unsnapshotted
        self._committed_seen: dict[QueueKey, int] = {}
        self.records_written = 0
        self.records_replayed = 0
        self.records_skipped = 0

    def lock(self, broker_name: str) -> threading.Lock:
        with self._locks_lock:
            return self._locks.setdefault(broker_name, threading.Lock())

    def open_set(self, broker_name: str) -> None:
        """Replay the set's STATE_TOPIC (once per process). A set without the topic has no
        state yet: the topic is created by the first write (so a cluster whose RocketMQ
        clients never consume gets no extra topic)."""
        if broker_name in self._open:
            return
        with self.lock(broker_name):
            if broker_name in self._open:
                return
            admin = self.links.admin(broker_name)
            try:
                admin.get_topic(STATE_TOPIC)
            except RocketHAError as err:
                if err.name != "TOPIC_NOT_EXIST":
                    raise
                self._missing.add(broker_name)
                self._open.add(broker_name)
                return
            start = admin.query_offsets(STATE_GROUP, STATE_TOPIC).get(0, 0)
            count = self._replay(broker_name, start)
            self._open.add(broker_name)
            logger.info("replica set %s: POP state replayed from %s@%d (%d records)",
                        broker_name, STATE_TOPIC, start, count)

    def _replay(self, broker_name: str, queue_offset: int) -> int:
        count = 0
        for _ in range(REPLAY_PULLS_MAX):
            result = self.links.pull(broker_name, STATE_TOPIC, 0, queue_offset,
                                     max_messages=REPLAY_BATCH_MESSAGES,
                                     columns=("queue_offset", "body"))
            if result.status in ("OFFSET_TOO_SMALL", "OFFSET_OVERFLOW_BADLY"):
                queue_offset = result.next_queue_offset
                continue
            for row_offset, body in zip(result.table.column("queue_offset").to_pylist(),
                                        result.table.column("body").to_pylist()):
                try:
                    records = decode_records(body)
                except RecordError as err:
                    self.records_skipped += 1
                    logger.warning("%s@%d on %s: skipped a state message (%s)", STATE_TOPIC,
                                   row_offset, broker_name, err)
                    continue
                for record in records:
                    self.pop.apply(record)
                    count += 1
            queue_offset = result.next_queue_offset
            if result.table.num_rows == 0 or queue_offset >= result.reply.max_queue_offset:
                break
        self.records_replayed += count
        return count

    def write(self, broker_name: str, records: list[dict[str, Any]]) -> int:
        """Put the records (caller holds `lock(broker_name)`), apply them once PUT_OK; returns
        the queue offset of the state message. Raises StateWriteError otherwise."""
        if broker_name in self._missing:
            try:
                self.links.admin(broker_name).create_topic(STATE_TOPIC, queues=1)
            except RocketHAError as err:
                raise StateWriteError(f"creating {STATE_TOPIC}: {err}") from err
            self._missing.discard(broker_name)
        body = encode_records(records)
        batch = pa.record_batch({"body": pa.array([body], pa.binary()),
                                 "queue_id": pa.array([0], pa.int32())})
        try:
            reply = self.links.put(broker_name, STATE_TOPIC, batch)
        except RocketHAError as err:
            raise StateWriteError(f"{err.name}: {err.message}") from err
        if reply.status != "PUT_OK":
            raise StateWriteError(f"{reply.status}: {reply.error}")
        for record in records:
            if record["t"] != "snapshot":  # a snapshot restates what is applied already
                self.pop.apply(record)
        self.records_written += len(records)
        self._dirty.setdefault(broker_name, self._clock_s())
        rows = reply.row_offsets(1)
        return rows[0][1] if rows else -1

    def snapshot_due(self) -> list[str]:
        now_s = self._clock_s()
        return [name for name, since in list(self._dirty.items())
                if now_s - since >= self._snapshot_interval_s]

    def snapshot(self, broker_name: str) -> None:
        """Write a snapshot record of the set's states and commit its offset as the replay
        start; commit each group's `committed` on its data queue (best effort)."""
        with self.lock(broker_name):
            record = self.pop.snapshot(broker_name)
            since = self._dirty.pop(broker_name, None)
            try:
                queue_offset = self.write(broker_name, [record])
            except StateWriteError:
                if since is not None:
                    self._dirty[broker_name] = since  # due again at the next poll
                raise
            self._dirty.pop(broker_name, None)  # the snapshot itself changes nothing
        admin = self.links.admin(broker_name)
        if queue_offset >= 0:
            admin.commit_offset(STATE_GROUP, STATE_TOPIC, 0, queue_offset)
        for item in record["states"]:
            key = QueueKey.from_json(item["k"])
            if self._committed_seen.get(key) != item["committed"]:
                try:
                    admin.commit_offset(key.group, key.topic, key.queue_id, item["committed"])
                    self._committed_seen[key] = item["committed"]
                except RocketHAError as err:
                    logger.info("commit of %s on %s failed: %s", key, broker_name, err)

    def stats(self) -> dict[str, int]:
        return {"records_written": self.records_written,
                "records_replayed": self.records_replayed,
                "records_skipped": self.records_skipped}

