"""The chaos checker finds what it claims to: hand-written histories (one anomaly each) and a
real run's history (tests/chaos/testdata/real_run.jsonl.gz, recorded by `build.py chaos`) before
and after mutations (a lost ack, two values at one offset, a regressing commit, a duplicate of
an idempotent send, diverging replicas, two masters in one epoch). A checker that passes
everything would fail here; so would one that flags a good history."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.checker import check, percentile
from tests.chaos.history import Event, History, read_history
from tests.integration.failover_cluster import commitlog_bytes, commitlog_segments

REAL_RUN = Path(__file__).parent / "testdata" / "real_run.jsonl.gz"


class Builder:
    """A history written by hand: one clock tick per event."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.t = 0

    def add(self, process: str, type_: str, f: str, **fields: Any) -> Builder:
        self.t += 1_000_000  # 1 ms
        self.events.append({"t": self.t, "process": process, "type": type_, "f": f,
                            **fields})
        return self

    def send(self, value: str, queue: int, offset: int, *, outcome: str = "ok",
             process: str = "p0", idempotent: bool = True, set_: str | None = None) -> Builder:
        self.add(process, "invoke", "send", value=value, key="k", tags="t",
                 idempotent=idempotent)
        if outcome == "ok":
            return self.add(process, "ok", "send", value=value, queue=queue, offset=offset,
                            set=set_, duplicate=False)
        return self.add(process, outcome, "send", value=value, error="timeout")

    def poll(self, set_: str, queue: int, offset: int, msgs: list[tuple[int, str]], *,
             process: str = "drain") -> Builder:
        self.add(process, "invoke", "poll", set=set_, queue=queue, offset=offset)
        return self.add(process, "ok", "poll", set=set_, queue=queue,
                        msgs=[list(m) for m in msgs],
                        next=(msgs[-1][0] + 1) if msgs else offset)


def good() -> Builder:
    b = Builder()
    b.send("v0", 0, 0).send("v1", 0, 1).send("v2", 1, 0).send("v3", 0, 2, outcome="info")
    b.poll("a", 0, 0, [(0, "v0"), (1, "v1")], process="c0")
    b.poll("a", 0, 2, [(2, "v3")], process="c0")
    b.poll("a", 0, 0, [(0, "v0"), (1, "v1"), (2, "v3")]).poll("a", 1, 0, [(0, "v2")])
    return b


def test_a_good_history_is_valid() -> None:
    result = check(good().events)
    assert result.valid, result.to_json()
    assert (result.attempted, result.acknowledged, result.indeterminate) == (4, 3, 1)
    assert result.recovered == 1 and result.read == 4
    assert result.acknowledged_by_set == {"None": 3}  # the builder's acks name no set


def test_a_lost_ack_is_found() -> None:
    b = good().send("v4", 1, 1)  # acked, never read; the queue's bound is 0
    result = check(b.events)
    assert result.lost == ["v4"] and not result.valid
    assert result.first_violation is not None and result.first_violation.startswith("lost")
    assert not result.lost_writes  # no poll reached offset 1 of queue 1
    b.poll("a", 1, 1, [(1, "vX"), (2, "v5")])  # a poll beyond it: a Kafka lost-write too
    result = check(b.events)
    assert result.lost_writes and "v4" in result.lost_writes[0]
    assert result.unexpected == ["v5", "vX"]


def test_an_indeterminate_send_never_read_is_not_lost() -> None:
    result = check(good().send("v9", 1, 5, outcome="info").send("v8", 0, 9, outcome="fail")
                   .events)
    assert result.valid, result.to_json()
    assert result.failed == 1 and result.indeterminate == 2


def test_two_values_at_one_offset_are_inconsistent() -> None:
    b = good().poll("a", 0, 1, [(1, "v9")], process="c1").send("v9", 0, 7, outcome="info")
    result = check(b.events)
    assert result.inconsistent_offsets == ["a/0@1 holds ['v1', 'v9']"]
    assert not result.valid


def test_an_ack_naming_another_offset_is_inconsistent() -> None:
    b = good().send("v5", 1, 3).poll("a", 1, 1, [(1, "v5")], process="c1")
    result = check(b.events)
    assert len(result.inconsistent_offsets) == 1
    assert "v5 acked at ?/1@3" in result.inconsistent_offsets[0]


