"""Deterministic simulation of whole Raft clusters (sans-IO cores driven in one process).

One seed fixes everything: cluster size, fault rates, every delay, drop, duplicate, partition,
crash and client request. Time is a virtual millisecond clock; events (node ticks, message
deliveries, faults, client requests) sit in one heap ordered by (time, sequence), so a run is
exactly reproducible. A failure prints the command that replays it:

    python3 build.py sim --seed 1234 --ticks 300 [--trace]

Model:
- network: each message gets a random delay (sometimes a long one, so messages overtake each
  other), may be dropped or duplicated, and goes through the codec (encode/decode) like on the
  wire; partitions cut links, sometimes in one direction only;
- clock: every node ticks at its own period (drift of up to +-20 %);
- crashes: a node can die at any point of its Ready loop (before persisting, after persisting
  but before sending, after sending part of the messages, before applying); it loses everything
  not saved, and restarts later from its storage (saves are atomic, as FileRaftStorage's
  superblock makes them);
- compaction: nodes snapshot their state machine and drop log prefixes, so lagging or restarted
  nodes get snapshots;
- clients propose commands and ask for ReadIndex reads at whichever node believes it leads;
- leadership transfers (TimeoutNow): now and then a leader is asked to hand over, to a chosen
  follower or to the best one, while every other fault goes on (drawn from a second random
  stream, so a seed's other events are the ones it had before transfers existed).

Checked after every step (see `Checker`): election safety (one leader per term), log matching
(an (index, term) pair names one entry and one predecessor), leader completeness (a new leader
holds every entry committed in an earlier term), state-machine safety (every node applies the
same entry, in order, at each index; snapshots carry the same state), linearizable reads (a read
index covers everything committed before the read was asked). At the end the network heals, every
node restarts, and a new command must commit everywhere within a bound (liveness).
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import heapq
import random
import sys
import time
from collections.abc import Callable
from typing import Any

from controller.raft import (
    Entry,
    MemoryRaftStorage,
    Message,
    ProposeStatus,
    RaftConfig,
    RaftNode,
    Ready,
    Role,
    Snapshot,
    decode_message,
    encode_message,
)

TICK_MS = 10
LIVENESS_TICKS = 400  # after healing, a command must commit everywhere within this


class SimFailure(AssertionError):
    """An invariant broke; the message names the seed and how to replay it."""


@dataclasses.dataclass(frozen=True, slots=True)
class SimOptions:
    """Everything a seed decides."""

    seed: int
    ticks: int
    size: int
    drop_probability: float
    duplicate_probability: float
    long_delay_probability: float
    partition_probability: float  # per fault event
    crash_probability: float  # per fault event
    torn_ready_probability: float  # a crash inside the Ready loop, per processed Ready
    compact_every_entries: int
    propose_period_ms: int
    config: dict[str, Any]

    @classmethod
    def from_seed(cls, seed: int, ticks: int) -> SimOptions:
        rng = random.Random(seed ^ 0x5EED)
        election = rng.choice((6, 10, 14))
        return cls(
            seed=seed,
            ticks=ticks,
            size=rng.choice((1, 3, 3, 3, 5, 5)),
            drop_probability=rng.choice((0.0, 0.02, 0.1, 0.25)),
            duplicate_probability=rng.choice((0.0, 0.05, 0.2)),
            long_delay_probability=rng.choice((0.0, 0.05, 0.2)),
            partition_probability=rng.choice((0.0, 0.3, 0.6)),
            crash_probability=rng.choice((0.0, 0.2, 0.5)),
            torn_ready_probability=rng.choice((0.0, 0.005, 0.02)),
            compact_every_entries=rng.choice((4, 16, 64)),
            propose_period_ms=rng.choice((5, 20, 60)),
            config={
                "election_timeout_ticks": election,
                "heartbeat_interval_ticks": rng.choice((1, 2, 3)),
                "pre_vote": rng.random() < 0.8,
                "check_quorum": rng.random() < 0.8,
                "append_entries_max": rng.choice((1, 4, 64)),
                "inflight_entries_max": 64,
                "uncommitted_entries_max": rng.choice((8, 1024)),
                "apply_entries_max": rng.choice((1, 256)),
            },
        )

    def replay_command(self) -> str:
        return f"python3 build.py sim --seed {self.seed} --ticks {self.ticks} --trace"


@dataclasses.dataclass(frozen=True, slots=True)
class SimStats:
    seed: int
    size: int
    events: int
    crashes: int
    elections: int
    committed: int
    reads: int
    snapshots_sent: int
    transfers: int = 0  # transfer_leadership calls that named a target


def _chain(state_hash: bytes, entry: Entry) -> bytes:
    payload = b"%d/%d/%d/" % (entry.entry_index, entry.term, entry.kind) + entry.data
    return hashlib.blake2b(state_hash + payload, digest_size=8).digest()


class Checker:
    """Global registries that every node's behaviour is checked against, incrementally."""

    def __init__(self, fail: Callable[[str], None]) -> None:
        self._fail = fail
        self.leaders: dict[int, int] = {}  # term -> leader id
        self.entries: dict[tuple[int, int], tuple[bytes, int, int]] = {}  # (i, t) -> data...
        self.committed_term: dict[int, int] = {}  # entry index -> term of the committed entry
        self.committed_by: dict[int, int] = {}  # entry index -> term of the leader committing it
        self.applied_hash: dict[int, bytes] = {0: b""}
        self.commit_high = 0
        self.current_leaders: dict[int, RaftNode] = {}  # node id -> core, while it leads

    def on_entries(self, node: RaftNode, entries: tuple[Entry, ...]) -> None:
        """Log matching: every (index, term) names one entry and one predecessor term."""
        if not entries:
            return
        prev_term = node.log.term_at(entries[0].entry_index - 1)
        for entry in entries:
            key = (entry.entry_index, entry.term)
            value = (entry.data, int(entry.kind), prev_term if prev_term is not None else -1)
            known = self.entries.setdefault(key, value)
            if known != value:
                self._fail(f"log matching: node {node.node_id} holds {key} = {value}, "
                           f"elsewhere {known}")
            if prev_term is not None and prev_term > entry.term:
                self._fail(f"log terms decrease at {key} on node {node.node_id}")
            prev_term = entry.term

    def on_commit(self, node: RaftNode, old_commit: int) -> None:
        """Committed entries never change; remember which leader term committed each one.

        Only a leader's own commit says which term committed an entry (a follower may learn
        a commit index that falls on an older entry), so only leaders fill `committed_by`.
        """
        log = node.log
        new_commit = log.committed_index
        if new_commit < old_commit:
            self._fail(f"node {node.node_id} commit index went back {old_commit} -> {new_commit}")
        by_term = None
        if node.role is Role.LEADER:
            by_term = node.term
            if log.term_at(new_commit) != node.term:
                self._fail(f"leader {node.node_id} committed {new_commit} of an older term")
        for index in range(old_commit + 1, new_commit + 1):
            term = log.term_at(index)
            if term is None:
                continue  # inside an installed snapshot: checked through its state hash
            known = self.committed_term.setdefault(index, term)
            if known != term:
                self._fail(f"node {node.node_id} committed ({index}, t{term}); "
                           f"({index}, t{known}) was committed before")
            if by_term is not None:
                self.committed_by.setdefault(index, by_term)
                for leader in self.current_leaders.values():
                    if (leader.role is Role.LEADER and leader.term > by_term
                            and leader.log.snapshot.entry_index < index
                            and leader.log.term_at(index) != term):
                        self._fail(f"leader completeness: leader {leader.node_id} of term "
                                   f"{leader.term} lacks ({index}, t{term}) committed in "
                                   f"term {by_term}")
        self.commit_high = max(self.commit_high, new_commit)

    def on_leader(self, node: RaftNode) -> None:
        """Election safety, then (once per term) leader completeness for the new leader.

        Checking once suffices: a leader never removes entries from its own log, and an entry
        committed later by a leader of an older term is checked in `on_commit`."""
        known = self.leaders.get(node.term)
        if known == node.node_id:
            return
        if known is not None:
            self._fail(f"two leaders in term {node.term}: {known} and {node.node_id}")
            return
        self.leaders[node.term] = node.node_id
        self.current_leaders[node.node_id] = node
        log = node.log
        for index, by_term in self.committed_by.items():
            if by_term >= node.term or index <= log.snapshot.entry_index:
                continue
            if log.term_at(index) != self.committed_term[index]:
                self._fail(f"leader completeness: node {node.node_id} leads term {node.term} "
                           f"without committed entry ({index}, t{self.committed_term[index]})")

    def on_apply(self, node_id: int, state: tuple[int, bytes], entry: Entry) -> tuple[int, bytes]:
        index, state_hash = state
        if entry.entry_index != index + 1:
            self._fail(f"node {node_id} applied {entry.entry_index} after {index}")
        if self.committed_term.get(entry.entry_index, entry.term) != entry.term:
            self._fail(f"node {node_id} applied uncommitted ({entry.entry_index}, t{entry.term})")
        new_hash = _chain(state_hash, entry)
        known = self.applied_hash.setdefault(entry.entry_index, new_hash)
        if known != new_hash:
            self._fail(f"state machine safety: node {node_id} state at {entry.entry_index} "
                       "differs from another node's")
        return entry.entry_index, new_hash

    def on_snapshot(self, node_id: int, snapshot: Snapshot) -> tuple[int, bytes]:
        index, state_hash = _decode_state(snapshot.data)
        if index != snapshot.entry_index:
            self._fail(f"node {node_id} snapshot at {snapshot.entry_index} holds state {index}")
        if self.applied_hash.get(index, state_hash) != state_hash:
            self._fail(f"node {node_id} installed a snapshot at {index} with another state")
        return index, state_hash


