"""Deterministic simulation of a whole cluster: 3 controllers, 1-2 replica sets of 2-4 brokers,
a producer and a reader per set.

One seed fixes everything (the topology, fault rates, every delay, drop, partition, crash, put
and read); time is a virtual millisecond clock and every event sits in one heap ordered by
(time, sequence), so a run replays exactly. A failure prints its seed, the replay command and
the last trace lines; `--minimise` searches the same seed for a smaller run that fails the same
way (tests/sim/cluster_minimise.py: fewer faults, `--only-faults`; no noise; a shorter fault
phase) and prints its replay command and whole trace:

    python3 build.py sim --cluster --seed S [--trace]
    python3 build.py sim --cluster --seeds N [--sets 1|2] [--replicas 2|3|4] [--json]
    python3 build.py sim --cluster --seed S --minimise [--minimise-runs-max N]
    python3 build.py sim --cluster --seed S --only-faults 3,7 [--no-noise] [--no-torn-writes]
    python3 build.py sim --cluster ... [--heartbeat-transit-max-ms N] [--long-delay-max-ms M]
                                      [--check-lease]

Topology: each seed draws 1 set (75 %) or 2, and 2, 3 or 4 brokers per set, from a stream of
its own (`--sets` / `--replicas` force them); every set registers at the same 3 controllers.
The fault, put and reader draws do not depend on it: `--sets 1 --replicas 3` replays the runs
of the versions that had only that topology. Readers draw from a third stream, and their
messages are counted apart (`reads`), so they change no broker's or controller's run.

What runs is the production decision code, driven here instead of by threads and sockets:
- controllers: the Raft core (controller/raft), the replicated state machine
  (controller/state.py), the liveness table (controller/liveness.py), the election policy
  (controller/election.py: failover_decision), role_of (controller/api/replicas.py) and the leader
  core (controller/leader_core.py: what a heartbeat is answered, when a SyncStateSet
  proposal is refused before Raft, the scan's election decision);
- brokers: the role core (ha/replication/role_core.py: which role a controller reply means, the
  master lease arithmetic, SyncStateSet proposals and adoption, the take-over epoch check), the
  master core (ha/replication/master_core.py: quorum, confirm position, SyncStateSet, lease), the
  slave core (ha/replication/slave_core.py: fork-point truncation, acks, confirm), the take-over
  core (ha/replication/takeover_core.py: cut a partial tail record, confirm := log end, epoch entry,
  fsync, open the term, lift the fence; SimBroker carries its effects out as replication.py does)
  and the put core (ha/replication/put_core.py: NOT_MASTER, IN_SYNC_REPLICAS_NOT_ENOUGH, the flush
  and quorum statuses, a deposed master's PUT_OK turned into FLUSH_SLAVE_TIMEOUT).

What is re-modelled here (the shells, and what is not yet a core; see README "Simulation"):
- the controller leader's shell (controller/node.py): `SimController` proposes and answers
  as node.py does, scans every SCAN_MS and at once when a heartbeat's answer wakes it
  (leader_core's `wake`, as node.py), but not when a master's heartbeat timeout ends (node.py
  shortens its wait to that; here the next scan sees it), never probes a master's address
  (a PROBE wake-up only scans), has no operator elections (so no lease holds) and no read
  barriers;
- the shells themselves: SimBroker is event-driven where ha/broker waits on threads, so one
  deadline (syncFlushTimeout) covers a put's flush and quorum waits here (replication.py
  gives each its own), and a deposed master answers its waiting puts at once;
- the clients: a producer per set sends to the broker it takes for the master and moves on
  after NOT_MASTER; a reader per set asks the controllers for the route and pulls by queue
  offset from the master or a member slave (the connector's readFromReplicas); brokers answer
  a pull with `read_records` of their log (the engine's `get_messages`; the model's records
  below confirm);
- the disk, by default (`--disk model`, the suite's 1,000-seed batch), is a MODEL: `SimLog`
  holds the CommitLog as bytes with a synced length, the epoch list (durable on append, as the
  epoch file is) and the confirm position; a crash drops every unsynced byte (or keeps a random
  prefix of them: a torn write); no decision is taken by this model;
- with `--disk engine` each broker runs the REAL storage engine (MessageStore: segments,
  ConsumeQueue, epoch file, checkpoint, recovery) over a simulated disk (tests/sim/sim_fs.py:
  unsynced writes and directory entries lost at a crash, torn tails, flipped bits), driven
  without threads (tests/sim/engine_log.py); a crash is a power cut plus the engine's recovery.

Network: controller requests and replies may be dropped, duplicated, delayed (so reordered;
a long delay lasts 20-300 ms, `--long-delay-max-ms` for longer); partitions cut links,
sometimes one way. An HA link is a TCP stream: in order, and a drop or a partition breaks it
(both ends see it close). Clock: one virtual clock (no drift yet).

Late heartbeats (`--heartbeat-transit-max-ms N`, 0 = off, the default; never drawn from the
seed, so runs without it replay step for step): as controller/node.py and
ha/broker/controller_link.py do, every controller records a heartbeat as heard at
liveness.heartbeat_credit_ms (the real function), the leader's answer carries its clock
(controller_ms, a clock id per controller process: node id and incarnation here) and
credit_behind_ms, followers answer NOT_LEADER with their clock, each broker echoes the last
reply of each controller in its next heartbeat to it (a restarted broker has none) and
starts its lease credit_behind_ms before the heartbeat's send time. The run's stats count
heartbeats credited late, leases so shortened, and elections of a master still heard within
the timeout by arrival. `--check-lease` adds the invariant "a master's lease ends by the
election of a newer epoch" (opt-in; it found seed 45, fixed since: README).

Invariants checked after every event (`ClusterChecker`; with `--disk engine` also: no
slave's engine refuses the bytes its master shipped as not being whole records):
(every one per replica set)
- no acknowledged message is lost or changed: the serving master of the highest epoch holds
  every PUT_OK'd record, byte for byte, where it was acknowledged;
- reads never pass the confirm position: a broker (master or slave) serves a reader only
  records ending at or below its own confirm position; what a reader read at a queue offset
  reads the same later from any broker (a tenth of the pulls read an earlier offset again);
  reads come in log order;
- replicas are identical below the confirm position (any two brokers of a set agree in every
  record that ends below the smaller of their confirm positions; a record that confirm cuts
  in two is never read, and a recovery or a take-over may cut it), and a broker's confirm
  never passes its log end (reads stop at confirm, so no read ever sees bytes a failover can
  cut);
- one master per epoch; a broker's epochs and (within one incarnation) its confirm position
  never go backwards; the controller's master epoch never goes back;
- every elected master was in the SyncStateSet of the epoch before (no unclean election);
- the Raft invariants are raft_sim.py's business (its checker runs 200 seeds by default).
At the end the network heals and each set must elect a master that holds every ack; then
the puts stop, and after DRAIN_MS each reader reads its set again from queue offset 0 on that
master: everything it read during the run must read the same, and every PUT_OK record must be
there, byte for byte, at its log_position, in log order.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import heapq
import itertools
import json
import logging
import random
import struct
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from controller.api import (
    BrokerHeartbeat,
    HeartbeatReply,
    ReplicaInfo,
    RoleChange,
)
from controller.leader_core import (
    Wake,
    answer_heartbeat,
    lease_held,
    refuse_sync_state_set,
    scan_decision,
    state_current,
)
from controller.liveness import LiveTable, heartbeat_credit_ms
from controller.raft import (
    EntryKind,
    MemoryRaftStorage,
    Message,
    ProposeStatus,
    RaftConfig,
    RaftNode,
    Role,
)
from controller.state import (
    AlterSyncStateSet,
    ApplyBrokerId,
    Command,
    ControllerState,
    ElectMaster,
    decode_command,
    encode_command,
)
from ha.replication import put_core, takeover_core
from ha.replication.frames import Frame, MasterHello, Transfer
from ha.replication.master_core import (
    CloseLink as MasterCloseLink,
)
from ha.replication.master_core import (
    ConfirmTo,
    MasterLog,
    MasterReplication,
    MasterSettings,
    SendLog,
    SendMetadata,
    SyncStateSetChanged,
    Wait,
)
from ha.replication.master_core import (
    SendFrame as MasterSendFrame,
)
from ha.replication.quorum import QuorumSettings
from ha.replication.role_core import RoleAction, RoleCore
from ha.replication.slave_core import (
    AppendEpoch,
    AppendLog,
    ApplyMetadata,
    DispatchLog,
    LocalLog,
    MasterKnown,
    RestartLogAt,
    SetConfirm,
    SlaveReplication,
    SlaveState,
    Truncate,
)
from ha.replication.slave_core import (
    CloseLink as SlaveCloseLink,
)
from ha.replication.slave_core import SendFrame as SlaveSendFrame
from ha.replication.takeover_core import AppendEpoch as TakeOverAppendEpoch
from ha.replication.takeover_core import ConfirmTo as TakeOverConfirmTo
from ha.replication.takeover_core import (
    CutTail,
    FlushLog,
    LiftFence,
    OpenTerm,
    ReplayState,
    TakeOverLog,
)
from storage_engine import (
    CorruptRecordError,
    EpochEntry,
    FsyncFailedError,
    PutStatus,
    ReplicatedDataError,
    set_fsync_failure_handler,
)
from tests.sim.engine_log import DiskFailedError, EngineLog
from tests.sim.sim_fs import SimDiskFaults
from tests.support.partitions import shape_cuts

CLUSTER = "sim"
CONTROLLERS = (1, 2, 3)
SET_NAMES = ("broker-a", "broker-b")  # the replica sets a run may have (--sets 1|2)
REPLICAS = (2, 3, 4)  # brokers per set a seed may draw (--replicas forces one of them)
TWO_SETS_PROBABILITY = 0.25  # a seed's chance of 2 sets (a second set costs CPU per seed)
RECORD_BYTES = 16  # a record: msg id (8) + a checksum of it (8); batches may cut one in two
TICK_MS = 10  # Raft tick
HEARTBEAT_MS = 100  # brokerHeartbeatInterval
HEARTBEAT_TIMEOUT_MS = 1000  # controllerHeartbeatTimeoutMs (lease max: 2/3 of it)
MASTER_LEASE_MS = 600
SCAN_MS = 100
LONG_DELAY_MIN_MS = 20  # a long delay (options.long_delay_probability) lasts from this
LONG_DELAY_MAX_MS = 300  # to this by default (--long-delay-max-ms)
SCAN_ON_WAKE = True  # scan at once when a heartbeat's answer wakes the leader (node.py does)
PUT_TIMEOUT_MS = 800  # syncFlushTimeout
CHECKPOINT_MS = 100  # --disk engine: how often a broker writes its store's checkpoint
HEAL_MS = 4000  # after the faults: heal, then a master must hold every ack within this
DRAIN_MS = 1000  # then, puts stopped, the confirm position reaches every ack within this
READ_MS = 40  # a reader's pull period
READ_COUNT_MAX = 32  # records per pull
ROUTE_MS = 300  # how often a reader asks the controllers for its set's route
REREAD_PROBABILITY = 0.1  # a pull that reads an earlier offset again (maybe from another broker)
TRACE_KEPT = 60
# The brokers' quorum rules a run may use (--quorum): every SyncStateSet member acks (the suite's
# batch; allAckInSyncStateSet, RocketMQ's default with a set of 2), or a majority of the set's
# brokers degrading to the in-sync count (2 of 3: the integration tests' QUORUM_AUTO).
QUORUMS = ("all-ack", "auto-isr")


def quorum_settings(rule: str, replicas: int) -> QuorumSettings:
    """The brokers' QuorumSettings under `rule` in a set of `replicas` brokers."""
    if rule == "all-ack":
        return QuorumSettings(total_replicas=replicas, in_sync_replicas=replicas,
                              min_in_sync_replicas=1, all_ack_in_sync_state_set=True)
    if rule == "auto-isr":
        return QuorumSettings(total_replicas=replicas, in_sync_replicas=replicas // 2 + 1,
                              min_in_sync_replicas=1, auto_in_sync_replicas=True)
    raise ValueError(f"unknown quorum rule {rule!r}")


