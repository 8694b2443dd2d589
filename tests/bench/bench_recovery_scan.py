"""The recovery scan's record check: µs per record, one at a time against in bulk.

    python3 tests/bench/bench_recovery_scan.py [--mib 1024] [--reference-mib 64] [--json]

Method: one segment file of `--mib` MiB under ./.bench-tmp, filled with 1 KiB messages in
puts of 1024 (the shape of `bench scale --curves log`), mapped read-only the way recovery maps
it and read once so its pages are cached. Then, in this one process:

- reference: `scan_record` on each record from the segment's start (the check recovery did
  one record at a time before record_scan), over the first `--reference-mib` MiB;
- bulk: `record_scan.valid_run_end` over the whole segment (what `_scan_segment` runs now);
- scan: `commit_log._scan_segment` of the whole segment, as `CommitLog.recover` calls it.

Both must accept the same records. The JSON's last line holds µs per record of each and
`bulk_speedup` (reference µs / bulk µs, taken in the same run: the ratio to quote), each in
wall and in CPU time (`_cpu_`: this process's, without the waits for a core of a shared
machine).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from storage_engine.commit_log import _scan_segment
from storage_engine.record_format import encode_batch, encode_host, scan_record
from storage_engine.record_scan import valid_run_end

MiB = 1024 * 1024
T = TypeVar("T")
BODY_SIZE_BYTES = 1024
PUT_MESSAGES = 1024


class _MappedSegment:
    """What _scan_segment reads of a Segment: its map, size and base position."""

    def __init__(self, data: mmap.mmap) -> None:
        self.map = data
        self.size_bytes = len(data)
        self.base_position = 0


def write_segment(path: Path, size_bytes: int) -> int:
    """Fill `path` with puts of 1 KiB messages until the next put does not fit; zeros after
    (a live segment's unwritten tail). Returns the number of records."""
    host = encode_host("127.0.0.1", 10911)
    bodies = [os.urandom(BODY_SIZE_BYTES) for _ in range(PUT_MESSAGES)]
    position = records = 0
    with open(path, "wb") as handle:
        while True:
            parts: list[bytes] = []
            positions: list[int] = []
            sizes: list[int] = []
            encoded = encode_batch(
                topic_meta=b"\x05bench", bodies=bodies, properties=None,
                queue_ids=[records % 8] * PUT_MESSAGES,
                queue_offsets=range(records, records + PUT_MESSAGES), start_index=0,
                log_position=position, space_bytes=size_bytes - position,
                store_timestamp_ms=1, store_host=host, born_timestamp_ms=1, born_host=host,
                flag=0, out_parts=parts, out_positions=positions, out_sizes=sizes)
            if encoded < PUT_MESSAGES:
                break
            handle.write(b"".join(parts))
            position += sum(sizes)
            records += encoded
        handle.truncate(size_bytes)
    return records


def reference_scan(data: mmap.mmap, limit_bytes: int) -> tuple[int, int]:
    """(records, end) of scan_record from 0 over about `limit_bytes`."""
    position = records = 0
    while position < limit_bytes:
        total = scan_record(data, position, len(data))  # type: ignore[arg-type]
        if total <= 0:
            break
        position += total
        records += 1
    return records, position


def timed(call: Callable[[], T]) -> tuple[T, float, float]:
    """call()'s result, wall seconds and CPU seconds (this process): on a shared machine the
    wall time also holds the waits for a core, the CPU time does not."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = call()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=1024, help="segment size in MiB")
    parser.add_argument("--reference-mib", type=int, default=64,
                        help="MiB checked one record at a time (the slow reference)")
    parser.add_argument("--json", action="store_true", help="last line: the figures as JSON")
    args = parser.parse_args()
    root = Path(".bench-tmp")
    root.mkdir(exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="recovery-scan-", dir=root))
    try:
        path = directory / "segment"
        records = write_segment(path, args.mib * MiB)
        with open(path, "rb") as handle:
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        sum(data[offset] for offset in range(0, len(data), 4096))  # pages into the cache
        (reference_records, reference_end), reference_s, reference_cpu_s = timed(
            lambda: reference_scan(data, args.reference_mib * MiB))
        bulk_end, bulk_s, bulk_cpu_s = timed(lambda: valid_run_end(data, 0, len(data)))
        (scan_end, reason), scan_s, scan_cpu_s = timed(
            lambda: _scan_segment(_MappedSegment(data)))  # type: ignore[arg-type]
        partial_end = valid_run_end(data, 0, reference_end)
        data.close()
    finally:
        shutil.rmtree(directory)
    assert partial_end == reference_end, (partial_end, reference_end)
    assert bulk_end == scan_end, (bulk_end, scan_end, reason)

    def per_record_us(seconds: float, count: int) -> float:
        return round(seconds / max(count, 1) * 1e6, 3)

    figures = {
        "segment_mib": args.mib, "records": records, "load_1min": round(os.getloadavg()[0], 1),
        "reference_records": reference_records,
        "reference_us_per_record": per_record_us(reference_s, reference_records),
        "reference_cpu_us_per_record": per_record_us(reference_cpu_s, reference_records),
        "bulk_us_per_record": per_record_us(bulk_s, records),
        "bulk_cpu_us_per_record": per_record_us(bulk_cpu_s, records),
        "scan_segment_s": round(scan_s, 3), "scan_segment_cpu_s": round(scan_cpu_s, 3),
        "scan_reason": reason,
        "bulk_speedup": round(reference_s / reference_records / (bulk_s / records), 1),
        "bulk_cpu_speedup": round(
            reference_cpu_s / reference_records / (bulk_cpu_s / records), 1),
    }
    for key, value in figures.items():
        print(f"{key:>26}: {value}")
    if args.json:
        print(json.dumps(figures, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