def test_an_ack_without_a_position_is_a_violation() -> None:
    """Issue 43: a retry answered PUT_OK at queue -1, offset -1 was skipped by every offset
    check; now it is a violation of its own, even though the value is found."""
    b = good().send("v5", -1, -1).poll("a", 1, 1, [(1, "v5")], process="c1")
    result = check(b.events)
    assert result.unpositioned_acks == ["v5 acked at -1@-1"], result.to_json()
    assert not result.lost and not result.inconsistent_offsets
    assert not result.valid and result.first_violation is not None
    assert result.first_violation.startswith("unpositioned_acks")
    assert result.to_json()["unpositioned_acks"] == 1
    half = check(good().send("v6", 1, -1).poll("a", 1, 1, [(1, "v6")]).events)
    assert half.unpositioned_acks == ["v6 acked at 1@-1"]


def test_an_ack_naming_its_set_is_checked_in_that_set() -> None:
    b = good().send("w1", 2, 0, set_="b").poll("b", 2, 0, [(0, "w1")])
    assert check(b.events).valid
    b = good().send("w1", 2, 0, set_="b").poll("a", 2, 0, [(0, "w1")])  # found in a
    assert "w1 acked at b/2@0" in check(b.events).inconsistent_offsets[0]
    # lost below what set b's polls returned, though set a's polls never got that far
    b = good().send("w2", 2, 0, set_="b").poll("b", 2, 1, [(1, "w3")])
    b.send("w3", 2, 1, set_="b")
    assert "w2" in check(b.events).lost_writes[0]


def test_the_same_offset_in_two_replica_sets_is_no_conflict() -> None:
    b = good().send("w0", 0, 0).poll("b", 0, 0, [(0, "w0")])
    assert check(b.events).valid


def test_duplicates_of_idempotent_sends_are_violations_others_explained() -> None:
    b = good().poll("a", 1, 1, [(1, "v2")])  # v2 (idempotent) stored twice
    result = check(b.events)
    assert result.duplicated == {"v2": 2} and result.duplicated_unexplained
    assert not result.valid
    b = good().send("n0", 1, 1, idempotent=False).poll("a", 1, 1, [(1, "n0"), (2, "n0")])
    result = check(b.events)
    assert result.duplicated == {"n0": 2} and not result.duplicated_unexplained
    assert result.valid, result.to_json()


def test_polls_going_back_or_skipping_are_found() -> None:
    b = good().poll("a", 0, 1, [(1, "v1")], process="c0")  # c0 had read up to 2
    assert any("went back below 3" in p for p in check(b.events).poll_violations)
    b = good().poll("a", 1, 0, [(1, "v7")], process="c2").send("v7", 1, 1)
    assert any("skipped to 1" in p for p in check(b.events).poll_violations)
    b = good().poll("a", 1, 0, [(0, "v2"), (2, "v6")], process="c3").send("v6", 1, 2)
    assert any("0 then 2" in p for p in check(b.events).poll_violations)


def commit(b: Builder, offset: int, *, outcome: str = "ok") -> Builder:
    b.add("c0", "invoke", "commit", group="g", set="a", queue=0, offset=offset)
    return b.add("c0", outcome, "commit", group="g", set="a", queue=0, offset=offset)


def read_commit(b: Builder, offset: int) -> Builder:
    b.add("observer", "invoke", "read_commit", group="g", set="a")
    return b.add("observer", "ok", "read_commit", group="g", set="a", offsets={"0": offset})


def test_a_regressing_commit_is_found() -> None:
    b = read_commit(commit(good(), 2), 2)
    assert check(b.events).valid
    regressed = read_commit(copy.deepcopy(b), 1)
    assert check(regressed.events).commit_regressions == [
        "group g 0/a: read 1 after a commit of 2 was acknowledged".replace("0/a", "a/0")]
    tolerant = check(regressed.events, tolerate=["commit_regressions"])
    assert tolerant.valid and tolerant.commit_regressions  # counted, not judged
    with pytest.raises(ValueError, match="unknown kinds"):
        check(regressed.events, tolerate=["lost_acks"])
    # an unacknowledged commit sets no floor, but a read-back that goes down still counts
    b = read_commit(read_commit(commit(good(), 5, outcome="info"), 3), 2)
    assert check(b.events).commit_regressions == ["group g a/0: read 2 after reading 3"]


