"""The POP state's home in the cluster: the internal topic STATE_TOPIC, one queue on each
replica set, holding the records of pop_core.py for the consumer-group queues of that set.

Writes go through the same put path as any message (quorum-acknowledged, replicated with the
set's CommitLog), so the state of a set's queues fails over with the set's data. A record
counts only once it is answered PUT_OK; the proxy answers the client only after it has
applied the log up to and including its own record (`StateStore.write`). Writes of one set
are serialized in this process (a lock per set around put + apply).

Several proxies on one cluster share the state through the log itself (pop_core.py: every
transition is conditional, decided when applied in log order). Each proxy keeps, per set, the
queue offset up to which it applied the state topic (`applied`). After its put lands at
queue offset L: L == applied (nobody else wrote meanwhile, always so with one proxy) -> it
applies its records at once; L > applied -> it first reads and applies [applied, L) (another
proxy's records), then its own. So its view after a write is exactly the log's, and the
caller inspects that view (is my lease current? did my ack apply?) before answering. Views
also catch up every second (`catch_up`, the proxy's main loop) and before a receipt handle is
called stale, so a proxy rarely decides on an old view (which would only lose a race).

Replay (`StateStore.open_set`, at start and for a set first seen later): read STATE_TOPIC from
the offset committed for the internal group STATE_GROUP (a snapshot record) to the queue's
end, applying every record in order. A snapshot applies only as the first record of a replay
and only if it was stored where it was meant to be (`at`): a snapshot overtaken by another
proxy's record restates an older view. A record that does not decode is logged and skipped
(the topic is writable by any client with put rights: it can cost deliveries, never crash the
proxy). Every snapshot_interval_ms a set whose state changed gets a snapshot record, whose
queue offset is then committed; with it the proxy also commits each consumer group's
`committed` as the group's offset on the data queue (so `rocketha-admin` shows the group's
lag).
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
# Reading up to our own record waits for the confirm position to pass the records before it
# (PUT_OK may come before every SyncStateSet member confirmed them): each pull long-polls
# CATCH_UP_WAIT_MS, for CATCH_UP_DEADLINE_S in all (then the request fails and the set is
# replayed from scratch at its next use)
CATCH_UP_WAIT_MS = 500
CATCH_UP_DEADLINE_S = 15.0


class StateWriteError(Exception):
    """A state record was not acknowledged PUT_OK, or the log up to it could not be applied
    (the status or error is in the message)."""


class RecordGapError(Exception):
    """The state topic could not be read up to a position known to be written."""


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
        self._applied: dict[str, int] = {}  # set -> next state-topic offset to apply
        self._missing: set[str] = set()  # opened sets without STATE_TOPIC yet
        self._dirty: dict[str, float] = {}  # set -> when its state first changed unsnapshotted
        self._committed_seen: dict[QueueKey, int] = {}
        self.records_written = 0
        self.records_replayed = 0
        self.records_skipped = 0
        self.records_caught_up = 0  # writes that found other proxies' records before theirs

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
            self.pop.forget(broker_name)  # (a set replayed again after a failed catch-up)
            self._applied[broker_name] = start
            count = self._apply_log(broker_name, None, replay=True)
            self._open.add(broker_name)
            logger.info("replica set %s: POP state replayed from %s@%d (%d records)",
                        broker_name, STATE_TOPIC, start, count)

    def _apply_log(self, broker_name: str, until: int | None, *, replay: bool = False,
                   wait_ms: int = 0) -> int:
        """Apply the state topic from `applied` on: to its end (`until` None) or up to
        `until` (exclusive; RecordGapError if it cannot be read that far). Caller holds the
        set's lock. Returns the records applied."""
        count = 0
        queue_offset = self._applied[broker_name]
        first = queue_offset
        deadline_s = self._clock_s() + CATCH_UP_DEADLINE_S
        for _ in range(REPLAY_PULLS_MAX):
            if until is not None and queue_offset >= until:
                break
            wanted = REPLAY_BATCH_MESSAGES if until is None else min(
                REPLAY_BATCH_MESSAGES, until - queue_offset)
            result = self.links.pull(broker_name, STATE_TOPIC, 0, queue_offset,
                                     max_messages=wanted, columns=("queue_offset", "body"),
                                     max_wait_ms=wait_ms if until is None else CATCH_UP_WAIT_MS)
            wait_ms = 0  # (only the first read waits)
            if result.status == "OFFSET_TOO_SMALL" and result.next_queue_offset > queue_offset:
                queue_offset = result.next_queue_offset  # retention removed older records
                continue
            for row_offset, body in zip(result.table.column("queue_offset").to_pylist(),
                                        result.table.column("body").to_pylist(), strict=True):
                if until is not None and row_offset >= until:
                    break
                count += self._apply_message(broker_name, row_offset, body,
                                             snapshot_ok=replay and row_offset == first)
                queue_offset = row_offset + 1
            if until is None:
                if result.status != "OFFSET_OVERFLOW_BADLY":
                    queue_offset = max(queue_offset, result.next_queue_offset)
                if result.table.num_rows == 0 or queue_offset >= result.reply.max_queue_offset:
                    break
            elif result.table.num_rows == 0 and self._clock_s() >= deadline_s:
                self._applied[broker_name] = queue_offset
                raise RecordGapError(f"{STATE_TOPIC} on {broker_name} not readable from "
                                     f"{queue_offset} up to {until} within "
                                     f"{CATCH_UP_DEADLINE_S:.0f} s")
        self._applied[broker_name] = queue_offset
        if replay:
            self.records_replayed += count
        return count

    def _apply_message(self, broker_name: str, row_offset: int, body: bytes, *,
                       snapshot_ok: bool) -> int:
        try:
            records = decode_records(body)
        except RecordError as err:
            self.records_skipped += 1
            logger.warning("%s@%d on %s: skipped a state message (%s)", STATE_TOPIC,
                           row_offset, broker_name, err)
            return 0
        count = 0
        for record in records:
            if record["t"] == "snapshot" and not (
                    snapshot_ok and record.get("at") in (None, row_offset)):
                continue  # a restatement of what is applied, or an overtaken one
            self.pop.apply(record)
            count += 1
        return count

    def catch_up(self, broker_name: str, wait_ms: int = 0) -> None:
        """Apply what other proxies appended to the set's state topic since our last read
        (`wait_ms`: long-poll that long for a first new record)."""
        if broker_name not in self._open:
            return
        if broker_name in self._missing:  # another proxy may have made it: replay then
            with self.lock(broker_name):
                self._open.discard(broker_name)
                self._missing.discard(broker_name)
            self.open_set(broker_name)
            return
        with self.lock(broker_name):
            self._apply_log(broker_name, None, wait_ms=wait_ms)

    def catch_up_all(self) -> None:
        """catch_up every open set (the proxy's main loop, every second): other proxies'
        records reach this view before a decision needs them."""
        for broker_name in sorted(self._open):
            try:
                self.catch_up(broker_name)
            except RocketHAError as err:
                logger.debug("catch-up of %s: %s", broker_name, err)

    def write(self, broker_name: str, records: list[dict[str, Any]]) -> int:
        """Put the records (caller holds `lock(broker_name)`); once PUT_OK, apply the log up
        to and including them (module docstring). Returns the queue offset of the state
        message. Raises StateWriteError when it was not PUT_OK, or when the log up to it
        could not be applied (the set is then replayed from scratch at its next use)."""
        if broker_name in self._missing:
            try:
                self.links.admin(broker_name).create_topic(STATE_TOPIC, queues=1)
            except RocketHAError as err:  # (maybe another proxy made it: replay next time)
                self._missing.discard(broker_name)
                self._open.discard(broker_name)
                raise StateWriteError(f"creating {STATE_TOPIC}: {err}") from err
            self._missing.discard(broker_name)
            self._applied.setdefault(broker_name, 0)
        body = encode_records(records)
        batch = pa.record_batch({"body": pa.array([body], pa.binary()),
                                 "queue_id": pa.array([0], pa.int32())})
        try:
            reply = self.links.put(broker_name, STATE_TOPIC, batch)
        except RocketHAError as err:
            raise StateWriteError(f"{err.name}: {err.message}") from err
        if reply.status != "PUT_OK":
            raise StateWriteError(f"{reply.status}: {reply.error}")
        rows = reply.row_offsets(1)
        landed = rows[0][1] if rows else -1
        applied = self._applied.get(broker_name, 0)
        if landed > applied:  # another proxy wrote meanwhile: its records come first
            self.records_caught_up += 1
            try:
                self._apply_log(broker_name, landed)
            except (RecordGapError, RocketHAError) as err:
                self._open.discard(broker_name)
                raise StateWriteError(f"applying {STATE_TOPIC} up to {landed}: {err}") from err
        if landed < 0 or landed < applied:  # (not seen: a put without offsets)
            self._open.discard(broker_name)
            raise StateWriteError(f"{STATE_TOPIC} put landed at {landed}, applied {applied}")
        for record in records:
            if record["t"] != "snapshot":  # a snapshot restates what is applied already
                self.pop.apply(record)
        self._applied[broker_name] = landed + 1
        self.records_written += len(records)
        self._dirty.setdefault(broker_name, self._clock_s())
        return landed

    def snapshot_due(self) -> list[str]:
        now_s = self._clock_s()
        return [name for name, since in list(self._dirty.items())
                if now_s - since >= self._snapshot_interval_s]

    def snapshot(self, broker_name: str) -> None:
        """Write a snapshot record of the set's states and commit its offset as the replay
        start; commit each group's `committed` on its data queue (best effort)."""
        with self.lock(broker_name):
            if broker_name not in self._open:
                return
            self._apply_log(broker_name, None)
            at = self._applied[broker_name]
            record = self.pop.snapshot(broker_name, at)
            since = self._dirty.pop(broker_name, None)
            try:
                queue_offset = self.write(broker_name, [record])
            except StateWriteError:
                if since is not None:
                    self._dirty[broker_name] = since  # due again at the next poll
                raise
            self._dirty.pop(broker_name, None)  # the snapshot itself changes nothing
        admin = self.links.admin(broker_name)
        if queue_offset != at:  # overtaken by another proxy's record: not a replay start
            logger.info("snapshot of %s meant for %s@%d landed at %d; next time", broker_name,
                        STATE_TOPIC, at, queue_offset)
            self._dirty.setdefault(broker_name, self._clock_s())
            return
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
                "records_skipped": self.records_skipped,
                "records_caught_up": self.records_caught_up}

