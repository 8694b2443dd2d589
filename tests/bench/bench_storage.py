"""Storage engine benchmark: append and read throughput against this machine's write ceiling.

    python3 build.py bench storage [--json] [--seconds S]

Method: every case runs in this one process, one after another, for at most `--seconds` (and a
bounded message count), in a fresh store directory under ./.bench-tmp (a real disk, not tmpfs).
The ceiling is measured in the same run: plain Python 1 MiB `write` calls into a new file, the
way the reference measured ~450 MB/s. The VM's speed drifts, so compare ratios taken in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import struct
import sys
import tempfile
import time
import zlib
from pathlib import Path

from storage_engine import FlushDiskType, MessageBatch, MessageStore, StoreConfig

MiB = 1024 * 1024
MESSAGES_MAX = 5_000_000  # per case, whatever the time budget


def measure_ceiling_MBps(directory: Path, seconds: float) -> float:
    chunk = os.urandom(MiB)
    path = directory / "ceiling.bin"
    written = 0
    start = time.perf_counter()
    with open(path, "wb") as handle:
        while time.perf_counter() - start < seconds and written < 4096 * MiB:
            handle.write(chunk)
            written += MiB
        handle.flush()
    elapsed = time.perf_counter() - start
    path.unlink()
    return written / elapsed / 1e6


def measure_pack_loop_msgs_per_s(seconds: float) -> float:
    """The floor the issue names: a plain loop packing a RocketMQ header + CRC per message."""
    header = struct.Struct(">iIiiiqqiq8sq8siqi")
    host = bytes(8)
    body = os.urandom(100)
    packed = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and packed < MESSAGES_MAX:
        parts = []
        for index in range(1024):
            parts.append(header.pack(211, 0xDAA320A7, zlib.crc32(body) & 0x7FFFFFFF, 0, 0,
                                     index, index * 211, 0, 1, host, 2, host, 0, 0, 100))
            parts.append(body)
        b"".join(parts)
        packed += 1024
    return packed / (time.perf_counter() - start)


def measure_append(directory: Path, *, body_bytes: int, batch: int, flush: FlushDiskType,
                   seconds: float) -> tuple[float, float, MessageStore]:
    config = StoreConfig(flush_disk_type=flush)
    store = MessageStore(directory, config)
    bodies = [os.urandom(body_bytes) for _ in range(batch)]
    queue_ids = [0] * batch
    message = MessageBatch(topic="bench", bodies=bodies, queue_ids=queue_ids)
    sent = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds and sent < MESSAGES_MAX:
        result = store.put_messages(message)
        assert result.status.name == "PUT_OK", result.status
        sent += batch
    elapsed = time.perf_counter() - start
    return sent / elapsed, sent * body_bytes / elapsed / 1e6, store


def measure_read(store: MessageStore, seconds: float) -> float:
    read = 0
    queue_offset = store.min_queue_offset("bench", 0)
    end = store.max_queue_offset("bench", 0)
    start = time.perf_counter()
    while queue_offset < end and time.perf_counter() - start < seconds:
        result = store.get_messages("bench", 0, queue_offset, max_count=1024, max_bytes=8 * MiB)
        read += len(result.records)
        queue_offset = result.next_queue_offset
    return read / (time.perf_counter() - start)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="last line: one JSON object")
    parser.add_argument("--seconds", type=float, default=2.0, help="time budget per case")
    args = parser.parse_args(argv)
    root = Path.cwd() / ".bench-tmp"
    root.mkdir(exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=root))
    figures: dict[str, float] = {}
    try:
        figures["ceiling_MBps"] = measure_ceiling_MBps(work, args.seconds)
        print(f"ceiling: plain 1 MiB writes {figures['ceiling_MBps']:.0f} MB/s")
        for flush in (FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH):
            mode = "async" if flush is FlushDiskType.ASYNC_FLUSH else "sync"
            for body_bytes, label in ((100, "100B"), (1024, "1KiB")):
                for batch in (1, 32, 1024):
                    case_dir = work / f"{mode}-{label}-{batch}"
                    rate, mbps, store = measure_append(
                        case_dir, body_bytes=body_bytes, batch=batch, flush=flush,
                        seconds=args.seconds)
                    name = f"append_{label}_batch{batch}_{mode}"
                    figures[f"{name}_msgs_per_s"] = rate
                    figures[f"{name}_MBps"] = mbps
                    print(f"{name:32s} {rate:12,.0f} msgs/s {mbps:8.1f} MB/s (bodies)")
                    if mode == "async" and batch == 1024 and label == "100B":
                        figures["read_100B_msgs_per_s"] = measure_read(store, args.seconds)
                        print(f"{'read_100B_sequential':32s} "
                              f"{figures['read_100B_msgs_per_s']:12,.0f} msgs/s")
                    store.close()
                    shutil.rmtree(case_dir)
        figures["pack_loop_msgs_per_s"] = measure_pack_loop_msgs_per_s(args.seconds)
        figures["append_100B_batch1024_async_vs_pack_loop"] = (
            figures["append_100B_batch1024_async_msgs_per_s"] / figures["pack_loop_msgs_per_s"])
        print(f"plain header+CRC pack loop: {figures['pack_loop_msgs_per_s']:,.0f} msgs/s; "
              f"store 100 B batch append is "
              f"{figures['append_100B_batch1024_async_vs_pack_loop']:.2f} of it")
        ratio = figures["append_1KiB_batch1024_async_MBps"] / figures["ceiling_MBps"]
        figures["append_1KiB_batch1024_async_vs_ceiling"] = ratio
        figures["append_100B_single_async_msgs_per_s"] = figures[
            "append_100B_batch1_async_msgs_per_s"]
        print(f"1 KiB batch append / ceiling = {ratio:.2f} (target >= 0.5)")
        print(f"100 B batch-1024 append = {figures['append_100B_batch1024_async_msgs_per_s']:,.0f}"
              " msgs/s (target >= 500,000)")
        print(f"100 B single append = {figures['append_100B_single_async_msgs_per_s']:,.0f}"
              " msgs/s (target >= 50,000)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.json:
        print(json.dumps({key: round(value, 3) for key, value in figures.items()}, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