def digest(b: Builder, broker: str, sha: str, *, set_: str = "a", end: int = 100,
           start: int | None = None) -> Builder:
    span = {"end": end} if start is None else {"start": start, "end": end}
    return b.add("final", "ok", "replica_digest", set=set_, broker=broker, sha256=sha, **span)


def test_replica_divergence_below_the_confirm_position_is_found() -> None:
    b = digest(digest(digest(good(), "a-0", "aa"), "a-1", "aa"), "a-2", "aa")
    assert check(b.events).valid and check(b.events).replicas_compared == 3
    b = digest(b, "a-2", "bb", end=120).add("x", "ok", "noop")
    b = digest(b, "a-1", "cc", end=120)
    assert check(b.events).replica_divergence[0].startswith("a: CommitLog bytes [0, 120)")


def test_replicas_are_compared_over_the_same_span_only() -> None:
    """A long run hashes from the highest first segment (retention): spans with another start
    are other comparisons, and a divergence names its span."""
    b = digest(digest(good(), "a-0", "aa", start=64, end=200), "a-1", "aa", start=64, end=200)
    assert check(b.events).valid and check(b.events).replicas_compared == 2
    b = digest(b, "a-2", "bb", start=64, end=200)
    assert check(b.events).replica_divergence[0].startswith("a: CommitLog bytes [64, 200)")


def test_commitlog_bytes_start_at_a_later_segment(tmp_path: Path) -> None:
    """commitlog_bytes reads [start, end) across segment files; a start that is not the first
    kept segment is an error, not a silently shorter comparison."""
    log = tmp_path / "commitlog"
    log.mkdir()
    (log / f"{16:020d}").write_bytes(b"b" * 16)
    (log / f"{32:020d}").write_bytes(b"c" * 10)
    assert commitlog_bytes(tmp_path, 40, 16) == b"b" * 16 + b"c" * 8
    assert commitlog_segments(tmp_path)[0][0] == 16
    with pytest.raises(AssertionError, match="segments"):
        commitlog_bytes(tmp_path, 40)  # [0, 16) was deleted
    with pytest.raises(AssertionError, match="bytes"):
        commitlog_bytes(tmp_path, 50, 16)  # past the end of what is written


def elections(b: Builder, controller: str, *records: tuple[str, int, int | None, int]
              ) -> Builder:
    return b.add("observer", "ok", "elections", controller=controller, records=[
        {"broker_name": n, "master_epoch": e, "master_broker_id": m, "entry_index": i}
        for n, e, m, i in records])


def state(b: Builder, set_: str, epoch: int, sss: list[int]) -> Builder:
    return b.add("observer", "ok", "replica_state", set=set_, master_epoch=epoch,
                 master_broker_id=sss[0], sync_state_set=sss)


def test_controller_invariants() -> None:
    b = state(elections(good(), "c1", ("a", 1, 1, 5)), "a", 1, [1, 2, 3])
    b = elections(b, "c2", ("a", 1, 1, 5), ("a", 2, 2, 9))
    assert check(b.events).valid and check(b.events).elections_seen == 2
    bad = elections(copy.deepcopy(b), "c3", ("a", 2, 3, 9))  # entry 9 reads differently
    assert "election entry 9" in check(bad.events).controller_violations[0]
    bad = elections(copy.deepcopy(b), "c1", ("a", 2, 3, 12))  # two masters in epoch 2
    found = check(bad.events).controller_violations
    assert any("not above 2" in v for v in found) and any("masters 2 and 3" in v for v in found)
    bad = state(copy.deepcopy(b), "a", 2, [2])
    bad = elections(bad, "c1", ("a", 3, 3, 14))  # 3 was not in epoch 2's SyncStateSet
    assert "in no SyncStateSet seen for epoch 2" in check(bad.events).controller_violations[0]
    bad = state(copy.deepcopy(b), "a", 0, [1])
    assert "epoch read 0 after 1" in check(bad.events).controller_violations[0]