class SimFailure(AssertionError):
    """An invariant broke; the message names the seed, the replay command and a trace.

    `kind` names the invariant (one of VIOLATIONS: what a minimised run must still break),
    `at_ms` the virtual time, `faults` the faults injected before it."""

    def __init__(self, message: str, *, kind: str, at_ms: int,
                 faults: tuple[InjectedFault, ...]) -> None:
        super().__init__(message)
        assert kind in VIOLATIONS, kind
        self.kind = kind
        self.at_ms = at_ms
        self.faults = faults


@dataclasses.dataclass(frozen=True, slots=True)
class InjectedFault:
    """One fault a run drew: its ordinal (what --only-faults names) and what it does."""

    ordinal: int  # 1, 2, ... in the order the run drew its faults
    at_ms: int
    what: str  # as the trace says it
    cuts: frozenset[tuple[str, str]] = frozenset()  # a partition's cut links (from, to)
    heal_after_ms: int = 0  # a partition's: then every cut heals (heal_some)
    crash: str | None = None  # the process crashed


# The kinds of invariant violation (SimFailure.kind): a minimised seed must break the same one.
VIOLATIONS = (
    "ack-lost",  # a PUT_OK'd record lost or changed on the serving master
    "ack-not-read-back",  # the reader's read-back at the end misses a PUT_OK'd record
    "read-changed",  # a queue offset read differently later
    "read-out-of-order",
    "read-past-confirm",  # a broker served a record past its confirm position
    "read-corrupt",  # a broker served (or would show) a corrupt record
    "replicas-differ",  # two replicas differ in a whole record below the confirm position
    "confirm-past-end", "confirm-back", "epoch-back", "controller-epoch-back",
    "two-masters", "epoch-reused",  # one master per epoch; one log per epoch
    "unclean-election",  # a master from outside the SyncStateSet
    "refused-master-bytes",  # --disk engine: a slave's engine refused its master's bytes
    "liveness",  # no master (to read from) after healing
    "lease-outlives-election",  # a master's lease ran past the election of a newer epoch
)


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterOptions:
    seed: int
    duration_ms: int
    drop_probability: float
    duplicate_probability: float
    long_delay_probability: float
    partition_probability: float  # per fault event
    crash_probability: float  # per fault event
    torn_write_probability: float  # a crash keeps a random prefix of the unsynced bytes
    transfer_batch_bytes: int
    put_period_ms: int
    disk_delay_ms: int
    quorum: str = "all-ack"  # one of QUORUMS: the brokers' quorum rule (the same for every seed)
    # the topology: brokers per replica set, one entry per set (drawn from the seed unless
    # forced: --sets, --replicas; `forced` remembers the options for the replay command)
    replicas: tuple[int, ...] = (3,)
    forced_sets: int | None = None
    forced_replicas: int | None = None
    # half of the partitions are partial (tests/support/partitions.py: a bridge or a
    # majorities ring over every process; or "pair": the master and one slave cut off from
    # the rest together); off by default, so older seeds replay unchanged
    partial: bool = False
    bit_flip_probability: float = 0.0  # per file at a crash (--disk engine only)
    fsync_failure_probability: float = 0.0  # per fsync (--disk engine only): fail-stop
    disk: str = "model"  # "model": SimLog; "engine": the storage engine on a SimFileSystem
    # What a minimisation varies (tests/sim/cluster_minimise.py); the defaults are the seed's
    # own run. `only_faults`: the faults (partitions, crashes, fsync failures: InjectedFault,
    # numbered 1, 2, ... in the order the run draws them) that happen; the others are drawn
    # and left out (None: every one). Every fault kept: the seed's own run, step for step. A
    # fault left out has had its own draws (so the next fault is drawn from the same point of
    # the stream), but not its effect nor what that would have drawn (a heal time, a restart,
    # link closes, the messages it would have cut): the run differs from there on, and a
    # later ordinal may name another fault than in the seed's own run. A set of ordinals
    # replays exactly, which is all minimising needs. (Replaying the seed's own k-th fault
    # as data instead, same target and times, minimised worse: 32 faults of 6 failing seeds
    # to 21, against 16 this way: a fault drawn anew hits the master of the run it is in.)
    # `noise` off: no message drops, duplicates or long delays; `torn_writes` off: a crash
    # drops exactly the unsynced bytes (no torn write or flipped bit).
    only_faults: frozenset[int] | None = None
    noise: bool = True
    torn_writes: bool = True
    # heartbeatTransitMaxMs (controller/liveness.py heartbeat_credit_ms; --heartbeat-transit-
    # max-ms): a heartbeat longer on the way counts as heard this long after the latest time
    # it can have been made, and the lease it grants starts that much earlier. 0: off, every
    # heartbeat counts at its arrival and followers send no NOT_LEADER answers (the runs of
    # older versions, step for step). Never drawn from the seed: a campaign chooses it.
    transit_max_ms: int = 0
    # the longest of the long delays (drawn from 20 ms up to it; --long-delay-max-ms): 300 by
    # default, as ever. Longer ones stand for TCP retransmissions on a lossy host (seconds):
    # only a heartbeat reply longer on the way than 1000 - 600 ms (the timeout less the
    # lease) plus transit_max_ms makes the credit start a lease before its send time, so
    # only then does a broker that ignored credit_behind_ms keep a lease too long. Not drawn.
    long_delay_max_ms: int = LONG_DELAY_MAX_MS
    # --check-lease: the invariant "a master's lease ends by the election of a newer epoch"
    # (ClusterChecker.check_lease). Opt-in (the default suite runs it on the late-heartbeat
    # seeds): it found seed 45 (a heartbeat answered between the leader's election decision
    # and its apply renewed the old master's lease), fixed since (leader_core.lease_held)
    check_lease: bool = False

    @classmethod
    def from_seed(cls, seed: int, duration_ms: int, quorum: str = "all-ack", *,
                  partial: bool = False, disk: str = "model", sets: int | None = None,
                  replicas: int | None = None, only_faults: Iterable[int] | None = None,
                  noise: bool = True, torn_writes: bool = True,
                  transit_max_ms: int = 0,
                  long_delay_max_ms: int = LONG_DELAY_MAX_MS,
                  check_lease: bool = False) -> ClusterOptions:
        """The seed's run, or (with only_faults, noise, torn_writes) a smaller one: the draws
        here are the same either way, the probabilities turned off are zeroed afterwards."""
        # the topology has its own stream: the fault draws below are those of older versions
        shape = random.Random(seed ^ 0x5E75)
        set_count = sets or (2 if shape.random() < TWO_SETS_PROBABILITY else 1)
        if not 1 <= set_count <= len(SET_NAMES):
            raise ValueError(f"--sets must be 1..{len(SET_NAMES)}, not {set_count}")
        if replicas is not None and replicas not in REPLICAS:
            raise ValueError(f"--replicas must be one of {REPLICAS}, not {replicas}")
        if not 0 <= transit_max_ms < HEARTBEAT_TIMEOUT_MS:  # as controller/config.py checks
            raise ValueError(f"--heartbeat-transit-max-ms must be at least 0 and below the "
                             f"heartbeat timeout ({HEARTBEAT_TIMEOUT_MS}), not {transit_max_ms}")
        if long_delay_max_ms < LONG_DELAY_MIN_MS:
            raise ValueError(f"--long-delay-max-ms must be at least {LONG_DELAY_MIN_MS}, not "
                             f"{long_delay_max_ms}")
        sizes = tuple(replicas or shape.choice(REPLICAS) for _ in range(set_count))
        rng = random.Random(seed ^ 0xC1A5)
        drawn = cls(seed=seed, duration_ms=duration_ms,
                   drop_probability=rng.choice((0.0, 0.01, 0.05)),
                   duplicate_probability=rng.choice((0.0, 0.05)),
                   long_delay_probability=rng.choice((0.0, 0.05, 0.2)),
                   partition_probability=rng.choice((0.0, 0.3, 0.5)),
                   crash_probability=rng.choice((0.0, 0.3, 0.5)),
                   torn_write_probability=rng.choice((0.0, 0.5)),
                   transfer_batch_bytes=rng.choice((24, 40, 4096)),
                   put_period_ms=rng.choice((5, 20, 50)),
                   disk_delay_ms=rng.choice((0, 1, 5)), quorum=quorum, partial=partial,
                   bit_flip_probability=rng.choice((0.0, 0.5)),
                   fsync_failure_probability=rng.choice((0.0, 0.0, 0.002)), disk=disk,
                   replicas=sizes, forced_sets=sets, forced_replicas=replicas,
                   transit_max_ms=transit_max_ms, long_delay_max_ms=long_delay_max_ms,
                   check_lease=check_lease)
        return drawn.smaller(only_faults=only_faults, noise=noise, torn_writes=torn_writes)

    def smaller(self, *, only_faults: Iterable[int] | None, noise: bool, torn_writes: bool
                ) -> ClusterOptions:
        """These options with faults left out (see the fields `only_faults`, `noise`,
        `torn_writes`); from the seed's own probabilities, never from a smaller run's."""
        changes: dict[str, Any] = {
            "only_faults": None if only_faults is None else frozenset(only_faults),
            "noise": noise, "torn_writes": torn_writes}
        if not noise:
            changes.update(drop_probability=0.0, duplicate_probability=0.0,
                           long_delay_probability=0.0)
        if not torn_writes:
            changes.update(torn_write_probability=0.0, bit_flip_probability=0.0)
        assert self.noise and self.torn_writes, "smaller() starts from the seed's options"
        return dataclasses.replace(self, **changes)

    def replay_command(self) -> str:
        quorum = "" if self.quorum == "all-ack" else f" --quorum {self.quorum}"
        partial = " --partial" if self.partial else ""
        disk = "" if self.disk == "model" else f" --disk {self.disk}"
        sets = "" if self.forced_sets is None else f" --sets {self.forced_sets}"
        replicas = "" if self.forced_replicas is None else f" --replicas {self.forced_replicas}"
        transit = ("" if not self.transit_max_ms
                   else f" --heartbeat-transit-max-ms {self.transit_max_ms}")
        if self.long_delay_max_ms != LONG_DELAY_MAX_MS:
            transit += f" --long-delay-max-ms {self.long_delay_max_ms}"
        if self.check_lease:
            transit += " --check-lease"
        smaller = ""
        if self.only_faults is not None:
            smaller += f" --only-faults {format_ordinals(self.only_faults)}"
        smaller += ("" if self.noise else " --no-noise") + (
            "" if self.torn_writes else " --no-torn-writes")
        return (f"python3 build.py sim --cluster --seed {self.seed} "
                f"--duration-ms {self.duration_ms}{quorum}{partial}{disk}{sets}{replicas}"
                f"{transit}{smaller} --trace")


    def minimise_hint(self) -> str:
        """The failure message's last line: how to minimise this run (if the seed's own)."""
        if self.only_faults is not None or not self.noise or not self.torn_writes:
            return ""
        command = self.replay_command().removesuffix(" --trace")
        return f"\n  minimise: {command} --minimise"


def format_ordinals(ordinals: Iterable[int]) -> str:
    """--only-faults' value: "3,7", or "none" for no fault at all."""
    return ",".join(map(str, sorted(ordinals))) or "none"


