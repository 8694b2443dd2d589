"""Where single sends wait for a CPU: the kernel's scheduler events during the latency loop.

    python3 build.py bench sched_waits [--json] [--rounds R] [--sends N] [--no-peer]

Why: timestamps inside our processes showed every stage of one acknowledged put running at
full CPU, yet the stages add up to less than the p50 (README, "Where the time of one
acknowledged put goes"). The missing time is spent runnable but not running: a thread woken
by a socket write waits for a CPU. This counts it, for rocketha and for NATS JetStream in the
same run, from the kernel's own records rather than from our code.

Method: the set of 3 and the JetStream R3 cluster of tests/bench/bench_latency.py. Each round
runs N single 100 B sends per system, one in flight; while a system's sends run, this records
`sched_wakeup` and `sched_switch` for TRACE_S through tracefs (root; mounted at
/sys/kernel/tracing if it is not; every setting it changes is put back, the events switched
off, even on failure). From the events: for every wake-up, the time until the woken thread
ran (`wait`), and whether some other CPU was idle at the moment of the wake-up (`idle-CPU
wait`: the thread queued on a busy CPU while another had nothing to do). Figures per send
(sends completed inside the traced span), all threads of the machine; the medians over the
rounds. With --json the last line holds `<system>_wakeups_per_send`,
`<system>_wait_us_per_send`, `<system>_idle_cpu_wait_us_per_send` and
`<system>_idle_cpu_waits_over_20us_per_send`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench import bench_peers as peers
from tests.bench.bench_latency import SendLoop, send_loops

ROOT = Path(__file__).resolve().parents[2]

TRACEFS = Path("/sys/kernel/tracing")
TRACE_S = 0.6  # traced span per system and round (the buffer holds ~8,000 events a 100 ms)
TRACE_AFTER_S = 0.3  # sends run this long before the span starts
BUFFER_KB = 20_000  # per CPU
LONG_WAIT_US = 20.0
_SWITCH = re.compile(r"\[(\d+)\].*?\s([\d.]+): sched_switch: .*?==> next_comm=.*? next_pid=(\d+)")
_WAKEUP = re.compile(r"\s([\d.]+): sched_wakeup: comm=.*? pid=(\d+) prio=\d+ target_cpu=(\d+)")


@contextlib.contextmanager
def sched_tracing() -> Iterator[Callable[[float], str]]:
    """A function that records scheduler events for `seconds` and returns tracefs's text;
    tracefs as it was afterwards."""
    if not (TRACEFS / "trace").exists():
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], check=False)
        if not (TRACEFS / "trace").exists():
            raise SystemExit(f"no tracefs at {TRACEFS} (root needed)")
    saved = {name: (TRACEFS / name).read_text().strip()
             for name in ("tracing_on", "buffer_size_kb")}
    clock = re.search(r"\[(\w+)\]", (TRACEFS / "trace_clock").read_text())
    events = ("events/sched/sched_switch/enable", "events/sched/sched_wakeup/enable")

    def write(name: str, value: str) -> None:
        (TRACEFS / name).write_text(value)

    def record(seconds: float) -> str:
        write("trace", "")
        write("tracing_on", "1")
        time.sleep(seconds)
        write("tracing_on", "0")
        return (TRACEFS / "trace").read_text()

    try:
        write("tracing_on", "0")
        write("trace_clock", "mono")
        write("buffer_size_kb", str(BUFFER_KB))
        for event in events:
            write(event, "1")
        yield record
    finally:
        for event in events:
            write(event, "0")
        write("trace", "")
        write("buffer_size_kb", saved["buffer_size_kb"])
        if clock:
            write("trace_clock", clock.group(1))
        write("tracing_on", saved["tracing_on"])


def waits(text: str) -> tuple[list[tuple[float, bool]], float, float]:
    """([(wait µs, another CPU idle at the wake-up)], first and last event time in s)."""
    running: dict[int, int] = {}  # CPU -> pid running there (0: idle)
    woken: dict[int, tuple[float, bool]] = {}
    found: list[tuple[float, bool]] = []
    first = last = 0.0
    for line in text.splitlines():
        switch = _SWITCH.search(line)
        if switch is not None:
            cpu, at, pid = int(switch.group(1)), float(switch.group(2)), int(switch.group(3))
            first, last = first or at, at
            running[cpu] = pid
            if pid in woken:
                since, other_idle = woken.pop(pid)
                found.append(((at - since) * 1e6, other_idle))
            continue
        wakeup = _WAKEUP.search(line)
        if wakeup is not None:
            at, pid, target = float(wakeup.group(1)), int(wakeup.group(2)), int(wakeup.group(3))
            first, last = first or at, at
            idle_elsewhere = any(cpu != target and running_pid == 0
                                 for cpu, running_pid in running.items())
            woken[pid] = (at, idle_elsewhere)
    return found, first, last


def traced_round(record: Callable[[float], str], send_loop: SendLoop,
                 sends: int) -> dict[str, float]:
    """Run `send_loop(sends)` on a thread, trace TRACE_S of it, return the per-send figures
    (the sends inside the traced span: its length over the mean latency, one in flight)."""
    samples: list[float] = []
    worker = threading.Thread(target=lambda: samples.extend(send_loop(sends)))
    worker.start()
    time.sleep(TRACE_AFTER_S)
    text = record(TRACE_S)
    worker.join()
    found, first, last = waits(text)
    if not samples or last - first < TRACE_S / 2 or sum(samples) < TRACE_AFTER_S + TRACE_S:
        raise SystemExit(f"trace of {last - first:.3f} s over {sum(samples):.3f} s of sends: "
                         "raise --sends so the sends outlast the trace")
    done = (last - first) / statistics.mean(samples)
    long_idle = [wait for wait, idle in found if idle and wait > LONG_WAIT_US]
    return {"sends_traced": round(done),
            "wakeups_per_send": len(found) / done,
            "wait_us_per_send": sum(wait for wait, _ in found) / done,
            "idle_cpu_wait_us_per_send": sum(wait for wait, idle in found if idle) / done,
            "idle_cpu_waits_over_20us_per_send": len(long_idle) / done}


def run(rounds: int, sends: int, with_peer: bool) -> dict[str, Any]:
    figures: dict[str, list[float]] = {}
    work = Path(tempfile.mkdtemp(prefix="bench-sched-waits-"))
    with send_loops(work, with_peer) as loops, sched_tracing() as record:
        for index in range(rounds):
            line = [f"round {index + 1}/{rounds}, load {os.getloadavg()[0]:.1f}:"]
            for system, loop in loops.items():
                row = traced_round(record, loop, sends)
                for key, value in row.items():
                    figures.setdefault(f"{system}_{key}", []).append(value)
                line.append(f"{system}: {row['wakeups_per_send']:.1f} wake-ups, wait "
                            f"{row['wait_us_per_send']:.0f} us, of it with a CPU idle "
                            f"{row['idle_cpu_wait_us_per_send']:.0f} us "
                            f"({row['idle_cpu_waits_over_20us_per_send']:.2f} waits > "
                            f"{LONG_WAIT_US:.0f} us) per send")
            print("  ".join(line), flush=True)
    result: dict[str, Any] = {name: round(statistics.median(values), 2)
                              for name, values in figures.items()}
    result.update(rounds=rounds, sends_per_round=sends, trace_s=TRACE_S,
                  machine=peers.machine())
    return result


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sends", type=int, default=2000,
                        help="sends per round and system (enough to outlast the trace)")
    parser.add_argument("--no-peer", action="store_true", help="rocketha only")
    parser.add_argument("--json", action="store_true", help="last line: the figures as JSON")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root (tracefs)")
    if args.rounds < 1 or args.sends < 500:
        parser.error("--rounds >= 1 and --sends >= 500")
    result = run(args.rounds, args.sends, not args.no_peer)
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
