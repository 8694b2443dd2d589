"""CPU and wake-ups per single send, by process and thread: where a 3-replica put's CPU goes.

    python3 build.py bench threads [--json] [--rounds R] [--sends N]

Why: the p50 of a single acknowledged send is set by how much CPU each hop burns on two
shared cores (README, "Where the CPU goes, by the kernel's count"); this says which thread of
which process burns it, from the kernel's own accounts, so a change to the put path can be
judged by more than its latency. Brokers name their threads in the kernel
(ha/broker/thread_names.py), so no profiler is needed.

Method: the set of 3 of tests/bench/bench_latency.py (one controller, inSyncReplicas 2,
ASYNC_FLUSH); R rounds of N single 100 B sends (`Producer.send`, one in flight) from this
process. Around each round, utime + stime (`/proc/<pid>/task/<tid>/stat`) and voluntary
context switches (`.../status`) of every thread of the master, both slaves and this client;
threads of one name in one role are summed (both slaves together under SLAVE). Figures are
per send, the medians over the rounds; threads under 1 us and 0.05 switches per send are left
out of the table. With --json the last line holds `<role>/<thread>` -> {cpu_us, switches} and
`<role>_cpu_us` per role.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench import bench_peers as peers
from tests.bench.bench_latency import started_set

ROOT = Path(__file__).resolve().parents[2]

TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def thread_counters(pids: dict[int, str]) -> dict[tuple[str, str, int], tuple[int, int]]:
    """(role, thread name, tid) -> (CPU ticks, voluntary switches) for every thread of `pids`."""
    found = {}
    for pid, role in pids.items():
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                stat = (task / "stat").read_text()
                status = (task / "status").read_text()
            except OSError:  # the thread ended meanwhile
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            switches = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
            found[(role, name, int(task.name))] = (int(fields[11]) + int(fields[12]), switches)
    return found


def per_send(before: dict[tuple[str, str, int], tuple[int, int]],
             after: dict[tuple[str, str, int], tuple[int, int]], sends: int
             ) -> dict[str, tuple[float, float]]:
    """`role/name` -> (CPU us, voluntary switches) per send, threads of one name summed."""
    figures: dict[str, tuple[float, float]] = {}
    for key, (ticks, switches) in after.items():
        start = before.get(key, (0, 0))
        name = f"{key[0]}/{key[1]}"
        cpu_us, woke = figures.get(name, (0.0, 0.0))
        figures[name] = (cpu_us + (ticks - start[0]) / TICKS_PER_S * 1e6 / sends,
                         woke + (switches - start[1]) / sends)
    return figures


def run(rounds: int, sends: int) -> dict[str, Any]:
    rounds_seen: list[dict[str, tuple[float, float]]] = []
    with started_set(Path(tempfile.mkdtemp(prefix="bench-threads-"))) as cluster:
        config = cluster.config()
        pids = {pid: role for pid, role in cluster.brokers() if role in ("MASTER", "SLAVE")}
        pids[os.getpid()] = "CLIENT"
        for index in range(rounds):
            before = thread_counters(pids)
            latencies = peers.rh_latency(config, "latency", sends)
            figures = per_send(before, thread_counters(pids), sends)
            rounds_seen.append(figures)
            roles = {role: sum(cpu for name, (cpu, _) in figures.items()
                               if name.startswith(role + "/"))
                     for role in ("MASTER", "SLAVE", "CLIENT")}
            print(f"round {index + 1}/{rounds}, load {os.getloadavg()[0]:.1f}: p50 "
                  f"{peers.percentile_ms(latencies, 0.5):.3f} ms; CPU per send: "
                  + ", ".join(f"{role} {cpu:.0f} us" for role, cpu in roles.items()),
                  flush=True)
    names = sorted({name for figures in rounds_seen for name in figures})
    result: dict[str, Any] = {}
    for name in names:
        cpu_us = statistics.median(r.get(name, (0.0, 0.0))[0] for r in rounds_seen)
        switches = statistics.median(r.get(name, (0.0, 0.0))[1] for r in rounds_seen)
        if cpu_us >= 1 or switches >= 0.05:
            result[name] = {"cpu_us": round(cpu_us, 1), "switches": round(switches, 2)}
    for role in ("MASTER", "SLAVE", "CLIENT"):
        result[f"{role}_cpu_us"] = round(sum(v["cpu_us"] for k, v in result.items()
                                             if k.startswith(role + "/")), 1)
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="last line: the figures as JSON")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sends", type=int, default=3000, help="sends per round")
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.sends < 100:
        parser.error("--rounds >= 1 and --sends >= 100")
    result = run(args.rounds, args.sends)
    print(f"per send, median of {args.rounds} rounds (both slaves summed under SLAVE):")
    rows = sorted(((k, v) for k, v in result.items() if isinstance(v, dict)),
                  key=lambda item: -item[1]["cpu_us"])
    for name, figures in rows:
        print(f"  {name:34} {figures['cpu_us']:7.1f} us CPU  {figures['switches']:5.2f} "
              "switches")
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
