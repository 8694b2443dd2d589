"""The chaos checker: judges a recorded history (tests/chaos/history.py), nothing else.

Checks (a violation in any of them makes the history invalid):

- total-queue (Jepsen `checker/total-queue`): attempts = values of send invokes, acknowledged =
  values of ok sends, read = values any poll returned (consumers and the final drain, which
  reads every queue of every replica set from its start). `lost` = acknowledged - read;
  `unexpected` = read - attempted; `duplicated` = a value stored at more than one (set, queue,
  offset); `recovered` = read values whose send was not acknowledged (indeterminate sends that
  got in: allowed). A duplicate is explained (allowed) only when its send was not idempotent;
  an idempotent producer's value stored twice is a violation.
- `unpositioned_acks`: every acknowledged send names its position (queue >= 0, offset >= 0):
  an ack without one (a retry answered PUT_OK at -1, issue 43) is a violation, not skipped.
- Kafka-workload subset (Jepsen `tests/kafka`):
  `inconsistent_offsets`: one (set, queue, offset) never holds two values across all polls, and
  an acknowledged (queue, offset) holds its value where the value is found;
  `lost_writes`: per (set, queue), every acknowledged write at or below the highest offset any
  poll returned was returned by some poll (an ack without its set counts only once every set's
  bound passed it);
  `poll_violations`: within one consumer and queue, polls never go backwards and never skip
  (each poll starts where it asked, its offsets contiguous);
  `commit_regressions`: a group's committed offset, as read back, never moves backwards, and
  never reads below a commit acknowledged before the read began.
- the Delta table of the Spark ingest (`--spark`; a `table` event with its rows' bodies): every
  acknowledged value exactly once (`table_lost`, `table_duplicated`), nothing never sent
  (`table_unexpected`).
- `replica_divergence`: after healing, every replica of a set has the same CommitLog bytes up
  to the position compared (its master's confirm position), as SHA-256 digests.
- `controller_violations` (from `elections` and `replica_state` observations): the same
  election entry reads the same on every controller; per replica set, election epochs strictly
  grow with the Raft entry index; one master per (set, epoch); the elected master was in a
  SyncStateSet observed for the previous epoch (when one was observed); the observed epoch never
  goes back.

Availability (reported, not judged): RTO per fault = from its start until every producer that
sent after it had an acknowledged write invoked after it (the slowest producer); per replica
set, from its start to that set's first acknowledged write invoked after it (`by_set_s`,
`rto_p99_by_set_s`); per fault kind (`rto_by_kind_s`: p50, p99, max); send latency p50/p99
of acknowledged sends invoked outside and during faults.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from tests.chaos.history import Event, pairs

__all__ = ["CheckResult", "FaultWindow", "check", "fault_windows", "percentile"]

NS_PER_S = 1e9
EXAMPLES_MAX = 20  # per violation kind, in the report

Position = tuple[str, int, int]  # (replica set, queue_id, queue_offset)


@dataclasses.dataclass(frozen=True, slots=True)
class FaultWindow:
    kind: str
    name: str
    targets: tuple[str, ...]
    start_ns: int
    stop_ns: int | None  # None: never healed in the history


@dataclasses.dataclass
class CheckResult:
    attempted: int = 0
    acknowledged: int = 0
    # acknowledged sends per replica set (the ack's `set`): a set that got few or none was
    # barely tested under faults (the workload rotates producers over masters for it)
    acknowledged_by_set: dict[str, int] = dataclasses.field(default_factory=dict)
    indeterminate: int = 0
    failed: int = 0
    read: int = 0
    recovered: int = 0
    lost: list[str] = dataclasses.field(default_factory=list)
    unexpected: list[str] = dataclasses.field(default_factory=list)
    duplicated: dict[str, int] = dataclasses.field(default_factory=dict)
    duplicated_unexplained: list[str] = dataclasses.field(default_factory=list)
    inconsistent_offsets: list[str] = dataclasses.field(default_factory=list)
    unpositioned_acks: list[str] = dataclasses.field(default_factory=list)
    lost_writes: list[str] = dataclasses.field(default_factory=list)
    poll_violations: list[str] = dataclasses.field(default_factory=list)
    commit_regressions: list[str] = dataclasses.field(default_factory=list)
    replica_divergence: list[str] = dataclasses.field(default_factory=list)
    replicas_compared: int = 0
    controller_violations: list[str] = dataclasses.field(default_factory=list)
    elections_seen: int = 0
    table_rows: int | None = None  # None: no Spark ingest in this run
    table_lost: list[str] = dataclasses.field(default_factory=list)
    table_duplicated: list[str] = dataclasses.field(default_factory=list)
    table_unexpected: list[str] = dataclasses.field(default_factory=list)
    faults_by_kind: dict[str, int] = dataclasses.field(default_factory=dict)
    rto: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    latency_ms: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)

    # the order a first violation is named in: the worst first
    VIOLATIONS = ("lost", "table_lost", "inconsistent_offsets", "unpositioned_acks",
                  "lost_writes", "unexpected",
                  "table_unexpected", "duplicated_unexplained", "table_duplicated",
                  "replica_divergence", "controller_violations", "commit_regressions",
                  "poll_violations")

    # violation kinds counted but not judged (a known, documented weakness), see `check`
    tolerated: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return self.first_violation is None

    @property
    def first_violation(self) -> str | None:
        for name in self.VIOLATIONS:
            found = getattr(self, name)
            if found and name not in self.tolerated:
                return f"{name}: {len(found)}, first {found[0]}"
        return None

    def rto_percentile_s(self, fraction: float) -> float | None:
        values = [entry["rto_s"] for entry in self.rto if entry["rto_s"] is not None]
        return percentile(values, fraction)

    def rto_p99_by_set_s(self) -> dict[str, float | None]:
        """p99 over the faults of each set's time to its first acknowledged write."""
        by_set: dict[str, list[float]] = defaultdict(list)
        for entry in self.rto:
            for name, seconds in entry.get("by_set_s", {}).items():
                by_set[name].append(seconds)
        return {name: _round(percentile(values, 0.99)) for name, values in sorted(by_set.items())}

    def rto_by_kind_s(self) -> dict[str, dict[str, float | None]]:
        """RTO p50 / p99 / max per fault kind: a planned handover's pause is not a crash's
        failover, and one figure over both hides which is which."""
        by_kind: dict[str, list[float]] = defaultdict(list)
        for entry in self.rto:
            if entry["rto_s"] is not None:
                by_kind[entry["kind"]].append(entry["rto_s"])
        return {kind: {"p50": _round(percentile(values, 0.5)),
                       "p99": _round(percentile(values, 0.99)),
                       "max": _round(percentile(values, 1.0))}
                for kind, values in sorted(by_kind.items())}

    def to_json(self) -> dict[str, Any]:
        """Counts for every check, the first examples of each violation."""
        out: dict[str, Any] = {
            "valid": self.valid, "first_violation": self.first_violation,
            "tolerated": list(self.tolerated),
            "attempted": self.attempted, "acknowledged": self.acknowledged,
            "acknowledged_by_set": dict(sorted(self.acknowledged_by_set.items())),
            "indeterminate": self.indeterminate, "failed": self.failed, "read": self.read,
            "recovered": self.recovered, "lost": len(self.lost),
            "unexpected": len(self.unexpected), "duplicated": len(self.duplicated),
            "duplicated_unexplained": len(self.duplicated_unexplained),
            "inconsistent_offsets": len(self.inconsistent_offsets),
            "unpositioned_acks": len(self.unpositioned_acks),
            "lost_writes": len(self.lost_writes), "poll_violations": len(self.poll_violations),
            "commit_regressions": len(self.commit_regressions),
            "replica_divergence": len(self.replica_divergence),
            "replicas_compared": self.replicas_compared,
            "controller_violations": len(self.controller_violations),
            "elections_seen": self.elections_seen, "table_rows": self.table_rows,
            "table_lost": len(self.table_lost), "table_duplicated": len(self.table_duplicated),
            "table_unexpected": len(self.table_unexpected),
            "faults_by_kind": dict(sorted(self.faults_by_kind.items())),
            "faults": sum(self.faults_by_kind.values()),
            "rto_p50_s": _round(self.rto_percentile_s(0.5)),
            "rto_p99_s": _round(self.rto_percentile_s(0.99)),
            "rto_max_s": _round(self.rto_percentile_s(1.0)),
            "rto_p99_by_set_s": self.rto_p99_by_set_s(),
            "rto_by_kind_s": self.rto_by_kind_s(),
            "latency_ms": self.latency_ms,
        }
        out["examples"] = {name: list(getattr(self, name))[:EXAMPLES_MAX]
                           for name in self.VIOLATIONS if getattr(self, name)}
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """Nearest-rank percentile (None for no values)."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def check(events: Sequence[Event], *, tolerate: Iterable[str] = ()) -> CheckResult:
    """Every check over one history; see the module docstring. `tolerate`: violation kinds
    (CheckResult.VIOLATIONS names) still counted and listed, but not making it invalid."""
    tolerated = tuple(tolerate)
    unknown = set(tolerated) - set(CheckResult.VIOLATIONS)
    if unknown:
        raise ValueError(f"tolerate: unknown kinds {sorted(unknown)}; known: "
                         f"{', '.join(CheckResult.VIOLATIONS)}")
    events = sorted(events, key=lambda e: e["t"])
    result = CheckResult(tolerated=tolerated)
    sends = list(pairs(events, "send"))
    polls = [(invoke, done) for invoke, done in pairs(events, "poll")
             if done is not None and done["type"] == "ok"]
    positions = _positions(polls)
    _total_queue(result, sends, positions)
    _inconsistent_offsets(result, sends, positions)
    _lost_writes(result, sends, positions)
    _polls(result, polls)
    _commits(result, events)
    _replicas(result, events)
    _table(result, events, sends)
    _controller(result, events)
    windows = fault_windows(events)
    result.faults_by_kind = dict(Counter(w.kind for w in windows))
    _availability(result, sends, windows, events[-1]["t"] if events else 0)
    return result


# -- total-queue --------------------------------------------------------------------------------
def _positions(polls: Iterable[tuple[Event, Event | None]]) -> dict[Position, set[str]]:
    """(set, queue, offset) -> the values polls returned there."""
    found: dict[Position, set[str]] = defaultdict(set)
    for invoke, done in polls:
        assert done is not None
        for queue_offset, value in done.get("msgs", []):
            found[(invoke["set"], int(invoke["queue"]), int(queue_offset))].add(value)
    return found


def _total_queue(result: CheckResult, sends: list[tuple[Event, Event | None]],
                 positions: dict[Position, set[str]]) -> None:
    attempted = {invoke["value"]: invoke for invoke, _ in sends}
    acked = {invoke["value"] for invoke, done in sends if done and done["type"] == "ok"}
    result.attempted = len(attempted)
    result.acknowledged = len(acked)
    result.acknowledged_by_set = dict(Counter(
        str(done.get("set")) for _, done in sends if done and done["type"] == "ok"))
    result.failed = sum(1 for _, done in sends if done and done["type"] == "fail")
    result.indeterminate = result.attempted - result.acknowledged - result.failed
    where: dict[str, set[Position]] = defaultdict(set)
    for position, values in positions.items():
        for value in values:
            where[value].add(position)
    result.read = len(where)
    result.lost = sorted(value for value in acked if value not in where)
    result.unexpected = sorted(value for value in where if value not in attempted)
    result.recovered = sum(1 for value in where if value in attempted and value not in acked)
    result.duplicated = {value: len(places) for value, places in sorted(where.items())
                         if len(places) > 1}
    result.duplicated_unexplained = [
        f"{value} at {sorted(where[value])}" for value in result.duplicated
        if attempted.get(value, {}).get("idempotent", True)]


# -- Kafka-workload subset ----------------------------------------------------------------------
def _inconsistent_offsets(result: CheckResult, sends: list[tuple[Event, Event | None]],
                          positions: dict[Position, set[str]]) -> None:
    problems = [f"{s}/{q}@{o} holds {sorted(values)}"
                for (s, q, o), values in sorted(positions.items()) if len(values) > 1]
    result.unpositioned_acks = [
        f"{invoke['value']} acked at {done.get('queue', -1)}@{done.get('offset', -1)}"
        for invoke, done in sends if done is not None and done["type"] == "ok"
        and (done.get("queue", -1) < 0 or done.get("offset", -1) < 0)]
    where: dict[str, set[Position]] = defaultdict(set)
    for position, values in positions.items():
        for value in values:
            where[value].add(position)
    for invoke, done in sends:
        if done is None or done["type"] != "ok" or done.get("queue", -1) < 0:
            continue  # (no position: an unpositioned ack, judged above)
        value, queue_id, queue_offset = invoke["value"], done["queue"], done["offset"]
        found = where.get(value)
        if not found:
            continue  # lost: counted there
        sets = [done["set"]] if done.get("set") else sorted({s for s, _, _ in found})
        if not any((s, queue_id, queue_offset) in found for s in sets):
            problems.append(f"{value} acked at {done.get('set') or '?'}/{queue_id}@"
                            f"{queue_offset}, found at {sorted(found)}")
    result.inconsistent_offsets = problems


def _lost_writes(result: CheckResult, sends: list[tuple[Event, Event | None]],
                 positions: dict[Position, set[str]]) -> None:
    bound: dict[tuple[str, int], int] = {}
    read: set[str] = set()
    for (s, q, o), values in positions.items():
        bound[(s, q)] = max(bound.get((s, q), -1), o)
        read |= values
    sets = sorted({s for s, _ in bound})
    for invoke, done in sends:
        if done is None or done["type"] != "ok" or done.get("queue", -1) < 0:
            continue
        if invoke["value"] in read:
            continue
        queue_id, queue_offset = done["queue"], done["offset"]
        candidates = [done["set"]] if done.get("set") else sets
        if candidates and all(bound.get((s, queue_id), -1) >= queue_offset
                              for s in candidates):
            result.lost_writes.append(f"{invoke['value']} acked at {queue_id}@{queue_offset}, "
                                      f"below what polls of {candidates} returned")


def _polls(result: CheckResult, polls: list[tuple[Event, Event | None]]) -> None:
    last_end: dict[tuple[str, str, int], int] = {}
    for invoke, done in polls:
        assert done is not None
        key = (invoke["process"], invoke["set"], int(invoke["queue"]))
        asked = int(invoke["offset"])
        offsets = [int(o) for o, _ in done.get("msgs", [])]
        where = f"{key[0]} {key[1]}/{key[2]} poll at {asked}"
        previous = last_end.get(key)
        if previous is not None and asked < previous and invoke["process"] != "drain":
            result.poll_violations.append(f"{where}: went back below {previous}")
        if not offsets:
            continue
        if offsets[0] != asked:
            kind = "skipped to" if offsets[0] > asked else "went back to"
            result.poll_violations.append(f"{where}: {kind} {offsets[0]}")
        for a, b in itertools.pairwise(offsets):
            if b != a + 1:
                result.poll_violations.append(f"{where}: {a} then {b}")
                break
        last_end[key] = max(previous or 0, offsets[-1] + 1)


def _commits(result: CheckResult, events: Sequence[Event]) -> None:
    """Per (group, set, queue): read-backs never go back, never below an acked commit."""
    acked_before: dict[tuple[str, str, int], list[tuple[int, int]]] = defaultdict(list)
    for invoke, done in pairs(events, "commit"):
        if done is not None and done["type"] == "ok":
            key = (invoke["group"], invoke["set"], int(invoke["queue"]))
            acked_before[key].append((done["t"], int(invoke["offset"])))
    seen: dict[tuple[str, str, int], int] = {}
    for invoke, done in pairs(events, "read_commit"):
        if done is None or done["type"] != "ok":
            continue
        for queue, observed in sorted(done["offsets"].items()):
            key = (invoke["group"], invoke["set"], int(queue))
            floor = max((o for t, o in acked_before.get(key, []) if t < invoke["t"]),
                        default=None)
            where = f"group {key[0]} {key[1]}/{key[2]}"
            if floor is not None and int(observed) < floor:
                result.commit_regressions.append(
                    f"{where}: read {observed} after a commit of {floor} was acknowledged")
            elif key in seen and int(observed) < seen[key]:
                result.commit_regressions.append(
                    f"{where}: read {observed} after reading {seen[key]}")
            seen[key] = max(seen.get(key, 0), int(observed))


# -- replicas and the controller ----------------------------------------------------------------
def _replicas(result: CheckResult, events: Sequence[Event]) -> None:
    by_set: dict[tuple[str, int, int], dict[str, str]] = defaultdict(dict)
    for event in events:
        if event["f"] == "replica_digest" and event["type"] == "ok":
            span = (event["set"], int(event.get("start", 0)), int(event["end"]))
            by_set[span][event["broker"]] = event["sha256"]
    for (replica_set, start, end), digests in sorted(by_set.items()):
        result.replicas_compared += len(digests)
        if len(set(digests.values())) > 1:
            result.replica_divergence.append(
                f"{replica_set}: CommitLog bytes [{start}, {end}) differ: "
                + ", ".join(f"{b} {d[:12]}" for b, d in sorted(digests.items())))


def _table(result: CheckResult, events: Sequence[Event],
           sends: list[tuple[Event, Event | None]]) -> None:
    tables = [e for e in events if e["f"] == "table" and e["type"] == "ok"]
    if not tables:
        return
    rows = Counter(tables[-1]["values"])
    attempted = {invoke["value"] for invoke, _ in sends}
    acked = sorted(invoke["value"] for invoke, done in sends
                   if done is not None and done["type"] == "ok")
    result.table_rows = sum(rows.values())
    result.table_lost = [value for value in acked if value not in rows]
    result.table_duplicated = [f"{value} x{count}" for value, count in sorted(rows.items())
                               if count > 1]
    result.table_unexpected = sorted(value for value in rows if value not in attempted)


def _controller(result: CheckResult, events: Sequence[Event]) -> None:
    problems = result.controller_violations
    records: dict[tuple[str, int], dict[str, Any]] = {}
    for event in events:
        if event["f"] != "elections" or event["type"] != "ok":
            continue
        for record in event["records"]:
            key = (record["broker_name"], int(record["entry_index"]))
            fields = {k: record.get(k) for k in ("master_epoch", "master_broker_id")}
            if key in records and records[key] != fields:
                problems.append(f"election entry {key[1]} of {key[0]}: {records[key]} on one "
                                f"controller, {fields} on {event.get('controller')}")
            records.setdefault(key, fields)
    result.elections_seen = len(records)
    sss_at: dict[tuple[str, int], set[int]] = defaultdict(set)
    epoch_seen: dict[str, int] = {}
    for event in events:
        if event["f"] != "replica_state" or event["type"] != "ok":
            continue
        name, epoch = event["set"], int(event["master_epoch"])
        sss_at[(name, epoch)].update(int(b) for b in event["sync_state_set"])
        if epoch < epoch_seen.get(name, 0):
            problems.append(f"{name}: master epoch read {epoch} after {epoch_seen[name]}")
        epoch_seen[name] = max(epoch_seen.get(name, 0), epoch)
    master_of: dict[tuple[str, int], Any] = {}
    previous: dict[str, int] = {}
    for (name, entry_index), fields in sorted(records.items()):
        epoch, master = fields["master_epoch"], fields["master_broker_id"]
        if name in previous and epoch <= previous[name]:
            problems.append(f"{name}: election at entry {entry_index} opened epoch {epoch}, "
                            f"not above {previous[name]}")
        if (name, epoch) in master_of and master_of[(name, epoch)] != master:
            problems.append(f"{name} epoch {epoch}: masters {master_of[(name, epoch)]} and "
                            f"{master}")
        master_of.setdefault((name, epoch), master)
        before = sss_at.get((name, previous.get(name, -1)))
        if master is not None and before and master not in before:
            problems.append(f"{name}: broker {master} elected for epoch {epoch} was in no "
                            f"SyncStateSet seen for epoch {previous[name]} ({sorted(before)})")
        previous[name] = epoch


# -- availability -------------------------------------------------------------------------------
def fault_windows(events: Sequence[Event]) -> list[FaultWindow]:
    """Each fault's start and stop (matched by name, in order)."""
    open_faults: dict[str, Event] = {}
    windows = []
    for event in events:
        if event["f"] != "fault":
            continue
        if event["phase"] == "start":
            open_faults[event["name"]] = event
        elif event["name"] in open_faults:
            start = open_faults.pop(event["name"])
            windows.append(FaultWindow(start["kind"], start["name"],
                                       tuple(start.get("targets", ())), start["t"], event["t"]))
    windows += [FaultWindow(e["kind"], e["name"], tuple(e.get("targets", ())), e["t"], None)
                for e in open_faults.values()]
    return sorted(windows, key=lambda w: w.start_ns)


