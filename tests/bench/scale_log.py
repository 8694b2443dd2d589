"""Scale curve (d): log size. Restart time after SIGKILL and after a clean stop, disk use vs
payload, and a new slave's full catch-up rate.

Method: one standalone broker (ASYNC_FLUSH, SEGMENT_BYTES segments); the log grows by acked
raw-Flight batches of 1024 x 1 KiB bodies (tests/bench/bench_ha.py `produce`) to each size in
turn; at each size: on-disk bytes of the store (allocated blocks, as `du`) over body bytes
acked, then the time from spawn to the broker answering and to serving a read of the last
message after a clean stop (SIGTERM), and the same after SIGKILL (recovery scans what lies past
the last checkpoint). Catch-up: `bench ha`'s method at the largest size (a 2-replica set whose
slave store is deleted; bytes received / time from its first byte to holding the master's log).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from connector import Admin, ClientConfig, Consumer
from tests.bench.bench_ha import catchup, info, produce
from tests.bench.scale_probe import dir_bytes, load_average, restart
from tests.integration.broker_process import BrokerProcess

BODY_BYTES = 1024
BATCH = 1024
SEGMENT_BYTES = 1 << 30
TOPIC = "log"


def _readable_s(broker: BrokerProcess, started: float, last_offset: int) -> float:
    """Seconds from `started` until the last acked message reads back."""
    result = Consumer(ClientConfig(brokers=(broker.endpoint,))).pull(TOPIC, 0, last_offset,
                                                                      max_messages=1)
    assert result.status == "FOUND", result.status
    return time.perf_counter() - started


def _restart(broker: BrokerProcess, last_offset: int, *, kill: bool) -> tuple[float, float]:
    answering_s, started = restart(broker, kill=kill)
    return answering_s, _readable_s(broker, started, last_offset)


def log_curve(work: Path, sizes_gib: list[float], catchup_gib: float) -> dict[str, Any]:
    broker = BrokerProcess(work / "log", flushDiskType="ASYNC_FLUSH", defaultTopicQueueNums="1",
                           mappedFileSizeCommitLog=str(SEGMENT_BYTES),
                           maxMessageSize=str(4 << 20)).start()
    rows = []
    payload = 0
    admin = Admin(ClientConfig(brokers=(broker.endpoint,)))
    try:
        for size_gib in sizes_gib:
            target = int(size_gib * (1 << 30))
            produce(broker.endpoint, TOPIC, BODY_BYTES, BATCH, total_bytes=target - payload)
            messages = admin.queue_offsets(TOPIC)[0]["max_queue_offset"]
            payload = messages * BODY_BYTES
            disk = dir_bytes(broker.store_dir)
            row: dict[str, Any] = {"log_gib": round(payload / (1 << 30), 3),
                                   "load_1m": load_average(),
                                   "max_log_position": info(broker.endpoint)["max_log_position"],
                                   "disk_bytes": disk, "disk_per_payload": round(disk / payload, 3)}
            row["clean_restart_s"], row["clean_restart_readable_s"] = _restart(
                broker, messages - 1, kill=False)
            row["kill_restart_s"], row["kill_restart_readable_s"] = _restart(
                broker, messages - 1, kill=True)
            print(f"log {row['log_gib']:.2f} GiB: disk/payload {row['disk_per_payload']:.3f}, "
                  f"restart after clean stop {row['clean_restart_readable_s']:.2f} s, after "
                  f"SIGKILL {row['kill_restart_readable_s']:.2f} s (load {row['load_1m']})",
                  flush=True)
            rows.append(row)
    finally:
        broker.stop()
    load = load_average()
    rate_mb_s = catchup(work, int(catchup_gib * (1 << 30)))
    print(f"new slave's full catch-up of {catchup_gib} GiB: {rate_mb_s:.0f} MB/s (load {load})",
          flush=True)
    return {"points": rows, "catchup": {"backlog_gib": catchup_gib, "mb_s": round(rate_mb_s, 1),
                                        "load_1m": load}}