def test_the_spark_table_holds_every_ack_exactly_once() -> None:
    assert check(good().events).table_rows is None  # no ingest: not judged
    b = good().add("final", "ok", "table", values=["v0", "v1", "v2", "v3"])
    assert check(b.events).valid and check(b.events).table_rows == 4
    b = good().add("final", "ok", "table", values=["v0", "v2", "v2", "zz"])
    result = check(b.events)
    assert result.table_lost == ["v1"] and result.table_duplicated == ["v2 x2"]
    assert result.table_unexpected == ["zz"]
    assert result.first_violation is not None
    assert result.first_violation.startswith("table_lost")


def test_rto_and_latency_are_measured_per_fault() -> None:
    b = good()
    b.add("nemesis", "info", "fault", phase="start", kind="kill", name="f1", targets=["x"])
    b.send("v5", 1, 1, outcome="info")
    b.t += 2_000_000_000  # the next ack comes 2 s later
    b.send("v6", 1, 2).poll("a", 1, 1, [(1, "v5"), (2, "v6")])
    b.add("nemesis", "info", "fault", phase="stop", kind="kill", name="f1", targets=["x"])
    result = check(b.events)
    assert result.valid and result.faults_by_kind == {"kill": 1}
    assert 2.0 < result.rto[0]["rto_s"] < 2.01 and result.rto[0]["recovered"]
    assert result.latency_ms["during"]["count"] == 1
    assert result.latency_ms["outside"]["count"] == 3
    assert percentile([1.0, 2.0, 3.0, 4.0], 0.5) == 2.0 and percentile([], 0.5) is None


def test_rto_is_also_measured_per_replica_set() -> None:
    """A fault on set a's master: set b acks on at once, set a after 2 s; the per-fault figure
    (slowest producer) would hide which set was down."""
    b = Builder().send("v0", 0, 0, set_="a").send("v1", 0, 0, set_="b")
    b.add("nemesis", "info", "fault", phase="start", kind="kill", name="f1", targets=["a-0"])
    b.send("v2", 0, 1, set_="b", process="p1")
    b.t += 2_000_000_000
    b.send("v3", 0, 1, set_="a")
    b.add("nemesis", "info", "fault", phase="stop", kind="kill", name="f1", targets=["a-0"])
    result = check(b.events)
    by_set = result.rto[0]["by_set_s"]
    assert 2.0 < by_set["a"] < 2.01 and by_set["b"] < 0.01, by_set
    assert result.to_json()["rto_p99_by_set_s"] == by_set


def test_history_file_round_trip(tmp_path: Path) -> None:
    history = History(tmp_path / "h.jsonl")
    history.add("p0", "invoke", "send", value="x", key="k", tags="t", idempotent=True)
    history.add("p0", "ok", "send", value="x", queue=0, offset=0, set=None, duplicate=False)
    history.close()
    with (tmp_path / "h.jsonl").open("a") as torn:
        torn.write('{"t": 1, "proc')  # a killed run's last line
    events = read_history(tmp_path / "h.jsonl")
    assert len(events) == 2 and check(events).lost == ["x"]
    # `run --resume` goes on with the file: the drain finds the value
    history = History(tmp_path / "h.jsonl", events=events, append=True)
    history.add("drain", "invoke", "poll", set=None, queue=0, offset=0)
    history.add("drain", "ok", "poll", set=None, queue=0, msgs=[[0, "x"]], next=1)
    history.close()
    events = read_history(tmp_path / "h.jsonl")
    assert len(events) == len(history.events) == 4
    assert check(events).valid and check(events).read == 1


# -- a real run, and mutations of it ------------------------------------------------------------
@pytest.fixture(scope="module")
def real() -> list[Event]:
    if not REAL_RUN.exists():
        pytest.fail(f"{REAL_RUN} missing: record one with build.py chaos "
                    "(its history.jsonl, gzipped)")
    return read_history(REAL_RUN)


KNOWN: list[str] = []  # recorded after finding 1's fix (the run before it had 55 regressions)


def test_the_real_run_is_valid(real: list[Event]) -> None:
    result = check(real, tolerate=KNOWN)
    assert result.valid, json.dumps(result.to_json())[:2000]
    assert result.acknowledged > 100 and sum(result.faults_by_kind.values()) >= 2
    assert result.replicas_compared == 6 and result.read == result.acknowledged


