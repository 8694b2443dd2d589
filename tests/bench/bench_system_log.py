"""System-log replay benchmark: what a restart's replay and a rollback after a cut cost.

    python3 build.py bench system_log [--json] [--records N] [--groups G]

Why: since chaos finding 8, a truncation that cuts records the offset table had applied rolls
the table back to a snapshot below the cut and replays the log from there
(ha/broker/system_log.py); with no usable snapshot it replays from the first record. The
figures say what that costs: records replayed per second, and the time of a rollback whose
snapshot sits just below the cut (the common case: loading the snapshot dominates).

Method: one real MessageStore in a tmp dir holding N offset-commit records (G groups, 4 queues
each, in batches of 1,000), confirmed; an OffsetLog with no snapshot catches up (a replay from
the first record, as a restart without consumerOffset.json or a rollback to the base does);
then a snapshot is flushed, 10 more commits are applied past it (answered PUT_OK above the
confirm position, as a master's quorum may), the store cuts them, and the next catch-up rolls back
(the snapshot of N records reloaded, nothing replayed).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from ha.broker.offset_log import OFFSETS_TOPIC, OffsetLog
from ha.broker.offset_table import encode_commit
from storage_engine import MessageBatch, MessageStore, StoreConfig
from tests.support.scripted_put import ScriptedPut

BATCH_RECORDS = 1000


def fill(store: MessageStore, first: int, records: int, groups: int) -> None:
    for start in range(first, first + records, BATCH_RECORDS):
        count = min(BATCH_RECORDS, first + records - start)
        bodies = [encode_commit(f"group-{n % groups}", "topic", n % 4, n)
                  for n in range(start, start + count)]
        store.append(MessageBatch(topic=OFFSETS_TOPIC, bodies=bodies, queue_ids=[0] * count))
    store.set_confirm_log_position(store.log_position_end)


def offset_log(directory: Path, store: MessageStore) -> OffsetLog:
    """Commits through it are appended and answered PUT_OK (a master whose quorum acked them
    before its own confirm position moved: the records a rollback may have to undo)."""
    return OffsetLog(directory, store, flush_interval_ms=1 << 30, put=ScriptedPut(store),
                     write_timeout_ms=1000)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--groups", type=int, default=1000)
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="bench-system-log-"))
    config = StoreConfig.from_properties({"mappedFileSizeCommitLog": str(64 << 20)})
    store = MessageStore(directory / "store", config, auto_confirm=False)
    try:
        fill(store, 0, args.records, args.groups)
        table = offset_log(directory / "config", store)
        started = time.perf_counter()
        table.catch_up()
        replay_s = time.perf_counter() - started
        assert table.applied_queue_offset == args.records
        table.close()  # the snapshot: every record so far
        snapshot_bytes = (directory / "config" / "consumerOffset.json").stat().st_size
        cut = store.log_position_end
        for n in range(10):  # the tail a deposed master applied
            table.commit("tail-group", "topic", 0, n)
        store.truncate_to(cut)
        started = time.perf_counter()
        table.catch_up()
        rollback_s = time.perf_counter() - started
        assert table.rollbacks == 1 and table.applied_queue_offset == args.records
    finally:
        store.close()
        shutil.rmtree(directory, ignore_errors=True)
    figures = {"records": args.records, "groups": args.groups,
               "replay_s": round(replay_s, 3),
               "replay_records_per_s": round(args.records / replay_s),
               "snapshot_bytes": snapshot_bytes,
               "rollback_to_snapshot_ms": round(rollback_s * 1000, 1)}
    if not args.json:
        print(f"replay of {args.records} records from the first: {replay_s:.2f} s "
              f"({figures['replay_records_per_s']} records/s); rollback to a snapshot of "
              f"{snapshot_bytes} bytes just below the cut: {figures['rollback_to_snapshot_ms']}"
              " ms", flush=True)
    print(json.dumps({"bench": "system_log", **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
