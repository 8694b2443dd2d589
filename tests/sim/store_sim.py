"""Seeded crash schedules for the real storage engine on the simulated disk (one store).

    python3 build.py sim --store [--seeds N | --minutes M] [--first F] [--seed S] [--json]

One seed fixes a schedule of appends (two topics, three queues, varied sizes, small segments so
CommitLog and ConsumeQueue files roll), group-commit flushes, checkpoints, fork truncations
(`truncate_to`, the replica path), crashes and failing fsyncs, on a `MessageStore(fs=
SimFileSystem, flush_driven=True)` (SYNC_FLUSH: a message is acknowledged once a flush step
covered it). A model keeps every message in log order. After each crash the store reopens
through its real recovery and must serve exactly the model's messages that end at or below the
recovered log end, which must be at or past the acknowledged end; every record served must
pass its checksum and end at or below the confirm position; after a failed fsync no flush may
succeed (fail-stop). tests/sim/test_engine_on_sim_disk.py runs a batch of seeds.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
import random
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from storage_engine import (
    CorruptRecordError,
    FlushDiskType,
    FsyncFailedError,
    GetStatus,
    MessageBatch,
    MessageStore,
    PutStatus,
    StoreConfig,
    decode_record,
    set_fsync_failure_handler,
)
from tests.sim.sim_fs import SimDiskFaults, SimFileSystem

__all__ = ["CONFIG", "STORE", "DiskFailure", "DiskRun", "faults_of", "run_disk_seed"]

STORE = Path("/broker/store")
CONFIG = StoreConfig(commit_log_segment_size_bytes=68 * 1024, message_size_max_bytes=2048,
                     consume_queue_segment_entries=16, flush_disk_type=FlushDiskType.SYNC_FLUSH)
TOPICS = ("orders", "audit")
QUEUES = 3


@dataclasses.dataclass(slots=True)
class _Written:
    topic: str
    queue_id: int
    body: bytes
    log_position: int
    log_position_end: int


class DiskFailure(AssertionError):
    """An invariant broke; the message names the seed and the replay command."""


def faults_of(seed: int) -> SimDiskFaults:
    rng = random.Random(seed ^ 0xD15C)
    return SimDiskFaults(torn_write_probability=rng.choice((0.0, 0.5, 1.0)),
                         bit_flip_probability=rng.choice((0.0, 0.5)),
                         sync_failure_probability=rng.choice((0.0, 0.0, 0.01)))


class DiskRun:
    """One seeded schedule against one store directory on one simulated disk."""

    def __init__(self, seed: int, steps: int = 120) -> None:
        self.seed = seed
        self.steps = steps
        self.rng = random.Random(seed)
        self.fs = SimFileSystem(random.Random(seed ^ 0xF5), faults_of(seed))
        self.log: list[_Written] = []
        self.acked_end = 0
        self.crashes = 0
        self.store = self.open()

    def fail(self, what: str) -> None:
        raise DiskFailure(f"seed {self.seed}: {what} (faults {self.fs.faults}, disk "
                          f"{self.fs.stats}); replay: python3 build.py sim --store "
                          f"--seed {self.seed}")

    def open(self) -> MessageStore:
        """Start the store (a restart: its recovery runs on a disk without faults)."""
        self.fs.faults, faults = SimDiskFaults(), self.fs.faults
        try:
            return MessageStore(STORE, CONFIG, fs=self.fs, flush_driven=True)
        finally:
            self.fs.faults = faults

    def run(self) -> dict[str, int]:
        for _ in range(self.steps):
            roll = self.rng.random()
            try:
                if roll < 0.55:
                    self.append()
                elif roll < 0.75:
                    if self.store.flush_step():
                        self.acked_end = self.store.stats().flushed_log_position
                    else:
                        self.died()  # fail-stop: the process ends, a restart recovers
                elif roll < 0.82:
                    if not self.store.checkpoint_step():
                        self.died()
                elif roll < 0.87:
                    self.truncate()
                else:
                    self.crash()
            except FsyncFailedError:
                self.died()
        self.crash()
        return {"messages": len(self.log), "crashes": self.crashes,
                "torn": self.fs.stats.torn_writes, "flipped": self.fs.stats.bits_flipped,
                "sync_failures": self.fs.stats.sync_failures}

    def append(self) -> None:
        topic = self.rng.choice(TOPICS)
        count = self.rng.randint(1, 12)
        queue_ids = [self.rng.randrange(QUEUES) for _ in range(count)]
        bodies = [self.rng.randbytes(self.rng.choice((1, 40, 300, 1500))) for _ in range(count)]
        start = self.store.log_position_end
        try:
            result = self.store.append(MessageBatch(topic=topic, bodies=bodies,
                                                    queue_ids=queue_ids))
        except FsyncFailedError:  # a segment roll's directory fsync: part of it may be written
            self.learn_written(start)
            raise
        if result.status is not PutStatus.PUT_OK:
            self.fail(f"append answered {result.status}")
        for body, queue_id, start in zip(bodies, queue_ids, result.log_positions, strict=True):
            self.log.append(_Written(topic, queue_id, body, start, self._record_end(start)))

    def learn_written(self, start: int) -> None:
        """Add what an interrupted append wrote from `start` (never acknowledged: it may or
        may not survive, and the model must know it if it does)."""
        position, end = start, self.store.log_position_end
        while position < end:
            raw = self.store.read_log(position, 1 << 20)
            if len(raw) < 8 or raw[4:8] != (0xDAA320A7).to_bytes(4, "big"):  # BLANK or end
                segment = CONFIG.commit_log_segment_size_bytes
                position = (position // segment + 1) * segment
                continue
            message = decode_record(raw)
            self.log.append(_Written(message.topic, message.queue_id, message.body, position,
                                     position + message.size_bytes))
            position += message.size_bytes

    def _record_end(self, log_position: int) -> int:
        raw = self.store.read_log(log_position, 4)  # TOTALSIZE
        return log_position + int.from_bytes(raw, "big")

    def truncate(self) -> None:
        """The replica path's fork truncation, at a record start at or past confirm."""
        confirm = self.store.confirm_log_position
        starts = [w.log_position for w in self.log if w.log_position >= confirm]
        if not starts:
            return
        cut = self.rng.choice(starts)
        self.store.truncate_to(cut)
        self.log = [w for w in self.log if w.log_position < cut]

    def died(self) -> None:
        """After a failed fsync: nothing more is acknowledged, and the process stops."""
        if self.store.flush_step():
            self.fail("a flush succeeded after a failed fsync (fail-stop broken)")
        self.crash()

    def crash(self) -> None:
        self.crashes += 1
        self.fs.crash()
        self.store = self.open()
        self.verify_recovered()

    def verify_recovered(self) -> None:
        stats = self.store.stats()
        end = stats.log_position_end
        if end < self.acked_end:
            self.fail(f"ACKNOWLEDGED MESSAGES LOST: the log ends at {end} after recovery, "
                      f"below the acknowledged end {self.acked_end}")
        if stats.confirm_log_position > end:
            self.fail(f"confirm {stats.confirm_log_position} past the log end {end}")
        survivors = [w for w in self.log if w.log_position_end <= end]
        if (survivors and survivors[-1].log_position_end != end
                and end % CONFIG.commit_log_segment_size_bytes != 0):
            self.fail(f"the recovered end {end} is not a record boundary "
                      f"(last surviving record ends at {survivors[-1].log_position_end})")
        for topic in TOPICS:
            for queue_id in range(QUEUES):
                expected = [w for w in survivors if (w.topic, w.queue_id) == (topic, queue_id)]
                self.verify_queue(topic, queue_id, expected, stats.confirm_log_position)
        self.log = survivors
        self.acked_end = end  # recovery flushed and checkpointed what it kept

    def verify_queue(self, topic: str, queue_id: int, expected: list[_Written],
                     confirm: int) -> None:
        served: list[bytes] = []
        queue_offset = 0
        while True:
            got = self.store.get_messages(topic, queue_id, queue_offset, max_count=64,
                                          max_bytes=1 << 20)
            if got.status is not GetStatus.FOUND:
                if got.status not in (GetStatus.OFFSET_OVERFLOW_ONE, GetStatus.NO_MESSAGE_IN_QUEUE,
                                      GetStatus.NO_MATCHED_LOGIC_QUEUE):
                    self.fail(f"{topic}/{queue_id} at {queue_offset}: {got.status}")
                break
            for record in got.records:
                try:
                    message = decode_record(record)  # verifies the whole-record checksum
                except CorruptRecordError as err:
                    self.fail(f"{topic}/{queue_id}: served a record that fails its checksum "
                              f"at queue_offset {queue_offset}: {err}")
                if message.log_position + message.size_bytes > confirm:
                    self.fail(f"{topic}/{queue_id}: served a record past confirm {confirm}")
                served.append(message.body)
            queue_offset = got.next_queue_offset
        bodies = [w.body for w in expected]
        if served != bodies:
            # strict=False: the lengths may differ; then the first difference is the shorter end
            first = next((i for i, (a, b) in enumerate(zip(served, bodies, strict=False))
                          if a != b), min(len(served), len(bodies)))
            self.fail(f"{topic}/{queue_id}: served {len(served)} messages, expected "
                      f"{len(expected)}; first difference at {first}")