def _first(events: list[Event], predicate: Any) -> int:
    return next(i for i, e in enumerate(events) if predicate(e))


def test_mutation_lost_ack(real: list[Event]) -> None:
    events = copy.deepcopy(real)
    done = events[_first(events, lambda e: e["f"] == "send" and e["type"] == "ok"
                         and e["queue"] >= 0)]
    for event in events:  # the value vanishes from every poll
        if event["f"] == "poll" and event["type"] == "ok":
            event["msgs"] = [m for m in event["msgs"] if m[1] != done["value"]]
    result = check(events, tolerate=KNOWN)
    assert result.lost == [done["value"]] and not result.valid


def test_mutation_duplicate_offset(real: list[Event]) -> None:
    events = copy.deepcopy(real)
    polls = [e for e in events if e["f"] == "poll" and e["type"] == "ok" and e["msgs"]]
    polls[-1]["msgs"][0][1] = polls[0]["msgs"][0][1]  # another value at that offset
    result = check(events, tolerate=KNOWN)
    assert result.inconsistent_offsets and not result.valid


def test_mutation_regressing_commit(real: list[Event]) -> None:
    events = copy.deepcopy(real)
    reads = [i for i, e in enumerate(events) if e["f"] == "read_commit" and e["type"] == "ok"
             and any(v > 0 for v in e["offsets"].values())]
    assert reads, "the real run read no committed offset above 0"
    event = events[reads[-1]]
    queue = next(q for q, v in event["offsets"].items() if v > 0)
    event["offsets"][queue] = 0
    before = len(check(real).commit_regressions)
    result = check(events)
    assert len(result.commit_regressions) == before + 1 and not result.valid
    assert any(f"{event['set']}/{queue}: read 0 after" in r for r in result.commit_regressions)


def test_mutation_replica_divergence(real: list[Event]) -> None:
    events = copy.deepcopy(real)
    index = _first(events, lambda e: e["f"] == "replica_digest")
    events[index]["sha256"] = "0" * 64
    result = check(events, tolerate=KNOWN)
    assert result.replica_divergence and not result.valid


def test_mutation_duplicate_of_an_idempotent_send(real: list[Event]) -> None:
    events = copy.deepcopy(real)
    polls = [e for e in events if e["f"] == "poll" and e["type"] == "ok" and e["msgs"]
             and e["process"] == "drain"]
    last = polls[-1]
    last["msgs"].append([last["msgs"][-1][0] + 1, polls[0]["msgs"][0][1]])
    result = check(events, tolerate=KNOWN)
    assert result.duplicated_unexplained and not result.valid


def test_mutation_two_masters_in_one_epoch(real: list[Event]) -> None:
    events = copy.deepcopy(real)
    seen = [e for e in events if e["f"] == "elections" and e["records"]]
    record = dict(seen[-1]["records"][-1])
    record["entry_index"] += 1000  # a later entry reopening the same epoch, another master
    record["master_broker_id"] = (record["master_broker_id"] or 0) + 1
    seen[-1]["records"] = [*seen[-1]["records"], record]
    result = check(events, tolerate=KNOWN)
    assert any("masters" in v for v in result.controller_violations) and not result.valid


def test_rto_is_also_reported_per_fault_kind() -> None:
    """A planned handover's pause and a kill's failover in one run: each kind has its own
    figures, so a fast handover does not hide a slow failover (or the other way round)."""
    b = good()
    for name, kind, pause_ns in (("f1", "handover", 100_000_000), ("f2", "kill", 2_000_000_000)):
        b.add("nemesis", "info", "fault", phase="start", kind=kind, name=name, targets=["x"])
        b.t += pause_ns
        b.send(f"v-{name}", 1, 1 if name == "f1" else 2)
        b.add("nemesis", "info", "fault", phase="stop", kind=kind, name=name, targets=["x"])
    b.poll("a", 1, 1, [(1, "v-f1"), (2, "v-f2")])
    by_kind = check(b.events).to_json()["rto_by_kind_s"]
    assert set(by_kind) == {"handover", "kill"}
    assert 0.1 < by_kind["handover"]["p99"] < 0.11, by_kind
    assert 2.0 < by_kind["kill"]["p50"] < 2.01 and by_kind["kill"]["max"] == by_kind["kill"]["p99"]
