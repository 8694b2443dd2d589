"""Scale curve (c): replica sets per controller group. Controller CPU and memory, Raft log
growth and snapshot size, and the controller side of a failover, as one group of three
controllers serves more replica sets.

Method: three real controller processes (tests/controller/controller_process.py, 50 ms ticks,
controllerHeartbeatTimeoutMs HEARTBEAT_TIMEOUT_MS as shipped, snapshotEveryEntries
SNAPSHOT_EVERY_ENTRIES so that snapshots are taken within the run) and one heartbeater process
(tests/bench/scale_heartbeater.py) playing N sets of 3 fake brokers: each registers, heartbeats
every second to every controller, and its master widens its SyncStateSet to all three. Once
every set has a master: CPU of the three controllers over CPU_WINDOW_S (share of one core,
summed, and the leader's), the leader's RSS, its committed Raft index, the bytes of its store
and of its newest snapshot. Failover: TRIALS times the master of a set goes silent and its
slaves report it lost at once (as a real slave whose HA link broke does); RTO here is the time
from the silence to a slave's heartbeat reply naming it master (detection, probe, election,
commit), the controller's part of a failover. A real set adds its brokers' switch on top
(`bench failover` measures that end to end).
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from tests.bench.scale_probe import cpu_s, dir_bytes, load_average, rss_bytes
from tests.controller.controller_process import ControllerGroup, call

ROOT = Path(__file__).resolve().parents[2]
HEARTBEAT_TIMEOUT_MS = 3000
SNAPSHOT_EVERY_ENTRIES = 16  # the smallest allowed: every size has a snapshot to weigh
CPU_WINDOW_S = 5.0
READY_TIMEOUT_S = 180.0
ELECTED_TIMEOUT_S = 30.0


def _expect(stream: IO[str], word: str, process: subprocess.Popen[str]) -> list[str]:
    """The next stdout line of the heartbeater starting with `word` (its other lines skipped).
    The deadline is the caller's: a dead heartbeater ends the stream."""
    for line in stream:
        if line.startswith(word):
            return line.split()
    raise RuntimeError(f"heartbeater ended (exit {process.poll()}) before {word!r}")


def _snapshot_bytes(store: Path) -> int:
    snapshots = sorted(store.rglob("snapshot-*"))
    return snapshots[-1].stat().st_size if snapshots else 0


def sets_point(work: Path, sets: int, trials: int) -> dict[str, Any]:
    group = ControllerGroup(work / f"sets-{sets}", 3,
                            controllerHeartbeatTimeoutMs=str(HEARTBEAT_TIMEOUT_MS),
                            snapshotEveryEntries=str(SNAPSHOT_EVERY_ENTRIES)).start()
    beater: subprocess.Popen[str] | None = None
    try:
        leader = group.wait_leader()
        addresses = ";".join(group.endpoint(n) for n in group.ids)
        started = time.perf_counter()
        beater = subprocess.Popen(
            [sys.executable, str(ROOT / "tests/bench/scale_heartbeater.py"), "--controllers",
             addresses, "--sets", str(sets)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            text=True, cwd=ROOT)
        assert beater.stdout is not None and beater.stdin is not None
        _expect(beater.stdout, "ready", beater)
        ready_s = time.perf_counter() - started
        pids = {n: group.processes[n].pid for n in group.ids}
        before = {n: cpu_s(pid) for n, pid in pids.items()}
        time.sleep(CPU_WINDOW_S)  # the measuring window itself, not a wait for a state
        shares = {n: (cpu_s(pid) - before[n]) / CPU_WINDOW_S for n, pid in pids.items()}
        status = call(group.endpoint(leader), "controller_status")
        store = work / f"sets-{sets}" / f"store-n{leader}"
        row: dict[str, Any] = {
            "sets": sets, "load_1m": load_average(), "all_masters_s": round(ready_s, 2),
            "controller_cpu_share_sum": round(sum(shares.values()), 4),
            "leader_cpu_share": round(shares[leader], 4),
            "leader_rss_bytes": rss_bytes(pids[leader]),
            "raft_committed_index": status.get("commit_index"),
            "raft_store_bytes": dir_bytes(store), "snapshot_bytes": _snapshot_bytes(store)}
        rtos = []
        for trial in range(trials):
            target = trial % sets
            beater.stdin.write(f"kill {target}\n")
            beater.stdin.flush()
            words = _expect(beater.stdout, "elected", beater)
            rtos.append(float(words[2]))
            beater.stdin.write(f"revive {target}\n")
            beater.stdin.flush()
            _expect(beater.stdout, "ready", beater)
        row["failover_trials"] = trials
        row["failover_p50_s"] = round(statistics.median(rtos), 3)
        row["failover_max_s"] = round(max(rtos), 3)
        print(f"sets {sets:3d}: controllers' CPU {row['controller_cpu_share_sum']:.1%} "
              f"(leader {row['leader_cpu_share']:.1%}), leader RSS "
              f"{row['leader_rss_bytes'] / 2**20:.0f} MiB, Raft index "
              f"{row['raft_committed_index']}, store {row['raft_store_bytes']:,} B, snapshot "
              f"{row['snapshot_bytes']:,} B, failover p50 {row['failover_p50_s']:.3f} s max "
              f"{row['failover_max_s']:.3f} s (load {row['load_1m']})", flush=True)
        return row
    finally:
        if beater is not None:
            beater.kill()
            beater.wait(10)
        group.stop_all()


def sets_curve(work: Path, sizes: list[int], trials: int) -> list[dict[str, Any]]:
    return [sets_point(work, sets, trials) for sets in sizes]
