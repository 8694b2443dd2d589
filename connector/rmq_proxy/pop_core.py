"""POP consumption state (RocketMQ's SimpleConsumer semantics), sans-IO.

Per (consumer group, topic, replica set, queue), a QueueState:

    committed   every queue offset below it is done (acked, or skipped by the tag filter)
    cursor      every offset in [committed, cursor) was delivered at least once (or skipped)
    leases      offset -> Lease(attempt, invisible_until_ms, nonce): delivered, not acked
    acked       offsets in [committed, cursor) that are done (compacted into `committed`)
    groups      offset -> message group, for leased messages that have one (FIFO order: a
                message of a group in flight blocks the later ones, pop_service.py)

    invariant: [committed, cursor) = leases | acked (disjoint); committed <= cursor;
               groups ⊆ leases

    new message ──pop──► leased(attempt 1, until now+invisible, nonce n1)
    leased ──ack(n)──► acked                 (only with the current nonce, before `until`)
    leased ──change(n→n2, until2)──► leased  (a new handle; the old one is stale)
    leased ──until passed, receive──► leased(attempt+1, new until, new nonce)  (redelivery)

Durability: every transition is a *record* (a JSON object) that a proxy writes to the
replicated state topic and sees acknowledged PUT_OK **before** it answers the client. The
state is a deterministic function of the log: every proxy applies every record in log order
(`apply`), so a restart, a failover or another proxy rebuilds the same state by replaying the
records from the last snapshot record. A record the proxy wrote but did not see acknowledged
may or may not be in the log; either way the outcome is at-least-once: a lease that nobody
answers expires and the message comes back, an ack that is lost makes the message come back
once its lease expires. Nothing in a record can make a message that was never acked
disappear, except the tag filter (skipped) and retention (the queue's minimum moved past it:
`start`).

Several writers (proxies, state_store.py): a record is a decision made on its writer's view,
which may miss records another proxy appended meanwhile. So every transition is conditional,
checked when the record is applied, in log order: a new lease only for an offset at or past
the cursor (not delivered by anyone yet), a redelivery, a change, an ack or a drop only if the
lease still has the nonce the writer saw. A record that lost its race changes nothing, and its
writer, which applies the log up to its own record before answering, sees that (its nonce is
not current) and does not hand the message out. Applying a record twice is a no-op the second
time (every condition then fails), so a record stored twice by a retried put is harmless.

Records (all carry "k": [group, topic, broker_name, queue_id]):
    {"t": "pop", "start": int|null, "cursor": int, "leases": [[offset, 1, until, nonce]..],
     "redeliver": [[offset, attempt, until, nonce, previous nonce]..],
     "dropped": [[offset, nonce]..], "groups": [[offset, "message group"]..]}
                                new messages (`leases`, offsets in [old cursor, cursor); the
                                others there were skipped by the filter) and redelivered ones;
                                `dropped`: leases whose message retention removed or that went
                                to the dead-letter topic (done); `groups`: the message group
                                of leased messages that have one; `start`: where a new state
                                begins, or the queue's minimum after retention
    {"t": "ack", "offsets": [[offset, nonce]..]}
    {"t": "change", "offset": int, "nonce": int, "new_nonce": int, "until": int}
    {"t": "snapshot", "at": int, "states": [{"k", "committed", "cursor", "leases", "acked",
                                             "groups"}..]}
                                the states of one replica set after every record before queue
                                offset `at` of the state topic (a snapshot stored elsewhere
                                was overtaken by another proxy's record: replay ignores it)
Time is passed in (`now_ms`, wall-clock milliseconds: a lease outlives the process).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from typing import Any

__all__ = ["GROUP_CHARS_MAX", "Lease", "PopState", "QueueKey", "QueueState", "RecordError",
           "decode_records", "encode_records"]

RECORD_BYTES_MAX = 8 << 20
GROUP_CHARS_MAX = 1024  # a message group's name in a record


class RecordError(ValueError):
    """A state record that does not follow the format above."""


@dataclasses.dataclass(frozen=True, slots=True, order=True)
class QueueKey:
    group: str
    topic: str
    broker_name: str
    queue_id: int

    def to_json(self) -> list[Any]:
        return [self.group, self.topic, self.broker_name, self.queue_id]

    @classmethod
    def from_json(cls, value: Any) -> QueueKey:
        if not (isinstance(value, list) and len(value) == 4
                and all(isinstance(v, str) for v in value[:3]) and _is_int(value[3])):
            raise RecordError(f"bad key {value!r:.100}")
        return cls(value[0], value[1], value[2], value[3])


@dataclasses.dataclass(frozen=True, slots=True)
class Lease:
    attempt: int
    invisible_until_ms: int
    nonce: int


@dataclasses.dataclass(slots=True)
class QueueState:
    committed: int
    cursor: int
    leases: dict[int, Lease] = dataclasses.field(default_factory=dict)
    acked: set[int] = dataclasses.field(default_factory=set)
    groups: dict[int, str] = dataclasses.field(default_factory=dict)

    def check(self) -> None:
        assert self.committed <= self.cursor, (self.committed, self.cursor)
        assert not (self.leases.keys() & self.acked)
        assert self.groups.keys() <= self.leases.keys(), self
        assert all(self.committed <= o < self.cursor for o in self.leases), self
        assert all(self.committed <= o < self.cursor for o in self.acked), self

    def finish(self, queue_offset: int) -> None:
        """The leased message at `queue_offset` is done (acked, dropped)."""
        del self.leases[queue_offset]
        self.groups.pop(queue_offset, None)
        self.acked.add(queue_offset)

    def compact(self) -> None:
        while self.committed < self.cursor and self.committed in self.acked:
            self.acked.discard(self.committed)
            self.committed += 1
        if self.committed == self.cursor:
            assert not self.leases and not self.acked


class PopState:
    """Every QueueState the proxy knows; `apply` is the only way to change one.

    Threads: `apply` runs under the replica set's lock (state_store.py); the questions below
    may run beside it (a receive deciding while a catch-up applies another proxy's records),
    so they copy a state's dicts in one C-level step (`list(...)`) before iterating."""

    def __init__(self) -> None:
        self._states: dict[QueueKey, QueueState] = {}

    def __len__(self) -> int:
        return len(self._states)

    def get(self, key: QueueKey) -> QueueState | None:
        return self._states.get(key)

    def keys(self) -> list[QueueKey]:
        return sorted(self._states)  # sorted() copies the keys first, in one C-level step

    # -- questions the shell asks before it writes a record --------------------------------
    def due(self, key: QueueKey, now_ms: int, limit: int) -> list[tuple[int, Lease]]:
        """Leased offsets whose invisible time is over (to redeliver), oldest first."""
        state = self._states.get(key)
        if state is None or limit <= 0:
            return []
        found = sorted((o, lease) for o, lease in list(state.leases.items())
                       if lease.invisible_until_ms <= now_ms)
        return found[:limit]

    def next_due_ms(self, key: QueueKey) -> int | None:
        state = self._states.get(key)
        if state is None or not state.leases:
            return None
        leases = list(state.leases.values())
        return min(lease.invisible_until_ms for lease in leases) if leases else None

    def groups_in_flight(self, key: QueueKey) -> set[str]:
        """Message groups with a leased (delivered, not acked) message in this queue."""
        state = self._states.get(key)
        return set(state.groups.values()) if state is not None else set()  # (one C step)

    def forget(self, broker_name: str) -> None:
        """Drop the states of a replica set's queues (before replaying them from scratch)."""
        for key in [k for k in self._states if k.broker_name == broker_name]:
            del self._states[key]

    def room(self, key: QueueKey, inflight_max: int) -> int:
        """How many new offsets may be leased: the window [committed, cursor) is bounded."""
        state = self._states.get(key)
        if state is None:
            return inflight_max
        return max(0, inflight_max - (state.cursor - state.committed))

    def lease_problem(self, key: QueueKey, queue_offset: int, nonce: int,
                      now_ms: int) -> str | None:
        """None when (offset, nonce) is the current lease and its time is not over; else why
        a handle naming it is stale."""
        state = self._states.get(key)
        if state is None:
            return "no such consumer group state"
        lease = state.leases.get(queue_offset)
        if lease is None:
            return "already acknowledged" if (queue_offset < state.committed
                                              or queue_offset in state.acked) \
                else "not delivered"
        if lease.nonce != nonce:
            return "superseded by a later delivery or ChangeInvisibleDuration"
        if lease.invisible_until_ms <= now_ms:
            return "its invisible duration is over"
        return None

    # -- transitions ----------------------------------------------------------------------
    def apply(self, record: dict[str, Any]) -> None:
        """Apply one checked record (decode_records checks them); deterministic."""
        kind = record["t"]
        if kind == "snapshot":
            for item in record["states"]:
                restored = QueueState(item["committed"], item["cursor"],
                                   {o: Lease(a, u, n) for o, a, u, n in item["leases"]},
                                   set(item["acked"]), {
                                       o: g for o, g in item.get("groups", ())
                                       if any(o == lease[0] for lease in item["leases"])})
                restored.check()
                self._states[QueueKey.from_json(item["k"])] = restored
            return
        key = QueueKey.from_json(record["k"])
        state = self._states.get(key)
        if kind == "pop":
            state = self._apply_pop(key, state, record)
        elif state is None:
            return  # an ack or change for a state this replay never saw begin: nothing to undo
        elif kind == "ack":
            for queue_offset, nonce in record["offsets"]:
                lease = state.leases.get(queue_offset)
                if lease is not None and lease.nonce == nonce:
                    state.finish(queue_offset)
        elif kind == "change":
            lease = state.leases.get(record["offset"])
            if lease is not None and lease.nonce == record["nonce"]:
                state.leases[record["offset"]] = Lease(lease.attempt, record["until"],
                                                       record["new_nonce"])
        state.compact()
        state.check()

    def _apply_pop(self, key: QueueKey, state: QueueState | None,
                   record: dict[str, Any]) -> QueueState:
        start = record.get("start")
        if state is None:
            first = start if start is not None else min(
                [record["cursor"]] + [lease[0] for lease in record["leases"]])
            state = self._states[key] = QueueState(first, first)
        elif start is not None and start > state.committed:  # retention moved the minimum
            state.committed = start
            state.cursor = max(state.cursor, start)
            state.leases = {o: lease for o, lease in state.leases.items() if o >= start}
            state.acked = {o for o in state.acked if o >= start}
            state.groups = {o: g for o, g in state.groups.items() if o >= start}
        before = state.cursor  # offsets from here on were delivered by nobody yet
        leased = {lease[0] for lease in record["leases"]}
        for queue_offset in range(state.cursor, max(state.cursor, record["cursor"])):
            if queue_offset not in leased:
                state.acked.add(queue_offset)  # skipped by the tag filter
        state.cursor = max(state.cursor, record["cursor"])
        groups = {o: g for o, g in record.get("groups", ())}
        for queue_offset, attempt, until, nonce in record["leases"]:
            if before <= queue_offset < state.cursor and queue_offset not in state.acked \
                    and queue_offset not in state.leases:
                state.leases[queue_offset] = Lease(attempt, until, nonce)
                if queue_offset in groups:
                    state.groups[queue_offset] = groups[queue_offset]
        for queue_offset, attempt, until, nonce, previous in record.get("redeliver", ()):
            lease = state.leases.get(queue_offset)
            if lease is not None and lease.nonce == previous:
                state.leases[queue_offset] = Lease(attempt, until, nonce)
        for entry in record.get("dropped", ()):
            queue_offset, nonce = entry
            lease = state.leases.get(queue_offset)
            if lease is not None and lease.nonce == nonce:
                state.finish(queue_offset)
        return state

    def snapshot(self, broker_name: str, at: int) -> dict[str, Any]:
        """One record that rebuilds every state of `broker_name`'s queues, valid when stored
        at queue offset `at` of the state topic. (The proxy's threads add other replica sets'
        states meanwhile: the items are copied first, in one C-level step.)"""
        items = list(self._states.items())
        return {"t": "snapshot", "at": at, "states": [
            {"k": key.to_json(), "committed": state.committed, "cursor": state.cursor,
             "leases": [[o, lease.attempt, lease.invisible_until_ms, lease.nonce]
                        for o, lease in sorted(state.leases.items())],
             "acked": sorted(state.acked),
             "groups": [[o, g] for o, g in sorted(state.groups.items())]}
            for key, state in sorted(items) if key.broker_name == broker_name]}


def encode_records(records: Iterable[dict[str, Any]]) -> bytes:
    return json.dumps(list(records), separators=(",", ":")).encode()


def decode_records(raw: bytes) -> list[dict[str, Any]]:
    """The records of one state message, each checked; RecordError for anything else."""
    if len(raw) > RECORD_BYTES_MAX:
        raise RecordError(f"state message of {len(raw)} bytes")
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as err:
        raise RecordError(f"not JSON: {str(err)[:100]}") from None
    if not isinstance(value, list):
        raise RecordError("a state message is a JSON list of records")
    for record in value:
        _check_record(record)
    return value


def _check_record(record: Any) -> None:
    if not isinstance(record, dict) or record.get("t") not in ("pop", "ack", "change",
                                                                "snapshot"):
        raise RecordError(f"bad record {record!r:.100}")
    kind = record["t"]
    if kind == "snapshot":
        if record.get("at") is not None and not _is_int(record["at"]):
            raise RecordError("snapshot: at must be an integer")
        states = record.get("states")
        if not isinstance(states, list):
            raise RecordError("snapshot: states must be a list")
        for item in states:
            if not isinstance(item, dict):
                raise RecordError("snapshot: a state must be an object")
            QueueKey.from_json(item.get("k"))
            _ints(item, ("committed", "cursor"))
            _rows(item.get("leases"), 4, "leases")
            if not isinstance(item.get("acked"), list) or not all(
                    _is_int(v) for v in item["acked"]):
                raise RecordError("snapshot: acked must be a list of integers")
            _groups(item.get("groups", []))
            if not 0 <= item["committed"] <= item["cursor"]:
                raise RecordError("snapshot: committed must be <= cursor")
            if any(not item["committed"] <= v[0] < item["cursor"] for v in item["leases"]) or \
                    any(not item["committed"] <= v < item["cursor"] for v in item["acked"]) or \
                    {v[0] for v in item["leases"]} & set(item["acked"]):
                raise RecordError("snapshot: leases and acked must lie in [committed, cursor)"
                                  " and be disjoint")
        return
    QueueKey.from_json(record.get("k"))
    if kind == "pop":
        _ints(record, ("cursor",))
        if record.get("start") is not None and not _is_int(record["start"]):
            raise RecordError("pop: start must be an integer or null")
        _rows(record.get("leases"), 4, "leases")
        _rows(record.get("redeliver", []), 5, "redeliver")
        _rows(record.get("dropped", []), 2, "dropped")
        _groups(record.get("groups", []))
    elif kind == "ack":
        _rows(record.get("offsets"), 2, "offsets")
    else:
        _ints(record, ("offset", "nonce", "new_nonce", "until"))


def _ints(record: dict[str, Any], names: tuple[str, ...]) -> None:
    for name in names:
        if not _is_int(record.get(name)):
            raise RecordError(f"{record.get('t')}: {name} must be an integer")


def _rows(value: Any, width: int, what: str) -> None:
    if not isinstance(value, list) or not all(
            isinstance(row, list) and len(row) == width and all(_is_int(v) for v in row)
            for row in value):
        raise RecordError(f"{what} must be a list of {width}-integer lists")


def _groups(value: Any) -> None:
    if not isinstance(value, list) or not all(
            isinstance(row, list) and len(row) == 2 and _is_int(row[0])
            and isinstance(row[1], str) and 0 < len(row[1]) <= GROUP_CHARS_MAX for row in value):
        raise RecordError(f"groups must be a list of [offset, message group] (1..{GROUP_CHARS_MAX}"
                          " characters)")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63