def _encode_state(state: tuple[int, bytes]) -> bytes:
    return b"%d:" % state[0] + state[1].hex().encode()


def _decode_state(data: bytes) -> tuple[int, bytes]:
    index, _, hex_hash = data.partition(b":")
    return int(index), bytes.fromhex(hex_hash.decode())


class SimNode:
    """One node's process: its core, storage (survives crashes) and applied state."""

    def __init__(self, sim: Simulation, node_id: int, period_ms: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.period_ms = period_ms
        self.storage = MemoryRaftStorage()
        self.core: RaftNode | None = None
        self.state: tuple[int, bytes] = (0, b"")
        self.commit_seen = 0
        self.incarnation = 0
        self.start()

    def start(self) -> None:
        sim = self.sim
        persisted = self.storage.load()
        config = RaftConfig(node_id=self.node_id, voter_ids=sim.ids, **sim.options.config)
        self.core = RaftNode(config, random.Random(sim.rng.getrandbits(32)),
                             hard_state=persisted.hard_state, snapshot=persisted.snapshot,
                             entries=persisted.entries)
        self.state = (0, b"")
        if persisted.snapshot is not None:
            self.state = sim.checker.on_snapshot(self.node_id, persisted.snapshot)
        self.commit_seen = self.core.log.committed_index
        self.incarnation += 1
        self.sim.schedule(self.period_ms, "tick", (self.node_id, self.incarnation))

    def crash(self) -> None:
        self.core = None

    def process(self) -> None:
        """Drain the core's Ready loop, crashing inside it now and then."""
        core, sim, checker = self.core, self.sim, self.sim.checker
        if core is not None:
            self._observe(core)
        while core is not None and core.has_ready():
            ready = core.ready()
            crash_at = sim.torn_ready_point()
            if crash_at == 0:
                return self._crash_in_ready("before persisting")
            checker.on_entries(core, ready.entries)
            self.storage.save(snapshot=ready.snapshot, entries=ready.entries,
                              hard_state=ready.hard_state)
            if crash_at == 1:
                return self._crash_in_ready("after persisting, before sending")
            for position, message in enumerate(ready.messages):
                if crash_at == 2 and position == len(ready.messages) // 2:
                    return self._crash_in_ready("while sending")
                sim.send(message)
            if crash_at == 3:
                return self._crash_in_ready("before applying")
            self._apply(ready)
            core.advance(ready)
            self._observe(core)
            self._maybe_compact(core)
        return None

    def _crash_in_ready(self, where: str) -> None:
        self.sim.trace(f"node {self.node_id} crashes {where}")
        self.sim.crash(self.node_id)

    def _apply(self, ready: Ready) -> None:
        checker = self.sim.checker
        if ready.snapshot is not None:
            self.state = checker.on_snapshot(self.node_id, ready.snapshot)
        for entry in ready.committed:
            self.state = checker.on_apply(self.node_id, self.state, entry)
            self.sim.on_applied(self.node_id, entry)
        for read in ready.read_states:
            self.sim.on_read(self.node_id, read.request_id, read.entry_index)

    def _observe(self, core: RaftNode) -> None:
        """Check what the last step/tick/advance changed (before anything is persisted)."""
        checker = self.sim.checker
        if core.role is Role.LEADER:
            checker.on_leader(core)
        if core.log.committed_index != self.commit_seen:
            checker.on_commit(core, self.commit_seen)
            self.commit_seen = core.log.committed_index

    def _maybe_compact(self, core: RaftNode) -> None:
        log = core.log
        every = self.sim.options.compact_every_entries
        if log.applied_index - log.snapshot.entry_index >= every and not core.has_ready():
            index = min(log.applied_index, log.stable_index)
            if index > log.snapshot.entry_index and index == self.state[0]:
                snapshot = core.compact(index, _encode_state(self.state))
                self.storage.compact(snapshot)


class Simulation:
    def __init__(self, options: SimOptions, *, trace: bool = False) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.ids = tuple(range(1, options.size + 1))
        self.now_ms = 0
        self._heap: list[tuple[int, int, str, Any]] = []  # (time_ms, seq, kind, payload)
        self._seq = 0
        self._trace = trace
        self.events = 0
        self.checker = Checker(self._fail)
        self.cuts: set[tuple[int, int]] = set()
        self.drop_probability = options.drop_probability
        self.long_delay_probability = options.long_delay_probability
        self.faults_on = True
        self.crashes = 0
        self.reads_done = 0
        self.snapshots_sent = 0
        self._next_request = 0
        self._read_floor: dict[int, int] = {}
        self.applied_commands: dict[bytes, int] = {}
        self.nodes = {
            node_id: SimNode(self, node_id, TICK_MS + self.rng.randint(-2, 2))
            for node_id in self.ids
        }
        self.transfer_rng = random.Random(options.seed ^ 0x7AB5)  # see the module docstring
        self.transfer_probability = self.transfer_rng.choice((0.0, 0.2, 0.5))  # per fault event
        self.transfers = 0
        self.schedule(options.propose_period_ms, "client", None)
        self.schedule(100, "fault", None)

    # -- plumbing --------------------------------------------------------------------------

    def _fail(self, what: str) -> None:
        raise SimFailure(
            f"seed {self.options.seed}: {what} (at {self.now_ms} ms, event {self.events})\n"
            f"  options: {self.options}\n  replay: {self.options.replay_command()}"
        )

    def trace(self, text: str) -> None:
        if self._trace:
            print(f"{self.now_ms:>7} ms  {text}")

    def schedule(self, delay_ms: int, kind: str, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self.now_ms + delay_ms, self._seq, kind, payload))

    def torn_ready_point(self) -> int | None:
        if not self.faults_on or self.rng.random() >= self.options.torn_ready_probability:
            return None
        return self.rng.randrange(4)

    def send(self, message: Message) -> None:
        if self.rng.random() < self.drop_probability:
            return
        copies = 2 if self.rng.random() < self.options.duplicate_probability else 1
        wire = encode_message(message)
        if type(message).__name__ == "SnapshotRequest":
            self.snapshots_sent += 1
        for _ in range(copies):
            if self.rng.random() < self.long_delay_probability:
                delay = self.rng.randint(20, 200)
            else:
                delay = self.rng.randint(1, 8)
            self.schedule(delay, "deliver", (message.from_id, message.to_id, wire))

    def crash(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.core is None:
            return
        node.crash()
        self.crashes += 1
        self.schedule(self.rng.randint(10, 300), "restart", node_id)

    # -- events ----------------------------------------------------------------------------

    def run(self) -> SimStats:
        end_ms = self.options.ticks * TICK_MS
        while self._heap and self._heap[0][0] <= end_ms:
            self.step()
        self._check_liveness()
        return SimStats(
            seed=self.options.seed, size=self.options.size, events=self.events,
            crashes=self.crashes, elections=len(self.checker.leaders),
            committed=self.checker.commit_high, reads=self.reads_done,
            snapshots_sent=self.snapshots_sent, transfers=self.transfers,
        )

    def step(self) -> None:
        self.now_ms, _, kind, payload = heapq.heappop(self._heap)
        self.events += 1
        getattr(self, f"_on_{kind}")(payload)

    def _on_tick(self, payload: tuple[int, int]) -> None:
        node_id, incarnation = payload
        node = self.nodes[node_id]
        if node.core is None or node.incarnation != incarnation:
            return
        node.core.tick()
        node.process()
        self.schedule(node.period_ms, "tick", payload)

    def _on_deliver(self, payload: tuple[int, int, bytes]) -> None:
        from_id, to_id, wire = payload
        node = self.nodes[to_id]
        if node.core is None or (from_id, to_id) in self.cuts:
            return
        message = decode_message(wire)
        if self._trace:
            self.trace(f"{from_id}->{to_id} {message}")
        node.core.step(message)
        node.process()

    def _on_restart(self, node_id: int) -> None:
        node = self.nodes[node_id]
        if node.core is None:
            self.trace(f"node {node_id} restarts")
            node.start()

    def _on_fault(self, _: None) -> None:
        if not self.faults_on:
            return
        rng, options = self.rng, self.options
        if rng.random() < options.partition_probability:
            self._partition()
        elif self.cuts and rng.random() < 0.5:
            self.trace("network heals")
            self.cuts.clear()
        if rng.random() < options.crash_probability:
            victim = rng.choice(self.ids)
            if self.nodes[victim].core is not None:
                self.trace(f"node {victim} crashes")
                self.crash(victim)
        self._maybe_transfer()
        self.schedule(rng.randint(50, 400), "fault", None)

    def _maybe_transfer(self) -> None:
        rng = self.transfer_rng
        if rng.random() >= self.transfer_probability:
            return
        leaders = [n for n in self.nodes.values()
                   if n.core is not None and n.core.role is Role.LEADER]
        if not leaders:
            return
        node = rng.choice(leaders)
        assert node.core is not None
        to_id = rng.choice([None, *self.ids])  # the best follower, a peer, or itself (refused)
        target = node.core.transfer_leadership(to_id)
        self.trace(f"node {node.node_id} transfers leadership to {to_id}: {target}")
        if target is not None:
            self.transfers += 1
        node.process()

    def _partition(self) -> None:
        rng, ids = self.rng, list(self.ids)
        rng.shuffle(ids)
        shape = rng.randrange(3)
        self.cuts.clear()
        if shape == 0:  # one side against the other
            cut_at = rng.randint(1, max(1, len(ids) - 1))
            for a in ids[:cut_at]:
                for b in ids[cut_at:]:
                    self.cuts |= {(a, b), (b, a)}
        elif shape == 1:  # one-way links
            for _ in range(rng.randint(1, len(ids))):
                a, b = rng.choice(ids), rng.choice(ids)
                if a != b:
                    self.cuts.add((a, b))
        else:  # one node isolated from everyone
            for b in ids[1:]:
                self.cuts |= {(ids[0], b), (b, ids[0])}
        self.trace(f"partition {sorted(self.cuts)}")

    def _leader(self) -> SimNode | None:
        leaders = [n for n in self.nodes.values()
                   if n.core is not None and n.core.role is Role.LEADER]
        return self.rng.choice(leaders) if leaders else None

    def _on_client(self, _: None) -> None:
        if not self.faults_on:
            return
        node = self._leader()
        if node is not None and node.core is not None:
            self._next_request += 1
            request_id = self._next_request
            if self.rng.random() < 0.3:
                self._read_floor[request_id] = self.checker.commit_high
                node.core.read_index(request_id)
            else:
                node.core.propose(b"cmd-%d" % request_id)
            node.process()
        self.schedule(self.rng.randint(1, 2 * self.options.propose_period_ms), "client", None)

    def on_applied(self, node_id: int, entry: Entry) -> None:
        if entry.data:
            self.applied_commands.setdefault(entry.data, entry.entry_index)

    def on_read(self, node_id: int, request_id: int, entry_index: int) -> None:
        floor = self._read_floor.pop(request_id, None)
        if floor is None:
            return  # a read issued by an earlier incarnation of this request id cannot repeat
        if entry_index < floor:
            self._fail(f"stale read: node {node_id} answered read {request_id} at "
                       f"{entry_index}, but {floor} was committed before the read began")
        self.reads_done += 1

    # -- the end ---------------------------------------------------------------------------

    def _check_liveness(self) -> None:
        """Heal everything; a fresh command must then commit and apply on every node."""
        self.faults_on = False  # also stops the background client
        self.cuts.clear()
        self.drop_probability = 0.0
        self.long_delay_probability = 0.0
        for node_id in self.ids:
            self._on_restart(node_id)
        deadline_ms = self.now_ms + LIVENESS_TICKS * TICK_MS
        final = b"final-%d" % self.options.seed
        proposed_at: set[tuple[int, int]] = set()
        while self.now_ms < deadline_ms:
            leader = self._leader()
            if final not in self.applied_commands and leader is not None and leader.core:
                attempt = (leader.node_id, leader.core.term)
                if attempt not in proposed_at:
                    result = leader.core.propose(final)
                    if result.status is ProposeStatus.ACCEPTED:
                        proposed_at.add(attempt)  # a client retries only at a new leader
                    leader.process()
            if final in self.applied_commands and self._all_applied(final):
                return
            self.step()
        self._fail(f"liveness: {final!r} not applied on every node within {LIVENESS_TICKS} "
                   f"ticks after healing; roles {self._roles()}")

    def _all_applied(self, final: bytes) -> bool:
        index = self.applied_commands[final]
        return all(node.state[0] >= index for node in self.nodes.values())

    def _roles(self) -> dict[int, str]:
        return {
            node_id: (f"{node.core.role.value} t{node.core.term} applied {node.state[0]}"
                      if node.core else "down")
            for node_id, node in self.nodes.items()
        }


def run_seed(seed: int, ticks: int = 300, *, trace: bool = False) -> SimStats:
    """Run one seed; raises SimFailure (with the replay command) when an invariant breaks."""
    return Simulation(SimOptions.from_seed(seed, ticks), trace=trace).run()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=1000, help="how many seeds to run")
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--seed", type=int, help="run only this seed")
    parser.add_argument("--ticks", type=int, default=300, help="virtual ticks per seed")
    parser.add_argument("--trace", action="store_true", help="print every event")
    args = parser.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(
        args.first_seed, args.first_seed + args.seeds)
    started = time.monotonic()
    failures = 0
    totals = {"events": 0, "crashes": 0, "elections": 0, "reads": 0, "snapshots_sent": 0,
              "transfers": 0}
    for seed in seeds:
        try:
            stats = run_seed(seed, args.ticks, trace=args.trace)
        except SimFailure as failure:
            failures += 1
            print(f"FAIL {failure}", flush=True)
            continue
        for key in totals:
            totals[key] += getattr(stats, key)
    count = len(seeds)
    print(f"{count - failures}/{count} seeds passed in {time.monotonic() - started:.1f} s; "
          + ", ".join(f"{key} {value}" for key, value in totals.items()))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