def _first_ack_by_set(oks: list[tuple[Event, Event | None]], start_ns: int,
                      end_ns: int) -> dict[str, float]:
    """Per replica set: seconds from a fault's start to the set's first acknowledged write
    invoked after it (until the history's end when there was none: never recovered).
    A fault on one set's master shows there; the other set's figure stays near zero."""
    first: dict[str, float] = {}
    for invoke, done in oks:
        assert done is not None
        replica_set = done.get("set")
        if replica_set is None:
            continue
        first.setdefault(replica_set, (end_ns - start_ns) / NS_PER_S)
        if invoke["t"] >= start_ns:
            first[replica_set] = min(first[replica_set], (done["t"] - start_ns) / NS_PER_S)
    return {name: round(seconds, 3) for name, seconds in sorted(first.items())}


def _availability(result: CheckResult, sends: list[tuple[Event, Event | None]],
                  windows: list[FaultWindow], end_ns: int) -> None:
    oks = [(invoke, done) for invoke, done in sends if done is not None and done["type"] == "ok"]
    for window in windows:
        per_producer: dict[str, float | None] = {}
        for invoke, _ in sends:
            if invoke["t"] >= window.start_ns:
                per_producer.setdefault(invoke["process"], None)
        for invoke, done in oks:
            assert done is not None
            process = invoke["process"]
            if invoke["t"] >= window.start_ns and per_producer.get(process, 0) is None:
                per_producer[process] = (done["t"] - window.start_ns) / NS_PER_S
        recovered = all(v is not None for v in per_producer.values())
        rto = (max((v for v in per_producer.values() if v is not None), default=None)
               if recovered else (end_ns - window.start_ns) / NS_PER_S)
        result.rto.append({"kind": window.kind, "name": window.name,
                           "targets": list(window.targets),
                           "rto_s": None if not per_producer else _round(rto),
                           "recovered": recovered,
                           "by_set_s": _first_ack_by_set(oks, window.start_ns, end_ns)})
    during, outside = [], []
    for invoke, done in oks:
        assert done is not None
        latency_ms = (done["t"] - invoke["t"]) / 1e6
        inside = any(w.start_ns <= invoke["t"] < (w.stop_ns or end_ns) for w in windows)
        (during if inside else outside).append(latency_ms)
    for name, values in (("outside", outside), ("during", during)):
        result.latency_ms[name] = {"count": len(values),
                                   "p50": _round(percentile(values, 0.5)) or 0.0,
                                   "p99": _round(percentile(values, 0.99)) or 0.0}