def parse_ordinals(text: str) -> frozenset[int]:
    """--only-faults "3,7" (or "none"): fault ordinals, counted from 1."""
    if text.strip().lower() == "none":
        return frozenset()
    try:
        ordinals = frozenset(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--only-faults takes fault ordinals like 3,7 (or none), not {text!r}") from None
    if not ordinals or min(ordinals) < 1:
        raise argparse.ArgumentTypeError(
            f"--only-faults takes fault ordinals from 1 on (or none), not {text!r}")
    return ordinals


def make_record(msg_id: int) -> bytes:
    digest = hashlib.blake2b(msg_id.to_bytes(8, "big"), digest_size=8).digest()
    return struct.pack(">Q", msg_id) + digest


# -- the disk model ---------------------------------------------------------------------------
class SimLog:
    """A MODEL of one broker's store (not storage_engine: see the module docstring)."""

    def __init__(self) -> None:
        self.data = bytearray()
        self.synced = 0
        self.epochs: list[EpochEntry] = []  # durable at once (the epoch file fsyncs)
        self.confirm = 0
        self.confirm_durable = 0  # what a restart finds (checkpoint): at most `synced`
        self.version = 0  # +1 whenever bytes are cut (truncation, crash): checks restart

    @property
    def end(self) -> int:
        return len(self.data)

    def append(self, position: int, data: bytes) -> None:
        assert position == self.end, (position, self.end)
        self.data += data

    def sync(self) -> None:
        self.synced = self.end
        self.confirm_durable = min(self.confirm, self.synced)

    def truncate(self, position: int) -> None:
        assert position >= self.confirm or position >= self.end, (position, self.confirm)
        del self.data[position:]
        self.version += 1
        self.synced = min(self.synced, position)
        self.epochs = [e for e in self.epochs if e.start_log_position < position]
        self.confirm = min(self.confirm, position)
        self.confirm_durable = min(self.confirm_durable, position)

    def set_confirm(self, position: int) -> None:
        self.confirm = max(self.confirm, min(position, self.end))

    def crash(self, rng: random.Random, torn_probability: float) -> None:
        keep = self.synced
        if self.end > self.synced and rng.random() < torn_probability:
            keep = rng.randint(self.synced, self.end)  # a torn write: a random prefix stays
        del self.data[keep:]
        self.version += 1
        self.synced = keep
        self.epochs = [e for e in self.epochs if e.start_log_position <= keep]
        self.confirm = min(self.confirm_durable, keep)

    def complete_end(self) -> int:
        return self.end - self.end % RECORD_BYTES

    def record_end_at(self, position: int) -> int | None:
        """Where the record holding the byte at `position` ends (whole or not)."""
        return position - position % RECORD_BYTES + RECORD_BYTES

    # the interface EngineLog shares (tests/sim/engine_log.py)
    segment_size_bytes = 1 << 30

    def append_record(self, record: bytes) -> tuple[int, int]:
        start = self.end
        self.append(start, record)
        return start, self.end

    def append_epoch(self, entry: EpochEntry) -> None:
        self.epochs.append(entry)

    def cut_tail(self, position: int) -> None:
        assert position <= self.complete_end(), (position, self.complete_end())
        if position < self.end:
            self.confirm = min(self.confirm, position)
            self.truncate(position)

    def dispatch(self) -> None:
        pass

    def checkpoint(self) -> None:
        pass

    def read(self, start: int, size: int) -> bytes:
        return bytes(self.data[start:start + size])

    def read_range(self, start: int, end: int) -> bytes:
        return bytes(self.data[start:end])

    def record_body(self, position: int) -> bytes | None:
        return bytes(self.data[position:position + RECORD_BYTES]) or None

    def visible_end(self) -> int:
        return 0  # no ConsumeQueue here: the engine's is checked with --disk engine

    def read_records(self, queue_offset: int, count_max: int) -> list[tuple[int, int, bytes]]:
        """A consumer's pull: whole records from the `queue_offset`-th on, below confirm
        (record k sits at k * RECORD_BYTES: the model's log holds nothing else)."""
        last = min(self.confirm, self.end) // RECORD_BYTES
        return [(k * RECORD_BYTES, (k + 1) * RECORD_BYTES,
                 bytes(self.data[k * RECORD_BYTES:(k + 1) * RECORD_BYTES]))
                for k in range(queue_offset, min(last, queue_offset + count_max))]


# -- controllers ------------------------------------------------------------------------------
class SimController:
    """One controller process: the real Raft core, state machine, liveness table, election
    policy and leader core (controller/leader_core.py: heartbeat answers, SyncStateSet
    refusals, the scan's decision); proposing and answering, as controller/node.py does."""

    def __init__(self, sim: ClusterSim, node_id: int) -> None:
        self.sim = sim
        self.node_id = node_id
        self.storage = MemoryRaftStorage()
        self.incarnation = 0
        self.alive = False
        self.start()

    def start(self) -> None:
        sim = self.sim
        persisted = self.storage.load()
        config = RaftConfig(node_id=self.node_id, voter_ids=CONTROLLERS,
                            election_timeout_ticks=10, heartbeat_interval_ticks=1)
        self.raft = RaftNode(config, random.Random(sim.rng.getrandbits(32)),
                             hard_state=persisted.hard_state, snapshot=persisted.snapshot,
                             entries=persisted.entries)
        self.state = ControllerState()
        self.live = LiveTable(heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS, brokers_max=16)
        self.pending: dict[int, tuple[int, Callable[[Any], None]]] = {}
        self.leader_since_ms: int | None = None
        self.scan_woken = False
        for set_name in sim.set_names:  # the state is rebuilt from the log
            sim.checker.controller_epoch.pop((self.node_id, set_name), None)
        self.incarnation += 1
        # This process's clock id, named in heartbeat replies (node.py: random per process);
        # from the node id and the incarnation here, so no draw of the seed's streams moves:
        # an echo of an earlier incarnation's clock is not one of this process's
        self.clock_id = self.node_id << 16 | self.incarnation
        # (set, broker id) -> when its last heartbeat arrived: the arrival-only view, which
        # tells an election that the credit brought forward (ClusterSim.credit_stats)
        self.arrived_ms: dict[tuple[str, int], int] = {}
        # set -> (master epoch, master id) from a scan's decision until its election's
        # outcome (watchdog.py `_election_holds`): heartbeats get no role meanwhile
        self.election_holds: dict[str, tuple[int, int | None]] = {}
        self.alive = True
        sim.every(TICK_MS, self, self.tick)
        sim.every(SCAN_MS, self, self.scan)

    def crash(self) -> None:
        self.alive = False
        self.incarnation += 1

    def tick(self) -> None:
        self.raft.tick()
        self.drain()

    def on_raft(self, message: Message) -> None:
        self.raft.step(message)
        self.drain()

    def drain(self) -> None:
        raft = self.raft
        while raft.has_ready():
            ready = raft.ready()
            self.storage.save(snapshot=ready.snapshot, entries=ready.entries,
                              hard_state=ready.hard_state)
            for message in ready.messages:
                self.sim.send(f"c{message.from_id}", f"c{message.to_id}",
                              ("raft", message))
            for entry in ready.committed:
                self.apply(entry.entry_index, entry.term, entry.kind, entry.data)
            raft.advance(ready)
        if raft.role is Role.LEADER and self.leader_since_ms is None:
            self.leader_since_ms = self.sim.now_ms
        elif raft.role is not Role.LEADER:
            self.leader_since_ms = None
            for _, (_, reply) in list(self.pending.items()):
                reply(None)
            self.pending.clear()

    def apply(self, index: int, term: int, kind: EntryKind, data: bytes) -> None:
        result = None
        if kind is EntryKind.NORMAL:
            command = decode_command(data)
            set_name = getattr(command, "broker_name", None)
            before = None if set_name is None else self.state.replica_info(set_name)
            result = self.state.apply(command)
            if set_name is not None:
                after = self.state.replica_info(set_name)
                self.sim.checker.on_controller_apply(self.node_id, command, before, after)
        waiting = self.pending.pop(index, None)
        if waiting is not None:
            proposed_term, reply = waiting
            reply(result if proposed_term == term else None)

    def propose(self, command: Command, reply: Callable[[Any], None]) -> None:
        result = self.raft.propose(encode_command(command))
        if result.status is not ProposeStatus.ACCEPTED:
            reply(None)
            return
        self.pending[result.entry_index] = (result.term, reply)
        self.drain()

    def wake_scan(self) -> None:
        """watchdog.py sets its scan loop's wake-up event when a heartbeat's answer asks for it
        (leader_core Wake: ELECT, elect now; PROBE, probe the master then scan; no probes
        here, so both scan): the scan runs at once, after this request, once however many
        heartbeats woke it."""
        if not self.scan_woken:
            self.scan_woken = True
            self.sim.later(0, self, self.woken_scan)

    def woken_scan(self) -> None:
        self.scan_woken = False
        self.scan()

    def scan(self) -> None:
        if self.raft.role is not Role.LEADER or self.leader_since_ms is None:
            self.election_holds.clear()  # (a proposal's outcome may never come back)
            return
        now = self.sim.now_ms
        self.live.expire(now)
        for set_name, (epoch, _) in list(self.election_holds.items()):
            replica = self.state.replica_info(set_name)
            if replica is None or replica.master_epoch != epoch:
                del self.election_holds[set_name]  # applied: the state says the rest
        for set_name in self.sim.set_names:
            replica = self.state.replica_info(set_name)
            if replica is None:
                continue
            decision = scan_decision(replica, self.live, now,
                                     leader_since_ms=self.leader_since_ms,
                                     heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
                                     unclean_enabled=False)
            if decision is not None:
                self.sim.trace(f"c{self.node_id} elects {decision.broker_id} in {set_name} "
                               f"(epoch {replica.master_epoch} -> {replica.master_epoch + 1})")
                master = replica.master_broker_id
                arrived = self.arrived_ms.get((set_name, master or 0))
                if (master is not None and arrived is not None
                        and now - arrived < HEARTBEAT_TIMEOUT_MS
                        and master not in self.live.alive(replica, now)):
                    # heard within the timeout by arrival, dead by its credited heartbeats
                    self.sim.credit_stats["elections_credited"] += 1
                self.election_holds[set_name] = (replica.master_epoch,
                                                 replica.master_broker_id)

                def released(result: Any, set_name: str = set_name) -> None:
                    self.election_holds.pop(set_name, None)
                self.propose(ElectMaster.decided_on(replica, decision.broker_id), released)

    def credit_ms(self, heartbeat: BrokerHeartbeat, arrived_ms: int) -> int:
        """When `heartbeat` counts as heard (handlers.py `_credit_ms`: the real
        liveness.heartbeat_credit_ms, with this process's clock id)."""
        return heartbeat_credit_ms(heartbeat, arrived_ms, clock=self.clock_id,
                                   transit_max_ms=self.sim.options.transit_max_ms)

    def on_request(self, src: str, request_id: int, kind: str, body: Any) -> None:
        now = self.sim.now_ms
        transit_on = self.sim.options.transit_max_ms > 0
        if kind == "heartbeat":  # every controller records it (handlers.py `handle`)
            credited_ms = self.live.heard(body, now, clock=self.clock_id,
                                          transit_max_ms=self.sim.options.transit_max_ms)
            if credited_ms < now:
                self.sim.credit_stats["heartbeats_credited_late"] += 1
            self.arrived_ms[(body.broker_name, body.broker_id)] = now
        if self.raft.role is not Role.LEADER:
            # NOT_LEADER: the broker tries every controller anyway. node.py answers it, with
            # its clock (the echo makes a follower's record count too); only with the credit
            # on, so the runs without it keep their draws
            if kind == "heartbeat" and transit_on:
                self.sim.send(f"c{self.node_id}", src, ("reply", request_id, HeartbeatReply(
                    "NOT_LEADER", None, controller_ms=now, controller_clock=self.clock_id)))
            return

        def answer(reply: Any) -> None:
            self.sim.send(f"c{self.node_id}", src, ("reply", request_id, reply))

        if kind == "register":  # body: the broker's set
            self.propose(ApplyBrokerId(CLUSTER, body, src),
                         lambda r: answer(None if r is None else r.broker_id))
        elif kind == "heartbeat":
            replica = self.state.replica_info(body.broker_name)
            heard = answer_heartbeat(
                replica, body,  # (no operator elections here)
                lease_held=(not state_current(self.raft.log, self.raft.term)
                            or (replica is not None
                                and lease_held(self.election_holds, replica, body.broker_id))),
                master_silent_ms=(None if replica is None else
                                  self.live.silent_ms(replica, replica.master_broker_id, now)),
                heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS)
            if heard.status != "OK":
                return  # (node.py answers BROKER_NOT_REGISTERED; the broker registers anyway)
            if heard.wake is not Wake.NONE and SCAN_ON_WAKE:
                self.wake_scan()
            answer(HeartbeatReply("OK", None, heard.role,
                                  heartbeat_timeout_ms=HEARTBEAT_TIMEOUT_MS,
                                  master_silent=heard.master_silent,
                                  controller_ms=now, controller_clock=self.clock_id,
                                  credit_behind_ms=now - self.credit_ms(body, now)))
        elif kind == "alter_sss":
            replica = self.state.replica_info(body.broker_name)
            alive = self.live.alive(replica, now) if replica else {}
            refusal = refuse_sync_state_set(replica, body.sync_state_set, alive)
            if refusal is not None:
                answer((refusal, None))
                return
            self.propose(AlterSyncStateSet(body.broker_name, body.master_broker_id,
                                           body.master_epoch, body.sync_state_set,
                                           body.sync_state_set_epoch),
                         lambda r: answer(None if r is None else (r.status, r.replica)))
        elif kind == "replica_info":  # body: the set's name (a reader's route)
            answer(("OK", self.state.replica_info(body)))


# -- brokers ----------------------------------------------------------------------------------
@dataclasses.dataclass(slots=True)
class _Put:
    request_id: int
    src: str
    msg_id: int
    start: int
    end: int
    need: int
    deadline_ms: int
    durable: bool = False


class SimBroker:
    """One broker process: the real role, master, slave, take-over and put cores, driven by
    events instead of ha/broker's threads; the disk is `SimLog` (a model) or `EngineLog`."""

    def __init__(self, sim: ClusterSim, name: str, set_name: str, replicas: int) -> None:
        self.sim = sim
        self.name = name
        self.set_name = set_name
        self.replicas = replicas  # brokers in this set (the quorum rule's total)
        options = sim.options
        self.log: SimLog | EngineLog = SimLog()
        if options.disk == "engine":
            self.log = EngineLog(name, random.Random(sim.rng.getrandbits(32)), SimDiskFaults(
                torn_write_probability=options.torn_write_probability,
                bit_flip_probability=options.bit_flip_probability,
                sync_failure_probability=options.fsync_failure_probability),
                lambda: sim.now_ms,
                sync_failure_allowed=lambda: sim.fsync_failure_drawn(name))
        self.incarnation = 0
        self.alive = False
        self.start()

    def start(self) -> None:
        self.broker_id: int | None = None
        self.role = RoleCore(broker_name=self.set_name, runtime_roles=True,
                             master_lease_ms=MASTER_LEASE_MS)
        self.master: MasterReplication | None = None
        self.slave: SlaveReplication | None = None
        self.master_of: str | None = None  # the broker this slave follows
        self.fenced = True
        self.puts: list[_Put] = []
        self.requests: dict[int, str] = {}
        self.links: dict[int, str] = {}  # as master: link id -> slave name
        self.link_id: int | None = None  # as slave: the link to the master
        self.confirm_seen = self.log.confirm
        # per controller: (controller_ms, controller_clock, when its reply came), echoed in
        # the next heartbeat to it (ha/broker/controller_link.py `_echoes`); a restarted
        # broker has none
        self.echoes: dict[str, tuple[int, int, int]] = {}
        self.incarnation += 1
        self.alive = True
        self.sim.every(HEARTBEAT_MS, self, self.heartbeat)
        self.sim.every(20, self, self.tick)
        if self.sim.options.disk == "engine":
            self.sim.every(CHECKPOINT_MS, self, self.log.checkpoint)

    def crash(self) -> None:
        self.alive = False
        self.incarnation += 1
        self.sim.checker.leases.pop(self.name, None)  # a stopped process acks nothing
        self.log.crash(self.sim.rng, self.sim.options.torn_write_probability)
        self.master = None
        self.slave = None

    # controller link
    def heartbeat(self) -> None:
        if self.broker_id is None:
            self.call_all("register", self.set_name)
            return
        last = self.log.epochs[-1].epoch if self.log.epochs else 0
        lost = 0
        # as ha/broker/replication.py master_unreachable_epoch: no link in TRANSFER
        if (self.slave is not None and self.slave.state is not SlaveState.TRANSFER
                and self.role.current is not None):
            lost = self.role.current.master_epoch
        body = BrokerHeartbeat(CLUSTER, self.set_name, self.broker_id, self.name, last,
                               self.log.end, self.log.confirm, master_unreachable_epoch=lost,
                               master_epoch_abandoned=self.role.abandoned_epoch)
        self.call_all("heartbeat", body)
        if self.master is not None:
            request = self.role.proposal(self.master.sync_state_set,
                                         self.master.accepted_sync_state_set,
                                         pending=self.master.proposal_pending())
            if request is not None:
                self.master.proposing(request.sync_state_set, request.sync_state_set_epoch)
                self.call_all("alter_sss", request)

    def call_all(self, kind: str, body: Any) -> None:
        request_id = self.sim.next_id()
        self.requests[request_id] = kind
        for node_id in CONTROLLERS:
            controller = f"c{node_id}"
            self.sim.send(self.name, controller,
                          ("request", request_id, kind, self.with_echo(kind, body, controller),
                           self.sim.now_ms))

    def with_echo(self, kind: str, body: Any, controller: str) -> Any:
        """A heartbeat for `controller` echoes the clock of its last reply (controller_link.py
        `_with_echo`: the body is per controller); anything else, or no reply yet: `body`."""
        echo = self.echoes.get(controller) if kind == "heartbeat" else None
        if echo is None:
            return body
        controller_ms, clock, received_ms = echo
        return dataclasses.replace(body, echo_controller_ms=controller_ms,
                                   echo_controller_clock=clock,
                                   echo_age_ms=max(0, self.sim.now_ms - received_ms))

    def on_reply(self, src: str, request_id: int, reply: Any) -> None:
        kind = self.requests.get(request_id)
        if kind is None or reply is None:
            return
        if kind == "register":
            self.broker_id = reply
        elif kind == "heartbeat":
            assert isinstance(reply, HeartbeatReply), reply
            if reply.controller_ms > 0:  # controller_link.py `_on_done`: whatever its status
                self.echoes[src] = (reply.controller_ms, reply.controller_clock,
                                    self.sim.now_ms)
            if reply.status != "OK":
                return
            change = reply.role
            if change is None:  # no role: the leader lets this master's lease lapse
                return
            sent_ms = self.sim.request_sent_ms.get(request_id, self.sim.now_ms)
            # a late heartbeat: the controller counted it as heard credit_behind_ms before it
            # arrived, so the lease starts that much before its send time (as _on_reply)
            behind_ms = max(0, reply.credit_behind_ms)
            until = self.role.confirm(change, sent_ms - behind_ms,
                                      reply.heartbeat_timeout_ms)
            if until is not None and behind_ms > 0:
                self.sim.credit_stats["leases_shortened"] += 1
            if (until is not None and self.master is not None
                    and self.master.master_epoch == change.master_epoch):
                self.master.renew_lease(until)
                self.sim.checker.on_lease(self, change.master_epoch, until)
            if self.role.offer(change):
                self.apply_role(change)
        elif kind == "alter_sss":
            status, replica = reply
            if status == "OK" and replica is not None:
                self.adopt(replica.sync_state_set, replica.sync_state_set_epoch)
        self.after()

    def adopt(self, members: tuple[int, ...], epoch: int) -> None:
        if self.master is not None and self.role.adopt(members, epoch):
            self.apply_master(self.master.accept_sync_state_set(members, epoch))

    # role changes (roles.py / replication.py, re-modelled; the decisions are RoleCore's)
    def apply_role(self, change: RoleChange) -> None:
        plan = self.role.plan(change)
        self.sim.trace(f"{self.name} {plan.action.value} epoch {change.master_epoch} "
                       f"sss {change.sync_state_set}@{change.sync_state_set_epoch}")
        if plan.action is RoleAction.ADOPT:
            self.adopt(change.sync_state_set, change.sync_state_set_epoch)
            self.role.applied(plan)
            return
        self.role.leaving()
        self.fenced = True
        self.fail_puts()
        self.master = None
        self.close_links()
        if plan.action is RoleAction.TAKE_OVER:
            self.take_over(change)
        elif plan.action is RoleAction.FOLLOW:
            self.follow(change)
        self.role.applied(plan)

    def take_over(self, change: RoleChange) -> None:
        """The take-over sequence of ha/replication/takeover_core.py, carried out as replication.py
        does (on SimLog or EngineLog)."""
        log = self.log
        plan = takeover_core.plan_take_over(
            TakeOverLog(log.end, log.complete_end(), tuple(log.epochs)), change.master_epoch)
        assert plan.refusal is None, plan.refusal  # the controller's epochs only grow
        for effect in plan.effects:
            if isinstance(effect, CutTail):
                log.cut_tail(effect.log_position)
            elif isinstance(effect, TakeOverConfirmTo):
                log.set_confirm(effect.log_position)
            elif isinstance(effect, ReplayState):
                pass  # the simulated records hold no state (no offsets topic)
            elif isinstance(effect, TakeOverAppendEpoch):
                log.append_epoch(EpochEntry(effect.epoch, effect.start_log_position))
            elif isinstance(effect, FlushLog):
                log.sync()
            elif isinstance(effect, OpenTerm):
                settings = MasterSettings(
                    quorum=quorum_settings(self.sim.options.quorum, self.replicas),
                    transfer_batch_bytes=self.sim.options.transfer_batch_bytes,
                    heartbeat_interval_ms=100, housekeeping_interval_ms=600,
                    slave_not_catchup_max_ms=400, segment_size_bytes=log.segment_size_bytes)
                self.master = MasterReplication(
                    settings, broker_id=change.broker_id, master_epoch=effect.master_epoch,
                    endpoint=self.name, master_log_position=log.synced,
                    confirm_log_position=log.confirm, now_ms=self.sim.now_ms,
                    accepted_sync_state_set=change.sync_state_set,
                    accepted_sync_state_set_epoch=change.sync_state_set_epoch,
                    lease_until_ms=self.role.lease_until_ms(change.master_epoch))
                self.sim.checker.on_lease(self, change.master_epoch,
                                          self.role.lease_until_ms(change.master_epoch))
            elif isinstance(effect, LiftFence):
                self.fenced = False
            else:
                raise TypeError(effect)
        self.sim.checker.on_serving(self, change.master_epoch)

    def follow(self, change: RoleChange) -> None:
        self.slave = SlaveReplication(broker_id=change.broker_id, heartbeat_interval_ms=100,
                                      housekeeping_interval_ms=600, fsync_before_ack=True,
                                      master_epoch_min=change.master_epoch)
        self.master_of = change.master_address
        self.link_id = None

    # HA links (TCP streams over the simulated network)
    def tick(self) -> None:
        now = self.sim.now_ms
        if self.slave is not None:
            if self.link_id is None and self.master_of is not None:
                self.link_id = self.sim.open_link(self.name, self.master_of)
                log = self.log
                self.apply_slave(self.slave.link_up(LocalLog(
                    0, log.end, log.confirm, tuple(log.epochs), log.segment_size_bytes),
                    now_ms=now))
            else:
                self.apply_slave(self.slave.on_tick(now_ms=now))
        if self.master is not None:
            self.apply_master(self.master.on_tick(self.master_log(), now_ms=now))
        self.after()

    def master_log(self) -> MasterLog:
        return MasterLog(0, self.log.end, tuple(self.log.epochs))

    def on_link_frame(self, link_id: int, src: str, frame: Frame) -> None:
        now = self.sim.now_ms
        if self.master is not None and not isinstance(frame, (MasterHello, Transfer)):
            if link_id not in self.links:
                self.links[link_id] = src
                self.apply_master(self.master.link_opened(link_id, now_ms=now))
            self.apply_master(self.master.on_frame(link_id, frame, self.master_log(),
                                                   now_ms=now))
        elif self.slave is not None and link_id == self.link_id:
            if isinstance(frame, Transfer) and frame.data:
                self.sim.checker.on_transfer(self, frame)
            self.apply_slave(self.slave.on_frame(frame, now_ms=now))
        else:
            self.sim.close_link(link_id)
        self.after()

    def on_link_closed(self, link_id: int) -> None:
        if self.master is not None and link_id in self.links:
            self.apply_master(self.master.link_closed(link_id, now_ms=self.sim.now_ms))
            self.links.pop(link_id, None)
        if link_id == self.link_id:
            self.link_id = None
            if self.slave is not None:
                self.slave.link_down()
        self.after()

    def close_links(self) -> None:
        for link_id in list(self.links):
            self.sim.close_link(link_id)
        self.links.clear()
        if self.link_id is not None:
            self.sim.close_link(self.link_id)
            self.link_id = None
        self.slave = None
        self.master_of = None

    def apply_master(self, effects: list[Any]) -> None:
        for effect in effects:
            if isinstance(effect, ConfirmTo):
                self.log.set_confirm(effect.log_position)
            elif isinstance(effect, MasterCloseLink):
                self.sim.close_link(effect.link_id)
                self.links.pop(effect.link_id, None)
            elif isinstance(effect, MasterSendFrame):
                self.sim.link_send(effect.link_id, self.name, effect.frame)
            elif isinstance(effect, SyncStateSetChanged):
                pass  # proposed with the next heartbeat (roles.py wakes its thread)
            else:
                raise TypeError(effect)

    def pump(self) -> None:
        """The master's senders: ship until every link waits."""
        master = self.master
        if master is None:
            return
        for link_id in list(self.links):
            for _ in range(64):
                effect = master.next_send(link_id, self.master_log(), now_ms=self.sim.now_ms)
                if isinstance(effect, Wait):
                    break
                if isinstance(effect, SendLog):
                    start = effect.transfer.log_position
                    data = self.log.read(start, effect.size_bytes)
                    frame: Frame = dataclasses.replace(effect.transfer, data=data)
                elif isinstance(effect, MasterSendFrame):
                    frame = effect.frame
                elif isinstance(effect, SendMetadata):
                    continue
                else:
                    raise TypeError(effect)
                self.sim.link_send(link_id, self.name, frame)

    def apply_slave(self, effects: list[Any]) -> None:
        log = self.log
        for effect in effects:
            if isinstance(effect, AppendLog):
                log.append(effect.log_position, bytes(effect.data))
                if effect.fsync:
                    log.sync()
            elif isinstance(effect, SlaveSendFrame):
                if self.link_id is not None:
                    self.sim.link_send(self.link_id, self.name, effect.frame)
            elif isinstance(effect, SetConfirm):
                log.set_confirm(effect.log_position)
            elif isinstance(effect, AppendEpoch):
                log.append_epoch(EpochEntry(effect.epoch, effect.start_log_position))
            elif isinstance(effect, Truncate):
                self.sim.trace(f"{self.name} truncates {log.end} -> {effect.log_position}")
                log.truncate(effect.log_position)
            elif isinstance(effect, RestartLogAt):
                raise TypeError("segments are never deleted in the simulation")
            elif isinstance(effect, SlaveCloseLink):
                if self.link_id is not None:
                    self.sim.close_link(self.link_id)
                    self.link_id = None
                    if self.slave is not None:
                        self.slave.link_down()
            elif isinstance(effect, DispatchLog):
                try:
                    log.dispatch()
                except ReplicatedDataError as err:  # slave_service.py refuses the link
                    self.sim.fail(f"{self.name} refused its master's bytes: {err}",
                                  kind="refused-master-bytes")
            elif isinstance(effect, (ApplyMetadata, MasterKnown)):
                pass
            else:
                raise TypeError(effect)

    # reads: what a consumer's pull gets (ha/broker serves store.get_messages: never past the
    # confirm position, on a master or on a slave)
    def on_read(self, src: str, request_id: int, queue_offset: int, count_max: int) -> None:
        try:
            records = self.log.read_records(queue_offset, count_max)
        except CorruptRecordError as err:  # the engine met bytes that are not a whole record
            self.sim.fail(f"{self.name} served a corrupt record to a reader: {err}",
                          kind="read-corrupt")
        check_served(self, records)
        self.sim.send(self.name, src, ("read_reply", request_id, queue_offset, records))

    # puts (ha/replication/put_core.py decides; this is the event-driven shell of
    # replication.py's put)
    def on_put(self, src: str, request_id: int, msg_id: int) -> None:
        master = self.master
        admission = put_core.admit(fenced=self.fenced, following=self.slave is not None,
                                   serving=master is not None, runtime_roles=True)
        if admission.refused:
            self.sim.send(self.name, src, ("put_reply", request_id, "NOT_MASTER", None))
            return
        assert master is not None and admission is put_core.Admission.REPLICATE, admission
        plan = master.plan_put(self.log.end)
        refused = put_core.plan_status(plan)
        if refused is not None:
            self.sim.send(self.name, src, ("put_reply", request_id, refused.name, None))
            return
        start, end = self.log.append_record(make_record(msg_id))
        put = _Put(request_id, src, msg_id, start, end, plan.need,
                   self.sim.now_ms + PUT_TIMEOUT_MS)
        self.puts.append(put)
        self.sim.later(self.sim.options.disk_delay_ms, self, self.flushed)
        self.after()

    def flushed(self) -> None:
        self.log.sync()
        if self.master is not None:
            self.apply_master(self.master.local_durable(self.log.synced))
        for put in self.puts:
            put.durable = put.durable or self.log.synced >= put.end
        self.after()

    def judge(self, put: _Put, *, stopping: bool = False) -> PutStatus | None:
        """ha/replication/put_core.py on one waiting put: its status now (None: it waits on). One
        deadline covers the flush and the quorum here (replication.py waits up to
        syncFlushTimeout for each)."""
        master, now = self.master, self.sim.now_ms
        deposed = master is None or self.fenced
        expired = now >= put.deadline_ms
        status = put_core.flush_status(put.durable, expired=expired, deposed=deposed)
        if status is not None or not put.durable:
            return status
        progress = (None if master is None
                    else master.put_progress(put.end, put.need, now_ms=now))
        status = put_core.quorum_status(progress, expired=expired,
                                        stopping=stopping or deposed)
        return None if status is None else put_core.answer(status, fenced=deposed)

    def after(self) -> None:
        """After every event: ship, then answer the puts that are decided."""
        if not self.alive:
            return
        self.pump()
        waiting: list[_Put] = []
        for put in self.puts:
            status = self.judge(put)
            if status is None:
                waiting.append(put)
                continue
            if status is PutStatus.PUT_OK:
                assert self.master is not None
                self.sim.checker.on_ack(self, self.master.master_epoch, put.msg_id, put.start)
            self.sim.send(self.name, put.src, ("put_reply", put.request_id, status.name,
                                               put.start))
        self.puts = waiting
        self.sim.checker.check_broker(self)

    def fail_puts(self) -> None:
        """Deposed (fenced already): the master service stops, its waiting puts return."""
        for put in self.puts:
            status = self.judge(put, stopping=True)
            assert status is not None and status is not PutStatus.PUT_OK, status
            self.sim.send(self.name, put.src, ("put_reply", put.request_id, status.name, None))
        self.puts = []


# -- the checker ------------------------------------------------------------------------------
def check_served(broker: SimBroker, records: list[tuple[int, int, bytes]]) -> None:
    """Reads never pass the confirm position: every record a broker hands a reader (master
    or slave) ends at or below its own confirm position, at the moment it serves it."""
    confirm = broker.log.confirm
    for position, end, _ in records:
        if end > confirm:
            broker.sim.fail(f"{broker.name} served the record at log_position {position} "
                            f"ending at {end}, past its confirm position {confirm}",
                            kind="read-past-confirm")


class ClusterChecker:
    """Every invariant is per replica set: its acks, its masters and epochs, its replicas."""

    def __init__(self, sim: ClusterSim) -> None:
        self.sim = sim
        # set -> msg id -> (log position, epoch)
        self.acked: dict[str, dict[int, tuple[int, int]]] = {name: {} for name in sim.sets}
        self.masters: dict[tuple[str, int], str] = {}  # (set, master epoch) -> its broker
        # (set, master epoch) -> incarnation of the broker serving it
        self.opened: dict[tuple[str, int], int] = {}
        self.serving: dict[str, int] = {}  # broker -> epoch it serves (since take-over)
        self.epoch_seen: dict[str, tuple[int, int]] = {}  # broker -> (log version, epoch)
        self.controller_epoch: dict[tuple[int, str], int] = {}  # (node, set) -> master epoch
        self.compared: dict[tuple[str, str], tuple[tuple[int, int], int]] = {}
        self.checked_signature: list[tuple[int, int]] = []
        # the master lease (docs/design.md §5.7): broker -> (set, epoch, lease end) of the term it
        # serves, while its process lives; (set, epoch) -> when a controller first applied
        # the election of that epoch. A lease must end by the election of a newer epoch: the
        # controller elects only once the master is dead by its (credited) heartbeats, and a
        # lease ends before that (controller/liveness.py heartbeat_credit_ms)
        self.leases: dict[str, tuple[str, int, int]] = {}
        self.elected_ms: dict[tuple[str, int], int] = {}

    def fail(self, what: str, *, kind: str) -> None:
        self.sim.fail(what, kind=kind)

    def on_controller_apply(self, node_id: int, command: Command, before: ReplicaInfo | None,
                            after: ReplicaInfo | None) -> None:
        if after is None:
            return
        key = (node_id, after.broker_name)
        if after.master_epoch < self.controller_epoch.get(key, 0):
            self.fail(f"controller {node_id}: master epoch of {after.broker_name} went back to "
                      f"{after.master_epoch}", kind="controller-epoch-back")
        self.controller_epoch[key] = after.master_epoch
        if after.master_epoch > (before.master_epoch if before is not None else 0):
            elected = (after.broker_name, after.master_epoch)
            if elected not in self.elected_ms:
                self.elected_ms[elected] = self.sim.now_ms
                for name, lease in self.leases.items():
                    self.check_lease(name, *lease)
        if (isinstance(command, ElectMaster) and before is not None
                and after.master_epoch > before.master_epoch and before.master_epoch > 0
                and command.new_master_broker_id is not None
                and command.new_master_broker_id not in before.sync_state_set):
            self.fail(f"controller {node_id} elected {command.new_master_broker_id}, not in "
                      f"the SyncStateSet {before.sync_state_set} of {after.broker_name} "
                      f"(epoch {before.master_epoch})", kind="unclean-election")

    def on_lease(self, broker: SimBroker, epoch: int, until_ms: int) -> None:
        """`broker`, serving `epoch`, holds its lease until `until_ms` (renewed or taken
        over with)."""
        held = self.leases.get(broker.name)
        if held is not None and held[1] == epoch:
            until_ms = max(until_ms, held[2])
        self.leases[broker.name] = (broker.set_name, epoch, until_ms)
        self.check_lease(broker.name, broker.set_name, epoch, until_ms)

    def check_lease(self, name: str, set_name: str, epoch: int, until_ms: int) -> None:
        if not self.sim.options.check_lease:
            return
        for (elected_set, elected_epoch), at_ms in self.elected_ms.items():
            if elected_set == set_name and elected_epoch > epoch and at_ms < until_ms:
                self.fail(f"{name}, master of epoch {epoch} of {set_name}, holds its lease "
                          f"until {until_ms} ms, past the election of epoch {elected_epoch} "
                          f"at {at_ms} ms", kind="lease-outlives-election")

    def on_serving(self, broker: SimBroker, epoch: int) -> None:
        known = self.masters.setdefault((broker.set_name, epoch), broker.name)
        if known != broker.name:
            self.fail(f"two masters of epoch {epoch} in {broker.set_name}: {known} and "
                      f"{broker.name}", kind="two-masters")
        # one log per epoch: a restarted process may have lost a tail its slaves hold, so
        # it never serves the epoch its previous incarnation served
        # (ha/replication/role_core.py REELECT)
        opened = self.opened.setdefault((broker.set_name, epoch), broker.incarnation)
        if opened != broker.incarnation:
            self.fail(f"{broker.name} serves epoch {epoch} again after a restart (one log "
                      "per epoch)", kind="epoch-reused")
        self.serving[broker.name] = epoch
        self.check_acked(broker, f"{broker.name} took over epoch {epoch}")

    def on_ack(self, broker: SimBroker, epoch: int, msg_id: int, position: int) -> None:
        self.acked[broker.set_name][msg_id] = (position, epoch)
        self.sim.acks += 1
        top = self.top_master(broker.set_name)
        if top is not None:  # a master of a newer epoch must hold it too, now
            self.check_record(top, msg_id, position, epoch, f"{broker.name} acked it")

    def top_master(self, set_name: str) -> SimBroker | None:
        serving = [b for b in self.sim.set_brokers(set_name)
                   if b.alive and b.master is not None and b.name in self.serving]
        return max(serving, key=lambda b: self.serving[b.name], default=None)

    def on_transfer(self, broker: SimBroker, frame: Transfer) -> None:
        pass

    def check_acked(self, broker: SimBroker, when: str) -> None:
        for msg_id, (position, epoch) in self.acked[broker.set_name].items():
            self.check_record(broker, msg_id, position, epoch, when)

    def check_record(self, broker: SimBroker, msg_id: int, position: int, epoch: int,
                     when: str) -> None:
        held = broker.log.record_body(position) or b""
        if held != make_record(msg_id):
            self.fail(f"ACKNOWLEDGED MESSAGE LOST: message {msg_id} (log_position {position}, "
                      f"acked in epoch {epoch}) lost or changed on {broker.name} of "
                      f"{broker.set_name}, master of "
                      f"epoch {self.serving.get(broker.name)}, when {when}: "
                      f"{held.hex() or 'absent'}", kind="ack-lost")

    def check_broker(self, broker: SimBroker) -> None:
        log = broker.log
        if log.confirm > log.end:
            self.fail(f"{broker.name}: confirm {log.confirm} past its log end {log.end}",
                      kind="confirm-past-end")
        if log.confirm < broker.confirm_seen:
            self.fail(f"{broker.name}: confirm went back {broker.confirm_seen} -> {log.confirm}",
                      kind="confirm-back")
        broker.confirm_seen = log.confirm
        try:
            visible = log.visible_end()
        except CorruptRecordError as err:
            self.fail(f"{broker.name}: the last record a reader can see is corrupt: {err}",
                      kind="read-corrupt")
        if visible > log.confirm:
            self.fail(f"{broker.name}: a reader sees a record ending at {visible}, past the "
                      f"confirm position {log.confirm}", kind="read-past-confirm")
        # The epoch file only grows, except where bytes are cut (fork truncation, a crash
        # that drops the data after an entry): then it restarts from what is left.
        last = log.epochs[-1].epoch if log.epochs else 0
        seen_version, seen_epoch = self.epoch_seen.get(broker.name, (log.version, 0))
        if seen_version == log.version and last < seen_epoch:
            self.fail(f"{broker.name}: epoch went back to {last}", kind="epoch-back")
        self.epoch_seen[broker.name] = (log.version, last)

    def check_all(self) -> None:
        """Replicas agree below the confirm position (incrementally: each pair remembers how
        far it was compared, until either log is cut). Bytes below a confirm position change
        only with a cut, which bumps the log's version: nothing to do while no version and no
        confirm position moved."""
        signature = [(b.log.version, b.log.confirm) for b in self.sim.broker_list]
        if signature == self.checked_signature:
            return
        self.checked_signature = signature
        for a, b in self.sim.pairs:
            below = min(a.log.confirm, b.log.confirm)
            key = (a.name, b.name)
            versions, done = self.compared.get(key, ((-1, -1), 0))
            if versions != (a.log.version, b.log.version):
                done = 0
            if below > done:
                left, right = a.log.read_range(done, below), b.log.read_range(done, below)
                if left != right:
                    if self.whole_record_differs(a, b, done, below, left, right):
                        self.fail(f"{a.name} and {b.name} differ below the confirm position "
                                  f"{below}", kind="replicas-differ")
                    continue  # only a partial record straddling `below`: compare it again
            self.compared[key] = ((a.log.version, b.log.version), max(done, below))

    @staticmethod
    def whole_record_differs(a: SimBroker, b: SimBroker, done: int, below: int, left: bytes,
                             right: bytes) -> bool:
        """Two replicas differ below `below`: in a record that ends at or below it (a broken
        invariant), or only in one that `below` cuts in two? A confirm position may fall
        inside a record (slaves ack what they received, batches cut records), and such a
        partial record is never read (reads stop at the last whole record below confirm) and
        may be cut: by a recovery that drops a partial tail record, by a take-over's CutTail.
        The first differing byte decides: the record holding it, in either log."""
        first = done + next((i for i, (x, y) in enumerate(zip(left, right, strict=False))
                             if x != y), min(len(left), len(right)))
        ends = (a.log.record_end_at(first), b.log.record_end_at(first))
        return any(end is None or end <= below for end in ends)


# -- clients --------------------------------------------------------------------------------
class SimProducer:
    """One producer per replica set: sends a put every put_period_ms to the broker it takes
    for the master; moves to the next broker of the set on NOT_MASTER (and sometimes on
    another failure), as a client that has not refreshed its route yet would."""

    def __init__(self, sim: ClusterSim, name: str, set_name: str) -> None:
        self.sim = sim
        self.name = name
        self.set_name = set_name
        self.target = 0  # index of the broker taken for the master
        self.pending: dict[int, int] = {}  # request id -> msg id

    def produce(self) -> None:
        sim = self.sim
        if sim.now_ms < sim.options.duration_ms + HEAL_MS:
            sim.at(sim.options.put_period_ms, self.produce)
        msg_id, sim.next_msg = sim.next_msg, sim.next_msg + 1
        request_id = sim.next_id()
        self.pending[request_id] = msg_id
        sim.send(self.name, sim.sets[self.set_name][self.target], ("put", request_id, msg_id))

    def on_put_reply(self, request_id: int, status: str, position: int | None) -> None:
        self.pending.pop(request_id, None)
        if status == "NOT_MASTER" or (status != "PUT_OK" and self.sim.rng.random() < 0.3):
            self.target = (self.target + 1) % len(self.sim.sets[self.set_name])


class SimReader:
    """One consumer per replica set, following the routes as the connector does: asks the
    controllers for the set's route (every ROUTE_MS), then pulls the next records by queue
    offset from the master or, as with readFromReplicas, from a member slave. Checks: the
    serving broker never hands out a record past its own confirm position (SimBroker.on_read);
    whatever was read at a queue offset is read the same from every broker later (a read
    that passed the confirm position could be cut by a failover and read differently); the
    records come in log order; and after the run every PUT_OK record of its set is read back,
    byte for byte, at the log_position it was acknowledged at (`read_to_the_end`)."""

    def __init__(self, sim: ClusterSim, name: str, set_name: str) -> None:
        self.sim = sim
        self.name = name
        self.set_name = set_name
        self.route: ReplicaInfo | None = None
        self.route_asked_ms: int | None = None
        # by queue offset: (log_position, end, body, the broker it was first read from)
        self.records: list[tuple[int, int, bytes, str]] = []
        sim.at(READ_MS, self.tick)

    def next_id(self) -> int:
        return -self.sim.next_reader_id()  # apart from the brokers' ids: older runs replay

    def tick(self) -> None:
        sim = self.sim
        if sim.now_ms < sim.options.duration_ms + HEAL_MS + DRAIN_MS:
            sim.at(READ_MS, self.tick)
        if self.route_asked_ms is None or sim.now_ms - self.route_asked_ms >= ROUTE_MS:
            self.route_asked_ms = sim.now_ms
            request_id = self.next_id()
            for node_id in CONTROLLERS:
                sim.send(self.name, f"c{node_id}",
                         ("request", request_id, "replica_info", self.set_name, sim.now_ms))
        route = self.route
        if route is None or not route.brokers:
            return
        rng = sim.reader_rng
        if route.master_address is not None and rng.random() < 0.5:
            target = route.master_address
        else:
            target = rng.choice(route.brokers).broker_address
        offset = len(self.records)  # the next records; sometimes again what it read before
        if self.records and rng.random() < REREAD_PROBABILITY:
            offset = rng.randrange(len(self.records))
        sim.send(self.name, target, ("read", self.next_id(), offset, READ_COUNT_MAX))

    def on_message(self, src: str, payload: tuple[Any, ...]) -> None:
        if payload[0] == "reply":  # a controller's route (None: not the leader's)
            answer = payload[2]
            if answer is None:
                return
            _, replica = answer
            if replica is not None and (self.route is None
                                        or replica.master_epoch >= self.route.master_epoch):
                self.route = replica
        elif payload[0] == "read_reply":
            _, _, queue_offset, records = payload
            self.take(src, queue_offset, records)

    def take(self, src: str, queue_offset: int, records: list[tuple[int, int, bytes]]) -> None:
        for i, (position, end, body) in enumerate(records):
            k = queue_offset + i
            if k < len(self.records):
                known = self.records[k]
                if (known[0], known[2]) != (position, body):
                    self.sim.fail(f"READ CHANGED: {self.name} read queue offset {k} of "
                                  f"{self.set_name} as {body.hex()} at log_position {position} "
                                  f"from {src}, but {known[2].hex()} at {known[0]} from "
                                  f"{known[3]} before", kind="read-changed")
            elif k == len(self.records):
                if self.records and position < self.records[-1][1]:
                    self.sim.fail(f"{self.name} read queue offset {k} at log_position "
                                  f"{position} from {src}, before the end of offset {k - 1} "
                                  f"({self.records[-1][1]}): not in log order",
                                  kind="read-out-of-order")
                self.records.append((position, end, body, src))

    def read_to_the_end(self) -> None:
        """After the run: read the set again from queue offset 0 on the newest master until it
        has nothing more (its confirm position): what was read during the run must read the
        same; then find every PUT_OK record of the set where it was acked."""
        sim = self.sim
        master = sim.checker.top_master(self.set_name)
        if master is None:
            sim.fail(f"{self.set_name}: no master to read from after the run", kind="liveness")
            return
        offset = 0
        while records := master.log.read_records(offset, 256):
            self.take(master.name, offset, records)
            offset += len(records)
        if offset < len(self.records):
            position, _, body, src = self.records[offset]
            sim.fail(f"READ CHANGED: {self.name} read queue offset {offset} of {self.set_name} "
                     f"({body.hex()} at log_position {position}) from {src}, but the master "
                     f"{master.name} has nothing there after the run (confirm "
                     f"{master.log.confirm})", kind="read-changed")
        read = {position: body for position, _, body, _ in self.records}
        for msg_id, (position, epoch) in sim.checker.acked[self.set_name].items():
            if read.get(position) != make_record(msg_id):
                got = read.get(position)
                sim.fail(f"ACKNOWLEDGED MESSAGE NOT READ BACK: message {msg_id} "
                         f"(log_position {position}, acked in epoch {epoch}) of {self.set_name}: "
                         f"{self.name} read {got.hex() if got else 'nothing'} there from "
                         f"{master.name} (confirm {master.log.confirm}, log end "
                         f"{master.log.end})", kind="ack-not-read-back")


# -- the simulation ---------------------------------------------------------------------------
class ClusterSim:
    def __init__(self, options: ClusterOptions, *, trace: bool = False) -> None:
        self.options = options
        self.rng = random.Random(options.seed)
        self.now_ms = 0
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._seq = 0
        self._ids = 0
        self.events = 0
        self.acks = 0
        self.crashes = 0
        self.fsync_failures = 0
        self.partitions = 0
        self.fault_ordinal = 0  # faults drawn so far
        self.faults_injected: list[InjectedFault] = []
        self._print = trace
        self.trace_lines: deque[str] = deque(maxlen=TRACE_KEPT)
        self.cuts: set[tuple[str, str]] = set()
        self.faults_on = True
        self.links: dict[int, tuple[str, str, int]] = {}  # id -> (a, b, deliver-after ms)
        self.request_sent_ms: dict[int, int] = {}
        # what the late-heartbeat credit did (options.transit_max_ms; counted in run's stats
        # only when it is on): heartbeats a controller counted as heard before they arrived,
        # leases a broker started before its heartbeat's send time, and elections whose old
        # master had been heard within the timeout by arrival
        self.credit_stats = dict.fromkeys(
            ("heartbeats_credited_late", "leases_shortened", "elections_credited"), 0)
        # the topology: set name -> its brokers' names (b1, b2, ... across the sets)
        self.set_names = SET_NAMES[:len(options.replicas)]
        self.sets: dict[str, tuple[str, ...]] = {}
        for set_name, size in zip(self.set_names, options.replicas, strict=True):
            first = sum(len(members) for members in self.sets.values()) + 1
            self.sets[set_name] = tuple(f"b{n}" for n in range(first, first + size))
        self.checker = ClusterChecker(self)
        self.controllers = {f"c{n}": SimController(self, n) for n in CONTROLLERS}
        self.brokers = {name: SimBroker(self, name, set_name, len(members))
                        for set_name, members in self.sets.items() for name in members}
        self.broker_list = list(self.brokers.values())
        # replicas of one set, compared below their confirm positions (never across sets)
        self.pairs = [(self.brokers[a], self.brokers[b]) for members in self.sets.values()
                      for i, a in enumerate(members) for b in members[i + 1:]]
        self.next_msg = 1
        # one producer per set ("producer" for the first: the name older seeds' cuts use)
        self.producers = {
            name: SimProducer(self, name, set_name)
            for name, set_name in zip(("producer", "producer-b"), self.set_names, strict=False)}
        for producer in self.producers.values():
            self.at(options.put_period_ms, producer.produce)
        self.at(200, self.fault)
        # one reader per set, on its own random stream (drops, delays, whom it reads)
        self.reader_rng = random.Random(options.seed ^ 0x8EAD)
        self.reader_events = 0
        self._reader_ids = 0
        self.readers = {f"reader-{set_name[-1]}": SimReader(self, f"reader-{set_name[-1]}",
                                                            set_name)
                        for set_name in self.set_names}

    # plumbing
    def fail(self, what: str, *, kind: str) -> None:
        """Raise SimFailure: `kind` is one of VIOLATIONS (what a minimised run must break)."""
        trace = "\n    ".join(self.trace_lines)
        raise SimFailure(f"seed {self.options.seed}: {what} (at {self.now_ms} ms, event "
                         f"{self.events})\n  options: {self.options}\n  last events:\n    "
                         f"{trace}\n  replay: {self.options.replay_command()}"
                         f"{self.options.minimise_hint()}",
                         kind=kind, at_ms=self.now_ms, faults=tuple(self.faults_injected))

    def next_fault(self, what: str, **effect: Any) -> InjectedFault | None:
        """A fault just drawn (the next ordinal), or None if options.only_faults leaves it
        out (see there: its draws are made, its effect is not)."""
        self.fault_ordinal += 1
        fault = InjectedFault(self.fault_ordinal, self.now_ms, what, **effect)
        only = self.options.only_faults
        if only is not None and fault.ordinal not in only:
            self.trace(f"fault {fault.ordinal} left out: {what}")
            return None
        self.faults_injected.append(fault)
        self.trace(f"fault {fault.ordinal}: {what}")
        return fault

    def inject(self, fault: InjectedFault | None) -> None:
        """A partition's or a crash's effect (a failing fsync's is the disk's)."""
        if fault is None:
            return
        if fault.cuts:
            self.cuts.update(fault.cuts)
            self.partitions += 1
            self.at(fault.heal_after_ms, self.heal_some)
        if fault.crash is not None:
            self.crash(fault.crash)

    def trace(self, text: str) -> None:
        line = f"{self.now_ms:>6} ms  {text}"
        self.trace_lines.append(line)
        if self._print:
            print(line)

    def fsync_failure_drawn(self, broker: str) -> bool:
        """The disk of `broker` drew a failing fsync (--disk engine): a fault. Does it fail?"""
        return self.next_fault(f"fsync fails on {broker}") is not None

    def next_id(self) -> int:
        self._ids += 1
        return self._ids

    def next_reader_id(self) -> int:
        self._reader_ids += 1
        return self._reader_ids

    def at(self, delay_ms: int, action: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (self.now_ms + delay_ms, self._seq, action))

    def later(self, delay_ms: int, process: Any, action: Callable[[], None]) -> None:
        """`action` after `delay_ms`, unless `process` crashed meanwhile."""
        incarnation = process.incarnation

        def run() -> None:
            if process.alive and process.incarnation == incarnation:
                action()
        self.at(delay_ms, run)

    def every(self, period_ms: int, process: Any, action: Callable[[], None]) -> None:
        incarnation = process.incarnation

        def run() -> None:
            if process.alive and process.incarnation == incarnation:
                action()
                self.at(period_ms, run)
        self.at(self.rng.randint(1, period_ms), run)

    def reachable(self, a: str, b: str) -> bool:
        return (a, b) not in self.cuts

    def delay(self, rng: random.Random | None = None) -> int:
        rng = rng or self.rng
        if self.faults_on and rng.random() < self.options.long_delay_probability:
            return rng.randint(LONG_DELAY_MIN_MS, self.options.long_delay_max_ms)
        return rng.randint(1, 5)

    def set_brokers(self, set_name: str) -> list[SimBroker]:
        return [self.brokers[name] for name in self.sets[set_name]]

    def some_master(self, default: str) -> str:
        """A serving master's name (any set's), else `default`. With one set: the first, as
        older versions chose (so their seeds replay); with two, the seed picks among them."""
        masters = [b.name for b in self.brokers.values() if b.alive and b.master is not None]
        if len(self.sets) == 1 or not masters:
            return masters[0] if masters else default
        return self.rng.choice(masters)

    def process(self, name: str) -> Any:
        if name in self.controllers:
            return self.controllers[name]
        return self.brokers.get(name)

    def send(self, src: str, dst: str, payload: tuple[Any, ...]) -> None:
        """A datagram (controller RPCs, Raft, puts): may be dropped, duplicated, reordered."""
        if not self.reachable(src, dst):
            return
        # a reader's traffic draws from its own stream: the runs of older versions replay
        rng = self.reader_rng if src in self.readers or dst in self.readers else self.rng
        if self.faults_on and rng.random() < self.options.drop_probability:
            return
        copies = 2 if (self.faults_on
                       and rng.random() < self.options.duplicate_probability) else 1
        if payload[0] == "request":
            self.request_sent_ms.setdefault(payload[1], payload[4])
        for _ in range(copies):
            self.at(self.delay(rng), lambda: self.deliver(src, dst, payload))

    def deliver(self, src: str, dst: str, payload: tuple[Any, ...]) -> None:
        if not self.reachable(src, dst):
            return
        kind = payload[0]
        if src in self.readers or dst in self.readers:  # counted apart: older runs replay
            self.reader_events += 1
            if dst in self.readers:
                self.readers[dst].on_message(src, payload)
                return
        else:
            self.events += 1
        if dst in self.producers:
            self.producers[dst].on_put_reply(*payload[1:])
            return
        target = self.process(dst)
        if target is None or not target.alive:
            return
        if kind == "raft":
            target.on_raft(payload[1])
        elif kind == "request":
            target.on_request(src, payload[1], payload[2], payload[3])
        elif kind == "reply":
            target.on_reply(src, payload[1], payload[2])
        elif kind == "put":
            target.on_put(src, payload[1], payload[2])
        elif kind == "read":
            target.on_read(src, payload[1], payload[2], payload[3])
            return  # a read changes no state
        self.check()

    # HA links: in-order streams that break on a drop or a cut
    def open_link(self, slave: str, master: str) -> int:
        link_id = self.next_id()
        self.links[link_id] = (slave, master, 0)
        return link_id

    def link_send(self, link_id: int, src: str, frame: Frame) -> None:
        link = self.links.get(link_id)
        if link is None:
            return
        a, b, after = link
        dst = b if src == a else a
        if (not self.reachable(src, dst)
                or (self.faults_on and self.rng.random() < self.options.drop_probability / 4)):
            self.close_link(link_id)
            return
        when = max(after, self.now_ms + self.delay())
        self.links[link_id] = (a, b, when)

        def deliver() -> None:
            if link_id not in self.links:
                return
            target = self.brokers[dst]
            if target.alive:
                self.events += 1
                target.on_link_frame(link_id, src, frame)
                self.check()
        self.at(when - self.now_ms, deliver)

    def close_link(self, link_id: int) -> None:
        link = self.links.pop(link_id, None)
        if link is None:
            return
        a, b, _ = link
        for name in (a, b):
            broker = self.brokers[name]
            if broker.alive:
                self.later(self.delay(), broker, lambda n=broker: n.on_link_closed(link_id))

    # faults
    def fault(self) -> None:
        if not self.faults_on:
            return
        self.at(self.rng.randint(100, 600), self.fault)
        options, rng = self.options, self.rng
        roll = rng.random()
        if roll < options.partition_probability and options.partial and rng.random() < 0.5:
            shape = rng.choice(("bridge", "ring", "pair"))
            if shape == "pair":  # the master and one slave cut off from everyone else
                master = self.some_master(rng.choice(list(self.brokers)))
                members = self.sets[self.brokers[master].set_name]
                pair = {master, rng.choice([b for b in members if b != master])}
                cuts = [(a, b) for a in sorted(pair)
                        for b in [*self.controllers, *self.brokers] if b not in pair]
            else:
                cuts = shape_cuts([*self.controllers, *self.brokers], shape, rng.random())
            self.inject(self.next_fault(
                f"partition: {shape}, cut {sorted(cuts)}",
                cuts=frozenset(pair for a, b in cuts for pair in ((a, b), (b, a))),
                heal_after_ms=rng.randint(200, 2000)))
        elif roll < options.partition_probability:
            names = [*self.controllers, *self.brokers]
            victim = rng.choice(names)
            if rng.random() < 0.5:  # most often the master: the interesting one
                victim = self.some_master(victim)
            one_way = rng.random() < 0.3
            producer_too = rng.random() < 0.5  # else the producers still reach it
            others = [o for o in [*names, *(self.producers if producer_too else [])]
                      if o != victim]
            self.inject(self.next_fault(
                f"partition: {victim} cut off{' (one way)' if one_way else ''}"
                f"{'' if producer_too else ', the producer still reaches it'}",
                cuts=frozenset([(victim, o) for o in others]
                               + ([] if one_way else [(o, victim) for o in others])),
                heal_after_ms=rng.randint(200, 2000)))
        elif roll < options.partition_probability + options.crash_probability:
            name = rng.choice([*self.controllers, *self.brokers])
            if rng.random() < 0.5:
                name = self.some_master(name)
            if self.process(name).alive:
                self.inject(self.next_fault(f"crash: {name}", crash=name))

    def crash(self, name: str) -> None:
        rng, target = self.rng, self.process(name)
        target.crash()
        self.crashes += 1
        for link_id, (a, b, _) in list(self.links.items()):
            if name in (a, b):
                self.close_link(link_id)
        # back before the controller's heartbeat timeout, or after (a failover)
        self.at(rng.choice((rng.randint(50, 800), rng.randint(1200, 2500))),
                lambda: self.restart(target))

    def fail_stop(self) -> None:
        """An fsync failed on a broker's simulated disk (--disk engine): that process stops
        at once (storage_engine/files.py: fail-stop), as a crash; its restart recovers."""
        for broker in self.brokers.values():
            if broker.alive and isinstance(broker.log, EngineLog) and broker.log.disk_failed():
                self.trace(f"fsync failed on {broker.name}: the process stops (fail-stop)")
                self.fsync_failures += 1
                self.crash(broker.name)

    def restart(self, target: Any) -> None:
        if not target.alive:
            self.trace(f"restart: {getattr(target, 'name', None) or target.node_id}")
            target.start()

    def heal_some(self) -> None:
        if self.cuts:
            self.trace("partitions heal: every cut link is whole again")
        self.cuts.clear()

    def heal(self) -> None:
        self.trace("heal: faults off, every process up, network whole")
        self.faults_on = False
        self.cuts.clear()
        for broker in self.brokers.values():
            if isinstance(broker.log, EngineLog):
                broker.log.heal()
        for process in [*self.controllers.values(), *self.brokers.values()]:
            if not process.alive:
                process.start()

    def check(self) -> None:
        self.checker.check_all()

    def run(self) -> dict[str, int]:
        self.at(self.options.duration_ms, self.heal)
        end = self.options.duration_ms + HEAL_MS
        self.run_until(end)
        self.check_end()
        stats = {"seed": self.options.seed, "sets": len(self.sets), "brokers": len(self.brokers),
                 "events": self.events, "acks": self.acks,
                 "crashes": self.crashes, "partitions": self.partitions,
                 "masters": len(self.checker.masters)}
        if self.options.transit_max_ms:
            stats.update(self.credit_stats)
        # the puts have stopped: the last acks reach every replica (confirm), then each
        # set's reader reads its set to the end from the master and must find every ack
        self.run_until(end + DRAIN_MS)
        for reader in self.readers.values():
            reader.read_to_the_end()
        stats.update(reads=self.reader_events,
                     records_read=sum(len(r.records) for r in self.readers.values()))
        if self.options.disk == "engine":  # what the simulated disks did to the real stores
            disks = [b.log.fs.stats for b in self.brokers.values()
                     if isinstance(b.log, EngineLog)]
            stats.update(fsync_failures=self.fsync_failures,
                         torn_writes=sum(d.torn_writes for d in disks),
                         bits_flipped=sum(d.bits_flipped for d in disks),
                         unsynced_bytes_dropped=sum(d.unsynced_bytes_dropped for d in disks))
        return stats

    def run_until(self, end_ms: int) -> None:
        while self._heap and self._heap[0][0] <= end_ms:
            when, _, action = heapq.heappop(self._heap)
            self.now_ms = when
            try:
                action()
            except (FsyncFailedError, DiskFailedError):
                self.fail_stop()

    def check_end(self) -> None:
        """After healing: in every set, one master serves the newest epoch and holds every
        ack."""
        for set_name in self.sets:
            serving = [b for b in self.set_brokers(set_name)
                       if b.master is not None and not b.fenced]
            if not serving:
                self.fail(f"{set_name}: no master {HEAL_MS} ms after healing (liveness)",
                          kind="liveness")
            top = max(serving, key=lambda b: b.master.master_epoch if b.master else 0)
            self.checker.check_acked(top, "the run ended")


def run_seed(seed: int, duration_ms: int, *, trace: bool = False,
             quorum: str = "all-ack", partial: bool = False, disk: str = "model",
             sets: int | None = None, replicas: int | None = None,
             only_faults: Iterable[int] | None = None, noise: bool = True,
             torn_writes: bool = True, transit_max_ms: int = 0,
             long_delay_max_ms: int = LONG_DELAY_MAX_MS, check_lease: bool = False
             ) -> dict[str, int]:
    """One seeded run (only_faults, noise, torn_writes, transit_max_ms, long_delay_max_ms,
    check_lease: see ClusterOptions)."""
    return run_options(ClusterOptions.from_seed(
        seed, duration_ms, quorum, partial=partial, disk=disk, sets=sets, replicas=replicas,
        only_faults=only_faults, noise=noise, torn_writes=torn_writes,
        transit_max_ms=transit_max_ms, long_delay_max_ms=long_delay_max_ms,
        check_lease=check_lease), trace=trace)


def run_options(options: ClusterOptions, *, trace: bool = False) -> dict[str, int]:
    """One run; the cores' own log lines are silenced (the trace tells the story)."""
    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        # a failed fsync ends the broker in the simulation, not this process
        handler = set_fsync_failure_handler(lambda err, path: None)
        try:
            return ClusterSim(options, trace=trace).run()
        finally:
            set_fsync_failure_handler(handler)
    finally:
        logging.disable(previous)


def build_parser(prog: str = "build.py sim --cluster") -> argparse.ArgumentParser:
    """The options of a run (also tests/sim/cluster_minimise.py's, which adds its own)."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--seeds", type=int, default=100)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--first", type=int, default=1)
    parser.add_argument("--duration-ms", type=int, default=3000)
    parser.add_argument("--trace", action="store_true")
    parser.add_argument("--minutes", type=float, default=None,
                        help="run seeds from --first on until this much time has passed")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--sets", type=int, choices=range(1, len(SET_NAMES) + 1), default=None,
                        help="replica sets (default: drawn from each seed)")
    parser.add_argument("--replicas", type=int, choices=REPLICAS, default=None,
                        help="brokers in every set (default: drawn from each seed, per set)")
    parser.add_argument("--quorum", choices=QUORUMS, default="all-ack",
                        help="the brokers' quorum rule (default: every SyncStateSet member)")
    parser.add_argument("--partial", action="store_true",
                        help="half of the partitions partial: a bridge, a majorities ring, or "
                             "the master and one slave cut off together")
    parser.add_argument("--disk", choices=("model", "engine"), default="model",
                        help="the brokers' log: a byte model, or the real storage engine on a "
                             "simulated disk")
    parser.add_argument("--only-faults", type=parse_ordinals, default=None, metavar="3,7|none",
                        help="only these injected faults (partitions, crashes, fsync failures; "
                             "numbered from 1 in the order drawn) happen; the rest are left out "
                             "(what --minimise prints)")
    parser.add_argument("--no-noise", action="store_true",
                        help="no message drops, duplicates or long delays")
    parser.add_argument("--no-torn-writes", action="store_true",
                        help="a crash drops exactly the unsynced bytes: no torn write, no "
                             "flipped bit")
    parser.add_argument("--heartbeat-transit-max-ms", type=int, default=0, metavar="MS",
                        dest="transit_max_ms",
                        help="the controllers' heartbeatTransitMaxMs: a heartbeat longer on "
                             "the way counts as heard this long after it was made at the "
                             "latest, and the master lease it grants starts that much earlier "
                             f"(below {HEARTBEAT_TIMEOUT_MS}; default 0: off, each heartbeat "
                             "counts at its arrival)")
    parser.add_argument("--long-delay-max-ms", type=int, default=LONG_DELAY_MAX_MS,
                        metavar="MS",
                        help="a long message delay lasts from 20 ms up to this (default "
                             f"{LONG_DELAY_MAX_MS}; longer: TCP retransmissions on a lossy host)")
    parser.add_argument("--check-lease", action="store_true",
                        help="also check that a master's lease ends by the election of a newer "
                             "epoch (off by default: seed 45 breaks it today)")
    return parser


def check_transit_max_ms(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--heartbeat-transit-max-ms or --long-delay-max-ms out of range: the parser's error,
    not a traceback."""
    if not 0 <= args.transit_max_ms < HEARTBEAT_TIMEOUT_MS:
        parser.error(f"--heartbeat-transit-max-ms must be at least 0 and below the heartbeat "
                     f"timeout ({HEARTBEAT_TIMEOUT_MS}), not {args.transit_max_ms}")
    if args.long_delay_max_ms < LONG_DELAY_MIN_MS:
        parser.error(f"--long-delay-max-ms must be at least {LONG_DELAY_MIN_MS}, not "
                     f"{args.long_delay_max_ms}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    parser.add_argument("--minimise", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.minimise:  # its own module (it drives this one): build.py routes it there
        parser.error("--minimise runs as `python3 build.py sim --cluster --seed S --minimise` "
                     "(python -m tests.sim.cluster_minimise)")
    check_transit_max_ms(parser, args)
    if args.seed is not None:
        seeds: Iterable[int] = [args.seed]
    elif args.minutes is not None:
        seeds = itertools.count(args.first)
    else:
        seeds = range(args.first, args.first + args.seeds)
    started = time.monotonic()
    failures, steps, acks, count, brokers, sets = [], 0, 0, 0, 0, 0
    topologies: dict[str, int] = {}  # "3+4": seeds with a set of 3 and a set of 4 brokers
    credit = dict.fromkeys(("heartbeats_credited_late", "leases_shortened",
                            "elections_credited"), 0)  # with --heartbeat-transit-max-ms
    for seed in seeds:
        if args.minutes is not None and time.monotonic() - started >= args.minutes * 60:
            break
        count += 1
        replicas = ClusterOptions.from_seed(seed, args.duration_ms, sets=args.sets,
                                            replicas=args.replicas).replicas
        brokers, sets = brokers + sum(replicas), sets + len(replicas)
        shape = "+".join(map(str, replicas))
        topologies[shape] = topologies.get(shape, 0) + 1
        try:
            stats = run_seed(seed, args.duration_ms, trace=args.trace, quorum=args.quorum,
                             partial=args.partial, disk=args.disk, sets=args.sets,
                             replicas=args.replicas, only_faults=args.only_faults,
                             noise=not args.no_noise, torn_writes=not args.no_torn_writes,
                             transit_max_ms=args.transit_max_ms,
                             long_delay_max_ms=args.long_delay_max_ms,
                             check_lease=args.check_lease)
            steps += stats["events"]
            acks += stats["acks"]
            for key in credit:
                credit[key] += stats.get(key, 0)
        except SimFailure as failure:
            failures.append(seed)
            print(failure, file=sys.stderr)
    elapsed = time.monotonic() - started
    print(f"{count} seeds, {len(failures)} failed, {steps} steps, {acks} acks, "
          f"{elapsed:.1f} s ({count / elapsed:.1f} seeds/s)"
          + (f"; failing seeds: {failures}" if failures else ""))
    if args.transit_max_ms:
        print(f"heartbeatTransitMaxMs {args.transit_max_ms}: "
              f"{credit['heartbeats_credited_late']} heartbeats credited late, "
              f"{credit['leases_shortened']} leases shortened, "
              f"{credit['elections_credited']} elections of a master heard by arrival")
    if args.json:
        transit = {"transit_max_ms": args.transit_max_ms, **credit} if args.transit_max_ms else {}
        if args.long_delay_max_ms != LONG_DELAY_MAX_MS:
            transit["long_delay_max_ms"] = args.long_delay_max_ms
        print(json.dumps({"seeds": count, "failures": len(failures), "disk": args.disk,
                          "failing_seeds": failures, "controllers": len(CONTROLLERS),
                          "brokers": brokers, "sets": sets, "topologies": topologies,
                          "steps": steps, "acks": acks, **transit,
                          "seconds": round(elapsed, 1)}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