def run_disk_seed(seed: int, steps: int = 120) -> dict[str, int]:
    """One schedule; a failed fsync is recorded, not fatal (the store still fail-stops)."""
    previous_handler = set_fsync_failure_handler(lambda err, path: None)
    previous_logging = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        return DiskRun(seed, steps).run()
    finally:
        logging.disable(previous_logging)
        set_fsync_failure_handler(previous_handler)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="build.py sim --store")
    parser.add_argument("--seeds", type=int, default=1000)
    parser.add_argument("--first", type=int, default=0)
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--minutes", type=float, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if args.seed is not None:
        seeds: Iterable[int] = [args.seed]
    elif args.minutes is not None:
        seeds = itertools.count(args.first)
    else:
        seeds = range(args.first, args.first + args.seeds)
    started = time.monotonic()
    failures: list[int] = []
    totals: dict[str, int] = {}
    count = 0
    for seed in seeds:
        if args.minutes is not None and time.monotonic() - started >= args.minutes * 60:
            break
        count += 1
        try:
            for key, value in run_disk_seed(seed, args.steps).items():
                totals[key] = totals.get(key, 0) + value
        except DiskFailure as failure:
            failures.append(seed)
            print(failure, file=sys.stderr)
    elapsed = time.monotonic() - started
    print(f"{count} seeds, {len(failures)} failed, {elapsed:.1f} s "
          f"({count / elapsed:.1f} seeds/s); {totals}"
          + (f"; failing seeds: {failures}" if failures else ""))
    if args.json:
        print(json.dumps({"seeds": count, "failures": len(failures), "failing_seeds": failures,
                          "seconds": round(elapsed, 1), **totals}))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())


